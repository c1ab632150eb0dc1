package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/webhooktest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flaky is an application behind listen -forward that fails its first
// request (it was restarting) and accepts the rest.
type flaky struct {
	mu     sync.Mutex
	bodies []string
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.bodies = append(f.bodies, string(body))
	n := len(f.bodies)
	f.mu.Unlock()
	if n == 1 {
		http.Error(w, "starting up", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

func (f *flaky) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.bodies)
}

// A copy of a delivery whose forwarding failed (the application answered
// 503, or could not be reached) is forwarded: the delivery never reached
// the application, and the library's Middleware hands such a copy to its
// handler ("otherwise ... forgotten, so that a copy is handled"). Sending
// the same request again (a tunnel's "replay" button, the curl command
// sign printed) once the application is up is how a customer retries it.
func TestListen_ForwardsACopyOfADeliveryWhoseForwardingFailed(t *testing.T) {
	app := &flaky{}
	appSrv := httptest.NewServer(app)
	defer appSrv.Close()
	base, out := startListen(t, "-forward", appSrv.URL+"/hook")

	body := []byte(`{"event":"user.identified","user":{"id":"usr_9","email":"ada@example.com"}}`)
	h := webhooktest.SignedHeader(testSecret, webhook.EventUserIdentified, body, time.Now())
	resp, _ := post(t, base+"/webhooks", h, body)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "what the application answered")
	assert.Contains(t, <-out.each, "answered 503")

	resp, _ = post(t, base+"/webhooks", h, body)
	line := <-out.each
	assert.Equal(t, http.StatusAccepted, resp.StatusCode, "the copy is forwarded: %s", line)
	require.Equal(t, 2, app.count(), "the application got the copy")

	// Once the application has accepted it, a copy is refused, as before.
	resp, _ = post(t, base+"/webhooks", h, body)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Contains(t, <-out.each, "replayed delivery")
	assert.Equal(t, 2, app.count())
}
