package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/webhooktest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmeCommands returns the command lines of the webhook command that the
// root README shows: the lines of its sh blocks and its code spans that
// start with "webhook ", without their comments.
func readmeCommands(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	var lines []string
	seen := map[string]bool{}
	add := func(line string) {
		line, _, _ = strings.Cut(line, "#")
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "webhook ") && !seen[line] {
			seen[line] = true
			lines = append(lines, line)
		}
	}
	inSh := false
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "```sh"):
			inSh = true
		case strings.HasPrefix(line, "```"):
			inSh = false
		case inSh:
			add(line)
		default:
			for _, m := range regexp.MustCompile("`(webhook [^`]+)`").FindAllStringSubmatch(line, -1) {
				add(m[1])
			}
		}
	}
	return lines
}

// TestREADME_CommandLinesRun runs every command line the README shows, as
// written, in a directory holding the files they name. Its host names and
// ports become test servers' (localhost:3000 is the customer's
// application, localhost:8080 the last listen), and listen is given
// -addr 127.0.0.1:0. Each listen is sent a delivery.
func TestREADME_CommandLinesRun(t *testing.T) {
	lines := readmeCommands(t)
	covered := map[string]bool{}
	for _, line := range lines {
		covered[strings.Fields(line)[1]] = true
	}
	for _, name := range []string{"trigger", "listen", "verify", "sign"} {
		assert.True(t, covered[name], "the README shows no %s command line", name)
	}

	v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{AllowReplays: true})
	require.NoError(t, err)
	var appGot atomic.Int32
	app := httptest.NewServer(v.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { appGot.Add(1) })))
	defer app.Close()

	t.Chdir(t.TempDir())
	payload, err := json.Marshal(webhook.SamplePayload(time.Now()))
	require.NoError(t, err)
	for name, data := range map[string][]byte{
		"user.json":     payload,
		"body.json":     payload,
		"captured.http": captured(t, webhooktest.SignedHeader(testSecret, webhook.EventUserIdentified, payload, time.Now()), payload),
	} {
		require.NoError(t, os.WriteFile(name, data, 0o600))
	}

	listenAddr := ""
	for _, line := range lines { // in the parent test: a listen runs until the test ends
		t.Logf("running README line %s", line)
		func() {
			var args []string
			for _, w := range strings.Fields(line)[1:] {
				w = strings.ReplaceAll(w, "localhost:3000", app.Listener.Addr().String())
				if listenAddr != "" {
					w = strings.ReplaceAll(strings.ReplaceAll(w, "localhost:8080", listenAddr), "127.0.0.1:8080", listenAddr)
				}
				args = append(args, w)
			}
			switch args[0] {
			case "listen":
				base, out := startListen(t, args[1:]...)
				listenAddr = strings.TrimPrefix(strings.TrimPrefix(base, "https://"), "http://")
				tr := &http.Transport{}
				if strings.HasPrefix(base, "https://") {
					_, pool := trusted(t, out)
					tr.TLSClientConfig = &tls.Config{RootCAs: pool}
				}
				client := &http.Client{Transport: tr}
				defer client.CloseIdleConnections()
				r, err := http.NewRequest(http.MethodPost, base+"/webhooks", bytes.NewReader(payload))
				require.NoError(t, err)
				r.Header = webhooktest.SignedHeader(testSecret, webhook.EventUserIdentified, payload, time.Now())
				before := appGot.Load()
				resp, err := client.Do(r)
				require.NoError(t, err)
				resp.Body.Close()
				assert.Equal(t, http.StatusOK, resp.StatusCode)
				assert.Contains(t, <-out.each, "verified")
				if strings.Contains(line, "-forward") {
					assert.Equal(t, before+1, appGot.Load(), "forwarded to the application")
				}
			case "trigger":
				res := runCmd(t, "", args...)
				require.Equal(t, exitOK, res.code, "stdout: %s\nstderr: %s", res.stdout, res.stderr)
				assert.Contains(t, res.stdout, "delivered")
			case "verify":
				res := runCmd(t, "", args...)
				require.Equal(t, exitOK, res.code, "stdout: %s\nstderr: %s", res.stdout, res.stderr)
				assert.Contains(t, res.stdout, "verified")
			case "sign":
				res := runCmd(t, "", args...)
				require.Equal(t, exitOK, res.code, "stdout: %s\nstderr: %s", res.stdout, res.stderr)
				r := curlRequest(t, res.stdout)
				body, err := io.ReadAll(r.Body)
				require.NoError(t, err)
				assert.NoError(t, webhook.Verify(testSecret, r.Header, body))
			default:
				t.Fatalf("no test runs README command %q", args[0])
			}
		}()
	}
}
