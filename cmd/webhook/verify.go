package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/internal/redact"
)

var verifyCmd = &command{
	name:  "verify",
	short: "say whether a captured request verifies, and why not",
	long: `Verify checks a captured request against one or more secrets, as a receiver
does, and when it does not verify says why, in the terms of the spec's
troubleshooting: a header missing or malformed; a timestamp in seconds
rather than milliseconds; none of the secrets matching; a body changed after
signing, and how: a trailing line break added or removed, JSON escapes
rewritten (the sender wrote \u002b or \/ and the body has + or /, or the
other way round), or re-serialised (the same JSON in other bytes); a
delivery too old or too far ahead, and by how much. It never prints a
secret or a signature it computed.

Give the request as raw HTTP, as httputil.DumpRequest writes it
(-request FILE, - for standard input), or as a file of "Name: value" header
lines and a file of the raw body (-headers FILE -body FILE). It exits 0 when
the request verifies, 1 when it does not.`,
	flags: func(fs *flag.FlagSet, e *env) func(context.Context, []string) int {
		var secrets secretFlags
		secrets.register(fs, true)
		request := fs.String("request", "", "a `file` holding the raw HTTP request (- for standard input)")
		headers := fs.String("headers", "", "a `file` of the request's header lines, \"Name: value\"")
		bodyFile := fs.String("body", "", "a `file` of the request's raw body")
		at := fs.Int64("now", 0, "judge the window at this Unix time in `milliseconds` (default: now)")
		tolerance := fs.Duration("tolerance", webhook.DefaultTolerance, "how far the timestamp may be from now, either way")
		return func(_ context.Context, args []string) int {
			if len(args) != 0 {
				return e.fail("verify", usagef("verify takes no arguments, got %d", len(args)))
			}
			keys, err := secrets.load(e, true)
			if err != nil {
				return e.fail("verify", err)
			}
			h, body, err := readCapture(e, *request, *headers, *bodyFile)
			if err != nil {
				return e.fail("verify", err)
			}
			now := time.Now()
			if given(fs, "now") { // 0 is a time: the Unix epoch's
				now = time.UnixMilli(*at)
			}
			if *tolerance <= 0 {
				return e.fail("verify", usagef("-tolerance must be positive"))
			}
			d := diagnose(keys, h, body, now, *tolerance)
			for _, line := range d.lines {
				fmt.Fprintln(e.stdout, e.hide(line)) // a header of the capture may hold one
			}
			if !d.ok {
				return exitFailed
			}
			return exitOK
		}
	},
}

// readCapture reads the captured request: raw HTTP, or headers and body.
func readCapture(e *env, request, headers, bodyFile string) (http.Header, []byte, error) {
	switch {
	case request != "" && (headers != "" || bodyFile != ""):
		return nil, nil, usagef("give -request, or -headers and -body, not both")
	case request != "":
		data, err := e.readInput(request)
		if err != nil {
			return nil, nil, err
		}
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(data)))
		if err != nil {
			return nil, nil, usagef("the request is not raw HTTP as httputil.DumpRequest writes it: %v", err)
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, nil, usagef("reading the request's body: %v", err)
		}
		if r.Header.Get("Content-Length") == "" && len(r.TransferEncoding) == 0 {
			// DumpRequest of a request made by a client writes no
			// Content-Length: the body is the rest of the capture.
			body = afterHeader(data)
		}
		return r.Header, body, nil
	case headers != "" && bodyFile != "":
		data, err := e.readInput(headers)
		if err != nil {
			return nil, nil, err
		}
		body, err := e.readInput(bodyFile)
		if err != nil {
			return nil, nil, err
		}
		h, err := parseHeaderLines(data)
		return h, body, err
	}
	return nil, nil, usagef("give -request FILE, or -headers FILE and -body FILE")
}

// afterHeader returns what follows the header block of raw HTTP.
func afterHeader(data []byte) []byte {
	crlf, lf := bytes.Index(data, []byte("\r\n\r\n")), bytes.Index(data, []byte("\n\n"))
	switch {
	case crlf >= 0 && (lf < 0 || crlf < lf):
		return data[crlf+4:]
	case lf >= 0:
		return data[lf+2:]
	}
	return nil
}

// parseHeaderLines reads "Name: value" lines, skipping a request line
// first if there is one.
func parseHeaderLines(data []byte) (http.Header, error) {
	data = bytes.TrimLeft(data, "\r\n")
	if first, rest, ok := bytes.Cut(data, []byte("\n")); ok && bytes.Contains(first, []byte(" HTTP/")) {
		data = rest
	}
	if !bytes.HasSuffix(data, []byte("\n\n")) && !bytes.HasSuffix(data, []byte("\r\n\r\n")) {
		data = append(bytes.TrimRight(data, "\r\n"), "\n\n"...)
	}
	mh, err := textproto.NewReader(bufio.NewReader(bytes.NewReader(data))).ReadMIMEHeader()
	if err != nil {
		return nil, usagef("the headers file is not \"Name: value\" lines: %v", err)
	}
	return http.Header(mh), nil
}

// diagnosis is verify's verdict and its explanation.
type diagnosis struct {
	ok    bool
	lines []string
}

func (d *diagnosis) say(format string, args ...any) {
	d.lines = append(d.lines, fmt.Sprintf(format, args...))
}

// diagnose judges h and body as the library's Verifier does, and says why
// they do not verify. Everything it prints of the request is printable.
func diagnose(secrets []string, h http.Header, body []byte, now time.Time, tolerance time.Duration) *diagnosis {
	d := &diagnosis{}
	v, err := webhook.NewVerifier(secrets, &webhook.VerifierOptions{
		Now: func() time.Time { return now }, Tolerance: tolerance, AllowReplays: true, MaxBodyBytes: 1 << 30,
	})
	if err != nil {
		d.say("cannot verify: %s", redact.Printable(err.Error()))
		return d
	}
	verr := v.Verify(h, body)
	if verr == nil {
		d.ok = true
		d.say("verified: the signature matches secret %d of %d and the delivery is %s", matchingSecret(secrets, h, body), len(secrets), age(h, now))
		return d
	}
	d.say("does not verify: %s", redact.Printable(verr.Error()))

	headersOK := checkHeaders(d, h, now)
	if !headersOK {
		return d
	}
	if i := matchingSecret(secrets, h, body); i > 0 {
		d.say("cause: the signature matches secret %d of %d, but the delivery is outside the window: %s", i, len(secrets), windowText(h, now, tolerance))
		return d
	}
	if i, how := changedBody(secrets, h, body); i > 0 {
		d.say("cause: the body was changed after signing: %s verifies with secret %d", how, i)
		d.say("fix: verify the raw body as received, before any JSON decoding or re-encoding")
		return d
	}
	d.say("cause: none of the %d secret(s) matches this timestamp and body", len(secrets))
	d.say("fix: use the secret of this connection (\"Show Secret\" in the dashboard), and the raw body as received")
	if hint := reserialisedHint(body); hint != "" {
		d.say("note: the body looks re-serialised (%s): if so, the original bytes are lost and it cannot verify", hint)
	}
	return d
}

// checkHeaders says what is wrong with the X-Service-* headers, and
// reports whether they can be checked further.
func checkHeaders(d *diagnosis, h http.Header, now time.Time) bool {
	ok := true
	for _, name := range []string{webhook.HeaderEvent, webhook.HeaderTimestamp, webhook.HeaderSignature} {
		switch vs := h.Values(name); {
		case len(vs) == 0:
			d.say("cause: header %s is missing; every delivery carries %s, %s and %s", name, webhook.HeaderEvent, webhook.HeaderTimestamp, webhook.HeaderSignature)
			ok = false
		case len(vs) > 1:
			d.say("cause: header %s appears %d times; want it once", name, len(vs))
			ok = false
		case vs[0] == "":
			d.say("cause: header %s is empty", name)
			ok = false
		}
	}
	if !ok {
		return false
	}
	ts := h.Get(webhook.HeaderTimestamp)
	n, err := strconv.ParseInt(ts, 10, 64)
	switch {
	case err != nil || strings.TrimLeft(ts, "0123456789") != "":
		d.say("cause: header %s is %q; want Unix time in milliseconds, decimal digits only", webhook.HeaderTimestamp, redact.PrintableCut(ts, 40))
		return false
	case len(ts) > 1 && ts[0] == '0':
		d.say("cause: header %s has a leading zero; the signed text is the header's, in canonical decimal", webhook.HeaderTimestamp)
		return false
	case looksLikeSeconds(n, now):
		d.say("cause: header %s is %d, Unix time in seconds; the spec says milliseconds (%d now)", webhook.HeaderTimestamp, n, now.UnixMilli())
	}
	sig := h.Get(webhook.HeaderSignature)
	digest, found := strings.CutPrefix(sig, webhook.SignaturePrefix)
	switch {
	case !found:
		d.say("cause: header %s does not start with %q", webhook.HeaderSignature, webhook.SignaturePrefix)
		return false
	case len(digest) != 64 || strings.Trim(strings.ToLower(digest), "0123456789abcdef") != "":
		d.say("cause: header %s must be %q and 64 hex digits; got %d characters after it", webhook.HeaderSignature, webhook.SignaturePrefix, len(digest))
		return false
	}
	return true
}

// looksLikeSeconds reports whether ts, read as Unix seconds, is within a
// day of now.
func looksLikeSeconds(ts int64, now time.Time) bool {
	diff := now.Unix() - ts
	return diff < 86400 && diff > -86400
}

// matchingSecret returns the 1-based index of the secret the signature
// matches, or 0.
func matchingSecret(secrets []string, h http.Header, body []byte) int {
	tsText, sig := h.Get(webhook.HeaderTimestamp), strings.ToLower(h.Get(webhook.HeaderSignature))
	for i, s := range secrets {
		if signText(s, tsText, body) == sig {
			return i + 1
		}
	}
	return 0
}

// signText is webhook.Sign over the timestamp's text.
func signText(secret, tsText string, body []byte) string {
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return ""
	}
	return webhook.Sign(secret, ts, body)
}

// maxRewrittenBytes bounds the bodies whose JSON escapes changedBody
// rewrites: each character costs some 40 bytes of memory while it does.
const maxRewrittenBytes = 8 << 20

// changedBody tries the changes a body commonly goes through between the
// sender and the code that verifies it, and returns the secret the body
// before the change matches and what the change was, or 0.
func changedBody(secrets []string, h http.Header, body []byte) (int, string) {
	type candidate struct {
		how  string
		body []byte
	}
	var candidates []candidate
	add := func(how string, b []byte) {
		if !bytes.Equal(b, body) {
			candidates = append(candidates, candidate{how, b})
		}
	}
	for _, lb := range []string{"\r\n", "\n"} {
		if b, ok := bytes.CutSuffix(body, []byte(lb)); ok && !bytes.HasSuffix(b, []byte("\n")) {
			add(fmt.Sprintf("a trailing line break %q was added; the body without it", lb), b)
		}
	}
	add("trailing line breaks were added; the body without them", bytes.TrimRight(body, "\r\n"))
	for _, lb := range []string{"\n", "\r\n"} {
		add(fmt.Sprintf("a trailing line break %q was removed; the body with it", lb), append(bytes.Clone(body), lb...))
	}
	add("line breaks were changed to CRLF; the body with LF", bytes.ReplaceAll(body, []byte("\r\n"), []byte("\n")))
	if json.Valid(body) {
		if len(body) <= maxRewrittenBytes {
			for _, r := range escapeRewrites(body) {
				add(redact.Printable(r.how), r.body)
			}
		}
		var compact bytes.Buffer
		if json.Compact(&compact, body) == nil {
			add("it was re-serialised (the same JSON in other bytes: white space); the original", compact.Bytes())
		}
		if p, err := webhook.ParsePayload(body); err == nil {
			if b, err := json.Marshal(p); err == nil {
				add("it was re-serialised (the same JSON in other bytes: field order or formats); the original", b)
			}
		}
	}
	for _, c := range candidates {
		if i := matchingSecret(secrets, h, c.body); i > 0 {
			return i, c.how
		}
	}
	return 0, ""
}

// reserialisedHint says why body looks re-serialised, or "": the service
// sends compact JSON with its fields in the order of the spec.
func reserialisedHint(body []byte) string {
	if !json.Valid(body) {
		return ""
	}
	var compact bytes.Buffer
	json.Compact(&compact, body)
	if !bytes.Equal(compact.Bytes(), bytes.TrimRight(body, "\r\n")) {
		return "white space between its tokens; the service sends compact JSON"
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return ""
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		keys = append(keys, fmt.Sprint(tok))
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return ""
		}
	}
	if want := []string{"event", "timestamp", "user", "application"}; len(keys) == len(want) && strings.Join(keys, ",") != strings.Join(want, ",") {
		return "its fields are in the order " + redact.PrintableCut(strings.Join(keys, ", "), 80) + "; the service sends event, timestamp, user, application"
	}
	return ""
}

// age says how old the delivery is, or how far ahead.
func age(h http.Header, now time.Time) string {
	ts, _ := strconv.ParseInt(h.Get(webhook.HeaderTimestamp), 10, 64)
	ms := now.UnixMilli() - ts
	if ms < 0 {
		return durationText(-ms) + " ahead of this clock"
	}
	return durationText(ms) + " old"
}

// windowText says how far outside the window the delivery is.
func windowText(h http.Header, now time.Time, tolerance time.Duration) string {
	ts, _ := strconv.ParseInt(h.Get(webhook.HeaderTimestamp), 10, 64)
	ms, tol := now.UnixMilli()-ts, tolerance.Milliseconds()
	switch {
	case looksLikeSeconds(ts, now):
		return fmt.Sprintf("read as milliseconds, it is %s old; it was signed in seconds (see above), not captured long ago", durationText(ms))
	case ms < 0:
		return fmt.Sprintf("it is %s ahead of this clock, %s past the %v tolerance; check both clocks (NTP)", durationText(-ms), durationText(-ms-tol), tolerance)
	}
	return fmt.Sprintf("it is %s old, %s past the %v window; a captured delivery can only be checked within it, or with -now", durationText(ms), durationText(ms-tol), tolerance)
}

// durationText formats milliseconds, in years past what a Duration holds.
func durationText(ms int64) string {
	if ms > int64(1<<63-1)/int64(time.Millisecond) {
		return fmt.Sprintf("about %d years", ms/(365*24*3600*1000))
	}
	return (time.Duration(ms) * time.Millisecond).String()
}
