package webhook_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

// TestSend_HTTP2LargerStreamWindowDoesNotCutAnotherDelivery: the
// transport NewTransport returns is an *http.Transport, whose HTTP2 field
// may raise the window the client opens to a stream
// (HTTP2Config.MaxReceiveBufferPerStream). readAllowance assumes net/http's
// default 4 MiB. With a 16 MiB window, a receiver that answers one
// delivery with a large body, within the window the client gave it, makes
// the connection read past its budget (three allowances while two
// deliveries are on it) and closes it: the other delivery, answered 200
// right after, fails.
func TestSend_HTTP2LargerStreamWindowDoesNotCutAnotherDelivery(t *testing.T) {
	const window = 16 << 20
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

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		raw, err := ln.Accept()
		if err != nil {
			return
		}
		defer raw.Close()
		conn := tls.Server(raw, cfg)
		if conn.Handshake() != nil {
			return
		}
		preface := make([]byte, 24)
		if _, err := io.ReadFull(conn, preface); err != nil {
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
		ended := make(chan uint32, 16)
		go func() {
			for {
				var h [9]byte
				if _, err := io.ReadFull(conn, h[:]); err != nil {
					close(ended)
					return
				}
				n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
				payload := make([]byte, n)
				if _, err := io.ReadFull(conn, payload); err != nil {
					close(ended)
					return
				}
				stream := binary.BigEndian.Uint32(h[5:]) & 0x7fffffff
				switch {
				case h[3] == 0x4 && h[4]&0x1 == 0:
					frame(0x4, 0x1, 0, nil)
				case h[3] == 0x6 && h[4]&0x1 == 0:
					frame(0x6, 0x1, 0, payload)
				case (h[3] == 0x0 || h[3] == 0x1) && h[4]&0x1 != 0:
					ended <- stream
				}
			}
		}()
		first, ok := <-ended
		if !ok {
			return
		}
		frame(0x1, 0x5, first, []byte{0x88})
		a, ok1 := <-ended
		b, ok2 := <-ended
		if !ok1 || !ok2 {
			return
		}
		// A large answer to a, within the window the client opened to it.
		frame(0x1, 0x4, a, []byte{0x88})
		chunk := make([]byte, 16<<10)
		for n := 0; n+len(chunk) < window; n += len(chunk) {
			if frame(0x0, 0, a, chunk) != nil {
				return
			}
		}
		frame(0x1, 0x5, b, []byte{0x88}) // b: 200
		for range ended {
		}
	}()

	tr, err := webhook.NewTransport(&webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: pool}, AllowPrivateNetworks: true})
	require.NoError(t, err)
	tr.HTTP2 = &http.HTTP2Config{MaxReceiveBufferPerStream: window}
	defer tr.CloseIdleConnections()
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr}, AttemptTimeout: faultAnswerTimeout,
		Retry: &webhook.RetryPolicy{MaxRetries: 0}})
	require.NoError(t, err)
	c := webhook.Connection{Name: "h2", URL: "https://" + ln.Addr().String() + "/hooks", Secret: testSecret}
	_, err = s.Send(context.Background(), c, samplePayload())
	require.NoError(t, err, "the priming delivery")

	var dwg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		dwg.Go(func() { _, errs[i] = s.Send(context.Background(), c, samplePayload()) })
	}
	dwg.Wait()
	for i, err := range errs {
		assert.NoError(t, err, "delivery %d: both receivers answered 200 within flow control", i)
	}
	tr.CloseIdleConnections()
	ln.Close()
	wg.Wait()
}
