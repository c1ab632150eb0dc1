package webhook_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

// TestSend_HTTP2AnswerThroughAnHTTPProxyKeepsNoReadingAfterTheDelivery is
// TestSend_HTTP2AnswerKeepsNoReadingAfterTheDelivery through an http://
// CONNECT proxy (TransportOptions.Proxy; Smokescreen, the example the doc
// gives, is one). net/http dials such a proxy with DialContext and makes
// the TLS handshake with the receiver itself, so no boundedConn is under
// the connection: the HTTP/2 receiver that ignores the reset of its stream
// makes the Sender read 64 MiB after the delivery returned, as before the
// read budget.
func TestSend_HTTP2AnswerThroughAnHTTPProxyKeepsNoReadingAfterTheDelivery(t *testing.T) {
	srv := httptest.NewUnstartedServer(nil)
	srv.StartTLS()
	cfg := srv.TLS.Clone()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	srv.Close()
	cfg.NextProtos = []string{"h2"}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()

	const after = 64 << 20
	written := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		raw, err := ln.Accept()
		if err != nil {
			written <- err
			return
		}
		defer raw.Close()
		conn := tls.Server(raw, cfg)
		if err := conn.Handshake(); err != nil {
			written <- err
			return
		}
		preface := make([]byte, 24)
		if _, err := io.ReadFull(conn, preface); err != nil {
			written <- err
			return
		}
		var wmu sync.Mutex
		frame := func(typ, flags byte, stream uint32, payload []byte) error {
			wmu.Lock()
			defer wmu.Unlock()
			conn.SetWriteDeadline(time.Now().Add(10 * time.Second)) // failsafe
			return h2Frame(conn, typ, flags, stream, payload)
		}
		frame(0x4, 0, 0, nil)
		requestEnded := make(chan struct{})
		go func() {
			var once sync.Once
			for {
				var h [9]byte
				if _, err := io.ReadFull(conn, h[:]); err != nil {
					once.Do(func() { close(requestEnded) })
					return
				}
				n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
				if _, err := io.CopyN(io.Discard, conn, int64(n)); err != nil {
					once.Do(func() { close(requestEnded) })
					return
				}
				switch {
				case h[3] == 0x4 && h[4]&0x1 == 0:
					frame(0x4, 0x1, 0, nil)
				case (h[3] == 0x0 || h[3] == 0x1) && h[4]&0x1 != 0:
					once.Do(func() { close(requestEnded) })
				}
			}
		}()
		<-requestEnded
		frame(0x1, 0x4, 1, []byte{0x88})
		chunk := make([]byte, 16384)
		for total := 0; total < (1<<20)+after; total += len(chunk) {
			if err := frame(0x0, 0, 1, chunk); err != nil {
				written <- err
				return
			}
		}
		written <- nil
	}()

	proxy := newConnectProxy(t)
	proxy.route(ln.Addr().String(), ln.Addr().String())
	tr, err := webhook.NewTransport(&webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: pool}, AllowPrivateNetworks: true,
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxy.addr})})
	require.NoError(t, err)
	defer tr.CloseIdleConnections()
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr}, AttemptTimeout: faultAnswerTimeout,
		Retry: &webhook.RetryPolicy{MaxRetries: 0}})
	require.NoError(t, err)
	c := webhook.Connection{Name: "h2", URL: "https://" + ln.Addr().String() + "/hooks", Secret: testSecret}
	res, err := s.Send(context.Background(), c, samplePayload())
	require.NoError(t, err, "delivered: a 2xx came")
	require.Len(t, res.Attempts, 1)
	require.EqualValues(t, 1, proxy.connects.Load(), "through the proxy")

	werr := <-written
	assert.Error(t, werr, "the receiver wrote %d MiB more after the delivery returned: the Sender still reads them", after>>20)
	if werr != nil && !errors.Is(werr, net.ErrClosed) {
		t.Logf("the receiver's writes ended with: %v", werr)
	}
	tr.CloseIdleConnections()
	ln.Close()
	wg.Wait()
}
