package webhook_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signedhook/webhook"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// outcome is what a test's handler does with a delivery.
type outcome int

const (
	succeed outcome = iota
	fail            // 500 from the Middleware's next, an error from NewHandler's function
	panics
)

// onceHandlers returns, by name, the Middleware and NewHandler around a
// handler that counts its calls and does what next says.
func onceHandlers(v *webhook.Verifier, calls *atomic.Int32, next func() outcome) map[string]http.Handler {
	act := func() error {
		calls.Add(1)
		switch next() {
		case fail:
			return errors.New("database unavailable")
		case panics:
			panic("handler bug")
		}
		return nil
	}
	return map[string]http.Handler{
		"Middleware": v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if act() != nil {
				http.Error(w, "try later", http.StatusInternalServerError)
			}
		})),
		"NewHandler": webhook.NewHandler(v, func(context.Context, webhook.Payload) error { return act() }, nil),
	}
}

// serve serves r with h and returns the status, recovering a panic as a
// server does (which answers nothing): code 0.
func serve(h http.Handler, r *http.Request) (code int) {
	defer func() {
		if recover() != nil {
			code = 0
		}
	}()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec.Code
}

// TestMiddleware_HandlesADeliveryOnceAndNeverLosesACopy sends one signed
// request twice (a proxy's retry, a stored request): a copy of one that was
// handled is acknowledged without a second run; a copy of one whose handler
// failed or panicked is handled.
func TestMiddleware_HandlesADeliveryOnceAndNeverLosesACopy(t *testing.T) {
	body := readTestdata(t, "body_user_identified.json")
	tests := []struct {
		name      string
		first     outcome
		wantCodes []int
		wantCalls int32
		wantLog   string
	}{
		{"a copy of a handled delivery is acknowledged, not handled", succeed, []int{200, 200}, 1, "duplicate delivery acknowledged"},
		{"a copy of a failed delivery is handled", fail, []int{500, 200}, 2, ""},
		{"a copy of a delivery whose handler panicked is handled", panics, []int{0, 200}, 2, ""},
	}
	for _, name := range []string{"Middleware", "NewHandler"} {
		for i, tc := range tests {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				var logs bytes.Buffer
				v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{
					Now:    func() time.Time { return testNow },
					Logger: slog.New(slog.NewTextHandler(&logs, nil)),
				})
				require.NoError(t, err)
				var calls atomic.Int32
				outcomes := []outcome{tc.first, succeed}
				h := onceHandlers(v, &calls, func() outcome { o := outcomes[0]; outcomes = outcomes[1:]; return o })[name]
				ts := testNow.UnixMilli() - int64(i)
				var codes []int
				for range 2 {
					codes = append(codes, serve(h, newSignedRequest(testSecret, ts, body)))
				}
				assert.Equal(t, tc.wantCodes, codes)
				assert.Equal(t, tc.wantCalls, calls.Load(), "handler runs")
				assert.Contains(t, logs.String(), tc.wantLog)
				assert.NotContains(t, logs.String(), testSecret)
				assert.Equal(t, 200, serve(h, newSignedRequest(testSecret, ts, body)), "a third copy")
				assert.Equal(t, tc.wantCalls, calls.Load(), "a third copy is not handled")
			})
		}
	}
}

// TestMiddleware_CopyDuringHandlingIsAskedToRetry holds the first request
// in its handler while its copy arrives: the copy is not handled and is
// answered 409 with Retry-After; once the first has succeeded, a copy is
// acknowledged.
func TestMiddleware_CopyDuringHandlingIsAskedToRetry(t *testing.T) {
	body := readTestdata(t, "body_user_identified.json")
	v := newTestVerifier(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	h := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			close(entered)
			<-release
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	first := make(chan int)
	go func() { first <- serve(h, newSignedRequest(testSecret, testNow.UnixMilli(), body)) }()
	<-entered

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, newSignedRequest(testSecret, testNow.UnixMilli(), body))
	assert.Equal(t, http.StatusConflict, rec.Code)
	assert.Equal(t, "5", rec.Header().Get("Retry-After"))
	assert.Equal(t, int32(1), calls.Load(), "the copy is not handled while the first runs")

	close(release)
	assert.Equal(t, http.StatusAccepted, <-first)
	assert.Equal(t, 200, serve(h, newSignedRequest(testSecret, testNow.UnixMilli(), body)), "a 202 is handled: its copy is acknowledged")
	assert.Equal(t, int32(1), calls.Load())
}

// TestMiddleware_CopyIsHandledOnceAcrossInstances shares one store between
// two instances of a receiver, and shows a claim left by an instance that
// died mid-handler blocking the copy for the lease only.
func TestMiddleware_CopyIsHandledOnceAcrossInstances(t *testing.T) {
	body := readTestdata(t, "body_user_identified.json")
	now := testNow
	clock := func() time.Time { return now }
	store := newFakeStore(clock)
	var calls atomic.Int32
	instance := func() http.Handler {
		v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{Now: clock, ReplayStore: store, HandlerLease: 30 * time.Second})
		require.NoError(t, err)
		return v.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls.Add(1) }))
	}
	a, b := instance(), instance()

	ts := now.UnixMilli()
	assert.Equal(t, 200, serve(a, newSignedRequest(testSecret, ts, body)))
	assert.Equal(t, 200, serve(b, newSignedRequest(testSecret, ts, body)))
	assert.Equal(t, int32(1), calls.Load(), "handled by a, acknowledged by b")

	// An instance died holding the claim of another delivery.
	dead := newSignedRequest(testSecret, ts+1, body)
	key := strings.TrimPrefix(dead.Header.Get(webhook.HeaderSignature), "sha256=")
	_, err := store.Claim(context.Background(), key, 30*time.Second)
	require.NoError(t, err)
	assert.Equal(t, http.StatusConflict, serve(b, newSignedRequest(testSecret, ts+1, body)))
	now = now.Add(30 * time.Second)
	assert.Equal(t, 200, serve(b, newSignedRequest(testSecret, ts+1, body)), "past the lease, the copy is handled")
	assert.Equal(t, int32(2), calls.Load())

	const ms = time.Millisecond
	want := []storeCall{
		{"Claim", hexSig(t, ts, body), 30 * time.Second},
		{"Complete", hexSig(t, ts, body), 5*time.Minute + ms},
		{"Claim", hexSig(t, ts, body), 30 * time.Second},
		{"Claim", key, 30 * time.Second}, // the dead instance's
		{"Claim", key, 30 * time.Second},
		{"Claim", key, 30 * time.Second},
		{"Complete", key, 4*time.Minute + 30*time.Second + 2*ms},
	}
	assert.Equal(t, want, store.calls)
}

func hexSig(t *testing.T, ts int64, body []byte) string {
	sig := signedHeader(testSecret, ts, body).Get(webhook.HeaderSignature)
	_, err := hex.DecodeString(strings.TrimPrefix(sig, "sha256="))
	require.NoError(t, err)
	return strings.TrimPrefix(sig, "sha256=")
}

// TestMiddleware_StoreFailures: a store that cannot claim refuses 503 (the
// sender retries); one that cannot record an outcome is logged.
func TestMiddleware_StoreFailures(t *testing.T) {
	var logs bytes.Buffer
	var got error
	v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{
		Now:          func() time.Time { return testNow },
		ReplayStore:  failingStore{},
		Logger:       slog.New(slog.NewTextHandler(&logs, nil)),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) { got = err; w.WriteHeader(599) },
	})
	require.NoError(t, err)
	body := readTestdata(t, "body_user_identified.json")
	assert.Equal(t, 599, serve(v.Middleware(http.NotFoundHandler()), newSignedRequest(testSecret, testNow.UnixMilli(), body)))
	assert.ErrorIs(t, got, webhook.ErrReplayStore)
	assert.ErrorIs(t, got, errStoreDown)
}

// TestMiddleware_InProgressGoesToErrorHandler: the 409 is the
// ErrorHandler's to answer, with an error that is not a verification
// failure.
func TestMiddleware_InProgressGoesToErrorHandler(t *testing.T) {
	var got error
	v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{
		Now: func() time.Time { return testNow },
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			got = err
			w.WriteHeader(http.StatusTooManyRequests)
		},
	})
	require.NoError(t, err)
	body := readTestdata(t, "body_user_identified.json")
	var h http.Handler
	h = v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The copy arrives while this one runs.
		assert.Equal(t, http.StatusTooManyRequests, serve(h, newSignedRequest(testSecret, testNow.UnixMilli(), body)))
	}))
	assert.Equal(t, 200, serve(h, newSignedRequest(testSecret, testNow.UnixMilli(), body)))
	require.ErrorIs(t, got, webhook.ErrInProgress)
	assert.NotErrorIs(t, got, webhook.ErrVerification)
}

// TestMiddleware_AllowReplaysHandlesEveryCopy: with replay refusal off, the
// handler runs for each copy.
func TestMiddleware_AllowReplaysHandlesEveryCopy(t *testing.T) {
	v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{Now: func() time.Time { return testNow }, AllowReplays: true})
	require.NoError(t, err)
	var calls atomic.Int32
	h := onceHandlers(v, &calls, func() outcome { return succeed })["Middleware"]
	body := readTestdata(t, "body_user_identified.json")
	for range 3 {
		assert.Equal(t, 200, serve(h, newSignedRequest(testSecret, testNow.UnixMilli(), body)))
	}
	assert.Equal(t, int32(3), calls.Load())
}

// TestMiddleware_StatusOfHandlersThatFlushOrWriteNothing: a handler that
// writes nothing, or flushes through http.ResponseController, answered
// 200: its delivery was handled.
func TestMiddleware_StatusOfHandlersThatFlushOrWriteNothing(t *testing.T) {
	body := readTestdata(t, "body_user_identified.json")
	for i, next := range []http.HandlerFunc{
		func(http.ResponseWriter, *http.Request) {},
		func(w http.ResponseWriter, r *http.Request) {
			require.NoError(t, http.NewResponseController(w).Flush())
		},
	} {
		v := newTestVerifier(t)
		var calls atomic.Int32
		h := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1); next(w, r) }))
		for range 2 {
			assert.Equal(t, 200, serve(h, newSignedRequest(testSecret, testNow.UnixMilli(), body)), "handler %d", i)
		}
		assert.Equal(t, int32(1), calls.Load(), "handler %d", i)
	}
}

func TestMemoryReplayStore_ClaimCompleteRelease(t *testing.T) {
	now := testNow
	s, err := webhook.NewMemoryReplayStore(&webhook.MemoryReplayStoreOptions{Now: func() time.Time { return now }})
	require.NoError(t, err)
	ctx := context.Background()
	claim := func(key string) webhook.ReplayState {
		st, err := s.Claim(ctx, key, time.Minute)
		require.NoError(t, err)
		return st
	}
	assert.Equal(t, webhook.ReplayUnseen, claim("a"))
	assert.Equal(t, webhook.ReplayHandling, claim("a"))
	require.NoError(t, s.Release(ctx, "a"))
	assert.Equal(t, webhook.ReplayUnseen, claim("a"), "released: the copy claims it")
	require.NoError(t, s.Complete(ctx, "a", time.Hour))
	require.NoError(t, s.Release(ctx, "a"))
	assert.Equal(t, webhook.ReplayHandled, claim("a"), "Release leaves a handled key")
	added, err := s.Add(ctx, "a", time.Hour)
	require.NoError(t, err)
	assert.False(t, added)

	assert.Equal(t, webhook.ReplayUnseen, claim("b"))
	now = now.Add(time.Minute)
	assert.Equal(t, webhook.ReplayUnseen, claim("b"), "a claim past its lease is gone")
	assert.Equal(t, "handling", webhook.ReplayHandling.String())
}

// oddStore answers Claim with a state that does not exist.
type oddStore struct{ failingStore }

func (oddStore) Claim(context.Context, string, time.Duration) (webhook.ReplayState, error) {
	return webhook.ReplayState(7), nil
}

// TestMiddleware_UnknownClaimStateIsAStoreFailure: a store answering a
// state that does not exist runs no handler; the sender retries.
func TestMiddleware_UnknownClaimStateIsAStoreFailure(t *testing.T) {
	v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{Now: func() time.Time { return testNow }, ReplayStore: oddStore{}})
	require.NoError(t, err)
	var calls atomic.Int32
	h := v.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls.Add(1) }))
	assert.Equal(t, http.StatusServiceUnavailable, serve(h, newSignedRequest(testSecret, testNow.UnixMilli(), readTestdata(t, "body_user_identified.json"))))
	assert.Zero(t, calls.Load())
	assert.Equal(t, "ReplayState(7)", webhook.ReplayState(7).String())
}

// TestMiddleware_OutcomeIsKeptWhenTheRequestIsOver: the client went away
// while the handler ran (its context is cancelled); the delivery was handled
// all the same, and its copy is acknowledged.
func TestMiddleware_OutcomeIsKeptWhenTheRequestIsOver(t *testing.T) {
	store := newFakeStore(func() time.Time { return testNow })
	v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{Now: func() time.Time { return testNow }, ReplayStore: store})
	require.NoError(t, err)
	var calls atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	h := v.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls.Add(1); cancel() }))
	body := readTestdata(t, "body_user_identified.json")
	assert.Equal(t, 200, serve(h, newSignedRequest(testSecret, testNow.UnixMilli(), body).WithContext(ctx)))
	assert.Equal(t, 200, serve(h, newSignedRequest(testSecret, testNow.UnixMilli(), body)))
	assert.Equal(t, int32(1), calls.Load(), "the copy is acknowledged")
}

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
