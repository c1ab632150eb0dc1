package webhook_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

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
	srv := newRawH2(t)
	release := make(chan struct{}) // the three large answers' attempts have returned
	const sent = 80 << 10          // of each large answer, before the resets: more than excerpt and drain
	const window = 4 << 20         // the client's initial stream window
	done := make(chan struct{})    // the test has its answers
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(done)
	wg.Go(func() {
		p, err := srv.accept()
		if err != nil {
			return
		}
		defer p.close()
		first, err := p.next() // the priming delivery
		if err != nil || p.ok(first) != nil {
			return
		}
		var streams []uint32
		for len(streams) < 4 {
			s, err := p.next()
			if err != nil {
				return
			}
			streams = append(streams, s)
		}
		for _, s := range streams[:3] { // large answers
			p.stream(s, sent)
		}
		<-release
		// What the receiver sent before it saw the resets, within each
		// stream's window, arrives now.
		for _, s := range streams[:3] {
			if p.data(s, window-sent) != nil {
				return
			}
		}
		p.ok(streams[3]) // the fourth delivery: 200
		<-done
	})
	var attempts atomic.Int32
	testSharedH2(t, srv, nil, 4, func(context.Context, webhook.Connection, webhook.Attempt) {
		if attempts.Add(1) == 4 { // the priming one and the three large answers
			close(release)
		}
	})
}

// testSharedH2 sends a priming delivery to srv, then n at once over its
// connection, on a transport from NewTransport whose HTTP2 field h2
// replaces (nil: NewTransport's own): every one must be delivered.
func testSharedH2(t *testing.T, srv *rawH2, h2 *http.HTTP2Config, n int, onAttempt func(context.Context, webhook.Connection, webhook.Attempt)) {
	t.Helper()
	tr, err := webhook.NewTransport(&webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: srv.pool}, AllowPrivateNetworks: true})
	require.NoError(t, err)
	if h2 != nil {
		tr.HTTP2 = h2
	}
	defer tr.CloseIdleConnections()
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr}, AttemptTimeout: faultAnswerTimeout,
		Retry: &webhook.RetryPolicy{MaxRetries: 0}, OnAttempt: onAttempt})
	require.NoError(t, err)
	c := webhook.Connection{Name: "h2", URL: "https://" + srv.addr() + "/hooks", Secret: testSecret}
	_, err = s.Send(context.Background(), c, samplePayload())
	require.NoError(t, err, "the priming delivery")
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range errs {
		wg.Go(func() { _, errs[i] = s.Send(context.Background(), c, samplePayload()) })
	}
	wg.Wait()
	for i, err := range errs {
		assert.NoError(t, err, "delivery %d: every receiver answered 200 within flow control", i)
	}
	tr.CloseIdleConnections()
}
