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
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

// TestSend_HTTP2ResetStreamsInFlightDoNotCutAnotherDelivery: four
// deliveries share one HTTP/2 connection. Three get large answers: the
// Sender reads each up to its excerpt and drain and resets the stream. The
// receiver had sent the rest of each stream's window (4 MiB, what
// flow control lets it send) before the resets reached it, and those bytes
// arrive after the three attempts ended, as they do over any network with
// latency: this test holds them until the three attempts have returned.
// The budget that readbudget.go says covers "a reset stream's window" was
// taken back when each attempt ended, leaving one allowance for the
// fourth attempt and one for the idle connection: 3 windows of 4 MiB do
// not fit in 8.4 MiB, so the connection is closed and the fourth delivery,
// whose receiver answers 200 right after, fails.
func TestSend_HTTP2ResetStreamsInFlightDoNotCutAnotherDelivery(t *testing.T) {
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

	release := make(chan struct{}) // the three large answers' attempts have returned
	const sent = 80 << 10          // of each large answer, before the resets: more than excerpt and drain
	const window = 4 << 20         // the client's initial stream window
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
		frame(0x4, 0, 0, nil) // SETTINGS
		ended := make(chan uint32, 16)
		go func() { // the client's frames: ACK SETTINGS and PING, note each request's end
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
		first, ok := <-ended // the priming delivery
		if !ok {
			return
		}
		frame(0x1, 0x5, first, []byte{0x88}) // :status 200, END_STREAM|END_HEADERS
		var streams []uint32
		for len(streams) < 4 {
			s, ok := <-ended
			if !ok {
				return
			}
			streams = append(streams, s)
		}
		chunk := make([]byte, 16<<10)
		for _, s := range streams[:3] { // large answers
			frame(0x1, 0x4, s, []byte{0x88})
			for n := 0; n < sent; n += len(chunk) {
				frame(0x0, 0, s, chunk)
			}
		}
		<-release
		// What the receiver sent before it saw the resets, within each
		// stream's window, arrives now.
		for _, s := range streams[:3] {
			for n := sent; n < window; n += len(chunk) {
				if frame(0x0, 0, s, chunk) != nil {
					return
				}
			}
		}
		frame(0x1, 0x5, streams[3], []byte{0x88}) // the fourth delivery: 200
		for range ended {                         // until the client closes
		}
	}()

	tr, err := webhook.NewTransport(&webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: pool}, AllowPrivateNetworks: true})
	require.NoError(t, err)
	defer tr.CloseIdleConnections()
	var attempts atomic.Int32
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr}, AttemptTimeout: faultAnswerTimeout,
		Retry: &webhook.RetryPolicy{MaxRetries: 0},
		OnAttempt: func(context.Context, webhook.Connection, webhook.Attempt) {
			if attempts.Add(1) == 4 { // the priming one and the three large answers
				close(release)
			}
		}})
	require.NoError(t, err)
	c := webhook.Connection{Name: "h2", URL: "https://" + ln.Addr().String() + "/hooks", Secret: testSecret}
	_, err = s.Send(context.Background(), c, samplePayload())
	require.NoError(t, err, "the priming delivery")

	var dwg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		dwg.Go(func() { _, errs[i] = s.Send(context.Background(), c, samplePayload()) })
	}
	dwg.Wait()
	for i, err := range errs {
		assert.NoError(t, err, "delivery %d: every receiver answered 200 within flow control", i)
	}
	tr.CloseIdleConnections()
	ln.Close()
	wg.Wait()
}
