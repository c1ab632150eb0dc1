package webhook_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signedhook/webhook"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMemoryReplayStore_ZeroValueDoesNotPanic: a store made as a literal
// (&webhook.MemoryReplayStore{}), as the zero Events and the zero Verifier
// may be, must not panic on use (an integer division by zero today), and
// given to NewVerifier it must not make every delivery panic and be lost.
func TestMemoryReplayStore_ZeroValueDoesNotPanic(t *testing.T) {
	ctx := context.Background()
	var s webhook.MemoryReplayStore
	require.NotPanics(t, func() {
		added, err := s.Add(ctx, "k", time.Minute)
		assert.NoError(t, err)
		assert.True(t, added)
		added, _ = s.Add(ctx, "k", time.Minute)
		assert.False(t, added, "a repeat is refused")
		assert.Equal(t, 1, s.Len())
	})

	body := readTestdata(t, "body_user_identified.json")
	v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{
		Now:         func() time.Time { return testNow },
		ReplayStore: &webhook.MemoryReplayStore{},
	})
	require.NoError(t, err, "NewVerifier accepts it")
	var calls atomic.Int32
	h := v.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls.Add(1) }))
	assert.Equal(t, http.StatusOK, serve(h, newSignedRequest(testSecret, testNow.UnixMilli(), body)), "handled, not a panic")
	assert.Equal(t, http.StatusOK, serve(h, newSignedRequest(testSecret, testNow.UnixMilli(), body)), "a copy is acknowledged")
	assert.Equal(t, int32(1), calls.Load())
}

// TestMemoryVersionStore_ZeroValueKeepsVersions: a store made as a literal
// (&webhook.MemoryVersionStore{}) silently remembers two keys at most (its
// bound is 0, so every Record starts a generation): a stale update of a
// third user back is applied over a newer one. It must keep the documented
// default bound, as a zero MaxKeys does.
func TestMemoryVersionStore_ZeroValueKeepsVersions(t *testing.T) {
	ctx := context.Background()
	var s webhook.MemoryVersionStore
	t2 := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	require.NoError(t, s.Record(ctx, "usr_a", t2))
	require.NoError(t, s.Record(ctx, "usr_b", t2))
	require.NoError(t, s.Record(ctx, "usr_c", t2))
	last, ok, err := s.Last(ctx, "usr_a")
	require.NoError(t, err)
	assert.True(t, ok && last.Equal(t2), "usr_a's version is kept, got %v %v", last, ok)
	assert.Equal(t, 3, s.Len())
}

// TestLastWriterWins_NilStorePointerIsRefusedAtOnce: a Store declared and
// never made (a nil *MemoryVersionStore) is a programming error that
// NewVerifier refuses for its ReplayStore; LastWriterWins takes it and every
// delivery then panics (nil pointer), answered with nothing and retried in
// vain. It must panic when built, as its doc says it does for programming
// errors, or use its default.
func TestLastWriterWins_NilStorePointerIsRefusedAtOnce(t *testing.T) {
	var st *webhook.MemoryVersionStore
	var fn func(context.Context, webhook.Payload) error
	built := func() (panicked bool) {
		defer func() { panicked = recover() != nil }()
		fn = webhook.LastWriterWins(func(context.Context, webhook.Payload) error { return nil },
			&webhook.LastWriterWinsOptions[webhook.Payload]{Store: st})
		return false
	}()
	if built {
		return // refused when built: fine
	}
	p := webhook.Payload{Event: webhook.EventUserIdentified}
	p.User.ID, p.User.UpdatedAt = "usr_1", webhook.NewTime(testNow)
	assert.NotPanics(t, func() { _ = fn(context.Background(), p) }, "taken when built, so it must serve")
}
