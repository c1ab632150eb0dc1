package webhook_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

// TestMiddleware_ADeliveryThroughOneVerifierTwiceIsHandled: a router that
// uses v.Middleware for a group, with NewHandler(v, ...) (or another
// v.Middleware) on a route of it, verifies each delivery twice with one
// Verifier. The delivery is one request, not a copy: it is handled once,
// not answered 409 for ever (every retry the same) and lost.
func TestMiddleware_ADeliveryThroughOneVerifierTwiceIsHandled(t *testing.T) {
	body := readTestdata(t, "body_user_identified.json")
	v := newTestVerifier(t)
	var calls atomic.Int32
	for i, name := range []string{"NewHandler", "Middleware"} {
		inner := map[string]http.Handler{
			"NewHandler": webhook.NewHandler(v, func(context.Context, webhook.Payload) error { calls.Add(1); return nil }, nil),
			"Middleware": v.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls.Add(1) })),
		}[name]
		t.Run(name, func(t *testing.T) {
			calls.Store(0)
			h := v.Middleware(inner)
			ts := testNow.UnixMilli() - int64(i) // a delivery of its own per case
			assert.Equal(t, http.StatusOK, serve(h, newSignedRequest(testSecret, ts, body)))
			assert.Equal(t, int32(1), calls.Load(), "handled once")
			assert.Equal(t, http.StatusOK, serve(h, newSignedRequest(testSecret, ts, body)), "a copy is acknowledged")
			assert.Equal(t, int32(1), calls.Load(), "a copy is not handled")
		})
	}
}

// TestMemoryVersionStore_HoldsAtMostMaxKeys for every small MaxKeys.
func TestMemoryVersionStore_HoldsAtMostMaxKeys(t *testing.T) {
	for _, maxKeys := range []int{1, 2, 3, 4, 5} {
		s, err := webhook.NewMemoryVersionStore(&webhook.MemoryVersionStoreOptions{MaxKeys: maxKeys})
		require.NoError(t, err)
		for i := range 20 {
			require.NoError(t, s.Record(context.Background(), fmt.Sprint("usr_", i), testNow))
			require.LessOrEqual(t, s.Len(), maxKeys, "MaxKeys %d, after %d keys", maxKeys, i+1)
		}
	}
}

// TestMemoryReplayStore_HoldsAtMostMaxEntries for a MaxEntries that is not
// a multiple of the store's shards.
func TestMemoryReplayStore_HoldsAtMostMaxEntries(t *testing.T) {
	for _, maxEntries := range []int{1, 10, 100, 1000} {
		s, err := webhook.NewMemoryReplayStore(&webhook.MemoryReplayStoreOptions{MaxEntries: maxEntries})
		require.NoError(t, err)
		for i := range 20 * maxEntries {
			added, _ := s.Add(context.Background(), fmt.Sprint(i), time.Hour)
			require.True(t, added)
		}
		assert.LessOrEqual(t, s.Len(), maxEntries, "MaxEntries %d", maxEntries)
		assert.Greater(t, s.Len(), maxEntries*9/10, "MaxEntries %d: the room is used", maxEntries)
	}
}

// TestOn_ValidatesAPointerType: a handler taking a *Payload (or a pointer to
// a type of one's own with Validate) gets only bodies that validate, as one
// taking the value does: a Payload the service would never send is
// answered 400, not handed over.
func TestOn_ValidatesAPointerType(t *testing.T) {
	v := newTestVerifier(t)
	var e webhook.Events
	var calls atomic.Int32
	webhook.On(&e, webhook.EventUserIdentified, func(context.Context, *webhook.Payload) error { calls.Add(1); return nil })
	webhook.On(&e, "deal.closed", func(context.Context, *dealClosed) error { calls.Add(1); return nil })
	h := webhook.NewEventHandler(v, &e, nil)
	for i, body := range []string{
		`{"event":"user.identified","timestamp":"2026-11-21T10:00:00Z","user":{"id":"8f3a2b"},"application":{"id":"app_1"}}`, // no usr_ prefix
		`{"event":"deal.closed","deal":{"amount":3}}`, // no deal.id
	} {
		assert.Equal(t, http.StatusBadRequest, serve(h, newSignedRequest(testSecret, testNow.UnixMilli()-int64(i), []byte(body))), body)
	}
	assert.Zero(t, calls.Load(), "no invalid event is handed to a handler")
}
