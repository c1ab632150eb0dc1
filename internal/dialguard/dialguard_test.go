package dialguard

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
)

func TestAllowed(t *testing.T) {
	tests := []struct {
		addr string
		want bool
	}{
		{"93.184.215.14", true},
		{"8.8.8.8", true},
		{"2606:4700:4700::1111", true},
		{"127.0.0.1", false},
		{"127.255.0.9", false},
		{"::1", false},
		{"10.1.2.3", false},
		{"172.16.0.1", false},
		{"172.31.255.255", false},
		{"172.32.0.1", true},
		{"192.168.1.1", false},
		{"169.254.169.254", false}, // cloud metadata
		{"fe80::1", false},
		{"fd00:ec2::254", false}, // unique local (AWS metadata over IPv6)
		{"100.64.0.1", false},
		{"100.127.255.255", false},
		{"100.128.0.1", true},
		{"224.0.0.1", false},
		{"ff02::1", false},
		{"0.0.0.0", false},
		{"::", false},
		{"0.1.2.3", false},
		{"255.255.255.255", false},
		{"::ffff:127.0.0.1", false}, // IPv4-mapped loopback
		{"::ffff:169.254.169.254", false},
		{"64:ff9b::a9fe:a9fe", false}, // NAT64 of 169.254.169.254
		{"64:ff9b::808:808", true},    // NAT64 of 8.8.8.8
		{"198.18.0.1", false},
		{"192.0.2.1", false},
	}
	for _, tc := range tests {
		t.Run(tc.addr, func(t *testing.T) {
			if got := Allowed(netip.MustParseAddr(tc.addr)); got != tc.want {
				t.Errorf("Allowed(%s) = %v, want %v", tc.addr, got, tc.want)
			}
		})
	}
}

func TestControl_RefusesBeforeConnecting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d := net.Dialer{Control: Control}
	conn, err := d.DialContext(context.Background(), "tcp", ln.Addr().String())
	if err == nil {
		conn.Close()
		t.Fatal("dial to loopback succeeded, want refused")
	}
	if !errors.Is(err, ErrBlocked) {
		t.Fatalf("got %v, want an error wrapping ErrBlocked", err)
	}
}

func TestControl_MalformedAddress(t *testing.T) {
	for _, addr := range []string{"no-port", "example.com:443"} {
		if err := Control("tcp", addr, nil); !errors.Is(err, ErrBlocked) {
			t.Errorf("Control(%q) = %v, want ErrBlocked", addr, err)
		}
	}
}
