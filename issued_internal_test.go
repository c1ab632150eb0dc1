package webhook

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"
)

type okTransport struct{}

func (okTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
}

// The timestamps kept follow the last second or two of the clock, also
// after it stepped back: an hour back, a Sender kept every body it signed
// for the hour (a review's finding).
func TestIssued_KeepsTheLastSecondsAfterTheClockStepsBack(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	now := t0.Add(time.Hour)
	s, err := NewSender(&SenderOptions{Client: &http.Client{Transport: okTransport{}}, Retry: &RetryPolicy{}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	conn := Connection{Name: "crm", URL: "https://crm.example.com/hooks", Secret: "whsec_issued_test_secret"}
	for i := range 64 {
		s.Attempt(context.Background(), conn, "ping", fmt.Appendf(nil, `{"n":%d}`, i), 1)
	}
	now = t0 // the clock steps back an hour
	const every = 12 * time.Millisecond
	for i := range 20000 {
		now = now.Add(every)
		s.Attempt(context.Background(), conn, "ping", fmt.Appendf(nil, `{"i":%d}`, i), 1)
	}
	kept := 0
	for i := range s.issued.shards {
		kept += len(s.issued.shards[i].last)
	}
	// Two seconds' worth, with the 64 from before the step.
	if limit := 64 + int(2*issuedKeep*time.Millisecond/every) + issuedShards; kept > limit {
		t.Errorf("%d entries kept, want the last 2 s' at the most (%d)", kept, limit)
	}
}
