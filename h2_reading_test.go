package webhook_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
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

// h2Frame writes one HTTP/2 frame.
func h2Frame(w io.Writer, typ, flags byte, stream uint32, payload []byte) error {
	var h [9]byte
	h[0], h[1], h[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	h[3], h[4] = typ, flags
	binary.BigEndian.PutUint32(h[5:], stream)
	_, err := w.Write(append(h[:], payload...))
	return err
}

// TestSend_HTTP2AnswerKeepsNoReadingAfterTheDelivery proves that what the
// Sender reads of an HTTP/2 receiver is bounded in bytes: an answer whose
// body never ends is read up to the log's excerpt and a bounded drain, and
// once the delivery has returned, the receiver cannot go on making the
// Sender read. Over HTTP/1 the connection of an answer not read to its end
// is closed; over HTTP/2 the stream is reset and the connection kept, and
// a receiver ignoring the reset goes on sending DATA on that stream, which
// the client reads and discards (returning the connection's flow-control
// window for it) for as long as the connection lives: here 64 MiB after
// the delivery returned.
func TestSend_HTTP2AnswerKeepsNoReadingAfterTheDelivery(t *testing.T) {
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

	const after = 64 << 20 // what the receiver sends after the answer's first 1 MiB
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
		h2Frame(conn, 0x4, 0, 0, nil) // SETTINGS
		requestEnded := make(chan struct{})
		go func() { // read the client's frames: ACK its SETTINGS, note the request's end
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
				case h[3] == 0x4 && h[4]&0x1 == 0: // SETTINGS
					h2Frame(conn, 0x4, 0x1, 0, nil)
				case (h[3] == 0x0 || h[3] == 0x1) && h[4]&0x1 != 0: // DATA or HEADERS ending the stream
					once.Do(func() { close(requestEnded) })
				}
			}
		}()
		<-requestEnded
		h2Frame(conn, 0x1, 0x4, 1, []byte{0x88}) // HEADERS :status 200, END_HEADERS
		chunk := make([]byte, 16384)
		for i := range chunk {
			chunk[i] = 'x'
		}
		total := 0
		for total < (1<<20)+after {
			conn.SetWriteDeadline(time.Now().Add(10 * time.Second)) // failsafe: a client that reads nothing holds the writer
			if err := h2Frame(conn, 0x0, 0, 1, chunk); err != nil {
				written <- err
				return
			}
			total += len(chunk)
		}
		written <- nil
	}()

	tr, err := webhook.NewTransport(&webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: pool}, AllowPrivateNetworks: true})
	require.NoError(t, err)
	defer tr.CloseIdleConnections()
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr}, AttemptTimeout: faultAnswerTimeout,
		Retry: &webhook.RetryPolicy{MaxRetries: 0}})
	require.NoError(t, err)
	c := webhook.Connection{Name: "h2", URL: "https://" + ln.Addr().String() + "/hooks", Secret: testSecret}
	res, err := s.Send(context.Background(), c, samplePayload())
	require.NoError(t, err, "delivered: a 2xx came")
	require.Len(t, res.Attempts, 1)
	assert.Len(t, res.Attempts[0].ResponseBody, 4<<10)

	// The delivery has returned. A receiver whose every frame the client
	// still reads writes all it wants; one that the client stopped reading
	// fails, or is held by TCP until the failsafe deadline.
	werr := <-written
	assert.Error(t, werr, "the receiver wrote %d MiB more after the delivery returned: the Sender still reads them", after>>20)
	if werr != nil && !errors.Is(werr, net.ErrClosed) {
		t.Logf("the receiver's writes ended with: %v", werr)
	}
	tr.CloseIdleConnections()
	ln.Close()
	wg.Wait()
}

// TestSend_HTTP2LargeAnswersKeepTheirConnection: the read budget of a
// connection never cuts a receiver that stops at the reset of its stream,
// however large its answers and however many deliveries share the
// connection: 64 deliveries at once, each answered with 1 MiB, all
// delivered over one connection.
func TestSend_HTTP2LargeAnswersKeepTheirConnection(t *testing.T) {
	answer := bytes.Repeat([]byte("x"), 1<<20)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write(answer)
	}))
	srv.EnableHTTP2 = true
	var conns atomic.Int32
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	tr, err := webhook.NewTransport(&webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: pool}, AllowPrivateNetworks: true})
	require.NoError(t, err)
	defer tr.CloseIdleConnections()
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr}, Retry: &webhook.RetryPolicy{MaxRetries: 0}})
	require.NoError(t, err)
	c := webhook.Connection{Name: "h2", URL: srv.URL + "/hooks", Secret: testSecret}
	// One delivery first, so that the others share its connection.
	_, err = s.Send(context.Background(), c, samplePayload())
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make([]error, 64)
	for i := range errs {
		wg.Go(func() { _, errs[i] = s.Send(context.Background(), c, samplePayload()) })
	}
	wg.Wait()
	for i, err := range errs {
		assert.NoError(t, err, "delivery %d", i)
	}
	assert.Equal(t, int32(1), conns.Load(), "one connection carried every delivery")
}
