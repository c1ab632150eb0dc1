package main

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/webhooktest"
)

func TestHelpHidesTheSecret(t *testing.T) {
	t.Setenv("WEBHOOK_SECRET", "whsec_do_not_print")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-h"}, &stdout, &stderr, nil, nil); code != 2 {
		t.Errorf("exit code %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), "-secret") {
		t.Fatalf("the usage text was not printed:\n%s", stderr.String())
	}
	if strings.Contains(stdout.String()+stderr.String(), "whsec_do_not_print") {
		t.Errorf("-h shows the secret:\n%s", stderr.String())
	}
}

func TestSendTestAgainstAReceiver(t *testing.T) {
	srv := webhooktest.NewServer("whsec_cli", nil)
	defer srv.Close()
	t.Setenv("WEBHOOK_SECRET", "whsec_cli")
	var stdout, stderr bytes.Buffer
	code := run([]string{"-url", srv.Connection().URL, "-H", "Authorization: Bearer k"}, &stdout, &stderr, srv.Client(), nil)
	if code != 0 {
		t.Fatalf("exit code %d; output:\n%s%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"attempt 1: 200 delivered in", "delivery-attempt log", "delivered: the endpoint answered 200"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	d := srv.Deliveries()
	if len(d) != 1 || d[0].Err != nil || d[0].Header.Get("Authorization") != "Bearer k" {
		t.Errorf("the receiver got %+v", d)
	}
}

func TestWrongSecretExitsOne(t *testing.T) {
	srv := webhooktest.NewServer("whsec_cli", nil)
	defer srv.Close()
	var stdout, stderr bytes.Buffer
	code := run([]string{"-url", srv.Connection().URL, "-secret", "whsec_wrong"}, &stdout, &stderr, srv.Client(), nil)
	if code != 1 || !strings.Contains(stdout.String(), "this connection's secret") {
		t.Errorf("exit code %d, output:\n%s", code, stdout.String())
	}
	if code := run([]string{"-url", "http://plain.example"}, &stdout, &stderr, nil, nil); code != 2 {
		t.Errorf("an invalid URL: exit code %d, want 2", code)
	}
}

func TestRetryPrintsEachAttempt(t *testing.T) {
	srv := webhooktest.NewServer("whsec_cli", nil)
	defer srv.Close()
	srv.Script(webhooktest.Status(503), webhooktest.Reset())
	fast := &webhook.RetryPolicy{MaxRetries: 3, Backoff: func(int, *http.Response) time.Duration { return time.Millisecond }}
	var stdout, stderr bytes.Buffer
	code := run([]string{"-url", srv.Connection().URL, "-secret", "whsec_cli", "-retry"}, &stdout, &stderr, srv.Client(), fast)
	if code != 0 {
		t.Fatalf("exit code %d; output:\n%s%s", code, stdout.String(), stderr.String())
	}
	lines := strings.Split(stdout.String(), "\n")
	for i, want := range []string{"attempt 1: 503 status in ", "attempt 2: reset in ", "attempt 3: 200 delivered in "} {
		if !strings.HasPrefix(lines[i], want) {
			t.Errorf("line %d: got %q, want it to start with %q", i+1, lines[i], want)
		}
	}
	if !strings.Contains(lines[0], "retry in 1ms") {
		t.Errorf("the first line does not say when the retry comes: %q", lines[0])
	}
}

// A -H without its colon is refused without quoting it: a header's value
// may be a credential.
func TestMalformedHeaderIsNotQuoted(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"-url", "https://crm.example.com/hook", "-H", "Authorization Bearer sk_live_SUPERSECRET"}, &stdout, &stderr, nil, nil)
	if code != 2 {
		t.Errorf("exit code %d, want 2", code)
	}
	if out := stdout.String() + stderr.String(); strings.Contains(out, "SUPERSECRET") || !strings.Contains(out, "Name: value") {
		t.Errorf("output:\n%s", out)
	}
}
