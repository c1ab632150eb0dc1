package webhook_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

func certPool(rv *receiver) *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(rv.Certificate())
	return pool
}

func TestNewTransport_WrappedClientKeepsTheGuard(t *testing.T) {
	rv := newReceiver(t)
	_, port, err := net.SplitHostPort(rv.Listener.Addr().String())
	require.NoError(t, err)
	guarded := newTransport(t, &webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: certPool(rv)}})
	defer guarded.CloseIdleConnections()
	tracing := &countingTransport{next: guarded} // defined beside ExampleNewTransport
	s := newTestSender(t, nil, &webhook.SenderOptions{Client: &http.Client{Transport: tracing}, Retry: shortPolicy(0)})

	for _, host := range []string{"127.0.0.1", "10.0.0.1", "169.254.169.254", "[2002:7f00:1::1]", "[::1]", "[fd00::1]"} {
		c := webhook.Connection{URL: "https://" + net.JoinHostPort(trimBrackets(host), port) + "/", Secret: testSecret}
		res, err := s.Send(context.Background(), c, samplePayload())
		require.ErrorIs(t, err, webhook.ErrBlockedDestination, host)
		assert.Equal(t, []webhook.FailureKind{webhook.KindBlocked}, kinds(res.Attempts), host)
	}
	assert.Empty(t, rv.deliveries(), "nothing reached the receiver")
	assert.EqualValues(t, 6, tracing.n.Load(), "every request went through the wrapper")

	open := newTransport(t, &webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: certPool(rv)}, AllowPrivateNetworks: true})
	defer open.CloseIdleConnections()
	s = newTestSender(t, nil, &webhook.SenderOptions{Client: &http.Client{Transport: &countingTransport{next: open}}})
	_, err = s.Send(context.Background(), rv.conn("/"), samplePayload())
	require.NoError(t, err, "AllowPrivateNetworks reaches the loopback test server, trusting its CA")
	assert.Len(t, rv.deliveries(), 1)
}

func trimBrackets(host string) string {
	if len(host) > 1 && host[0] == '[' {
		return host[1 : len(host)-1]
	}
	return host
}

func TestNewTransport_Defaults(t *testing.T) {
	custom := &tls.Config{ServerName: "x", MinVersion: tls.VersionTLS10}
	tr := newTransport(t, &webhook.TransportOptions{TLSClientConfig: custom})
	assert.Nil(t, tr.Proxy, "no proxy: HTTP_PROXY would hide the destination from the guard")
	assert.EqualValues(t, tls.VersionTLS12, tr.TLSClientConfig.MinVersion, "raised to TLS 1.2")
	assert.EqualValues(t, tls.VersionTLS10, custom.MinVersion, "the caller's config is not modified")
	assert.Equal(t, "x", tr.TLSClientConfig.ServerName)
	assert.Equal(t, webhook.DefaultMaxIdleConnsPerHost, tr.MaxIdleConnsPerHost)
	assert.EqualValues(t, 64<<10, tr.MaxResponseHeaderBytes)
	assert.Equal(t, webhook.DefaultMaxIdleConns, tr.MaxIdleConns, "a cap across all hosts")
	assert.NotNil(t, tr.TLSClientConfig.ClientSessionCache, "sessions are resumed; nil turns that off")
	assert.Nil(t, custom.ClientSessionCache)
	assert.Equal(t, 7, newTransport(t, &webhook.TransportOptions{MaxIdleConnsPerHost: 7}).MaxIdleConnsPerHost)
	assert.Equal(t, 9, newTransport(t, &webhook.TransportOptions{MaxIdleConns: 9}).MaxIdleConns)
	assert.Equal(t, webhook.DefaultMaxIdleConnsPerHost, newTransport(t, nil).MaxIdleConnsPerHost)
}

func TestNewTransport_RefusesANegativeOption(t *testing.T) {
	for _, opts := range []*webhook.TransportOptions{{MaxIdleConnsPerHost: -1}, {MaxIdleConns: -1}} {
		tr, err := webhook.NewTransport(opts)
		require.Error(t, err)
		assert.Nil(t, tr)
	}
	_, err := webhook.NewTransport(&webhook.TransportOptions{MaxIdleConnsPerHost: -1})
	assert.EqualError(t, err, "webhook: TransportOptions.MaxIdleConnsPerHost must not be negative, got -1")
	_, err = webhook.NewTransport(&webhook.TransportOptions{MaxIdleConns: -2})
	assert.EqualError(t, err, "webhook: TransportOptions.MaxIdleConns must not be negative, got -2")
}

// newTransport is NewTransport for a test: opts must be valid.
func newTransport(tb testing.TB, opts *webhook.TransportOptions) *http.Transport {
	tb.Helper()
	tr, err := webhook.NewTransport(opts)
	require.NoError(tb, err)
	return tr
}

// keyRecorder is a session cache that records the keys it is given.
type keyRecorder struct {
	tls.ClientSessionCache
	mu   sync.Mutex
	keys []string
}

func (c *keyRecorder) Put(key string, cs *tls.ClientSessionState) {
	c.mu.Lock()
	c.keys = append(c.keys, key)
	c.mu.Unlock()
	c.ClientSessionCache.Put(key, cs)
}

func TestNewTransport_UsesTheCallersSessionCache(t *testing.T) {
	rv := newReceiver(t)
	own := &keyRecorder{ClientSessionCache: tls.NewLRUClientSessionCache(4)}
	tr := newTransport(t, &webhook.TransportOptions{AllowPrivateNetworks: true,
		TLSClientConfig: &tls.Config{RootCAs: certPool(rv), ClientSessionCache: own}})
	defer tr.CloseIdleConnections()
	s := newTestSender(t, nil, &webhook.SenderOptions{Client: &http.Client{Transport: tr}})
	_, err := s.Send(context.Background(), rv.conn("/"), samplePayload())
	require.NoError(t, err)
	own.mu.Lock()
	defer own.mu.Unlock()
	assert.Contains(t, own.keys, rv.Listener.Addr().String(), "keyed by host and port")
}

// TestNewTransport_EgressProxy runs a CONNECT proxy on loopback. Through it,
// a host name reaches the receiver (the proxy's policy decides), the proxy's
// own private address is dialled, and a URL with a private IP literal is
// still refused before anything is sent.
func TestNewTransport_EgressProxy(t *testing.T) {
	rv, proxy, port, s := proxiedSender(t)

	// The test certificate is valid for example.com; the proxy maps it to
	// the receiver, as a real proxy would resolve it.
	proxy.route("example.com:"+port, rv.Listener.Addr().String())
	_, err := s.Send(context.Background(), webhook.Connection{URL: "https://example.com:" + port + "/", Secret: testSecret}, samplePayload())
	require.NoError(t, err)
	assert.Len(t, rv.deliveries(), 1)

	res, err := s.Send(context.Background(), webhook.Connection{URL: "https://127.0.0.1:" + port + "/", Secret: testSecret}, samplePayload())
	require.ErrorIs(t, err, webhook.ErrBlockedDestination)
	assert.Equal(t, []webhook.FailureKind{webhook.KindBlocked}, kinds(res.Attempts))
	assert.EqualValues(t, 1, proxy.connects.Load(), "the refused request never reached the proxy")
}

// connectProxy is a minimal HTTP CONNECT proxy on 127.0.0.1 that tunnels to
// the addresses routed to it, and refuses any other.
type connectProxy struct {
	addr     string
	ln       net.Listener
	routes   sync.Map     // requested host:port -> address to dial
	accepted atomic.Int64 // connections, whatever they carry
	connects atomic.Int64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

// proxiedSender returns a receiver, a CONNECT proxy on loopback, the
// receiver's port and a Sender, without retries, whose transport from
// NewTransport goes through the proxy.
func proxiedSender(t *testing.T) (*receiver, *connectProxy, string, *webhook.Sender) {
	t.Helper()
	rv := newReceiver(t)
	proxy := newConnectProxy(t)
	_, port, _ := net.SplitHostPort(rv.Listener.Addr().String())
	tr := newTransport(t, &webhook.TransportOptions{
		TLSClientConfig: &tls.Config{RootCAs: certPool(rv)},
		Proxy:           http.ProxyURL(&url.URL{Scheme: "http", Host: proxy.addr}),
	})
	t.Cleanup(tr.CloseIdleConnections)
	return rv, proxy, port, newTestSender(t, nil, &webhook.SenderOptions{Client: &http.Client{Transport: tr}, Retry: shortPolicy(0)})
}

func newConnectProxy(t *testing.T) *connectProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &connectProxy{addr: ln.Addr().String(), ln: ln}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *connectProxy) route(from, to string) { p.routes.Store(from, to) }

func (p *connectProxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

func (p *connectProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.track(c)
		p.accepted.Add(1)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer c.Close()
			br := bufio.NewReader(c)
			req, err := http.ReadRequest(br)
			if err != nil || req.Method != http.MethodConnect {
				return
			}
			p.connects.Add(1)
			to, ok := p.routes.Load(req.Host)
			if !ok {
				io.WriteString(c, "HTTP/1.1 403 Forbidden\r\n\r\n")
				return
			}
			up, err := net.Dial("tcp", to.(string))
			if err != nil {
				io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
				return
			}
			p.track(up)
			defer up.Close()
			io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
			done := make(chan struct{})
			go func() { io.Copy(up, br); up.Close(); close(done) }()
			io.Copy(c, up)
			c.Close()
			<-done
		}()
	}
}

// TestNewTransport_ResumesTLSSessions counts full handshakes at a receiver
// that closes every connection: after the first, each new connection
// resumes the session.
func TestNewTransport_ResumesTLSSessions(t *testing.T) {
	var resumed, full atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS.DidResume {
			resumed.Add(1)
		} else {
			full.Add(1)
		}
	}))
	srv.Config.SetKeepAlivesEnabled(false)
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	tr := newTransport(t, &webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: pool}, AllowPrivateNetworks: true})
	defer tr.CloseIdleConnections()
	s := newTestSender(t, nil, &webhook.SenderOptions{Client: &http.Client{Transport: tr}})
	for range 5 {
		_, err := s.Send(context.Background(), webhook.Connection{URL: srv.URL, Secret: testSecret}, samplePayload())
		require.NoError(t, err)
	}
	assert.EqualValues(t, 1, full.Load(), "one full handshake")
	assert.EqualValues(t, 4, resumed.Load(), "then resumed sessions")

	tr.TLSClientConfig.ClientSessionCache = nil // resumption off
	for range 2 {
		_, err := s.Send(context.Background(), webhook.Connection{URL: srv.URL, Secret: testSecret}, samplePayload())
		require.NoError(t, err)
	}
	assert.EqualValues(t, 3, full.Load(), "full handshakes once the cache is gone")
}

// TestNewTransport_ProxysAddressIsGuardedForDirectRequests pins that only a
// connection made to reach a proxy skips the guard. Go's proxy functions
// never proxy localhost, so with a local egress proxy a customer URL naming
// the proxy's own address is sent directly: that connection is guarded like
// any other, before and after the proxy was first used.
func TestNewTransport_ProxysAddressIsGuardedForDirectRequests(t *testing.T) {
	rv := newReceiver(t)
	proxy := newConnectProxy(t)
	_, proxyPort, _ := net.SplitHostPort(proxy.addr)
	_, port, _ := net.SplitHostPort(rv.Listener.Addr().String())
	proxy.route("example.com:"+port, rv.Listener.Addr().String())
	proxyURL := &url.URL{Scheme: "http", Host: "localhost:" + proxyPort}
	tr := newTransport(t, &webhook.TransportOptions{
		TLSClientConfig: &tls.Config{RootCAs: certPool(rv)},
		Proxy: func(r *http.Request) (*url.URL, error) {
			if r.URL.Hostname() == "localhost" {
				return nil, nil // as http.ProxyFromEnvironment: localhost is never proxied
			}
			return proxyURL, nil
		},
	})
	defer tr.CloseIdleConnections()
	// Wrapped, as a tracing transport would: the Sender cannot see the
	// proxy, and its attempts still reach it.
	s := newTestSender(t, nil, &webhook.SenderOptions{Client: &http.Client{Transport: &countingTransport{next: tr}}, Retry: shortPolicy(0)})
	direct := webhook.Connection{URL: "https://localhost:" + proxyPort + "/", Secret: testSecret}

	for i, step := range []string{"before the proxy is used", "after"} {
		res, err := s.Send(context.Background(), direct, samplePayload())
		require.ErrorIs(t, err, webhook.ErrBlockedDestination, step)
		assert.Equal(t, []webhook.FailureKind{webhook.KindBlocked}, kinds(res.Attempts), step)
		assert.EqualValues(t, i, proxy.accepted.Load(), "%s: the direct request never reached the proxy's port", step)

		_, err = s.Send(context.Background(), webhook.Connection{URL: "https://example.com:" + port + "/", Secret: testSecret}, samplePayload())
		require.NoError(t, err, "%s: through the proxy, whose private address is dialled", step)
		tr.CloseIdleConnections() // the next proxied request dials the proxy again
	}
	assert.Len(t, rv.deliveries(), 2)

	// A request made outside a Sender carries no attempt of a Sender: the
	// proxy's private address is guarded for it too.
	client := &http.Client{Transport: tr}
	_, err := client.Get("https://example.com:" + port + "/")
	require.ErrorIs(t, err, webhook.ErrBlockedDestination)
}

// TestNewTransport_SessionsAreKeyedByHostAndPort pins that a TLS session of
// host:A is never offered to host:B. The two receivers share their ticket
// keys, as two services behind one terminating proxy may, so a ticket of one
// would resume at the other.
func TestNewTransport_SessionsAreKeyedByHostAndPort(t *testing.T) {
	var ticketKey [32]byte
	newServer := func(resumed *atomic.Int32) *httptest.Server {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.TLS.DidResume {
				resumed.Add(1)
			}
		}))
		srv.Config.SetKeepAlivesEnabled(false) // a new connection per delivery
		srv.TLS = &tls.Config{}
		srv.TLS.SetSessionTicketKeys([][32]byte{ticketKey})
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return srv
	}
	var resumedA, resumedB atomic.Int32
	a, b := newServer(&resumedA), newServer(&resumedB)
	pool := x509.NewCertPool()
	pool.AddCert(a.Certificate())
	tr := newTransport(t, &webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: pool}, AllowPrivateNetworks: true})
	defer tr.CloseIdleConnections()
	s := newTestSender(t, nil, &webhook.SenderOptions{Client: &http.Client{Transport: tr}})
	send := func(srv *httptest.Server) {
		t.Helper()
		_, err := s.Send(context.Background(), webhook.Connection{URL: srv.URL, Secret: testSecret}, samplePayload())
		require.NoError(t, err)
	}
	send(a)
	send(a)
	require.EqualValues(t, 1, resumedA.Load(), "the second connection to A resumes")
	send(b)
	assert.Zero(t, resumedB.Load(), "B, another port of the same host, is not offered A's session")
	send(b)
	assert.EqualValues(t, 1, resumedB.Load(), "B's own session resumes")
}

// TestNewTransport_HTTP2 pins that the transport still negotiates HTTP/2
// with a receiver that offers it.
func TestNewTransport_HTTP2(t *testing.T) {
	var proto atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { proto.Store(r.Proto) }))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	tr := newTransport(t, &webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: pool}, AllowPrivateNetworks: true})
	defer tr.CloseIdleConnections()
	s := newTestSender(t, nil, &webhook.SenderOptions{Client: &http.Client{Transport: tr}})
	_, err := s.Send(context.Background(), webhook.Connection{URL: srv.URL, Secret: testSecret}, samplePayload())
	require.NoError(t, err)
	assert.Equal(t, "HTTP/2.0", proto.Load())
}

// TestNewTransport_DialsHTTPSThroughItsDialContext pins that a DialContext
// set on the transport from NewTransport (wrapping the original to add an
// allowlist, a metric, a tunnel) makes the HTTPS connections too, as
// http.Transport documents: DialTLSContext, now set by NewTransport, must not
// silently bypass it.
func TestNewTransport_DialsHTTPSThroughItsDialContext(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	tr := newTransport(t, &webhook.TransportOptions{AllowPrivateNetworks: true,
		TLSClientConfig: &tls.Config{RootCAs: pool}})
	defer tr.CloseIdleConnections()
	errDenied := errors.New("egress allowlist: denied")
	orig := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr != "allowed.example:443" {
			return nil, errDenied
		}
		return orig(ctx, network, addr)
	}
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	if err == nil {
		resp.Body.Close()
	}
	require.ErrorIs(t, err, errDenied, "the HTTPS connection was dialled without the transport's DialContext")
}

// TestNewTransport_TraceSeesTheTLSHandshake pins that httptrace's first
// TLSHandshakeStart and TLSHandshakeDone bracket the real handshake on
// NewTransport, as on http.Transport: tracing (otelhttp's, which the README
// pairs with NewTransport) times the handshake between them. The server
// notes when the ClientHello arrived, which must be after TLSHandshakeStart.
// (net/http then reports a second, empty handshake.)
func TestNewTransport_TraceSeesTheTLSHandshake(t *testing.T) {
	var hello atomic.Int64 // when the server read the ClientHello, in ns
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.TLS = &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		hello.Store(time.Now().UnixNano())
		return nil, nil
	}}
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	tr := newTransport(t, &webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: pool}, AllowPrivateNetworks: true})
	defer tr.CloseIdleConnections()

	var start, done atomic.Int64
	trace := &httptrace.ClientTrace{
		TLSHandshakeStart: func() { start.CompareAndSwap(0, time.Now().UnixNano()) },
		TLSHandshakeDone: func(cs tls.ConnectionState, err error) {
			if err == nil && cs.HandshakeComplete {
				done.CompareAndSwap(0, time.Now().UnixNano())
			}
		},
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.NotZero(t, start.Load(), "TLSHandshakeStart was called")
	assert.Less(t, start.Load(), hello.Load(), "TLSHandshakeStart came %v after the server had the ClientHello: the handshake was over", time.Duration(start.Load()-hello.Load()))
	assert.Greater(t, done.Load(), hello.Load(), "TLSHandshakeDone, with the handshake's state, after it")
}

// TestSend_ASlowHandshakeHasTheAttemptsTime: the spec gives an attempt 30
// seconds (AttemptTimeout), and a receiver that answers 2xx within them has
// the delivery. NewTransport also cuts the TLS handshake at its
// TLSHandshakeTimeout of 10 seconds, so a receiver whose handshake takes
// 12 seconds (a loaded server, a slow TLS terminator) and answers 200 at
// once fails every attempt as a timeout, though it answered within the
// attempt's time; a longer AttemptTimeout does not help either.
func TestSend_ASlowHandshakeHasTheAttemptsTime(t *testing.T) {
	cert := httptest.NewUnstartedServer(nil)
	cert.StartTLS() // only for its certificate (example.com) and TLS config
	cfg := cert.TLS.Clone()
	cfg.NextProtos = []string{"http/1.1"}
	pool := x509.NewCertPool()
	pool.AddCert(cert.Certificate())
	cert.Close()

	synctest.Test(t, func(t *testing.T) {
		done := make(chan struct{}) // ends the receiver, also when the test fails
		defer close(done)
		tr := newTransport(t, &webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: pool}})
		defer tr.CloseIdleConnections()
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c1, c2 := net.Pipe()
			go func() { // a receiver whose handshake takes 12 s, then answers 200
				defer c2.Close()
				select {
				case <-time.After(12 * time.Second):
				case <-done:
					return
				}
				conn := tls.Server(c2, cfg)
				req, err := http.ReadRequest(bufio.NewReader(conn))
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			}()
			return c1, nil
		}
		s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr}, Retry: &webhook.RetryPolicy{MaxRetries: 0}})
		require.NoError(t, err)
		res, err := s.Send(context.Background(), webhook.Connection{Name: "slow", URL: "https://example.com/hook", Secret: testSecret}, samplePayload())
		require.NoError(t, err, "answered 200 after 12 s, within the attempt's %v: %v", webhook.DefaultAttemptTimeout, res.Attempts)
	})
}

// TestNewTransport_NumericHostNamesNeverReachTheProxy: a URL whose host
// ends in a number (127.1, 2130706433, 0x7f.0.0.1, 127.0.0.1.) is an IPv4
// address to inet_aton, to browsers and to many proxies, though not to
// netip: through an egress proxy, which resolves what it is given, the
// guard's check of IP literals must not let it pass as a host name.
func TestNewTransport_NumericHostNamesNeverReachTheProxy(t *testing.T) {
	rv, proxy, port, s := proxiedSender(t)
	for _, host := range []string{"127.1", "2130706433", "0x7f.0.0.1", "0x7f000001", "127.0.0.1.", "0177.0.0.1", "169.254.169.254."} {
		proxy.route(host+":"+port, rv.Listener.Addr().String()) // as a proxy resolving it would
		c := webhook.Connection{URL: "https://" + host + ":" + port + "/", Secret: testSecret}
		res, err := s.Send(context.Background(), c, samplePayload())
		require.Error(t, err, host)
		assert.ErrorIs(t, err, webhook.ErrInvalidConnection, host)
		assert.Empty(t, res.Attempts, host)
		assert.ErrorIs(t, c.Validate(), webhook.ErrInvalidConnection, host)
	}
	assert.Zero(t, proxy.connects.Load(), "nothing reached the proxy")
	assert.Empty(t, rv.deliveries())
	for _, host := range []string{"example.com", "1x.example.com", "a.b1", "8.8.8.8", "host-0x1.example", "[::ffff:8.8.8.8]", "[64:ff9b::8.8.8.8]"} {
		assert.NoError(t, webhook.Connection{URL: "https://" + host + "/", Secret: testSecret}.Validate(), host)
	}
}
