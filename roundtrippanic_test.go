package webhook_test

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

// panicking is a transport that panics on its first panics round trips,
// as a caller's buggy RoundTripper (or CheckRedirect) may, and answers 204
// after.
type panicking struct{ panics atomic.Int32 }

func (p *panicking) RoundTrip(r *http.Request) (*http.Response, error) {
	if p.panics.Add(-1) >= 0 {
		panic("a round tripper's bug")
	}
	return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody, Request: r}, nil
}

// An attempt whose round trip panics, a panic its caller recovers (as
// River does in a job), is over for endpoint health: it is not counted in
// flight for ever, and the endpoint is tried again once it answers, rather
// than refused as "not answering" with MaxUnanswered such attempts "in
// flight".
func TestAttempt_APanicInTheRoundTripLeavesNothingInFlight(t *testing.T) {
	for _, call := range []struct {
		name string
		do   func(s *webhook.Sender, c webhook.Connection) error
	}{
		{"Attempt", func(s *webhook.Sender, c webhook.Connection) error {
			return s.Attempt(context.Background(), c, webhook.EventUserIdentified, []byte(`{}`), 1).Err
		}},
		{"Send", func(s *webhook.Sender, c webhook.Connection) error {
			_, err := s.Send(context.Background(), c, samplePayload())
			return err
		}},
	} {
		t.Run(call.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tr := &panicking{}
				tr.panics.Store(2)
				s := panickedSender(t, tr)
				conn := hungConn("/hook")
				for range 2 {
					require.Panics(t, func() { _ = call.do(s, conn) })
				}
				time.Sleep(time.Minute) // the endpoint's quiet, long past
				require.NoError(t, call.do(s, conn), "the panicked attempts are still counted in flight")
			})
		})
	}
}

// A Send whose OnAttempt panics (a caller's bug, a panic its caller
// recovers) after an attempt that timed out gives back the place among
// what waits on URLs not answering (MaxUnansweredTotal) that it took to
// retry: it held it for ever, and with MaxUnansweredTotal such panics every
// attempt to a URL not answering was refused from then on.
func TestSend_APanicInOnAttemptGivesBackItsPlaceToRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ep := &deadPaths{}
		var panics atomic.Int32
		panics.Store(1)
		constant := func(int, *http.Response) time.Duration { return time.Second }
		s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: ep}, AttemptTimeout: time.Second,
			Retry:  &webhook.RetryPolicy{MaxRetries: 3, Backoff: constant},
			Health: &webhook.HealthOptions{DownAfter: 100, MaxUnansweredTotal: 1},
			OnAttempt: func(context.Context, webhook.Connection, webhook.Attempt) {
				if panics.Add(-1) >= 0 {
					panic("an OnAttempt's bug")
				}
			}})
		require.NoError(t, err)
		require.Panics(t, func() { _, _ = s.Send(context.Background(), hungConn("/dead/0"), payloadFor(0)) })
		go s.Send(context.Background(), hungConn("/dead/0"), payloadFor(1))
		synctest.Wait()
		assert.EqualValues(t, 1, ep.inFlight.Load(), "the panicked delivery's place was given back")
		time.Sleep(10 * time.Second)
	})
}

// panickingBody answers 200 with a body whose Read panics on its first
// panics answers, as a caller's buggy RoundTripper's body may, and 204
// after.
type panickingBody struct{ panics atomic.Int32 }

type panicReader struct{}

func (panicReader) Read([]byte) (int, error) { panic("a response body's bug") }

func (p *panickingBody) RoundTrip(r *http.Request) (*http.Response, error) {
	if p.panics.Add(-1) >= 0 {
		return &http.Response{StatusCode: http.StatusOK, ContentLength: -1, Body: io.NopCloser(panicReader{}), Request: r}, nil
	}
	return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody, Request: r}, nil
}

// An attempt whose answer's body panics as it is read is over for endpoint
// health too: finish took the attempt in flight before reading the body,
// so that abandon found nothing to end, and MaxUnanswered such panics had
// the endpoint refused as not answering for ever.
func TestAttempt_APanicReadingTheAnswerLeavesNothingInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := &panickingBody{}
		tr.panics.Store(2)
		s := panickedSender(t, tr)
		conn := hungConn("/hook")
		for range 2 {
			require.Panics(t, func() { _ = s.Attempt(context.Background(), conn, webhook.EventUserIdentified, []byte(`{}`), 1) })
		}
		time.Sleep(time.Minute) // the endpoint's quiet, long past
		require.NoError(t, s.Attempt(context.Background(), conn, webhook.EventUserIdentified, []byte(`{}`), 1).Err,
			"the panicked attempts are still counted in flight")
	})
}

// panickedSender sends through tr without retries, with endpoint health
// refusing an endpoint with two attempts in flight and no answer.
func panickedSender(t *testing.T, tr http.RoundTripper) *webhook.Sender {
	t.Helper()
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr}, Retry: &webhook.RetryPolicy{},
		Health: &webhook.HealthOptions{MaxUnanswered: 2}})
	require.NoError(t, err)
	return s
}
