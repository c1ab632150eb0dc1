package webhooktest_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/webhooktest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServer_StatusIsWhatTheServerAnswered: Delivery.Status is "the status
// the Server answered". A Handler that flushes (through
// http.NewResponseController, as the Server's doc offers) has answered 200;
// a 500 it writes afterwards is superfluous and never reaches the sender.
// The Server records 500 while the sender's attempt says 200.
func TestServer_StatusIsWhatTheServerAnswered(t *testing.T) {
	srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).Flush()
		http.Error(w, "too late", http.StatusInternalServerError)
	})})
	defer srv.Close()
	res, err := srv.Sender(&webhook.SenderOptions{Retry: fastRetries(0)}).Send(context.Background(), srv.Connection(), payload())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.Attempts[0].StatusCode, "the sender got 200")
	assert.Equal(t, http.StatusOK, srv.Deliveries()[0].Status, "the Server answered 200")
}
