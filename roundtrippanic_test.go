package webhook_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

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
				s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr}, Retry: &webhook.RetryPolicy{},
					Health: &webhook.HealthOptions{MaxUnanswered: 2}})
				require.NoError(t, err)
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
