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
	"net/url"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

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
	srv := newRawH2(t)
	const after = 64 << 20 // what the receiver sends after the answer's first 1 MiB
	written := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		p, err := srv.accept()
		if err != nil {
			written <- err
			return
		}
		defer p.close()
		s, err := p.next()
		if err == nil {
			err = p.stream(s, (1<<20)+after) // an answer whose body goes on
		}
		written <- err
	})
	testHostileH2(t, srv, nil, written, after)
	wg.Wait()
}

// testHostileH2 sends one delivery to srv, whose answer's body goes on
// after the delivery returned (written tells how its writes ended), through
// proxy if not nil: the Sender must stop reading it.
func testHostileH2(t *testing.T, srv *rawH2, proxy *url.URL, written <-chan error, after int) {
	t.Helper()
	opts := &webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: srv.pool}, AllowPrivateNetworks: true}
	if proxy != nil {
		opts.Proxy = http.ProxyURL(proxy)
	}
	tr, err := webhook.NewTransport(opts)
	require.NoError(t, err)
	defer tr.CloseIdleConnections()
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr}, AttemptTimeout: faultAnswerTimeout,
		Retry: &webhook.RetryPolicy{MaxRetries: 0}})
	require.NoError(t, err)
	c := webhook.Connection{Name: "h2", URL: "https://" + srv.addr() + "/hooks", Secret: testSecret}
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

// TestSend_HTTP2GoAwayDebugDataIsBounded: a receiver that reads the
// delivery, then sends GOAWAY with a frame full of debug data and closes:
// net/http quotes the debug data whole in its error, and the attempt
// prints no more of it than of a body (review: 64 KB of text).
func TestSend_HTTP2GoAwayDebugDataIsBounded(t *testing.T) {
	srv := newRawH2(t)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		p, err := srv.accept()
		if err != nil {
			return
		}
		defer p.close()
		stream, err := p.next()
		if err != nil {
			return
		}
		payload := make([]byte, 8, 16<<10)
		binary.BigEndian.PutUint32(payload[0:4], stream) // the last stream: the delivery's
		payload = append(payload, bytes.Repeat([]byte{0x01}, cap(payload)-8)...)
		p.frame(0x7, 0, 0, payload) // GOAWAY, NO_ERROR
	})
	tr := newTransport(t, &webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: srv.pool}, AllowPrivateNetworks: true})
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr}, Retry: shortPolicy(0)})
	require.NoError(t, err)
	t.Cleanup(s.CloseIdleConnections)
	res, err := s.Send(context.Background(), webhook.Connection{URL: "https://" + srv.addr() + "/hooks", Secret: testSecret}, samplePayload())
	require.Error(t, err)
	require.Contains(t, err.Error(), "GOAWAY")
	requirePrintedBounded(t, res, err)
}
