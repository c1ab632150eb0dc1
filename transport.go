package webhook

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/signedhook/webhook/internal/dialguard"
	"github.com/signedhook/webhook/internal/redact"
)

// This file holds NewTransport, the guarded transport: its dialer, the
// private-network guard's place in it, TLS sessions, and egress proxies.

// ErrBlockedDestination is matched by the error of an attempt that the
// default transport refused to make because the connection's host resolved
// to a loopback, private, link-local, shared, multicast or otherwise
// non-public address. See SenderOptions.AllowPrivateNetworks.
var ErrBlockedDestination = dialguard.ErrBlocked

// DefaultMaxIdleConnsPerHost is how many idle connections per host the
// transport from [NewTransport] keeps: as many as the concurrency it serves,
// since a smaller pool opens a new TLS connection for most requests.
const DefaultMaxIdleConnsPerHost = 1024

// DefaultMaxIdleConns is how many idle connections the transport from
// [NewTransport] keeps across all hosts: a sender reaching thousands of
// customer hosts keeps the most recently used connections, not one per host
// it ever reached.
const DefaultMaxIdleConns = 1024

// DefaultTLSSessionCacheSize is how many hosts' TLS sessions the transport
// from [NewTransport] remembers, so that a new connection to a host it
// reached before resumes the session instead of a full handshake.
const DefaultTLSSessionCacheSize = 4096

// maxResponseHeaderBytes bounds the headers of each answer, 1xx ones
// included, on the transport from NewTransport.
const maxResponseHeaderBytes = 64 << 10

// TransportOptions configures [NewTransport]. A nil *TransportOptions, or a
// zero field, selects the documented default.
type TransportOptions struct {
	// TLSClientConfig is the TLS configuration, cloned: set RootCAs for a
	// private CA or a test server's certificate. Nil means the system's
	// roots. A MinVersion below TLS 1.2 is raised to TLS 1.2. A nil
	// ClientSessionCache is given an LRU cache of DefaultTLSSessionCacheSize
	// sessions. Either way, the transport's TLSClientConfig holds it
	// wrapped, so that sessions are keyed by host and port; setting the
	// transport's ClientSessionCache to nil turns resumption off.
	TLSClientConfig *tls.Config

	// AllowPrivateNetworks turns the private-network guard off: the
	// transport then connects to loopback, private, link-local and every
	// other address. For local receivers and tests only.
	AllowPrivateNetworks bool

	// MaxIdleConnsPerHost is how many idle connections are kept per host.
	// Zero means DefaultMaxIdleConnsPerHost.
	MaxIdleConnsPerHost int

	// MaxIdleConns is how many idle connections are kept across all hosts;
	// past it the least recently used is closed. Zero means
	// DefaultMaxIdleConns.
	MaxIdleConns int

	// Proxy, if not nil, returns the egress proxy for a request (such as
	// Smokescreen, which refuses private destinations itself), or nil to
	// connect directly. Nil means no proxy: the environment's HTTP_PROXY is
	// ignored, since a proxy hides the destination from the guard.
	//
	// With a proxy the guard checks what this process can see: a URL whose
	// host is an IP address that is not public is refused before anything
	// is sent, and every direct connection is guarded, also one to a
	// proxy's own address. Only the connection that an attempt of a
	// [Sender] makes to reach the proxy Proxy returned for it is not
	// guarded (a proxy is usually private); a request made with this
	// transport outside a Sender reaches a proxy only at a public address.
	// Host names sent through the proxy are resolved by the proxy: its own
	// policy must refuse private addresses. TLS sessions are not resumed
	// through a proxy (they are keyed by host and port, which only a direct
	// connection's dial knows).
	Proxy func(*http.Request) (*url.URL, error)
}

// NewTransport returns the transport a [Sender] uses by default, for a
// Client of your own: no proxy unless opts says so, TLS 1.2 or later with
// session resumption (sessions keyed by host and port), HTTP/2 when the
// receiver offers it, TLS handshakes bounded by DefaultAttemptTimeout
// (TLSHandshakeTimeout: a receiver has an attempt's time to answer, its
// handshake included), response headers bounded to 64 KiB, a pool of
// DefaultMaxIdleConnsPerHost idle connections per host and
// DefaultMaxIdleConns in all, and the private-network guard. The guard
// refuses, at dial time and on the address DNS resolved (so DNS rebinding
// cannot pass it), loopback, private, link-local (cloud metadata), shared
// (CGNAT), multicast, documentation, benchmarking and reserved addresses,
// and IPv6 forms that carry such an IPv4 address (6to4, Teredo,
// IPv4-compatible, IPv4-translated, NAT64); outside IPv4, only global
// unicast IPv6 is allowed. The error of a refused attempt matches
// [ErrBlockedDestination].
//
// A Client keeps the guard as long as its Transport is this transport or
// wraps it (a tracing RoundTripper such as otelhttp's, say): every
// connection is still dialled here. opts may be nil (zero fields select
// the defaults); a negative option is an error.
//
// To key sessions by host and port, which net/http cannot, the transport
// makes the TLS handshake of direct HTTPS connections itself, in
// DialTLSContext, through its DialContext and with its TLSClientConfig,
// read at each dial: change them on this transport. A Clone of it keeps
// making handshakes with this transport's TLSClientConfig, not the clone's:
// call NewTransport again for other TLS settings. It offers HTTP/2 to every
// server that has it, also for a request that needs HTTP/1.1 (a WebSocket
// upgrade): it is a transport for deliveries.
//
// Its HTTP/2 connections index no request header in HPACK's dynamic
// table (HTTP2.MaxEncoderHeaderTableSize 1): a delivery's signature,
// timestamp and id are new each time, and indexing them cost an insertion
// and an eviction in the table's maps for each, 7-13 µs of CPU a delivery
// (internal/benchcmp's README); and the headers of one customer's delivery
// are never kept on a connection for another's to be compared with. Every
// request's header values are sent whole (Huffman-coded where that is
// shorter), but for those of HPACK's static table (a POST's :method,
// https's :scheme): about 110 bytes more a delivery than with indexing.
//
// A connection of its reads at most about 4.2 MiB for each attempt of a
// Sender that it carries (the answer's header, excerpt and drain, and the
// window of an HTTP/2 stream the Sender resets once it has read enough:
// 4 MiB, or the transport's HTTP2.MaxReceiveBufferPerStream if larger),
// and 8 times as much beyond them, for what reset streams still have on
// the way: an HTTP/2 receiver that goes on sending on a reset stream,
// which net/http would read and discard for the connection's life, has it
// closed instead. Through an http:// proxy too.
//
// An HTTP/2 receiver that stops reading its socket while it makes the
// client write (PINGs to acknowledge) blocks the connection's writer, and
// net/http ends an attempt's stream with a write: the attempt would last as
// long as the receiver kept the connection. When a Sender's attempt over a
// connection of this transport has run out of time while reading its
// answer, and the connection still holds it 5 seconds later (the time the
// spec gives a receiver to answer), the connection is closed, with the
// attempts on it. So such an attempt lasts at most 5 seconds past its
// AttemptTimeout. A healthy connection ends the attempt's stream at once.
// An HTTP/2 connection on which one write is not taken within 30 seconds,
// DefaultAttemptTimeout (HTTP2.WriteByteTimeout), is closed, with the
// attempts on it. A receiver that stops reading before it answers would
// otherwise keep the blocked writer, and the connection with its
// goroutines and buffers, for as long as it liked. Over TLS, net/http
// bounds each write (a frame, up to 512 KiB), not the time between two
// bytes. With the default AttemptTimeout, the attempts on the connection
// when a write began are out of time once it has waited 30 seconds; those
// that came later, queued behind it, fail with them. A Sender's own
// transport (SenderOptions.Client nil) has its AttemptTimeout there when
// that is longer. With a longer AttemptTimeout on a transport of yours,
// raise HTTP2.WriteByteTimeout to match, or large bodies over a link
// slower than about 17 KiB/s may be cut 30 seconds into one write. Set
// fields of the transport's HTTP2 rather than replacing it, to keep both
// of its settings.
func NewTransport(opts *TransportOptions) (*http.Transport, error) {
	if opts == nil {
		opts = &TransportOptions{}
	}
	switch {
	case opts.MaxIdleConnsPerHost < 0:
		return nil, fmt.Errorf("webhook: TransportOptions.MaxIdleConnsPerHost must not be negative, got %d", opts.MaxIdleConnsPerHost)
	case opts.MaxIdleConns < 0:
		return nil, fmt.Errorf("webhook: TransportOptions.MaxIdleConns must not be negative, got %d", opts.MaxIdleConns)
	}
	d := &dialer{
		guard:   !opts.AllowPrivateNetworks,
		plain:   &net.Dialer{KeepAlive: 30 * time.Second},
		guarded: &net.Dialer{KeepAlive: 30 * time.Second, Control: dialguard.Control},
	}
	tlsConfig := &tls.Config{}
	if opts.TLSClientConfig != nil {
		tlsConfig = opts.TLSClientConfig.Clone()
	}
	tlsConfig.MinVersion = max(tlsConfig.MinVersion, tls.VersionTLS12)
	// Most customers' endpoints get a delivery now and then, so most
	// deliveries open a new connection: resuming saves a handshake.
	cache := tlsConfig.ClientSessionCache
	if cache == nil {
		cache = tls.NewLRUClientSessionCache(DefaultTLSSessionCacheSize)
	}
	tlsConfig.ClientSessionCache = portKeyed{cache}
	perHost := cmp.Or(opts.MaxIdleConnsPerHost, DefaultMaxIdleConnsPerHost)
	total := cmp.Or(opts.MaxIdleConns, DefaultMaxIdleConns)
	t := &http.Transport{
		Proxy:                  nil,
		DialContext:            d.dial,
		DialTLSContext:         d.dialTLS,
		TLSClientConfig:        tlsConfig,
		TLSHandshakeTimeout:    DefaultAttemptTimeout, // an attempt's time: the spec gives a receiver 30 s
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           total,
		MaxIdleConnsPerHost:    perHost,
		IdleConnTimeout:        90 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
		// Index no header value; close a connection whose writes stall.
		HTTP2: &http.HTTP2Config{MaxEncoderHeaderTableSize: 1, WriteByteTimeout: DefaultAttemptTimeout},
	}
	d.t = t
	t.OnProxyConnectResponse = proxyConnectResponse
	if opts.Proxy != nil {
		p := &proxyRouter{proxy: opts.Proxy, guard: d.guard}
		t.Proxy = p.proxyFor
	}
	return t, nil
}

// dialer makes the transport's connections: every one under the guard
// (unless it is off), except the connection a request makes to reach the
// proxy proxyRouter chose for it, which the request's route names.
type dialer struct {
	t       *http.Transport // its TLSClientConfig, read at each dial: net/http adds HTTP/2 to it
	guard   bool
	plain   *net.Dialer
	guarded *net.Dialer // refuses addresses dialguard refuses
}

func (d *dialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	ctx, cancel := boundToAttempt(ctx)
	defer cancel()
	proxied := routedToProxy(ctx, addr)
	if d.guard && !proxied {
		return d.guarded.DialContext(ctx, network, addr)
	}
	conn, err := d.plain.DialContext(ctx, network, addr)
	if err == nil && proxied && ctx.Value(tlsDialKey{}) == nil {
		// An http:// proxy's: net/http makes the receiver's TLS handshake
		// over it itself, so dialTLS never sees it (readbudget.go).
		bc := newBoundedConn(conn, d.streamWindow())
		closeUnlessUsed(ctx, bc)
		conn = bc
	}
	return conn, err
}

// closeUnlessUsed ends c, a connection to a proxy, at the deadline of the
// attempt that dialled it unless an attempt has had it by then: net/http
// makes the receiver's TLS handshake through the proxy's tunnel on the
// dial's context, not the request's, bounded by TLSHandshakeTimeout alone,
// and it would go on after its attempt, as dialTLS's own does not
// (TestSend_NoHandshakeOutlivesItsAttemptThroughAProxy).
func closeUnlessUsed(ctx context.Context, c *boundedConn) {
	if s := dialScopeOf(ctx); s != nil && !s.deadline.IsZero() {
		time.AfterFunc(time.Until(s.deadline), func() {
			if !c.used.Load() {
				c.Conn.SetDeadline(time.Now()) // its handshake fails as a timeout, and net/http closes it
			}
		})
	}
}

// streamWindow is the window the transport opens to an HTTP/2 stream when
// its HTTP2 field sets one (MaxReceiveBufferPerStream), or 0.
func (d *dialer) streamWindow() int64 {
	if h := d.t.HTTP2; h != nil {
		return int64(h.MaxReceiveBufferPerStream)
	}
	return 0
}

// tlsDialKey marks the context of dialTLS's dial, whose connection it
// bounds itself.
type tlsDialKey struct{}

// dialTLS dials addr with the transport's DialContext and makes the TLS
// handshake with its TLSClientConfig, as net/http would, but with the
// sessions of addr's host and port: a session of host:443 is never offered
// to host:8443. net/http calls it for HTTPS destinations reached directly,
// and for HTTPS proxies. It reports the handshake to an httptrace.ClientTrace
// as net/http does; net/http then reports a second, empty one.
func (d *dialer) dialTLS(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := boundToAttempt(ctx)
	defer cancel()
	dial := d.t.DialContext // the guard's, unless the caller wrapped or replaced it
	if dial == nil {
		dial = (&net.Dialer{}).DialContext // as net/http dials then
	}
	conn, err := dial(context.WithValue(ctx, tlsDialKey{}, true), network, addr)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{}
	if d.t.TLSClientConfig != nil {
		cfg = d.t.TLSClientConfig.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	switch c := cfg.ClientSessionCache.(type) {
	case nil: // resumption off
	case portKeyed:
		cfg.ClientSessionCache = portSessions{c.cache, port}
	default: // set on the transport after NewTransport
		cfg.ClientSessionCache = portSessions{c, port}
	}
	if timeout := d.t.TLSHandshakeTimeout; timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	trace := httptrace.ContextClientTrace(ctx)
	if trace != nil && trace.TLSHandshakeStart != nil {
		trace.TLSHandshakeStart()
	}
	bc := newBoundedConn(conn, d.streamWindow()) // see readbudget.go
	conn = bc
	tc := tls.Client(conn, cfg)
	err = tc.HandshakeContext(ctx)
	if trace != nil && trace.TLSHandshakeDone != nil {
		var cs tls.ConnectionState
		if err == nil {
			cs = tc.ConnectionState()
		}
		trace.TLSHandshakeDone(cs, err)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	if routedToProxy(ctx, addr) { // an https:// proxy's
		closeUnlessUsed(ctx, bc)
	}
	return tc, nil
}

// portKeyed is the session cache of a transport from NewTransport, whose
// sessions are keyed by host and port. Asked by host name alone, as TLS
// asks a cache, it finds and keeps nothing: only dialTLS, which knows the
// port, reaches its sessions, through portSessions. So net/http's own
// handshake through a proxy, which knows the host alone, resumes nothing.
type portKeyed struct{ cache tls.ClientSessionCache }

func (portKeyed) Get(string) (*tls.ClientSessionState, bool) { return nil, false }
func (portKeyed) Put(string, *tls.ClientSessionState)        {}

// portSessions is a session cache for one port's connections: TLS keys a
// session by the server's name, and this adds the port.
type portSessions struct {
	cache tls.ClientSessionCache
	port  string
}

func (s portSessions) Get(name string) (*tls.ClientSessionState, bool) {
	return s.cache.Get(net.JoinHostPort(name, s.port))
}

func (s portSessions) Put(name string, cs *tls.ClientSessionState) {
	s.cache.Put(net.JoinHostPort(name, s.port), cs)
}

// dialScope is what a Sender's attempt tells the dial of its connection,
// carried by the attempt's context (net/http dials with the request's
// context values, not its deadline or cancellation). proxyRouter notes in
// it the address of the proxy it chose for the request, which the dial may
// then reach unguarded: a direct request's stays empty, so its dial is
// guarded even when its address is a proxy's. Its deadline, the attempt's,
// bounds the dial and the TLS handshake, which net/http would otherwise go
// on with after the attempt ended (up to TLSHandshakeTimeout): a host that
// hangs sees no more connections than attempts in flight.
type dialScope struct {
	proxy    atomic.Pointer[string]
	deadline time.Time
}

// scopeContext is a context carrying an attempt's dialScope, and its
// connTrace: one allocation for the values and their context.
type scopeContext struct {
	context.Context
	s     dialScope
	trace connTrace
}

type dialScopeKey struct{}

// connTraceKey finds the connTrace of the attempt a context is of.
type connTraceKey struct{}

func (c *scopeContext) Value(key any) any {
	switch key {
	case dialScopeKey{}:
		return &c.s
	case connTraceKey{}:
		return &c.trace
	}
	return c.Context.Value(key)
}

// withDialScope returns ctx carrying a new dialScope that ends by deadline,
// and a connTrace not yet in its ClientTrace (see delivery.bound).
func withDialScope(ctx context.Context, deadline time.Time) *scopeContext {
	c := &scopeContext{Context: ctx}
	c.s.deadline = deadline
	c.trace.init()
	return c
}

// dialScopeOf returns the dialScope ctx carries, or nil.
func dialScopeOf(ctx context.Context) *dialScope {
	s, _ := ctx.Value(dialScopeKey{}).(*dialScope)
	return s
}

// boundToAttempt returns ctx with the deadline of the attempt whose
// dialScope it carries, if any.
func boundToAttempt(ctx context.Context) (context.Context, context.CancelFunc) {
	if s := dialScopeOf(ctx); s != nil && !s.deadline.IsZero() {
		return context.WithDeadline(ctx, s.deadline)
	}
	return ctx, func() {}
}

// routedToProxy reports whether the request whose dial has ctx (net/http
// dials with the request's context values) was routed through the proxy at
// addr.
func routedToProxy(ctx context.Context, addr string) bool {
	s := dialScopeOf(ctx)
	if s == nil {
		return false
	}
	p := s.proxy.Load()
	return p != nil && *p == addr
}

// proxyRouter routes through the caller's proxy, guarding what it can: IP
// literals in URLs here, every direct connection at its dial.
type proxyRouter struct {
	proxy func(*http.Request) (*url.URL, error)
	guard bool
}

func (p *proxyRouter) proxyFor(r *http.Request) (*url.URL, error) {
	if p.guard {
		if ip, err := netip.ParseAddr(r.URL.Hostname()); err == nil && !dialguard.Allowed(ip) {
			return nil, dialguard.Blocked(ip)
		}
	}
	u, err := p.proxy(r)
	if u != nil && err == nil {
		if s := dialScopeOf(r.Context()); s != nil {
			addr := proxyAddr(u)
			s.proxy.Store(&addr)
		}
	}
	return u, err
}

// proxyAddr returns the host:port net/http dials for proxy u.
func proxyAddr(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443", "socks5": "1080", "socks5h": "1080"}[u.Scheme]
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// attemptTransport refuses to switch protocols: net/http hands over the raw
// connection as the body of a 101 and stops watching the request's context,
// so a receiver that held it would hold the delivery forever. A status
// outside 100-599 is a failure with no answer: net/http takes any three
// digits, and 000 would read as no status. It also hides
// its RoundTripper's CloseIdleConnections: go-retryablehttp closes the
// client's idle connections whenever a delivery gives up, which on a shared
// pool would cost every other delivery its connections. Each attempt's time
// is bounded by its request's context (delivery.bound).
type attemptTransport struct {
	rt http.RoundTripper
}

func (t *attemptTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(req)
	if err == nil {
		if ct, _ := req.Context().Value(connTraceKey{}).(*connTrace); ct != nil {
			ct.answered.Store(true) // its request may be asked for again now (connTrace.getBody)
		}
	}
	switch {
	case err != nil:
	case resp.StatusCode < 100 || resp.StatusCode > 599:
		// net/http takes any three digits; 000 would read as no answer.
		resp.Body.Close()
		return nil, fmt.Errorf("webhook: receiver answered an invalid status %03d", resp.StatusCode)
	case resp.StatusCode == http.StatusSwitchingProtocols:
		resp.Body.Close()
		resp.Body = http.NoBody
	}
	return resp, err
}

// proxyUnreachableError is a proxy's answer to CONNECT that it could not
// reach the destination: the endpoint, not the proxy, gave no connection.
type proxyUnreachableError struct{ status string }

func (e *proxyUnreachableError) Error() string {
	return "the egress proxy answered CONNECT with " + e.status
}

// proxyConnectResponse turns a proxy's 502, 503 or 504 to CONNECT into a
// proxyUnreachableError, which classify reports as KindUnreachable and
// endpoint health counts as no connection. Other answers are net/http's to
// handle.
func proxyConnectResponse(_ context.Context, _ *url.URL, _ *http.Request, resp *http.Response) error {
	switch resp.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return &proxyUnreachableError{status: redact.Printable(resp.Status)}
	}
	return nil
}
