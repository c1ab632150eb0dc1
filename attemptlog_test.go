package webhook_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/webhooktest"
)

func TestAttempt_String(t *testing.T) {
	tests := []struct {
		a    webhook.Attempt
		want string
	}{
		{webhook.Attempt{N: 1, StatusCode: 503, Kind: webhook.KindStatus, Duration: 3210 * time.Microsecond, Retry: true, RetryIn: time.Second},
			"attempt 1: 503 status in 3.21ms, retry in 1s"},
		{webhook.Attempt{N: 3, StatusCode: 200, Duration: 612 * time.Microsecond}, "attempt 3: 200 delivered in 610µs"},
		{webhook.Attempt{N: 2, Kind: webhook.KindTimeout, Duration: 30 * time.Second}, "attempt 2: timeout in 30s"},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, tc.a.String())
	}
}

func TestResult_WriteTable(t *testing.T) {
	srv := webhooktest.NewServer(testSecret, nil)
	defer srv.Close()
	srv.Script(webhooktest.Status(503), webhooktest.Reset())
	res, err := srv.Sender(&webhook.SenderOptions{Retry: shortPolicy(3)}).Send(context.Background(), srv.Connection(), samplePayload())
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, res.WriteTable(&out))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 6, out.String())
	assert.Equal(t, `delivery-attempt log for "webhooktest":`, lines[0])
	assert.Regexp(t, `^#  +X-Service-Timestamp  +status  +outcome  +took  +next  +response$`, lines[1])
	assert.Regexp(t, `^1  +\d{13}  +503  +status  +\S+  +retry in 2ms  +\{"status":503\}$`, lines[2])
	assert.Regexp(t, `^2  +\d{13}  +-  +reset  +\S+  +retry in 2ms\s*$`, lines[3])
	assert.Regexp(t, `^3  +\d{13}  +200  +delivered  +\S+  +-  +\{"ok":true\}$`, lines[4])
	assert.Regexp(t, regexp.MustCompile(`^delivered: the endpoint answered 200`), lines[5])
}

func TestResult_WriteTable_HostileBodyAndNothingSent(t *testing.T) {
	res := &webhook.Result{Connection: "x", Attempts: []webhook.Attempt{{N: 1, StatusCode: 500, Kind: webhook.KindStatus,
		ResponseBody: []byte("line1\r\n\x1b[31mred\xff" + strings.Repeat("z", 100))}}}
	var out bytes.Buffer
	require.NoError(t, res.WriteTable(&out))
	assert.NotContains(t, out.String(), "\x1b", "no terminal escapes from a receiver")
	assert.NotContains(t, out.String(), "\r")
	assert.Contains(t, out.String(), "line1..")
	assert.Contains(t, out.String(), "…")

	res = &webhook.Result{Connection: "x", Err: errors.New("webhook: invalid connection: URL: must use https://")}
	out.Reset()
	require.NoError(t, res.WriteTable(&out))
	assert.Contains(t, out.String(), "not sent: webhook: invalid connection")
}

func TestResult_WriteTable_Stopped(t *testing.T) {
	srv := webhooktest.NewServer(testSecret, nil)
	defer srv.Close()
	srv.Script(webhooktest.Status(503))
	ctx, cancel := context.WithCancel(context.Background())
	s := srv.Sender(&webhook.SenderOptions{Retry: &webhook.RetryPolicy{MaxRetries: 1,
		Backoff: func(int, *http.Response) time.Duration { return time.Hour }},
		OnAttempt: func(context.Context, webhook.Connection, webhook.Attempt) { cancel() }})
	res, _ := s.Send(ctx, srv.Connection(), samplePayload())
	var out bytes.Buffer
	require.NoError(t, res.WriteTable(&out))
	assert.Contains(t, out.String(), "stopped before the next attempt: context canceled")
}
