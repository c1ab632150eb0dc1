package webhook_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/webhooktest"
)

// hostile is a TLS receiver on 127.0.0.1 that reads each request and then
// behaves as script says, writing raw bytes: what no well-behaved server
// would send.
type hostile struct {
	ln     net.Listener
	tls    *tls.Config
	pool   *x509.CertPool // trusts its certificate
	script func(conn net.Conn, req *http.Request)
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
	closed chan struct{} // closed at cleanup: scripts that hold stop holding
	hits   int
}

func newHostile(t *testing.T, script func(conn net.Conn, req *http.Request)) *hostile {
	t.Helper()
	cert := httptest.NewUnstartedServer(nil)
	cert.StartTLS() // only for its certificate and TLS config
	cfg := cert.TLS.Clone()
	pool := x509.NewCertPool()
	pool.AddCert(cert.Certificate())
	cert.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h := &hostile{ln: ln, tls: cfg, pool: pool, script: script, closed: make(chan struct{})}
	h.wg.Add(1)
	go h.accept()
	t.Cleanup(func() {
		close(h.closed)
		ln.Close()
		h.mu.Lock()
		for _, c := range h.conns {
			c.Close()
		}
		h.mu.Unlock()
		h.wg.Wait()
	})
	return h
}

func (h *hostile) accept() {
	defer h.wg.Done()
	for {
		raw, err := h.ln.Accept()
		if err != nil {
			return
		}
		h.mu.Lock()
		h.conns = append(h.conns, raw)
		h.mu.Unlock()
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			defer raw.Close()
			conn := tls.Server(raw, h.tls)
			req, err := http.ReadRequest(bufio.NewReader(conn))
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			h.mu.Lock()
			h.hits++
			h.mu.Unlock()
			h.script(conn, req)
		}()
	}
}

func (h *hostile) requests() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hits
}

// hold blocks until the test ends.
func (h *hostile) hold() { <-h.closed }

// trickle writes s one byte every 20 ms until the test ends or s is written.
func (h *hostile) trickle(w io.Writer, s string) {
	for i := 0; i < len(s); i++ {
		select {
		case <-h.closed:
			return
		case <-time.After(20 * time.Millisecond):
		}
		if _, err := w.Write([]byte{s[i]}); err != nil {
			return
		}
	}
	h.hold()
}

func (h *hostile) url() string { return "https://" + h.ln.Addr().String() + "/hooks" }

func (h *hostile) conn() webhook.Connection {
	return webhook.Connection{Name: "hostile", URL: h.url(), Secret: testSecret}
}

// resetConn closes conn with a TCP RST.
func resetConn(conn net.Conn) {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		tcp.SetLinger(0)
	}
	conn.Close()
}

// The attempt timeouts of the fault tests. An attempt that must get an
// answer (or fail its handshake) has faultAnswerTimeout: far more than a TLS
// handshake and an answer take on a slow, loaded machine under -race. Only
// a case that expects its attempts to time out has faultTimeout: short, so
// the test stays quick, but still long enough for the handshake and the
// request, which the receiver must read first.
const (
	faultTimeout       = 3 * time.Second
	faultAnswerTimeout = 10 * time.Second
)

// faultSender uses the library's own transport, trusting the hostile
// receiver's certificate, with the attempt timeout faultAnswerTimeout and
// one fast retry.
func faultSender(t *testing.T, pool *x509.CertPool, retry *webhook.RetryPolicy) *webhook.Sender {
	t.Helper()
	return faultSenderTimeout(t, pool, retry, faultAnswerTimeout)
}

// faultSenderTimeout is faultSender with the attempt timeout given.
func faultSenderTimeout(t *testing.T, pool *x509.CertPool, retry *webhook.RetryPolicy, timeout time.Duration) *webhook.Sender {
	t.Helper()
	if retry == nil {
		retry = shortPolicy(1)
	}
	tr := newTransport(t, &webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: pool}, AllowPrivateNetworks: true})
	// The hostile receiver closes each connection after its one request: a
	// retry that raced its close to the pool failed as a reset (a flake of
	// "3xx with Location").
	tr.DisableKeepAlives = true
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr}, AttemptTimeout: timeout, Retry: retry})
	require.NoError(t, err)
	t.Cleanup(tr.CloseIdleConnections)
	return s
}

func TestSend_HostileReceivers(t *testing.T) {
	const bigBody = "HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n"
	tests := []struct {
		name       string
		script     func(h *hostile, conn net.Conn, req *http.Request)
		retry      *webhook.RetryPolicy
		timeout    time.Duration // the attempt timeout: faultAnswerTimeout if 0
		wantKinds  []webhook.FailureKind
		wantStatus int
		wantErr    string // part of the last attempt's error
		check      func(t *testing.T, a webhook.Attempt)
	}{
		{
			name: "101 and held",
			script: func(h *hostile, conn net.Conn, _ *http.Request) {
				io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
				h.hold()
			},
			wantKinds: []webhook.FailureKind{webhook.KindStatus, webhook.KindStatus}, wantStatus: 101, wantErr: "101",
		},
		{
			name: "1xx then 2xx",
			script: func(_ *hostile, conn net.Conn, _ *http.Request) {
				io.WriteString(conn, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n"+
					"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			},
			wantKinds: []webhook.FailureKind{webhook.KindNone}, wantStatus: 200,
		},
		{
			name: "1xx forever",
			script: func(h *hostile, conn net.Conn, _ *http.Request) {
				for range 20000 { // 700 KB of 1xx answers
					if _, err := io.WriteString(conn, "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"); err != nil {
						return
					}
				}
				h.hold()
			},
			wantKinds: []webhook.FailureKind{webhook.KindOther, webhook.KindOther}, wantErr: "more than 5 1xx answers", // counted by the Sender: net/http stops when a trace sets Got1xxResponse
		},
		{
			name: "3xx with Location",
			script: func(_ *hostile, conn net.Conn, _ *http.Request) {
				io.WriteString(conn, "HTTP/1.1 307 Temporary Redirect\r\nLocation: https://169.254.169.254/latest?k=v\r\nContent-Length: 0\r\n\r\n")
			},
			wantKinds: []webhook.FailureKind{webhook.KindRedirect, webhook.KindRedirect}, wantStatus: 307, wantErr: "(Location: https://169.254.169.254/…)",
		},
		{
			name: "5xx",
			script: func(_ *hostile, conn net.Conn, _ *http.Request) {
				io.WriteString(conn, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy")
			},
			wantKinds: []webhook.FailureKind{webhook.KindStatus, webhook.KindStatus}, wantStatus: 503,
			check: func(t *testing.T, a webhook.Attempt) { assert.Equal(t, "busy", string(a.ResponseBody)) },
		},
		{
			name: "429 with Retry-After",
			script: func(_ *hostile, conn net.Conn, _ *http.Request) {
				io.WriteString(conn, "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3600\r\nContent-Length: 0\r\n\r\n")
			},
			retry:     &webhook.RetryPolicy{MaxRetries: 1, Backoff: webhook.WithRetryAfter(webhook.ExponentialBackoff(time.Millisecond, time.Second), 5*time.Millisecond)},
			wantKinds: []webhook.FailureKind{webhook.KindStatus, webhook.KindStatus}, wantStatus: 429,
			check: func(t *testing.T, a webhook.Attempt) { assert.False(t, a.Retry, "the last attempt") },
		},
		{
			name: "headers trickled past the timeout",
			script: func(h *hostile, conn net.Conn, _ *http.Request) {
				h.trickle(conn, "HTTP/1.1 200 OK\r\nX-Slow: "+strings.Repeat("a", 1000)+"\r\n\r\n")
			},
			timeout:   faultTimeout,
			wantKinds: []webhook.FailureKind{webhook.KindTimeout, webhook.KindTimeout},
		},
		{
			name: "body trickled past the timeout",
			script: func(h *hostile, conn net.Conn, _ *http.Request) {
				io.WriteString(conn, "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 1000\r\n\r\n")
				h.trickle(conn, strings.Repeat("x", 1000))
			},
			timeout:   faultTimeout,
			wantKinds: []webhook.FailureKind{webhook.KindStatus, webhook.KindStatus}, wantStatus: 500,
			check: func(t *testing.T, a webhook.Attempt) {
				assert.GreaterOrEqual(t, a.Duration, faultTimeout, "read until the attempt timed out")
				assert.Less(t, len(a.ResponseBody), 1000)
			},
		},
		{
			name: "body never ending",
			script: func(_ *hostile, conn net.Conn, _ *http.Request) {
				io.WriteString(conn, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
				chunk := fmt.Sprintf("%x\r\n%s\r\n", 8192, strings.Repeat("y", 8192))
				for {
					if _, err := io.WriteString(conn, chunk); err != nil {
						return
					}
				}
			},
			wantKinds: []webhook.FailureKind{webhook.KindNone}, wantStatus: 200,
			check: func(t *testing.T, a webhook.Attempt) { assert.Len(t, a.ResponseBody, 4<<10) },
		},
		{
			name:      "hang without answering",
			script:    func(h *hostile, _ net.Conn, _ *http.Request) { h.hold() },
			timeout:   faultTimeout,
			wantKinds: []webhook.FailureKind{webhook.KindTimeout, webhook.KindTimeout},
		},
		{
			name:      "reset before headers",
			script:    func(_ *hostile, conn net.Conn, _ *http.Request) { resetConn(conn) },
			wantKinds: []webhook.FailureKind{webhook.KindReset, webhook.KindReset},
		},
		{
			name: "reset mid-body",
			script: func(_ *hostile, conn net.Conn, _ *http.Request) {
				io.WriteString(conn, bigBody+"partial")
				resetConn(conn)
			},
			// The 2xx status came within the timeout: delivered, with what
			// of the body arrived.
			wantKinds: []webhook.FailureKind{webhook.KindNone}, wantStatus: 200,
			check: func(t *testing.T, a webhook.Attempt) { assert.LessOrEqual(t, len(a.ResponseBody), len("partial")) },
		},
		{
			name: "huge headers",
			script: func(_ *hostile, conn net.Conn, _ *http.Request) {
				io.WriteString(conn, "HTTP/1.1 200 OK\r\n")
				line := "X-Filler: " + strings.Repeat("f", 1000) + "\r\n"
				for range 1 << 10 { // 1 MiB of headers
					if _, err := io.WriteString(conn, line); err != nil {
						return
					}
				}
			},
			wantKinds: []webhook.FailureKind{webhook.KindOther, webhook.KindOther}, wantErr: "exceeded",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			timeout := tc.timeout
			if timeout == 0 {
				timeout = faultAnswerTimeout
			}
			var h *hostile
			h = newHostile(t, func(conn net.Conn, req *http.Request) { tc.script(h, conn, req) })
			s := faultSenderTimeout(t, h.pool, tc.retry, timeout)
			start := time.Now()
			res, err := s.Send(context.Background(), h.conn(), samplePayload())
			elapsed := time.Since(start)

			require.Equal(t, tc.wantKinds, kinds(res.Attempts), "errors: %v", res.Err)
			assert.Equal(t, len(tc.wantKinds), h.requests(), "requests the receiver read")
			// Each attempt ends by its timeout at the latest: a generous
			// bound, never a tight timing assert.
			assert.Less(t, elapsed, time.Duration(len(tc.wantKinds))*timeout+5*time.Second)
			last := res.Attempts[len(res.Attempts)-1]
			assert.Equal(t, tc.wantStatus, last.StatusCode)
			if tc.wantKinds[len(tc.wantKinds)-1] == webhook.KindNone {
				require.NoError(t, err)
			} else {
				var de *webhook.DeliveryError
				require.ErrorAs(t, err, &de)
				assert.Len(t, de.Attempts, len(tc.wantKinds), "every attempt in the error")
				assert.ErrorContains(t, last.Err, tc.wantErr)
			}
			if tc.check != nil {
				tc.check(t, last)
			}
		})
	}
}

// TestSend_SwitchingProtocolsHeldNeverBlocks pins that a receiver answering
// 101 and holding the connection holds no entry point: each returns long
// before its (default, 30 s) attempt timeout.
func TestSend_SwitchingProtocolsHeldNeverBlocks(t *testing.T) {
	var h *hostile
	h = newHostile(t, func(conn net.Conn, _ *http.Request) {
		io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
		h.hold()
	})
	tr := newTransport(t, &webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: h.pool}, AllowPrivateNetworks: true})
	defer tr.CloseIdleConnections()
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr}, Retry: shortPolicy(0)})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // far below 30 s, far above a loopback answer
	defer cancel()
	body := []byte(`{"event":"user.identified"}`)

	calls := map[string]func() []webhook.Attempt{
		"Send": func() []webhook.Attempt { r, _ := s.Send(ctx, h.conn(), samplePayload()); return r.Attempts },
		"SendAll": func() []webhook.Attempt {
			return s.SendAll(ctx, []webhook.Connection{h.conn()}, samplePayload())[0].Attempts
		},
		"SendTest": func() []webhook.Attempt { r, _ := s.SendTest(ctx, h.conn()); return r.Attempts },
		"Attempt": func() []webhook.Attempt {
			return []webhook.Attempt{s.Attempt(ctx, h.conn(), webhook.EventUserIdentified, body, 1)}
		},
	}
	for name, call := range calls {
		attempts := call()
		require.Len(t, attempts, 1, name)
		assert.Equal(t, webhook.KindStatus, attempts[0].Kind, "%s: %v", name, attempts[0].Err)
		assert.Equal(t, http.StatusSwitchingProtocols, attempts[0].StatusCode, name)
		assert.NoError(t, ctx.Err(), "%s returned only when the context ended", name)
	}
}

func TestSend_TLSFailures(t *testing.T) {
	t.Run("handshake refused", func(t *testing.T) {
		h := newHostile(t, nil) // for its certificate pool only
		plain, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // answers plain HTTP to the TLS handshake
			defer wg.Done()
			for {
				c, err := plain.Accept()
				if err != nil {
					return
				}
				io.WriteString(c, "HTTP/1.1 400 Bad Request\r\n\r\n")
				c.Close()
			}
		}()
		defer func() { plain.Close(); wg.Wait() }()
		s := faultSender(t, h.pool, shortPolicy(0))
		res, err := s.Send(context.Background(), webhook.Connection{URL: "https://" + plain.Addr().String(), Secret: testSecret}, samplePayload())
		require.Error(t, err)
		assert.Equal(t, []webhook.FailureKind{webhook.KindTLS}, kinds(res.Attempts), "%v", err)
	})
	t.Run("wrong certificate", func(t *testing.T) {
		h := newHostile(t, func(net.Conn, *http.Request) {})
		s := faultSender(t, x509.NewCertPool(), shortPolicy(0)) // trusts nothing
		res, err := s.Send(context.Background(), h.conn(), samplePayload())
		require.Error(t, err)
		assert.Equal(t, []webhook.FailureKind{webhook.KindTLS}, kinds(res.Attempts), "%v", err)
		assert.Zero(t, h.requests(), "nothing was sent")
		assert.Contains(t, res.Attempts[0].Diagnosis(), "certificate")
	})
}

// nxdomainServer answers every DNS query on a 127.0.0.1 UDP port with
// NXDOMAIN, so a resolver pointed at it fails as for a name that does not
// exist, without leaving the machine.
func nxdomainServer(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 512)
		for {
			n, addr, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if n < 12 {
				continue
			}
			resp := append([]byte(nil), buf[:n]...)
			flags := binary.BigEndian.Uint16(resp[2:4])
			flags |= 0x8000           // a response
			flags = flags&^0x000f | 3 // RCODE NXDOMAIN
			binary.BigEndian.PutUint16(resp[2:4], flags)
			binary.BigEndian.PutUint16(resp[6:8], 0) // no answers
			pc.WriteTo(resp, addr)
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	return pc.LocalAddr().String()
}

func TestSend_DNSFailure(t *testing.T) {
	dnsAddr := nxdomainServer(t)
	resolver := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", dnsAddr)
	}}
	dialer := &net.Dialer{Resolver: resolver}
	tr := &http.Transport{DialContext: dialer.DialContext}
	defer tr.CloseIdleConnections()
	s := newTestSender(t, nil, &webhook.SenderOptions{Client: &http.Client{Transport: tr}, Retry: shortPolicy(1)})
	res, err := s.Send(context.Background(), webhook.Connection{URL: "https://no-such-host.example.test/hooks", Secret: testSecret}, samplePayload())
	require.Error(t, err)
	assert.Equal(t, []webhook.FailureKind{webhook.KindDNS, webhook.KindDNS}, kinds(res.Attempts), "%v", err)
	assert.Contains(t, res.Attempts[0].Diagnosis(), "does not resolve")
}

// hostileCert returns a self-signed certificate for 127.0.0.1 whose DNS names
// and common name carry terminal escapes and a bidi override, and a pool
// that trusts it.
func hostileCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "evil\u202e\x1b[2J"},
		DNSNames:     []string{"a\x1b]0;pwned\x07.example", "b\x1b[31m.example"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// TestSend_HostileTextIsNeverPrinted pins that what a receiver controls (a
// status line's reason phrase, a Location header, the names in its
// certificate) reaches no printed text raw: not the attempt's error, not
// the DeliveryError, not Diagnosis, not the table.
func TestSend_HostileTextIsNeverPrinted(t *testing.T) {
	const evil = "\x1b[2J\u009b31m\u202e\u2066\u200b\x00\xff"
	cert, pool := hostileCert(t)
	answers := map[string]string{
		"redirect": "HTTP/1.1 307 Go" + evil + "\r\nLocation: https://x" + "\u202e" + ".example/p?q\r\nContent-Length: 0\r\n\r\n",
		"status":   "HTTP/1.1 500 Oops" + evil + "\r\nContent-Length: 4\r\n\r\n" + evil[:4],
	}
	for name, answer := range answers {
		t.Run(name, func(t *testing.T) {
			h := newHostile(t, func(conn net.Conn, _ *http.Request) { io.WriteString(conn, answer) })
			res, err := faultSender(t, h.pool, shortPolicy(0)).Send(context.Background(), h.conn(), samplePayload())
			require.Error(t, err)
			requireAllPrintable(t, res, err)
		})
	}
	for name, trusted := range map[string]*x509.CertPool{"unknown authority": x509.NewCertPool(), "wrong host name": pool} {
		t.Run(name, func(t *testing.T) {
			ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
			require.NoError(t, err)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					c.(*tls.Conn).Handshake()
					c.Close()
				}
			}()
			defer func() { ln.Close(); <-done }()
			_, port, _ := net.SplitHostPort(ln.Addr().String())
			conn := webhook.Connection{Name: "tls", URL: "https://localhost:" + port + "/", Secret: testSecret}
			res, err := faultSender(t, trusted, shortPolicy(0)).Send(context.Background(), conn, samplePayload())
			require.Error(t, err)
			require.Equal(t, webhook.KindTLS, res.Attempts[0].Kind, "%v", err)
			requireAllPrintable(t, res, err)
		})
	}
}

// TestSend_HostileTextIsBounded: what a delivery prints of a receiver's
// text is bounded, as its body's excerpt is, whatever the receiver sends:
// net/http quotes a malformed status line whole, each control byte as four
// characters, and a reason phrase or a Location may fill the 64 KiB of
// headers. Unbounded, one attempt printed 240 KB (review).
func TestSend_HostileTextIsBounded(t *testing.T) {
	long := strings.Repeat("a", 60000)
	answers := map[string]string{
		"malformed status line": strings.Repeat("\x01", 60000) + "\r\n\r\n",
		"long reason phrase":    "HTTP/1.1 500 " + long + "\r\nContent-Length: 0\r\n\r\n",
		"long Location host":    "HTTP/1.1 307 Go\r\nLocation: https://" + long + ".example/p\r\nContent-Length: 0\r\n\r\n",
	}
	for name, answer := range answers {
		t.Run(name, func(t *testing.T) {
			h := newHostile(t, func(conn net.Conn, _ *http.Request) { io.WriteString(conn, answer) })
			var logged bytes.Buffer
			s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: newTransport(t,
				&webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: h.pool}, AllowPrivateNetworks: true})},
				Retry: shortPolicy(0), Logger: slog.New(slog.NewTextHandler(&logged, nil))})
			require.NoError(t, err)
			res, err := s.Send(context.Background(), h.conn(), samplePayload())
			require.Error(t, err)
			requirePrintedBounded(t, res, err)
			assert.LessOrEqual(t, logged.Len(), 2*maxPrinted, "the log line")
		})
	}
}

// maxPrinted bounds each text a delivery prints of one attempt: as much as
// its body's excerpt (4 KiB).
const maxPrinted = 4 << 10

// requirePrintedBounded checks the length of every text a failed delivery
// of one attempt prints.
func requirePrintedBounded(t *testing.T, res *webhook.Result, err error) {
	t.Helper()
	require.Len(t, res.Attempts, 1)
	var table strings.Builder
	require.NoError(t, res.WriteTable(&table))
	a := res.Attempts[0]
	for name, s := range map[string]string{"the error": err.Error(), "the table": table.String(), "the attempt's error": a.Err.Error(),
		"the diagnosis": a.Diagnosis(), "the attempt": a.String()} {
		assert.LessOrEqual(t, len(s), maxPrinted, "%s: %.200s", name, s)
	}
}

// TestSend_StatusOutsideHTTPsRangeIsNoAnswer: net/http takes any three
// digits for a status. An answer of 000 read as none (StatusCode 0) of kind
// status (review); one outside 100-599 is a protocol failure, which says
// so.
func TestSend_StatusOutsideHTTPsRangeIsNoAnswer(t *testing.T) {
	for _, status := range []string{"000", "099", "600", "999"} {
		t.Run(status, func(t *testing.T) {
			h := newHostile(t, func(conn net.Conn, _ *http.Request) {
				io.WriteString(conn, "HTTP/1.1 "+status+" Nope\r\nContent-Length: 0\r\n\r\n")
			})
			res, err := faultSender(t, h.pool, shortPolicy(0)).Send(context.Background(), h.conn(), samplePayload())
			require.Error(t, err)
			a := res.Attempts[0]
			assert.Equal(t, webhook.KindOther, a.Kind)
			assert.Zero(t, a.StatusCode)
			assert.ErrorContains(t, a.Err, "invalid status "+status)
		})
	}
}

// requireAllPrintable checks every text a failed delivery prints.
func requireAllPrintable(t *testing.T, res *webhook.Result, err error) {
	t.Helper()
	var table strings.Builder
	require.NoError(t, res.WriteTable(&table))
	texts := []string{err.Error(), table.String()}
	for _, a := range res.Attempts {
		texts = append(texts, a.Err.Error(), a.Diagnosis(), a.String(), a.ResponseText())
	}
	for _, s := range texts {
		requirePrintable(t, s, "\n")
	}
}

// TestSend_HTTP2StreamResetIsAReset pins that a receiver resetting the
// delivery's stream over HTTP/2 (RST_STREAM, where one connection carries
// several deliveries) is a failure of kind reset, as a TCP reset is.
func TestSend_HTTP2StreamResetIsAReset(t *testing.T) {
	srv := webhooktest.NewUnstartedServer(testSecret, nil)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	srv.Script(webhooktest.Reset())
	res, err := srv.Sender(&webhook.SenderOptions{Retry: shortPolicy(1)}).Send(context.Background(), srv.Connection(), samplePayload())
	require.NoError(t, err)
	assert.Equal(t, []webhook.FailureKind{webhook.KindReset, webhook.KindNone}, kinds(res.Attempts), "%v", res.Attempts[0].Err)
}
