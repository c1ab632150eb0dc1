package webhook

import (
	"net/http"
	"testing"
	"time"
)

// A Sender's own transport lets one HTTP/2 write wait as long as an
// attempt may take, so that a longer AttemptTimeout is not cut at
// DefaultAttemptTimeout by a slow link; and no less than NewTransport's
// own, so that a shorter one does not close a connection under the
// deliveries queued behind a slow write (a review's finding: with the
// bound at a 2 s AttemptTimeout, a delivery begun during a 2.6 s stall of
// a large upload failed, and was sent at 30 s).
func TestNewSender_OwnTransportBoundsAWriteByTheAttempt(t *testing.T) {
	for timeout, want := range map[time.Duration]time.Duration{
		0:               DefaultAttemptTimeout,
		2 * time.Second: DefaultAttemptTimeout,
		2 * time.Minute: 2 * time.Minute,
	} {
		s, err := NewSender(&SenderOptions{AttemptTimeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		tr := s.client.Transport.(*attemptTransport).rt.(*http.Transport)
		if got := tr.HTTP2.WriteByteTimeout; got != want {
			t.Errorf("AttemptTimeout %v: HTTP2.WriteByteTimeout is %v, want %v", timeout, got, want)
		}
	}
}
