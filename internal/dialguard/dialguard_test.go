package dialguard

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
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
		{"2002:7f00:1::1", false},          // 6to4 of 127.0.0.1
		{"2002:a9fe:a9fe::1", false},       // 6to4 of 169.254.169.254
		{"::7f00:1", false},                // IPv4-compatible 127.0.0.1
		{"::ffff:0:7f00:1", false},         // IPv4-translated 127.0.0.1
		{"2001:0:4136:e378::1", false},     // Teredo
		{"3fff::1", false},                 // documentation
		{"fe80::1%eth0", false},            // link-local with a zone
		{"2a00:1450:4001:80b::200e", true}, // global unicast
		{"64:ff9b:1::808:808", false},      // local-use translation
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

// registryEntry is a line of testdata/special-purpose.txt.
type registryEntry struct {
	prefix    netip.Prefix
	reachable string // "true", "false" or "n/a"
	name      string
}

func loadRegistry(t *testing.T) []registryEntry {
	t.Helper()
	data, err := os.ReadFile("testdata/special-purpose.txt")
	if err != nil {
		t.Fatal(err)
	}
	var entries []registryEntry
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 3 || strings.HasPrefix(line, "#") {
			continue
		}
		entries = append(entries, registryEntry{netip.MustParsePrefix(fields[0]), fields[1], strings.Join(fields[2:], " ")})
	}
	if len(entries) < 40 {
		t.Fatalf("read %d registry entries, want the whole table", len(entries))
	}
	return entries
}

// samples returns the first, last and a middle address of p.
func samples(p netip.Prefix) []netip.Addr {
	first := p.Masked().Addr()
	b := first.AsSlice()
	last := make([]byte, len(b))
	mid := make([]byte, len(b))
	for i := range b {
		hostBits := max(0, min(8, (i+1)*8-p.Bits()))
		mask := byte(1<<hostBits - 1)
		last[i] = b[i] | mask
		mid[i] = b[i] | (mask & 0x5a)
	}
	l, _ := netip.AddrFromSlice(last)
	m, _ := netip.AddrFromSlice(mid)
	return []netip.Addr{first, m, l}
}

func TestAllowed_SpecialPurposeRegistries(t *testing.T) {
	for _, e := range loadRegistry(t) {
		if e.reachable == "true" {
			continue
		}
		for _, ip := range samples(e.prefix) {
			if !embedsIPv4(ip) {
				if Allowed(ip) {
					t.Errorf("Allowed(%s) = true, want false: %s (%s) is not globally reachable", ip, e.prefix, e.name)
				}
			}
		}
	}
}

// embedsIPv4 reports whether ip is IPv4-mapped or in the well-known NAT64
// prefix: such an address reaches the IPv4 host it carries, and is judged as
// that host (TestAllowed_IPv6FormsOfBlockedIPv4).
func embedsIPv4(ip netip.Addr) bool {
	return ip.Is4In6() || netip.MustParsePrefix("64:ff9b::/96").Contains(ip)
}

// TestAllowed_IPv6FormsOfBlockedIPv4 embeds addresses of every blocked IPv4
// entry in each IPv6 form that can carry one.
func TestAllowed_IPv6FormsOfBlockedIPv4(t *testing.T) {
	forms := map[string]func(v4 [4]byte) netip.Addr{
		"IPv4-mapped ::ffff:a.b.c.d": func(v4 [4]byte) netip.Addr {
			return netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: v4[0], 13: v4[1], 14: v4[2], 15: v4[3]})
		},
		"IPv4-compatible ::a.b.c.d": func(v4 [4]byte) netip.Addr {
			return netip.AddrFrom16([16]byte{12: v4[0], 13: v4[1], 14: v4[2], 15: v4[3]})
		},
		"IPv4-translated ::ffff:0:a.b.c.d": func(v4 [4]byte) netip.Addr {
			return netip.AddrFrom16([16]byte{8: 0xff, 9: 0xff, 12: v4[0], 13: v4[1], 14: v4[2], 15: v4[3]})
		},
		"NAT64 64:ff9b::a.b.c.d": func(v4 [4]byte) netip.Addr {
			return netip.AddrFrom16([16]byte{1: 0x64, 2: 0xff, 3: 0x9b, 12: v4[0], 13: v4[1], 14: v4[2], 15: v4[3]})
		},
		"6to4 2002:abcd:efgh::1": func(v4 [4]byte) netip.Addr {
			return netip.AddrFrom16([16]byte{0: 0x20, 1: 0x02, 2: v4[0], 3: v4[1], 4: v4[2], 5: v4[3], 15: 1})
		},
		"Teredo 2001:0:...:~a.b.c.d": func(v4 [4]byte) netip.Addr {
			return netip.AddrFrom16([16]byte{0: 0x20, 1: 0x01, 12: ^v4[0], 13: ^v4[1], 14: ^v4[2], 15: ^v4[3]})
		},
	}
	for _, e := range loadRegistry(t) {
		if e.reachable == "true" || !e.prefix.Addr().Is4() {
			continue
		}
		for _, ip := range samples(e.prefix) {
			for name, form := range forms {
				if v6 := form(ip.As4()); Allowed(v6) {
					t.Errorf("Allowed(%s) = true, want false: %s form of %s (%s)", v6, name, ip, e.name)
				}
			}
		}
	}
	for _, public := range []string{"8.8.8.8", "1.1.1.1", "93.184.215.14"} {
		v4 := netip.MustParseAddr(public).As4()
		if !Allowed(forms["NAT64 64:ff9b::a.b.c.d"](v4)) || !Allowed(forms["IPv4-mapped ::ffff:a.b.c.d"](v4)) {
			t.Errorf("the NAT64 and IPv4-mapped forms of public %s must be allowed", public)
		}
	}
}
