package webhook_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

func TestAttempt_MarshalJSON(t *testing.T) {
	start := time.Date(2026, 11, 24, 18, 3, 7, 215_400_000, time.FixedZone("CET", 3600))
	for _, tc := range []struct {
		name string
		a    webhook.Attempt
		want string
	}{
		{"delivered", webhook.Attempt{N: 1, Start: start, Duration: 3214567 * time.Nanosecond, Timestamp: 1795543387215, StatusCode: 200},
			`{"n":1,"outcome":"delivered","start":"2026-11-24T17:03:07.215Z","duration_ms":3.215,"timestamp":1795543387215,"status":200,"retry":false}`},
		{"failed with a retry", webhook.Attempt{N: 2, Start: start, Duration: 30 * time.Second, Timestamp: 1, StatusCode: 503,
			Kind: webhook.KindStatus, Err: errors.New("webhook: status 503\x1b[31m"), ResponseBody: []byte("busy\n\u202etxt"), Retry: true, RetryIn: 2 * time.Second},
			`{"n":2,"outcome":"status","start":"2026-11-24T17:03:07.215Z","duration_ms":30000,"timestamp":1,"status":503,"error":"webhook: status 503�[31m","response":"busy �txt","retry":true,"retry_in_ms":2000}`},
		{"interrupted, start unknown", webhook.Attempt{N: 3, Kind: webhook.KindInterrupted, Err: errors.New("interrupted")},
			`{"n":3,"outcome":"interrupted","duration_ms":0,"error":"interrupted","retry":false}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := json.Marshal(tc.a)
			require.NoError(t, err)
			assert.JSONEq(t, tc.want, string(got))
			assert.Equal(t, tc.want, string(got), "the documented order")
		})
	}
}

func TestResult_MarshalJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    webhook.Result
		want string
	}{
		{"delivered", webhook.Result{ConnectionName: "CRM", Attempts: []webhook.Attempt{{N: 1, StatusCode: 204}}},
			`{"connection_name":"CRM","outcome":"delivered","attempts":[{"n":1,"outcome":"delivered","duration_ms":0,"status":204,"retry":false}]}`},
		{"invalid, nothing sent", webhook.Result{ConnectionName: "CRM", Err: fmt.Errorf("x: %w", webhook.ErrInvalidConnection)},
			`{"connection_name":"CRM","outcome":"invalid","error":"x: webhook: invalid connection","attempts":[]}`},
		{"down, nothing sent", webhook.Result{Err: fmt.Errorf("x: %w", webhook.ErrEndpointDown)},
			`{"connection_name":"","outcome":"down","error":"x: webhook: endpoint down","attempts":[]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := json.Marshal(tc.r)
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(got))
			got, err = json.Marshal(&tc.r)
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(got), "a *Result too")
		})
	}
}

func TestAttempt_OutcomeIsDeliveredOnSuccess(t *testing.T) {
	assert.Equal(t, webhook.KindDelivered, webhook.Attempt{StatusCode: 200}.Outcome())
	assert.Equal(t, webhook.KindTimeout, webhook.Attempt{Kind: webhook.KindTimeout, Err: errors.New("t")}.Outcome())
}

// A dashboard serves the delivery-attempt log as JSON as it is, and a
// program switches on each attempt's outcome.
func ExampleAttempt_MarshalJSON() {
	a := webhook.Attempt{
		N: 1, Start: time.Date(2026, 11, 24, 18, 3, 7, 215e6, time.UTC), Duration: 3210 * time.Microsecond,
		Timestamp: 1795543387215, StatusCode: 503, Kind: webhook.KindStatus, Err: errors.New("webhook: status 503"),
		ResponseBody: []byte("busy"), Retry: true, RetryIn: time.Second,
	}
	b, _ := json.Marshal(a)
	fmt.Println(string(b))
	switch a.Outcome() {
	case webhook.KindDelivered:
		fmt.Println("delivered")
	case webhook.KindStatus:
		fmt.Println("answered", a.StatusCode)
	}
	// Output:
	// {"n":1,"outcome":"status","start":"2026-11-24T18:03:07.215Z","duration_ms":3.21,"timestamp":1795543387215,"status":503,"error":"webhook: status 503","response":"busy","retry":true,"retry_in_ms":1000}
	// answered 503
}
