package main

import (
	"bytes"
	"context"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/signedhook/webhook/webhooktest"
)

// TestTrigger_InterruptedBeforeSendingIsNotAUsageError proves that a
// trigger stopped (Ctrl-C: its context done) before its first attempt
// exits 1, not delivered, as the command's exit statuses say: not 2 with
// "run 'webhook trigger -h' for usage", as if the command line were wrong.
func TestTrigger_InterruptedBeforeSendingIsNotAUsageError(t *testing.T) {
	srv := webhooktest.NewServer(testSecret, nil)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // interrupted before the delivery starts
	var stdout, stderr bytes.Buffer
	getenv := func(name string) string {
		if name == "WEBHOOK_SECRET" {
			return testSecret
		}
		return ""
	}
	code := run(ctx, []string{"trigger", "-allow-private", "-cacert", caFile(t, srv), srv.URL + "/webhooks"},
		strings.NewReader(""), &stdout, &stderr, getenv)
	assert.Equal(t, exitFailed, code, "stdout: %s\nstderr: %s", stdout.String(), stderr.String())
	assert.NotContains(t, stderr.String(), "for usage")
	assert.Empty(t, srv.Deliveries())
}

// TestTrigger_NegativeTimeoutNamesTheFlag proves that a bad -timeout is
// refused with an error naming the flag the user typed, as every other
// flag's error does, not the library's option (AttemptTimeout) they never
// saw.
func TestTrigger_NegativeTimeoutNamesTheFlag(t *testing.T) {
	res := runCmd(t, "", "trigger", "-timeout", "-1s", "https://example.com/webhooks")
	assert.Equal(t, exitUsage, res.code)
	assert.Contains(t, res.stderr, "-timeout", "stderr: %s", res.stderr)
}

// TestTrigger_AllowHTTPTakesAnEmptyPort proves that trigger -allow-http
// takes an http:// URL whose port is empty ("host:", the scheme's default,
// which the library's Sender drops too) instead of refusing it with a
// misleading error about IPv6 brackets or "not a URL". Nothing listens on
// 127.0.0.1:80 in the tests: the attempt fails to connect, exit 1.
func TestTrigger_AllowHTTPTakesAnEmptyPort(t *testing.T) {
	for _, u := range []string{"http://127.0.0.1:/webhooks", "http://[::1]:/webhooks"} {
		res := runCmd(t, "", "trigger", "-allow-http", "-allow-private", "-timeout", "5s", u)
		assert.NotEqual(t, exitUsage, res.code, "%s: stderr: %s", u, res.stderr)
		assert.NotContains(t, res.stderr, "IPv6", u)
		assert.NotContains(t, res.stderr, "not a URL", u)
	}
}

// TestTrigger_URLWithoutSchemeDoesNotShowItsPath proves that a URL typed
// without its scheme (a careless copy of a Slack or Zapier URL, whose path
// is its credential) is refused without printing that path: the command
// names an endpoint by its origin only, everywhere else.
func TestTrigger_URLWithoutSchemeDoesNotShowItsPath(t *testing.T) {
	const credential = "B0123/XyZsEcReTtOkEn42"
	for _, u := range []string{"hooks.example.com/services/T0/" + credential, "//hooks.example.com.evil/x/" + credential, "/services/" + credential, "https://hooks.example.com/x%zz/" + credential} {
		res := runCmd(t, "", "trigger", u)
		assert.Equal(t, exitUsage, res.code, u)
		assert.NotContains(t, res.stderr, "XyZsEcReTtOkEn42", "the path is a credential: %s", res.stderr)
	}
}

// TestTrigger_NeverPrintsAShortSecretTheReceiverEchoes proves that trigger
// prints no loaded secret, as the command promises, also a short one (a
// local "dev1234") that the receiver echoes in its answer: the attempt
// table prints the start of the answer, scrubbed by the library of the
// secret texts of 8 bytes or more only, while the command's own errors
// hide every loaded secret, short ones included.
func TestTrigger_NeverPrintsAShortSecretTheReceiverEchoes(t *testing.T) {
	const secret = "dev1234"
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, "signature mismatch; this receiver's secret is "+secret)
	}))
	defer srv.Close()
	ca := writeFile(t, "ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	var stdout, stderr bytes.Buffer
	getenv := func(name string) string {
		if name == "WEBHOOK_SECRET" {
			return secret
		}
		return ""
	}
	code := run(context.Background(), []string{"trigger", "-allow-private", "-cacert", ca, srv.URL + "/webhooks"},
		strings.NewReader(""), &stdout, &stderr, getenv)
	assert.Equal(t, exitFailed, code, "stderr: %s", stderr.String())
	assert.Contains(t, stdout.String(), "signature mismatch", "the answer is shown")
	assert.NotContains(t, stdout.String()+stderr.String(), secret, "a loaded secret is never printed")
}
