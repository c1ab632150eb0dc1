package webhook_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

// readCountingListener counts the bytes its connections read.
type readCountingListener struct {
	net.Listener
	read *atomic.Int64
}

func (l readCountingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	return readCounter{c, l.read}, err
}

type readCounter struct {
	net.Conn
	read *atomic.Int64
}

func (c readCounter) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

// The transport's HTTP/2 connections index no header value in HPACK's
// dynamic table: a delivery's values (its signature, timestamp and id) are
// new each time, and indexing them cost the encoder an insertion and an
// eviction each, in maps, for every header of every request; and a
// connection's own headers, on a connection that carries many customers'
// deliveries, are never kept for another's request to be compared with.
// So the same header sent again costs its bytes again: a 512-character
// value, which an indexing encoder sends as one byte from the second
// request on, arrives whole (Huffman-coded) every time.
func TestTransport_HTTP2IndexesNoHeaderValue(t *testing.T) {
	var read atomic.Int64
	var mu sync.Mutex
	var seen []int64 // bytes read by the server when each request is served
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.ProtoMajor != 2 {
			http.Error(w, "HTTP/2 only", http.StatusHTTPVersionNotSupported)
			return
		}
		mu.Lock()
		seen = append(seen, read.Load()) // requests come one at a time
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.Listener = readCountingListener{srv.Listener, &read}
	var conns atomic.Int32 // one: a new connection's handshake would pass the bound alone
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	tr := newTransport(t, &webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: pool}, AllowPrivateNetworks: true})
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	value := strings.Repeat("0123456789abcdef", 32)
	const requests = 8
	for range requests {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/hooks", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("X-Probe", value)
		resp, err := client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, requests)
	require.Equal(t, int32(1), conns.Load(), "connections the requests took")
	for i := 1; i < requests; i++ {
		assert.GreaterOrEqual(t, seen[i]-seen[i-1], int64(300), "request %d: bytes read for it", i+1)
	}
}
