package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/webhooktest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// captured returns r as httputil.DumpRequest writes it.
func captured(t *testing.T, h http.Header, body []byte) []byte {
	t.Helper()
	r, err := http.NewRequest(http.MethodPost, "http://receiver.example/webhooks", bytes.NewReader(body))
	require.NoError(t, err)
	r.Header = h
	dump, err := httputil.DumpRequest(r, true)
	require.NoError(t, err)
	return dump
}

func TestVerify_NamesTheCause(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	p := webhook.SamplePayload(now)
	body, err := json.Marshal(p)
	require.NoError(t, err)
	indented, err := json.MarshalIndent(p, "", "  ")
	require.NoError(t, err)
	var asMap map[string]any
	require.NoError(t, json.Unmarshal(body, &asMap))
	sortedKeys, err := json.Marshal(asMap) // what a decode into a map and re-encode gives
	require.NoError(t, err)
	signed := func(secret string, at time.Time) http.Header {
		// Signed at exactly at: webhooktest signs a body it signed before
		// a millisecond later, and this test reads the age verify prints
		// (run again in one process, -count 2, it did).
		h := webhooktest.SignedHeader(secret, webhook.EventUserIdentified, body, at)
		h.Set(webhook.HeaderTimestamp, strconv.FormatInt(at.UnixMilli(), 10))
		h.Set(webhook.HeaderSignature, webhook.Sign(secret, at.UnixMilli(), body))
		return h
	}
	edit := func(h http.Header, name, value string) http.Header {
		h = h.Clone()
		if value == "" {
			h.Del(name)
		} else {
			h.Set(name, value)
		}
		return h
	}
	inSeconds := edit(signed(testSecret, now), webhook.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	inSeconds.Set(webhook.HeaderSignature, webhook.Sign(testSecret, now.Unix(), body)) // a sender that signs seconds

	tests := []struct {
		name   string
		header http.Header
		body   []byte
		want   int
		says   []string
	}{
		{"verifies", signed(testSecret, now.Add(-2*time.Second)), body, exitOK, []string{"verified", "secret 2 of 2", "2s old"}},
		{"no secret matches", signed("whsec_another_connection", now), body, exitFailed, []string{"none of the 2 secret(s) matches", "Show Secret"}},
		{"body re-serialised with white space", signed(testSecret, now), indented, exitFailed, []string{"body was changed", "re-serialised", "white space", "secret 2"}},
		{"body re-serialised in another field order", signed(testSecret, now), sortedKeys, exitFailed, []string{"body was changed", "re-serialised", "field order"}},
		{"body changed", signed(testSecret, now), bytes.Replace(body, []byte("Test User"), []byte("Eve"), 1), exitFailed, []string{"none of the 2 secret(s) matches"}},
		{"trailing line break added", signed(testSecret, now), append(bytes.Clone(body), '\n'), exitFailed, []string{`a trailing line break "\n" was added`}},
		{"timestamp in seconds", inSeconds, body, exitFailed, []string{"Unix time in seconds", "milliseconds"}},
		{"too old", signed(testSecret, now.Add(-7*time.Minute)), body, exitFailed, []string{"matches secret 2", "7m0s old, 2m0s past the 5m0s window"}},
		{"ahead", signed(testSecret, now.Add(6*time.Minute)), body, exitFailed, []string{"6m0s ahead of this clock, 1m0s past", "NTP"}},
		{"signature header missing", edit(signed(testSecret, now), webhook.HeaderSignature, ""), body, exitFailed, []string{"X-Service-Signature is missing"}},
		{"event header missing", edit(signed(testSecret, now), webhook.HeaderEvent, ""), body, exitFailed, []string{"X-Service-Event is missing"}},
		{"signature malformed", edit(signed(testSecret, now), webhook.HeaderSignature, "sha256=abc"), body, exitFailed, []string{`"sha256=" and 64 hex digits`}},
		{"signature without prefix", edit(signed(testSecret, now), webhook.HeaderSignature, strings.Repeat("a", 64)), body, exitFailed, []string{`does not start with "sha256="`}},
		{"timestamp malformed", edit(signed(testSecret, now), webhook.HeaderTimestamp, "2026-11-21T10:00:00Z"), body, exitFailed, []string{"want Unix time in milliseconds"}},
	}
	secrets := writeFile(t, "secrets", []byte("whsec_the_old_secret\n"+testSecret+"\n"))
	at := strconv.FormatInt(now.UnixMilli(), 10)
	// A delivery signed in seconds is no old capture: -now cannot help it.
	res := runCmd(t, "", "verify", "-secret-file", secrets, "-now", at, "-request", writeFile(t, "req.http", captured(t, inSeconds, body)))
	assert.NotContains(t, res.stdout, "-now", res.stdout)
	assert.Contains(t, res.stdout, "signed in seconds", res.stdout)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := runCmd(t, "", "verify", "-secret-file", secrets, "-now", at, "-request", writeFile(t, "req.http", captured(t, tc.header, tc.body)))
			assert.Equal(t, tc.want, res.code, res.stdout+res.stderr)
			for _, s := range tc.says {
				assert.Contains(t, res.stdout, s)
			}
			assert.NotContains(t, res.stdout, "\x1b", "printable output only")

			// The same from headers and body files.
			var hdr bytes.Buffer
			require.NoError(t, tc.header.Write(&hdr))
			res2 := runCmd(t, "", "verify", "-secret-file", secrets, "-now", at,
				"-headers", writeFile(t, "headers", hdr.Bytes()), "-body", writeFile(t, "body", tc.body))
			assert.Equal(t, res.code, res2.code)
			assert.Equal(t, res.stdout, res2.stdout)
		})
	}
}

func TestVerify_OutputIsPrintable(t *testing.T) {
	body := []byte(`{"event":"user.identified"}`)
	h := webhooktest.SignedHeader(testSecret, webhook.EventUserIdentified, body, time.Now())
	h.Set(webhook.HeaderTimestamp, "\x1b]0;owned\x07\u202e1")
	dump := captured(t, h, body)
	res := runCmd(t, string(dump), "verify", "-request", "-")
	assert.NotEqual(t, exitOK, res.code)
	var hdr bytes.Buffer
	require.NoError(t, h.Write(&hdr))
	res2 := runCmd(t, "", "verify", "-headers", writeFile(t, "h", hdr.Bytes()), "-body", writeFile(t, "b", body))
	assert.NotEqual(t, exitOK, res2.code)
	for _, out := range []string{res.stdout, res.stderr, res2.stdout, res2.stderr} {
		assert.NotContains(t, out, "\x1b")
		assert.NotContains(t, out, "\u202e")
	}
}

func TestVerify_Stdin(t *testing.T) {
	body := []byte(`{"event":"user.identified"}`)
	dump := captured(t, webhooktest.SignedHeader(testSecret, webhook.EventUserIdentified, body, time.Now()), body)
	res := runCmd(t, string(dump), "verify", "-request", "-")
	assert.Equal(t, exitOK, res.code, res.stdout+res.stderr)
	assert.Equal(t, exitUsage, runCmd(t, "GARBAGE", "verify", "-request", "-").code)
	assert.Equal(t, exitUsage, runCmd(t, "", "verify").code)
}

func TestVerify_NamesLineBreaksAndEscapesRewritten(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	const minimal = `{"event":"user.identified","user":{"phone":"+1 555 0100","site":"https://example.com/ada","name":"Zoë <Ada> & co"}}`
	goStyle := `{"event":"user.identified","user":{"phone":"+1 555 0100","site":"https://example.com/ada","name":"Zoë \u003cAda\u003e \u0026 co"}}`
	php := `{"event":"user.identified","user":{"phone":"+1 555 0100","site":"https:\/\/example.com\/ada","name":"Zo\u00eb <Ada> & co"}}`
	phpSlashOnly := `{"event":"user.identified","user":{"phone":"+1 555 0100","site":"https:\/\/example.com\/ada","name":"Zo\u00eb <Ada> & co"}}`
	phpSlashOnlyGiven := `{"event":"user.identified","user":{"phone":"+1 555 0100","site":"https://example.com/ada","name":"Zo\u00eb <Ada> & co"}}`
	dotnet := `{"event":"user.identified","user":{"phone":"\u002B1 555 0100","site":"https://example.com/ada","name":"Zo\u00EB \u003CAda\u003E \u0026 co"}}`
	plusOnly := `{"event":"user.identified","user":{"phone":"\u002b1 555 0100","site":"https://example.com/ada","name":"Zoë <Ada> & co"}}`
	tests := []struct {
		name         string
		signed, sent string
		says         []string
	}{
		{"LF added", minimal, minimal + "\n", []string{`a trailing line break "\n" was added; the body without it verifies`}},
		{"CRLF added", minimal, minimal + "\r\n", []string{`a trailing line break "\r\n" was added; the body without it verifies`}},
		{"several added", minimal, minimal + "\n\n", []string{"trailing line breaks were added; the body without them verifies"}},
		{"LF removed", minimal + "\n", minimal, []string{`a trailing line break "\n" was removed; the body with it verifies`}},
		{"CRLF removed", minimal + "\r\n", minimal, []string{`a trailing line break "\r\n" was removed; the body with it verifies`}},
		{"sender escaped + as \\u002b", plusOnly, minimal, []string{"JSON escapes were rewritten", `the sender wrote \u002b where this body has '+'`}},
		{"sender escaped / and non-ASCII", php, minimal, []string{"JSON escapes were rewritten", `\/ where this body has '/'`, `\u00eb where this body has 'ë'`}},
		{"only / unescaped", phpSlashOnly, phpSlashOnlyGiven, []string{"JSON escapes were rewritten", `\/ where this body has '/'`}},
		{"sender escaped in upper case", dotnet, minimal, []string{`\u002B where this body has '+'`, `\u003C where this body has '<'`, `\u00EB where this body has 'ë'`}},
		{"escapes added by a re-encoder", minimal, goStyle, []string{"JSON escapes were rewritten", `the sender wrote '<' where this body has \u003c`}},
		{"escape removed by a re-encoder", minimal, plusOnly, []string{`the sender wrote '+' where this body has \u002b`}},
	}
	secrets := writeFile(t, "secrets", []byte("whsec_the_old_secret\n"+testSecret+"\n"))
	at := strconv.FormatInt(now.UnixMilli(), 10)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := webhooktest.SignedHeader(testSecret, webhook.EventUserIdentified, []byte(tc.signed), now)
			var hdr bytes.Buffer
			require.NoError(t, h.Write(&hdr))
			res := runCmd(t, "", "verify", "-secret-file", secrets, "-now", at,
				"-headers", writeFile(t, "headers", hdr.Bytes()), "-body", writeFile(t, "body", []byte(tc.sent)))
			assert.Equal(t, exitFailed, res.code, res.stdout+res.stderr)
			assert.Contains(t, res.stdout, "cause: the body was changed after signing")
			assert.Contains(t, res.stdout, "with secret 2")
			for _, s := range tc.says {
				assert.Contains(t, res.stdout, s)
			}
			assert.NotContains(t, res.stdout, h.Get(webhook.HeaderSignature)[len("sha256="):], "no signature printed")
			want := webhook.Sign(testSecret, now.UnixMilli(), []byte(tc.sent))
			assert.NotContains(t, res.stdout, want[len("sha256="):], "no expected signature printed")
		})
	}
}

func TestVerify_EscapesOfHostileTextArePrintable(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	signed := `{"event":"user.identified","note":"\u001b[2J \u202e"}`
	sent := "{\"event\":\"user.identified\",\"note\":\"\\u001b[2J \u202e\"}"
	h := webhooktest.SignedHeader(testSecret, webhook.EventUserIdentified, []byte(signed), now)
	var hdr bytes.Buffer
	require.NoError(t, h.Write(&hdr))
	res := runCmd(t, "", "verify", "-now", strconv.FormatInt(now.UnixMilli(), 10),
		"-headers", writeFile(t, "headers", hdr.Bytes()), "-body", writeFile(t, "body", []byte(sent)))
	assert.Equal(t, exitFailed, res.code)
	assert.Contains(t, res.stdout, "JSON escapes were rewritten")
	assert.NotContains(t, res.stdout, "\x1b")
	assert.NotContains(t, res.stdout, "\u202e")
}

// A capture file mixed up with the secrets file: the parsers' errors quote
// its first line, which is then the secret just loaded. runCmd checks
// WEBHOOK_SECRET; the secrets file's, the old one, is checked here.
func TestVerify_ACaptureThatIsTheSecretFileShowsNoSecret(t *testing.T) {
	const old = "whsec_old_secret_in_the_file_42"
	secrets := writeFile(t, "secrets", []byte(old+"\n"+testSecret+"\n"))
	body := writeFile(t, "body.json", []byte(`{}`))
	for name, args := range map[string][]string{
		"-request":                              {"verify", "-secret-file", secrets, "-request", secrets},
		"-headers":                              {"verify", "-secret-file", secrets, "-headers", secrets, "-body", body},
		"-request, a secret of the environment": {"verify", "-request", writeFile(t, "env-secret", []byte(testSecret+"\n"))},
	} {
		t.Run(name, func(t *testing.T) {
			res := runCmd(t, "", args...)
			assert.Equal(t, exitUsage, res.code, res.stderr)
			assert.NotContains(t, res.stdout+res.stderr, old)
			assert.Contains(t, res.stderr, "…", "the parser's quote stays, the secret hidden: %s", res.stderr)
		})
	}
}

// A secret shorter than redact's words is hidden too, as it is written.
func TestVerify_AShortSecretInTheCaptureIsHidden(t *testing.T) {
	secrets := writeFile(t, "secrets", []byte("hunter2\n"))
	res := runCmd(t, "", "verify", "-secret-file", secrets, "-request", secrets)
	assert.Equal(t, exitUsage, res.code, res.stderr)
	assert.NotContains(t, res.stdout+res.stderr, "hunter2")
}

// TestSignAndVerify_ReproduceEveryVector runs sign and verify on each line
// of testdata/vectors.txt: sign at the vector's timestamp prints its
// signature, and verify, judging the window at that instant, accepts it.
// The vector of Unix time 0 is one: 0 was taken as "not given", so both
// used the time now (review).
func TestSignAndVerify_ReproduceEveryVector(t *testing.T) {
	vectors, err := os.ReadFile("../../testdata/vectors.txt")
	require.NoError(t, err)
	for _, line := range strings.Split(strings.TrimSpace(string(vectors)), "\n") {
		fields := strings.Split(line, "\t")
		require.Len(t, fields, 4, line)
		secret, ts, bodyFile, want := fields[0], fields[1], fields[2], fields[3]
		t.Run(ts+"/"+bodyFile, func(t *testing.T) {
			secretFile := writeFile(t, "secret", []byte(secret+"\n"))
			body := filepath.Join("../../testdata", bodyFile)
			res := runCmd(t, "", "sign", "-secret-file", secretFile, "-body", body, "-timestamp", ts)
			require.Equal(t, exitOK, res.code, res.stderr)
			assert.Contains(t, res.stdout, "X-Service-Timestamp: "+ts+"\n")
			assert.Contains(t, res.stdout, "X-Service-Signature: "+want+"\n")

			headers := writeFile(t, "headers", []byte("X-Service-Event: user.identified\nX-Service-Timestamp: "+ts+"\nX-Service-Signature: "+want+"\n"))
			res = runCmd(t, "", "verify", "-secret-file", secretFile, "-headers", headers, "-body", body, "-now", ts)
			assert.Equal(t, exitOK, res.code, "%s%s", res.stdout, res.stderr)
		})
	}
}
