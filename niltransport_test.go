package webhook_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

// TestNewSender_ANilTransportIsRefusedAtOnce: a Client whose Transport is a
// nil *http.Transport (declared, never made: NewTransport's error ignored,
// say) was taken, and every delivery then panicked in net/http.
func TestNewSender_ANilTransportIsRefusedAtOnce(t *testing.T) {
	var tr *http.Transport
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr}})
	if err == nil {
		assert.NotPanics(t, func() { s.SendTest(t.Context(), fakeConn) }, "taken, so it must deliver or fail")
	}
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Transport")
}
