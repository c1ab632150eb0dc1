package webhook_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// plainWriter is an outer middleware's ResponseWriter that can neither
// flush nor unwrap (a logging or metrics wrapper of its own).
type plainWriter struct{ w http.ResponseWriter }

func (p *plainWriter) Header() http.Header         { return p.w.Header() }
func (p *plainWriter) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p *plainWriter) WriteHeader(code int)        { p.w.WriteHeader(code) }

// TestMiddleware_FlushThatFlushedNothingDoesNotMakeA500Handled: under a
// writer that cannot flush, a handler's Flush sends nothing, so the 500 it
// answers next is what the client gets. The Middleware took the Flush for
// a 200 and recorded the delivery as handled: its copy (a proxy retrying
// the 500) is acknowledged 200 without running the handler, and the
// delivery is lost.
func TestMiddleware_FlushThatFlushedNothingDoesNotMakeA500Handled(t *testing.T) {
	body := readTestdata(t, "body_user_identified.json")
	v := newTestVerifier(t)
	var calls atomic.Int32
	h := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
			http.Error(w, "database unavailable", http.StatusInternalServerError)
		}
	}))
	outer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(&plainWriter{w}, r) })

	ts := testNow.UnixMilli()
	rec := httptest.NewRecorder()
	outer.ServeHTTP(rec, newSignedRequest(testSecret, ts, body))
	require.Equal(t, http.StatusInternalServerError, rec.Code, "the client got the 500")

	rec = httptest.NewRecorder()
	outer.ServeHTTP(rec, newSignedRequest(testSecret, ts, body))
	assert.Equal(t, int32(2), calls.Load(), "the copy of a delivery answered 500 is handled")
}
