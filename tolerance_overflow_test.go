package webhook_test

import (
	"math"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signedhook/webhook"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMiddleware_HugeToleranceStillHandlesACopyOnce: a Tolerance is any
// non-negative Duration; a caller who turns the window off with the
// largest one must still get exactly-once handling of a copy.
func TestMiddleware_HugeToleranceStillHandlesACopyOnce(t *testing.T) {
	body := readTestdata(t, "body_user_identified.json")
	for _, tol := range []time.Duration{math.MaxInt64, 250 * 365 * 24 * time.Hour} {
		v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{Now: func() time.Time { return testNow }, Tolerance: tol})
		require.NoError(t, err)
		var calls atomic.Int32
		h := v.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls.Add(1) }))
		ts := testNow.UnixMilli()
		assert.Equal(t, http.StatusOK, serve(h, newSignedRequest(testSecret, ts, body)))
		assert.Equal(t, http.StatusOK, serve(h, newSignedRequest(testSecret, ts, body)), "a copy is acknowledged")
		assert.Equal(t, int32(1), calls.Load(), "tolerance %v: a copy is not handled again", tol)
		// Verify's own rule: a repeat is refused.
		h2 := signedHeader(testSecret, ts-1, body)
		require.NoError(t, v.Verify(h2, body))
		assert.ErrorIs(t, v.Verify(h2, body), webhook.ErrReplayed, "tolerance %v", tol)
	}
}

// TestMemoryReplayStore_HugeTTLDoesNotExpireAtOnce: a ReplayStore's TTL
// and lease are any Duration; "for ever" (math.MaxInt64) must not wrap into
// an expiry in the past.
func TestMemoryReplayStore_HugeTTLDoesNotExpireAtOnce(t *testing.T) {
	s, err := webhook.NewMemoryReplayStore(nil)
	require.NoError(t, err)
	ctx := t.Context()
	added, _ := s.Add(ctx, "a", math.MaxInt64)
	require.True(t, added)
	added, _ = s.Add(ctx, "a", math.MaxInt64)
	assert.False(t, added, "a key added for ever is still there")
	st, _ := s.Claim(ctx, "b", math.MaxInt64)
	require.Equal(t, webhook.ReplayUnseen, st)
	st, _ = s.Claim(ctx, "b", time.Second)
	assert.Equal(t, webhook.ReplayHandling, st, "a claim for ever is still held")
}
