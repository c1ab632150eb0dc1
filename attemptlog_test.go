package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

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
		{webhook.Attempt{N: 2, Kind: webhook.KindInterrupted}, "attempt 2: interrupted"},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, tc.a.String())
	}
	assert.Contains(t, webhook.Attempt{Kind: webhook.KindInterrupted}.Diagnosis(), "cost no retry")
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
	res := &webhook.Result{ConnectionName: "x", Attempts: []webhook.Attempt{{N: 1, StatusCode: 500, Kind: webhook.KindStatus,
		ResponseBody: []byte("line1\r\n\x1b[31mred\xff" + strings.Repeat("z", 100))}}}
	var out bytes.Buffer
	require.NoError(t, res.WriteTable(&out))
	assert.NotContains(t, out.String(), "\x1b", "no terminal escapes from a receiver")
	assert.NotContains(t, out.String(), "\r")
	assert.Contains(t, out.String(), "line1  \uFFFD[31mred\uFFFD")
	assert.Contains(t, out.String(), "…")

	res = &webhook.Result{ConnectionName: "x", Err: errors.New("webhook: invalid connection: url: must use https://")}
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

// hostileText holds what a receiver may send that must never reach a
// terminal or a text column as it is: C0 and C1 controls (U+009B acts as
// ESC [ on many terminals), DEL, bidi overrides and isolates, zero-width and
// other format characters, line and paragraph separators, NUL and invalid
// UTF-8.
var hostileText = []string{"\x1b[2J", "\u009b31m", "\x7f", "\u202e", "\u2066", "\u2069", "\u200b",
	"\ufeff", "\u2028", "\u2029", "\x00", "\xff", "\xc3"}

// TestAttempt_ResponseText pins that the excerpt is shown as printable
// text (internal/redact's TestPrintable has every case).
func TestAttempt_ResponseText(t *testing.T) {
	tests := []struct {
		name string
		body string
		want string
	}{
		{"JSON as it came", `{"ok":true}`, `{"ok":true}`},
		{"empty", "", ""},
		{"lines join with spaces, ends trimmed", " {\n\t\"a\": 1\r\n}\n", `{  "a": 1  }`},
		{"terminal escapes", "\x1b[31mred\x1b[0m", "\uFFFD[31mred\uFFFD[0m"},
		{"invalid UTF-8", "a\xffb\xc3", "a\uFFFDb\uFFFD"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := webhook.Attempt{ResponseBody: []byte(tc.body)}.ResponseText()
			assert.Equal(t, tc.want, got)
			assert.True(t, utf8.ValidString(got))
		})
	}
}

// TestPrintedText_NoControlOrFormatCharacters pins that nothing a receiver
// sends reaches text printed for people: the table, String, Diagnosis and
// the attempt's error, whatever the failure kind.
func TestPrintedText_NoControlOrFormatCharacters(t *testing.T) {
	hostile := strings.Join(hostileText, "x")
	for _, kind := range []webhook.FailureKind{webhook.KindNone, webhook.KindStatus, webhook.KindRedirect, webhook.KindTLS,
		webhook.KindInvalid, webhook.KindOther, webhook.KindTimeout} {
		a := webhook.Attempt{N: 1, StatusCode: 500, Kind: kind, ResponseBody: []byte(hostile)}
		if kind != webhook.KindNone {
			a.Err = fmt.Errorf("webhook: wrapped: %w", errors.New(hostile))
		}
		res := &webhook.Result{ConnectionName: "c" + hostile, Attempts: []webhook.Attempt{a}, Err: a.Err}
		var out bytes.Buffer
		require.NoError(t, res.WriteTable(&out))
		for _, text := range []string{out.String(), a.String(), a.Diagnosis()} {
			requirePrintable(t, text, "\n")
		}
	}
}

// requirePrintable fails unless s is valid UTF-8 with no control or format
// character (Unicode Cc, Cf, Zl, Zp) other than those in allowed.
func requirePrintable(t *testing.T, s, allowed string) {
	t.Helper()
	require.True(t, utf8.ValidString(s), "invalid UTF-8 in %q", s)
	for i, r := range s {
		if strings.ContainsRune(allowed, r) {
			continue
		}
		if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp) {
			t.Fatalf("%U at offset %d of %q", r, i, s)
		}
	}
}

// TestAttempt_ResponseTextDoesNotInventAReplacementAtTheCut pins that the
// 4 KiB excerpt of a valid UTF-8 answer, cut by the library in the middle
// of a character, does not end in U+FFFD: the receiver sent no invalid
// byte, the cut made it.
func TestAttempt_ResponseTextDoesNotInventAReplacementAtTheCut(t *testing.T) {
	answer := strings.Repeat("a", 4095) + strings.Repeat("é", 100) // é is 2 bytes: the 4096th byte is half of one
	rv := newReceiver(t)
	rv.handle = func(w http.ResponseWriter, r *http.Request) bool {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, answer)
		return true
	}
	s := newTestSender(t, rv, &webhook.SenderOptions{AllowPrivateNetworks: true, Retry: shortPolicy(0)})
	res, err := s.Send(context.Background(), rv.conn("/"), samplePayload())
	require.Error(t, err)
	a := res.Attempts[0]
	require.True(t, utf8.Valid([]byte(answer)))
	text := a.ResponseText()
	assert.False(t, strings.ContainsRune(text, utf8.RuneError), "a valid answer's excerpt ends in %q", text[len(text)-8:])
}

func TestAttempt_MarshalJSON(t *testing.T) {
	start := time.Date(2026, 11, 24, 18, 3, 7, 215_400_000, time.FixedZone("CET", 3600))
	for _, tc := range []struct {
		name string
		a    webhook.Attempt
		want string
	}{
		{"delivered", webhook.Attempt{N: 1, Start: start, Duration: 3214567 * time.Nanosecond, Timestamp: 1795543387215, StatusCode: 200},
			`{"n":1,"outcome":"delivered","start":"2026-11-24T17:03:07.215Z","duration_ms":3.215,"timestamp":1795543387215,"status":200,"retry":false}`},
		{"failed with a retry", webhook.Attempt{N: 2, Start: start, Duration: 30 * time.Second, Timestamp: 1, StatusCode: 503,
			Kind: webhook.KindStatus, Err: errors.New("webhook: status 503\x1b[31m"), ResponseBody: []byte("busy\n\u202etxt"), Retry: true, RetryIn: 2 * time.Second},
			`{"n":2,"outcome":"status","start":"2026-11-24T17:03:07.215Z","duration_ms":30000,"timestamp":1,"status":503,"error":"webhook: status 503�[31m","response":"busy �txt","retry":true,"retry_in_ms":2000}`},
		{"interrupted, start unknown", webhook.Attempt{N: 3, Kind: webhook.KindInterrupted, Err: errors.New("interrupted")},
			`{"n":3,"outcome":"interrupted","duration_ms":0,"error":"interrupted","retry":false}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := json.Marshal(tc.a)
			require.NoError(t, err)
			assert.JSONEq(t, tc.want, string(got))
			assert.Equal(t, tc.want, string(got), "the documented order")
		})
	}
}

func TestResult_MarshalJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    webhook.Result
		want string
	}{
		{"delivered", webhook.Result{ConnectionName: "CRM", Attempts: []webhook.Attempt{{N: 1, StatusCode: 204}}},
			`{"connection_name":"CRM","outcome":"delivered","attempts":[{"n":1,"outcome":"delivered","duration_ms":0,"status":204,"retry":false}]}`},
		{"invalid, nothing sent", webhook.Result{ConnectionName: "CRM", Err: fmt.Errorf("x: %w", webhook.ErrInvalidConnection)},
			`{"connection_name":"CRM","outcome":"invalid","error":"x: webhook: invalid connection","attempts":[]}`},
		{"down, nothing sent", webhook.Result{Err: fmt.Errorf("x: %w", webhook.ErrEndpointDown)},
			`{"connection_name":"","outcome":"down","error":"x: webhook: endpoint down","attempts":[]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := json.Marshal(tc.r)
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(got))
			got, err = json.Marshal(&tc.r)
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(got), "a *Result too")
		})
	}
}

func TestAttempt_OutcomeIsDeliveredOnSuccess(t *testing.T) {
	assert.Equal(t, webhook.KindDelivered, webhook.Attempt{StatusCode: 200}.Outcome())
	assert.Equal(t, webhook.KindTimeout, webhook.Attempt{Kind: webhook.KindTimeout, Err: errors.New("t")}.Outcome())
}

// A dashboard serves the delivery-attempt log as JSON as it is, and a
// program switches on each attempt's outcome.
func ExampleAttempt_MarshalJSON() {
	a := webhook.Attempt{
		N: 1, Start: time.Date(2026, 11, 24, 18, 3, 7, 215e6, time.UTC), Duration: 3210 * time.Microsecond,
		Timestamp: 1795543387215, StatusCode: 503, Kind: webhook.KindStatus, Err: errors.New("webhook: status 503"),
		ResponseBody: []byte("busy"), Retry: true, RetryIn: time.Second,
	}
	b, _ := json.Marshal(a)
	fmt.Println(string(b))
	switch a.Outcome() {
	case webhook.KindDelivered:
		fmt.Println("delivered")
	case webhook.KindStatus:
		fmt.Println("answered", a.StatusCode)
	}
	// Output:
	// {"n":1,"outcome":"status","start":"2026-11-24T18:03:07.215Z","duration_ms":3.21,"timestamp":1795543387215,"status":503,"error":"webhook: status 503","response":"busy","retry":true,"retry_in_ms":1000}
	// answered 503
}
