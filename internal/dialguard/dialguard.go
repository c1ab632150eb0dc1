// Package dialguard refuses connections to addresses a webhook must never
// reach: every special-purpose address that is not globally reachable
// (loopback, private, link-local and cloud metadata, shared CGNAT,
// documentation, benchmarking, reserved), multicast, and IPv6 forms that
// carry such an IPv4 address. It checks the address being dialled, after DNS
// resolution, so a host name that resolves to a private address (DNS
// rebinding included) is refused too.
//
// IPv4 is judged by a blocklist of the IANA IPv4 Special-Purpose Address
// Registry's entries that are not globally reachable, plus multicast. IPv6 is
// judged by an allowlist: global unicast 2000::/3 minus its special-purpose
// prefixes, among them 6to4 (2002::/16) and Teredo (inside 2001::/23), whose
// embedded IPv4 addresses could be private. IPv4-mapped addresses and the
// well-known NAT64 prefix 64:ff9b::/96 are judged by the IPv4 address they
// embed; every other IPv6 form of an IPv4 address (IPv4-compatible ::a.b.c.d,
// IPv4-translated ::ffff:0:a.b.c.d) lies outside 2000::/3 and is refused.
package dialguard

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// ErrBlocked is wrapped by every error Control returns.
var ErrBlocked = errors.New("webhook: destination address not allowed")

// blocked4 is the IPv4 blocklist: the special-purpose registry's entries that
// are not globally reachable (a few reachable anycast addresses inside
// 192.0.0.0/24 are refused with it), and multicast.
var blocked4 = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("10.0.0.0/8"),      // private-use
	netip.MustParsePrefix("100.64.0.0/10"),   // shared address space (CGNAT)
	netip.MustParsePrefix("127.0.0.0/8"),     // loopback
	netip.MustParsePrefix("169.254.0.0/16"),  // link-local, cloud metadata
	netip.MustParsePrefix("172.16.0.0/12"),   // private-use
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("192.88.99.0/24"),  // deprecated 6to4 relay anycast
	netip.MustParsePrefix("192.168.0.0/16"),  // private-use
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("224.0.0.0/4"),     // multicast
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, limited broadcast
}

// global6 is the only IPv6 space allowed, less blocked6.
var global6 = netip.MustParsePrefix("2000::/3")

// blocked6 are the special-purpose prefixes inside global6.
var blocked6 = []netip.Prefix{
	netip.MustParsePrefix("2001::/23"),     // IETF protocol assignments: Teredo, benchmarking, ORCHID
	netip.MustParsePrefix("2001:db8::/32"), // documentation
	netip.MustParsePrefix("2002::/16"),     // 6to4, embedding any IPv4 address
	netip.MustParsePrefix("3fff::/20"),     // documentation
}

// nat64 is the well-known NAT64 prefix: its last 32 bits are an IPv4
// address, reached through the translator.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// Allowed reports whether ip is a globally reachable unicast address.
func Allowed(ip netip.Addr) bool {
	ip = ip.WithZone("")
	if ip.Is4In6() {
		ip = ip.Unmap()
	}
	if ip.Is6() && nat64.Contains(ip) {
		b := ip.As16()
		ip = netip.AddrFrom4([4]byte(b[12:]))
	}
	if ip.Is4() {
		return !inAny(blocked4, ip)
	}
	return ip.Is6() && global6.Contains(ip) && !inAny(blocked6, ip)
}

func inAny(prefixes []netip.Prefix, ip netip.Addr) bool {
	for _, p := range prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// Control is a net.Dialer Control function that refuses to connect to an
// address Allowed refuses. The error wraps ErrBlocked and names the address.
func Control(network, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("%w: %q is not host:port", ErrBlocked, address)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("%w: %q is not an IP address", ErrBlocked, host)
	}
	if !Allowed(ip) {
		return Blocked(ip)
	}
	return nil
}

// Blocked returns the error for a refused address ip.
func Blocked(ip netip.Addr) error {
	return fmt.Errorf("%w: %s is not a public address (loopback, private, link-local and similar are refused)", ErrBlocked, ip)
}
