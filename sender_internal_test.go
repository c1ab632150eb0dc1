package webhook

import (
	"net/http"
	"testing"
	"time"
)

// A Sender's own transport lets one HTTP/2 write wait as long as an
// attempt may take: a longer AttemptTimeout is not cut at
// DefaultAttemptTimeout by a slow link, and a shorter one frees a stalled
// connection sooner.
func TestNewSender_OwnTransportBoundsAWriteByTheAttempt(t *testing.T) {
	for _, timeout := range []time.Duration{0, time.Second, 2 * time.Minute} {
		s, err := NewSender(&SenderOptions{AttemptTimeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		tr := s.client.Transport.(*attemptTransport).rt.(*http.Transport)
		if got, want := tr.HTTP2.WriteByteTimeout, s.AttemptTimeout(); got != want {
			t.Errorf("AttemptTimeout %v: HTTP2.WriteByteTimeout is %v, want %v", timeout, got, want)
		}
	}
}
