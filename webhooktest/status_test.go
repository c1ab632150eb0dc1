package webhooktest_test

import (
	"bytes"
	"context"
	"net/http"
	"runtime"
	"testing"
	"time"

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

// TestServer_StatusOfAHandlerThatTakesTheConnection: a Handler that hijacks
// the connection (through http.NewResponseController, as the Server's doc
// offers) and writes its own answer has not answered through the Server:
// the Server records no status of its own, never a 200 the sender did not
// get.
func TestServer_StatusOfAHandlerThatTakesTheConnection(t *testing.T) {
	srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("Hijack: %v", err)
			return
		}
		defer conn.Close()
		buf.WriteString("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		buf.Flush()
	})})
	defer srv.Close()
	res, err := srv.Sender(&webhook.SenderOptions{Retry: fastRetries(0)}).Send(context.Background(), srv.Connection(), payload())
	require.Error(t, err)
	require.Equal(t, http.StatusInternalServerError, res.Attempts[0].StatusCode, "the sender got the Handler's 500")
	waitServed(t)
	assert.Zero(t, srv.Deliveries()[0].Status, "the Server answered nothing itself")
}

// waitServed waits until no goroutine is in a Server's handler. The sender
// can have the answer of a Handler that took the connection before the
// Handler has returned, and nothing the Server does afterwards is seen on
// the wire: the goroutines' stacks are what tells.
func waitServed(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(30 * time.Second) // the wait is not what is tested
	for bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("webhooktest.(*Server).serve(")) {
		if time.Now().After(deadline) {
			t.Fatal("a Server's handler still runs after 30 s")
		}
		runtime.Gosched()
	}
}

// TestServer_StatusOfAHandlerThatPanicsAfterAnswering: a Handler that
// flushes its 200 and then panics (http.ErrAbortHandler, or a bug) has
// answered 200, which the sender got.
func TestServer_StatusOfAHandlerThatPanicsAfterAnswering(t *testing.T) {
	srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	})})
	defer srv.Close()
	res, err := srv.Sender(&webhook.SenderOptions{Retry: fastRetries(0)}).Send(context.Background(), srv.Connection(), payload())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.Attempts[0].StatusCode, "the sender got 200")
	assert.Equal(t, http.StatusOK, srv.Deliveries()[0].Status, "the Server answered 200")
}
