package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/webhooktest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func customPayload(t *testing.T) []byte {
	p := webhook.SamplePayload(time.Now())
	p.User.ID = webhook.UserID("custom_42")
	p.User.Email = "ada@example.com"
	p.User.Metadata = webhook.Metadata{"plan": "pro", "source": "cli-test"}
	body, err := json.MarshalIndent(p, "", "  ") // sent as given: not the service's compact form
	require.NoError(t, err)
	return body
}

func TestTrigger_CustomPayloadReachesVerifyingReceiver(t *testing.T) {
	srv := webhooktest.NewServer(testSecret, nil)
	defer srv.Close()
	body := customPayload(t)
	for _, source := range []string{"file", "stdin"} {
		t.Run(source, func(t *testing.T) {
			srv.Clear()
			args := []string{"trigger", "-allow-private", "-cacert", caFile(t, srv), "-method", "PUT", "-H", "Authorization: Bearer k_123"}
			stdin := ""
			if source == "file" {
				args = append(args, "-payload", writeFile(t, "payload.json", body))
			} else {
				args, stdin = append(args, "-payload", "-"), string(body)
			}
			res := runCmd(t, stdin, append(args, srv.URL+"/webhooks")...)
			require.Equal(t, exitOK, res.code, "stdout: %s\nstderr: %s", res.stdout, res.stderr)
			assert.Contains(t, res.stdout, "delivered")
			assert.Contains(t, res.stdout, "attempt 1")

			got := srv.Deliveries()
			require.Len(t, got, 1)
			assert.NoError(t, got[0].Err, "the receiver verified it")
			assert.Equal(t, body, got[0].Body, "byte for byte")
			assert.Equal(t, http.MethodPut, got[0].Method)
			assert.Equal(t, "Bearer k_123", got[0].Header.Get("Authorization"))
			assert.Equal(t, webhook.EventUserIdentified, got[0].Header.Get(webhook.HeaderEvent))
		})
	}
}

// TestTrigger_SendsTheSpecsMinimalTestRequest: SPEC §6's hand-made test
// body has "event", "user.email" and "user.name" only; -payload sends it as
// it is, since a receiver takes whatever has an event.
func TestTrigger_SendsTheSpecsMinimalTestRequest(t *testing.T) {
	srv := webhooktest.NewServer(testSecret, nil)
	defer srv.Close()
	minimal := []byte(`{"event":"user.identified","user":{"email":"test@example.com","name":"Test User"}}`)
	res := runCmd(t, "", "trigger", "-allow-private", "-cacert", caFile(t, srv), "-payload", writeFile(t, "minimal.json", minimal), srv.URL)
	require.Equal(t, exitOK, res.code, res.stdout+res.stderr)
	got := srv.Deliveries()
	require.Len(t, got, 1)
	assert.NoError(t, got[0].Err)
	assert.Equal(t, minimal, got[0].Body)
	assert.Equal(t, webhook.EventUserIdentified, got[0].Header.Get(webhook.HeaderEvent))
}

func TestTrigger_PayloadIsCheckedUnlessRaw(t *testing.T) {
	srv := webhooktest.NewServer(testSecret, nil)
	defer srv.Close()
	notPayload := writeFile(t, "body.json", []byte(`{"hello":"world"}`))
	res := runCmd(t, "", "trigger", "-allow-private", "-cacert", caFile(t, srv), "-payload", notPayload, srv.URL)
	assert.Equal(t, exitUsage, res.code)
	assert.Contains(t, res.stderr, "-raw")
	assert.Empty(t, srv.Deliveries())

	res = runCmd(t, "", "trigger", "-allow-private", "-cacert", caFile(t, srv), "-payload", notPayload, "-raw", "-event", "custom.event", srv.URL)
	require.Equal(t, exitOK, res.code, res.stdout+res.stderr)
	got := srv.Deliveries()
	require.Len(t, got, 1)
	assert.NoError(t, got[0].Err)
	assert.Equal(t, `{"hello":"world"}`, string(got[0].Body))
	assert.Equal(t, "custom.event", got[0].Header.Get(webhook.HeaderEvent))

	// Without -event, the event is the body's "event", as -event's help
	// says; user.identified when it has none.
	srv.Clear()
	deal := writeFile(t, "deal.json", []byte(`{"Event":"other.thing","event":"deal.closed","dealId":"d1"}`))
	upper := writeFile(t, "upper.json", []byte(`{"EVENT":"not.the.event"}`))
	for _, tc := range []struct{ file, want string }{{deal, "deal.closed"}, {upper, webhook.EventUserIdentified}} {
		res = runCmd(t, "", "trigger", "-allow-private", "-cacert", caFile(t, srv), "-payload", tc.file, "-raw", srv.URL)
		require.Equal(t, exitOK, res.code, res.stdout+res.stderr)
		assert.Contains(t, res.stdout, "("+tc.want+", ")
	}
	got = srv.Deliveries()
	require.Len(t, got, 2)
	assert.Equal(t, "deal.closed", got[0].Header.Get(webhook.HeaderEvent))
	assert.Equal(t, webhook.EventUserIdentified, got[1].Header.Get(webhook.HeaderEvent))
}

func TestTrigger_PlainHTTPAndPrivateAddressesOnlyWhenAsked(t *testing.T) {
	v, err := webhook.NewVerifier([]string{testSecret}, nil)
	require.NoError(t, err)
	var got atomic.Int32
	plain := httptest.NewServer(v.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { got.Add(1) })))
	defer plain.Close()

	res := runCmd(t, "", "trigger", plain.URL)
	assert.Equal(t, exitUsage, res.code)
	assert.Contains(t, res.stderr, "-allow-http")

	res = runCmd(t, "", "trigger", "-allow-http", plain.URL)
	assert.Equal(t, exitFailed, res.code, "loopback is private")
	assert.Contains(t, res.stdout, "-allow-private")

	res = runCmd(t, "", "trigger", "-allow-http", "-allow-private", plain.URL+"/hooks")
	require.Equal(t, exitOK, res.code, res.stdout+res.stderr)
	assert.Equal(t, int32(1), got.Load(), "verified by the receiver")

	srv := webhooktest.NewServer(testSecret, nil)
	defer srv.Close()
	res = runCmd(t, "", "trigger", "-cacert", caFile(t, srv), srv.URL)
	assert.Equal(t, exitFailed, res.code, "https to loopback needs -allow-private too")
	assert.Empty(t, srv.Deliveries(), "nothing was sent")
}

func TestTrigger_RetryFollowsThePolicy(t *testing.T) {
	retryPolicy = func() *webhook.RetryPolicy {
		p := webhook.DefaultRetryPolicy()
		p.Backoff = func(int, *http.Response) time.Duration { return 2 * time.Millisecond }
		return p
	}
	defer func() { retryPolicy = webhook.DefaultRetryPolicy }()
	srv := webhooktest.NewServer(testSecret, nil)
	defer srv.Close()

	srv.Script(webhooktest.Status(503), webhooktest.Status(503))
	res := runCmd(t, "", "trigger", "-allow-private", "-cacert", caFile(t, srv), srv.URL)
	assert.Equal(t, exitFailed, res.code, "without -retry, one attempt")
	assert.Len(t, srv.Deliveries(), 1)

	srv.Clear()
	srv.Script(webhooktest.Status(503), webhooktest.Status(500))
	res = runCmd(t, "", "trigger", "-retry", "-allow-private", "-cacert", caFile(t, srv), srv.URL)
	require.Equal(t, exitOK, res.code, res.stdout)
	got := srv.Deliveries()
	require.Len(t, got, 3)
	for _, d := range got {
		assert.NoError(t, d.Err, "every attempt signed afresh")
	}
	assert.NotEqual(t, got[0].Header.Get(webhook.HeaderSignature), got[2].Header.Get(webhook.HeaderSignature))

	srv.Clear()
	srv.Script(webhooktest.Status(503), webhooktest.Status(503), webhooktest.Status(503), webhooktest.Status(503))
	res = runCmd(t, "", "trigger", "-retry", "-allow-private", "-cacert", caFile(t, srv), srv.URL)
	assert.Equal(t, exitFailed, res.code)
	assert.Len(t, srv.Deliveries(), 4, "1 attempt and the spec's 3 retries")
	assert.Contains(t, res.stdout, "failed: the endpoint answered 503")
}

// resultLines returns the lines of trigger's output that state the
// delivery's result.
func resultLines(out string) []string {
	var got []string
	for _, line := range strings.Split(out, "\n") {
		for _, start := range []string{"delivered", "not delivered", "failed", "not sent"} {
			if strings.HasPrefix(line, start) {
				got = append(got, line)
				break
			}
		}
	}
	return got
}

func TestTrigger_PrintsItsResultOnce(t *testing.T) {
	srv := webhooktest.NewServer(testSecret, nil)
	defer srv.Close()
	ca := caFile(t, srv)
	tests := []struct {
		name   string
		script []webhooktest.Answer
		args   []string
		want   int
		says   string
	}{
		{"delivered", nil, []string{"-allow-private"}, exitOK, "delivered: the endpoint answered 200"},
		{"refused by the receiver", []webhooktest.Answer{webhooktest.Status(503)}, []string{"-allow-private"}, exitFailed, "failed: the endpoint answered 503"},
		{"blocked", nil, nil, exitFailed, "not sent: the URL's host resolves to a private"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv.Clear()
			srv.Script(tc.script...)
			res := runCmd(t, "", append(append([]string{"trigger", "-cacert", ca}, tc.args...), srv.URL)...)
			assert.Equal(t, tc.want, res.code, res.stdout+res.stderr)
			got := resultLines(res.stdout)
			require.Len(t, got, 1, "one result line in:\n%s", res.stdout)
			assert.True(t, strings.HasPrefix(got[0], tc.says), "got %q, want it to start with %q", got[0], tc.says)
		})
	}
}

func TestTrigger_UsageErrorPrintsOnlyToStderr(t *testing.T) {
	srv := webhooktest.NewServer(testSecret, nil)
	defer srv.Close()
	ca := caFile(t, srv)
	big := writeFile(t, "big.json", bytes.Repeat([]byte(" "), webhook.DefaultMaxBodyBytes+1))
	for _, args := range [][]string{
		{"-method", "GET"},
		{"-H", "X-Service-Signature: forged"},
		{"-H", "Content-Type: text/plain"},
		{"-event", "user.identified\x1b[2J"},
		{"-payload", big, "-raw"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			res := runCmd(t, "", append(append([]string{"trigger", "-allow-private", "-cacert", ca}, args...), srv.URL)...)
			assert.Equal(t, exitUsage, res.code)
			assert.Empty(t, res.stdout, "nothing on standard output")
			assert.Contains(t, res.stderr, "run 'webhook trigger -h' for usage")
			assert.Empty(t, srv.Deliveries(), "nothing was sent")
			assert.NotContains(t, res.stderr, "\x1b")
		})
	}
}

// A -H without its colon is refused without quoting it: the flag package
// would print the value, and a header's value may be a credential.
func TestTrigger_AMalformedHeaderFlagIsNotQuoted(t *testing.T) {
	res := runCmd(t, "", "trigger", "-allow-private", "-H", "Authorization Bearer sk_live_SUPERSECRET", "https://127.0.0.1:1/x")
	assert.Equal(t, exitUsage, res.code)
	assert.Contains(t, res.stderr, `-H wants "Name: value"`)
	assert.NotContains(t, res.stdout+res.stderr, "SUPERSECRET")

	// The colon missing after the name, a colon inside the token.
	res = runCmd(t, "", "trigger", "-allow-private", "-H", "Authorization Bearer sk_live_SUPERSECRET:x", "https://127.0.0.1:1/x")
	assert.Equal(t, exitUsage, res.code)
	assert.NotContains(t, res.stdout+res.stderr, "SUPERSECRET")
}

func TestTrigger_InterruptedWhileWaitingForARetryPrintsItsResultOnce(t *testing.T) {
	retryPolicy = func() *webhook.RetryPolicy {
		p := webhook.DefaultRetryPolicy()
		p.Backoff = func(int, *http.Response) time.Duration { return time.Hour }
		return p
	}
	defer func() { retryPolicy = webhook.DefaultRetryPolicy }()
	srv := webhooktest.NewServer(testSecret, nil)
	defer srv.Close()
	srv.Script(webhooktest.Status(503))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := newLines()
	done := make(chan int)
	getenv := func(name string) string {
		if name == "WEBHOOK_SECRET" {
			return testSecret
		}
		return ""
	}
	go func() {
		done <- run(ctx, []string{"trigger", "-retry", "-allow-private", "-cacert", caFile(t, srv), srv.URL}, strings.NewReader(""), out, out, getenv)
	}()
	for line := range out.each {
		if strings.HasPrefix(line, "attempt 1:") {
			break
		}
	}
	cancel() // as Ctrl-C does, during the wait for the retry
	assert.Equal(t, exitFailed, <-done)
	got := resultLines(out.String())
	require.Len(t, got, 1, "one result line in:\n%s", out.String())
	assert.True(t, strings.HasPrefix(got[0], "failed: the endpoint answered 503"), got[0])
	assert.Len(t, srv.Deliveries(), 1)
	assert.Contains(t, out.String(), "stopped before the next attempt")
}
