package webhooktest_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/webhooktest"
)

// TestServer_HandlerCanFlushAsAnyHandler: a ServerOptions.Handler flushes
// its answer as handlers do, through the http.Flusher the ResponseWriter
// net/http gives it is (a receiver's handler that streams, or answers
// before its heavy work, as the spec asks). The Server's writer was none:
// it flushed only through http.NewResponseController, and a handler that
// asserts http.Flusher, as most do, could not flush (or, asserting
// without ok, panicked and answered nothing).
func TestServer_HandlerCanFlushAsAnyHandler(t *testing.T) {
	srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, ok := w.(http.Flusher)
		if !ok {
			http.Error(w, "the ResponseWriter is not an http.Flusher", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		f.Flush()
	})})
	defer srv.Close()
	res, err := srv.Sender(&webhook.SenderOptions{Retry: &webhook.RetryPolicy{}}).Send(context.Background(), srv.Connection(), payload())
	require.NoError(t, err, "%s", res.Attempts[0].ResponseText())
	assert.Equal(t, http.StatusAccepted, srv.Deliveries()[0].Status)
}
