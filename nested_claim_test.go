package webhook_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

// TestMiddleware_OneVerifierTwiceWithABodyLimitBetweenIsHandled: a router
// group with v.Middleware, then a body-limiting middleware (chi's
// middleware.RequestSize does r.Body = http.MaxBytesReader(w, r.Body, n)),
// then NewHandler(v, ...) on the route. The delivery is one request, not a
// copy: it must be handled once, not answered 409 for ever and lost.
func TestMiddleware_OneVerifierTwiceWithABodyLimitBetweenIsHandled(t *testing.T) {
	body := readTestdata(t, "body_user_identified.json")
	v := newTestVerifier(t)
	var calls atomic.Int32
	limit := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
			next.ServeHTTP(w, r)
		})
	}
	h := v.Middleware(limit(webhook.NewHandler(v, func(context.Context, webhook.Payload) error { calls.Add(1); return nil }, nil)))
	assert.Equal(t, http.StatusOK, serve(h, newSignedRequest(testSecret, testNow.UnixMilli(), body)))
	assert.Equal(t, int32(1), calls.Load(), "handled once")
}

// TestMiddleware_TwoVerifiersSharingAStoreNestedIsHandled: the documented
// multi-instance set-up shares one ReplayStore; a group middleware and a
// route's NewHandler built from two Verifiers over that store must still
// hand the one request to its handler.
func TestMiddleware_TwoVerifiersSharingAStoreNestedIsHandled(t *testing.T) {
	body := readTestdata(t, "body_user_identified.json")
	store, err := webhook.NewMemoryReplayStore(&webhook.MemoryReplayStoreOptions{Now: func() time.Time { return testNow }})
	require.NoError(t, err)
	mk := func() *webhook.Verifier {
		v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{Now: func() time.Time { return testNow }, ReplayStore: store})
		require.NoError(t, err)
		return v
	}
	outer, inner := mk(), mk()
	var calls atomic.Int32
	h := outer.Middleware(webhook.NewHandler(inner, func(context.Context, webhook.Payload) error { calls.Add(1); return nil }, nil))
	assert.Equal(t, http.StatusOK, serve(h, newSignedRequest(testSecret, testNow.UnixMilli(), body)))
	assert.Equal(t, int32(1), calls.Load(), "handled once")
}

// TestVerifyRequest_ThenNewHandlerOfOneVerifierRunsTheHandler: a router
// middleware that checks requests with v.VerifyRequest in front of
// NewHandler(v, ...) sees one request, not a copy. NewHandler must run its
// function; it acknowledges the request 200 as "handled before" without
// running it, so every delivery is silently lost.
func TestVerifyRequest_ThenNewHandlerOfOneVerifierRunsTheHandler(t *testing.T) {
	body := readTestdata(t, "body_user_identified.json")
	v := newTestVerifier(t)
	var calls atomic.Int32
	inner := webhook.NewHandler(v, func(context.Context, webhook.Payload) error { calls.Add(1); return nil }, nil)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := v.VerifyRequest(r); err != nil {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		inner.ServeHTTP(w, r)
	})
	assert.Equal(t, http.StatusOK, serve(h, newSignedRequest(testSecret, testNow.UnixMilli(), body)))
	assert.Equal(t, int32(1), calls.Load(), "the one request is handled, not acknowledged as a copy")
}

// TestMiddleware_ThenVerifyRequestOfOneVerifierIsNotAReplay: a route's
// handler written from VerifyRequest's docs, in a router group with
// v.Middleware, verifies the one request the Middleware serves. It is not a
// replay: refused, every attempt of the delivery was lost (review). A
// NewHandler further in still runs its function once, and a copy once it
// was handled is acknowledged by the Middleware.
func TestMiddleware_ThenVerifyRequestOfOneVerifierIsNotAReplay(t *testing.T) {
	body := readTestdata(t, "body_user_identified.json")
	v := newTestVerifier(t)
	var calls atomic.Int32
	inner := webhook.NewHandler(v, func(context.Context, webhook.Payload) error { calls.Add(1); return nil }, nil)
	h := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, err := v.VerifyRequest(r)
		if !assert.NoError(t, err, "the request the Middleware serves") || !assert.Equal(t, body, got) {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		inner.ServeHTTP(w, r)
	}))
	assert.Equal(t, http.StatusOK, serve(h, newSignedRequest(testSecret, testNow.UnixMilli(), body)))
	assert.Equal(t, http.StatusOK, serve(h, newSignedRequest(testSecret, testNow.UnixMilli(), body)), "a copy is acknowledged")
	assert.Equal(t, int32(1), calls.Load(), "handled once")

	// Alone, VerifyRequest still refuses the copy.
	_, err := v.VerifyRequest(newSignedRequest(testSecret, testNow.UnixMilli(), body))
	assert.ErrorIs(t, err, webhook.ErrReplayed)
}

// TestMiddleware_TwiceThenVerifyRequestIsNotAReplay: a router group's
// v.Middleware, a route's v.Middleware, and a handler written from
// VerifyRequest's docs; or VerifyRequest, then the Middleware, then
// VerifyRequest. Each Middleware further in hands on the claim it found, so
// the handler's VerifyRequest finds it too: the inner Middleware handed on
// a body without it, and every attempt was refused as a replay (review).
func TestMiddleware_TwiceThenVerifyRequestIsNotAReplay(t *testing.T) {
	body := readTestdata(t, "body_user_identified.json")
	v := newTestVerifier(t)
	var calls atomic.Int32
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := v.VerifyRequest(r); !assert.NoError(t, err) {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		calls.Add(1)
	})
	verifying := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := v.VerifyRequest(r); err != nil {
				http.Error(w, "no", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	for name, h := range map[string]http.Handler{
		"Middleware, Middleware, VerifyRequest":    v.Middleware(v.Middleware(handler)),
		"VerifyRequest, Middleware, VerifyRequest": verifying(v.Middleware(handler)),
	} {
		calls.Store(0)
		ts := testNow.UnixMilli() + int64(len(name)) // a delivery of its own
		assert.Equal(t, http.StatusOK, serve(h, newSignedRequest(testSecret, ts, body)), name)
		assert.Equal(t, int32(1), calls.Load(), name)
	}
}

// loggingWriter wraps the writer as a logging middleware does, with Unwrap
// for http.ResponseController.
type loggingWriter struct {
	http.ResponseWriter
	status int
}

func (w *loggingWriter) WriteHeader(code int)        { w.status = code; w.ResponseWriter.WriteHeader(code) }
func (w *loggingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func wrapBoth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		next.ServeHTTP(&loggingWriter{ResponseWriter: w}, r.WithContext(context.WithValue(r.Context(), loggingWriter{}, "request id")))
	})
}

// TestMiddleware_NestedThroughAWrappedBodyAndWriterIsHandledOnce: between
// a group's v.Middleware and a route's NewHandler(v), a middleware wraps
// the body, the writer (with Unwrap) and the request's context. The one
// request is handled once; a copy sent while it is handled is not handled
// and asked to come back; a copy once it was handled is acknowledged
// without running the handler.
func TestMiddleware_NestedThroughAWrappedBodyAndWriterIsHandledOnce(t *testing.T) {
	body := readTestdata(t, "body_user_identified.json")
	v := newTestVerifier(t)
	var calls atomic.Int32
	inHandler, release := make(chan struct{}), make(chan struct{})
	h := v.Middleware(wrapBoth(webhook.NewHandler(v, func(context.Context, webhook.Payload) error {
		if calls.Add(1) == 1 {
			close(inHandler)
			<-release
		}
		return nil
	}, nil)))
	first := newSignedRequest(testSecret, testNow.UnixMilli(), body)
	copyDuring, copyAfter := first.Clone(context.Background()), first.Clone(context.Background())
	copyDuring.Body, copyAfter.Body = io.NopCloser(bytes.NewReader(body)), io.NopCloser(bytes.NewReader(body))
	done := make(chan int)
	go func() { done <- serve(h, first) }()
	<-inHandler
	assert.Equal(t, http.StatusConflict, serve(h, copyDuring), "a copy while the first is handled")
	close(release)
	assert.Equal(t, http.StatusOK, <-done, "the request itself")
	assert.Equal(t, http.StatusOK, serve(h, copyAfter), "a copy once it was handled")
	assert.Equal(t, int32(1), calls.Load(), "handled once")
}
