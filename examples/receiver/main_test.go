package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/webhooktest"
)

func TestSplitSecrets(t *testing.T) {
	tests := map[string][]string{
		"whsec_a":                 {"whsec_a"},
		"whsec_old, whsec_new":    {"whsec_old", "whsec_new"},
		" whsec_old ,whsec_new, ": {"whsec_old", "whsec_new"},
		"":                        nil,
		// The spec leaves a secret's characters open: a "#" is part of one,
		// or every delivery would be refused 401 with no word at start-up.
		"whsec_ab#cd":          {"whsec_ab#cd"},
		"whsec_old,#whsec_new": {"whsec_old", "#whsec_new"},
	}
	for in, want := range tests {
		if diff := cmp.Diff(want, splitSecrets(in)); diff != "" {
			t.Errorf("splitSecrets(%q) (-want +got):\n%s", in, diff)
		}
	}
}

// TestParseSecretsFile: one secret a line; a line that starts with "#" is
// a comment. A space within a line is refused, with its line: a comment
// after a secret, as the example once allowed, would be taken as part of
// the secret, and every delivery refused 401.
func TestParseSecretsFile(t *testing.T) {
	got, err := parseSecretsFile("# rotation of 2026-11\nwhsec_old\n  whsec_new#2  \n\n")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"whsec_old", "whsec_new#2"}, got); diff != "" {
		t.Errorf("a secrets file (-want +got):\n%s", diff)
	}
	_, err = parseSecretsFile("whsec_old\nwhsec_new  # added today\n")
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a comment after a secret: got %v, want an error naming line 2", err)
	}
	if err != nil && strings.Contains(err.Error(), "whsec_new") {
		t.Errorf("the error shows the secret: %v", err)
	}
}

// TestRotateOnSIGHUP rotates a serving verifier by rewriting its secrets
// file and signalling. rotateOn handles one signal at a time, so a second
// send on the unbuffered channel returns only once the first was handled.
func TestRotateOnSIGHUP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secrets")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("whsec_old\n")
	secrets, err := loadSecrets(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := webhook.NewVerifier(secrets, nil)
	if err != nil {
		t.Fatal(err)
	}
	handler := v.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	status := func(secret string) int {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, webhooktest.NewRequest(secret, webhook.SamplePayload(time.Now()), time.Now()))
		return rec.Code
	}

	hup := make(chan os.Signal)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { rotateOn(ctx, hup, v, path, slog.New(slog.NewTextHandler(io.Discard, nil))); close(done) }()
	defer func() { cancel(); <-done }()
	rotate := func() { hup <- syscall.SIGHUP; hup <- syscall.SIGHUP } // the second returns once the first is handled

	if got := status("whsec_new"); got != http.StatusUnauthorized {
		t.Fatalf("new secret before the rotation: %d", got)
	}
	write("whsec_old\nwhsec_new\n")
	rotate()
	if got := status("whsec_new"); got != http.StatusOK {
		t.Errorf("new secret during the rotation: %d", got)
	}
	if got := status("whsec_old"); got != http.StatusOK {
		t.Errorf("old secret during the rotation: %d", got)
	}
	write("whsec_new\n")
	rotate()
	if got := status("whsec_old"); got != http.StatusUnauthorized {
		t.Errorf("old secret after the rotation: %d", got)
	}
	write("") // an empty file leaves the secrets as they were
	rotate()
	if got := status("whsec_new"); got != http.StatusOK {
		t.Errorf("after an empty file: %d", got)
	}
}

// TestNewMux_AnswersTheSpecsMinimalTestRequest sends SPEC §6's hand-made
// test request, signed by OpenSSL (the root's testdata/vectors.sh), as
// curl would: the receiver answers 200 and logs the user's email and name.
func TestNewMux_AnswersTheSpecsMinimalTestRequest(t *testing.T) {
	body, err := os.ReadFile("../../testdata/body_minimal.json")
	if err != nil {
		t.Fatal(err)
	}
	const ts, signature = "1763719200000", "sha256=11c1b24e4cef0288e888840962de211038be911253a8b3cdffe0e1d606be53fc" // testdata/vectors.txt
	v, err := webhook.NewVerifier([]string{"whsec_test_secret"}, &webhook.VerifierOptions{
		Now: func() time.Time { return time.UnixMilli(1763719200000 + 1000) },
	})
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	srv := httptest.NewTLSServer(newMux(v, slog.New(slog.NewTextHandler(&logs, nil))))
	defer srv.Close()

	// A connection's method is POST, PUT or PATCH (SPEC 2.1). Each is the
	// same delivery: the first is handled, the others acknowledged as copies.
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodPatch} {
		req, err := http.NewRequest(method, srv.URL+"/webhooks", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(webhook.HeaderEvent, "user.identified")
		req.Header.Set(webhook.HeaderTimestamp, ts)
		req.Header.Set(webhook.HeaderSignature, signature)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: got %d, want 200", method, resp.StatusCode)
		}
	}
	for _, want := range []string{"email=test@example.com", `name="Test User"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %s:\n%s", want, logs.String())
		}
	}
}
