package webhook_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

// A URL with user information and no password (https://KEY@host/...):
// net/http sends Authorization: Basic base64("KEY:"), and a receiver that
// echoes it must not put the key, base64-encoded, into the excerpt.
func TestSend_EchoedBasicCredentialsWithoutAPasswordAreScrubbed(t *testing.T) {
	rv := newReceiver(t)
	rv.handle = func(w http.ResponseWriter, r *http.Request) bool {
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte("bad credentials: " + r.Header.Get("Authorization")))
		return true
	}
	s := newTestSender(t, rv, &webhook.SenderOptions{Retry: &webhook.RetryPolicy{}})
	conn := rv.conn("/in")
	conn.URL = strings.Replace(conn.URL, "https://", "https://sk_live_1234567890@", 1)
	res, err := s.Send(context.Background(), conn, samplePayload())
	require.Error(t, err)
	basic := base64.StdEncoding.EncodeToString([]byte("sk_live_1234567890:"))
	got := string(res.Attempts[0].ResponseBody)
	assert.Contains(t, got, "bad credentials: Basic ", "the receiver echoed the header")
	assert.NotContains(t, got, basic, "the key shows, base64-encoded")
}

// What a Connection may hold is bounded: a URL of more than 8 KiB, which
// most servers refuse anyway, is refused with an error naming the field.
func TestConnection_URLIsBounded(t *testing.T) {
	c := webhook.Connection{Name: "long", URL: "https://hooks.example.com/" + strings.Repeat("a/", 4096), Secret: testSecret}
	err := c.Validate()
	require.ErrorIs(t, err, webhook.ErrInvalidConnection)
	assert.Contains(t, err.Error(), "url")
	assert.Contains(t, err.Error(), "8192")
	c.URL = "https://hooks.example.com/" + strings.Repeat("a", 8000)
	assert.NoError(t, c.Validate())
}
