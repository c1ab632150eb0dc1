package webhook_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

// mapBackedStore is a ReplayStore of a type that is not comparable (a map
// field), behind a ReplayStore field of a comparable wrapper.
type mapBackedStore struct {
	*webhook.MemoryReplayStore
	tags map[string]string
}

type wrappedStore struct{ webhook.ReplayStore }

// TestMiddleware_NestedVerifiersOnAWrappedUncomparableStoreDoNotPanic: two
// Verifiers share one ReplayStore whose type is comparable (a struct with
// an interface field) but whose value is not (that field holds a struct
// with a map). sharesStore checks reflect.Type.Comparable and then uses
// ==, which panics at run time: the nested delivery is never handled.
func TestMiddleware_NestedVerifiersOnAWrappedUncomparableStoreDoNotPanic(t *testing.T) {
	body := readTestdata(t, "body_user_identified.json")
	mem, err := webhook.NewMemoryReplayStore(&webhook.MemoryReplayStoreOptions{Now: func() time.Time { return testNow }})
	require.NoError(t, err)
	store := wrappedStore{mapBackedStore{mem, map[string]string{"region": "eu"}}}
	mk := func() *webhook.Verifier {
		v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{Now: func() time.Time { return testNow }, ReplayStore: store})
		require.NoError(t, err)
		return v
	}
	outer, inner := mk(), mk()
	h := outer.Middleware(webhook.NewHandler(inner, func(context.Context, webhook.Payload) error { return nil }, nil))
	code, panicked := func() (code int, p any) {
		defer func() { p = recover() }()
		return serve(h, newSignedRequest(testSecret, testNow.UnixMilli(), body)), nil
	}()
	require.Nil(t, panicked, "serving panicked: %v", fmt.Sprint(panicked))
	// sharesStore's stated rule for a store it cannot compare: no match (the
	// inner one claims, and finds the outer's claim), never a panic.
	assert.NotEqual(t, 0, code, "0: the handler chain panicked (serve recovers it)")
}
