package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/internal/redact"
)

var signCmd = &command{
	name:  "sign",
	short: "print the three headers for a body, and a curl command that sends it",
	long: `Sign prints the X-Service-* headers the service would send with a body,
signed now (or at -timestamp, in Unix milliseconds), and a curl command that
sends it to -url. The body is the sample payload, or -body FILE (- for
standard input), as it is, byte for byte. A body with control characters
other than newlines (LF) and tabs, CRLF line breaks included, is sent by
curl from its file; give -body FILE for it.`,
	flags: func(fs *flag.FlagSet, e *env) func(context.Context, []string) int {
		var secrets secretFlags
		secrets.register(fs, false)
		bodyFile := fs.String("body", "", "sign this `file`'s bytes (- for standard input) instead of the sample payload")
		event := fs.String("event", webhook.EventUserIdentified, "the X-Service-Event header")
		ts := fs.Int64("timestamp", 0, "sign at this Unix time in `milliseconds` (default: now)")
		target := fs.String("url", "https://localhost:8080/webhooks", "the `URL` of the curl command")
		method := fs.String("method", "POST", "the curl command's method: POST, PUT or PATCH")
		return func(_ context.Context, args []string) int {
			if len(args) != 0 {
				return e.fail("sign", usagef("sign takes no arguments, got %d", len(args)))
			}
			at := *ts
			if !given(fs, "timestamp") { // 0 is a time: the Unix epoch's
				at = time.Now().UnixMilli()
			}
			if err := sign(e, &secrets, *bodyFile, *event, at, *target, *method); err != nil {
				return e.fail("sign", err)
			}
			return exitOK
		}
	},
}

func sign(e *env, sf *secretFlags, bodyFile, event string, ts int64, target, method string) error {
	secrets, err := sf.load(e, false)
	if err != nil {
		return err
	}
	if ts < 0 {
		return usagef("-timestamp must be Unix milliseconds, got %d", ts)
	}
	switch method {
	case "POST", "PUT", "PATCH":
	default:
		return usagef("-method must be POST, PUT or PATCH, got %q", redact.PrintableCut(method, 20))
	}
	if u, err := url.Parse(target); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || !printableLine(target) {
		return usagef("-url must be an absolute http:// or https:// URL of printable characters")
	}
	if event == "" || !printableLine(event) {
		return usagef("-event must be printable text")
	}
	var body []byte
	if bodyFile == "" {
		body, err = json.Marshal(webhook.SamplePayload(time.UnixMilli(ts)))
	} else {
		body, err = e.readInput(bodyFile)
	}
	if err != nil {
		return err
	}
	tsText := strconv.FormatInt(ts, 10)
	headers := [][2]string{
		{"Content-Type", "application/json"},
		{webhook.HeaderEvent, event},
		{webhook.HeaderTimestamp, tsText},
		{webhook.HeaderSignature, webhook.Sign(secrets[0], ts, body)},
	}
	var data string
	switch {
	case bodyFile != "" && bodyFile != "-" && printableLine(bodyFile):
		data = "@" + bodyFile
	case !printableBody(body):
		return usagef("the body has control characters and cannot be shown on a terminal; save it to a file and give -body FILE")
	case strings.HasPrefix(string(body), "@"):
		return usagef("the body starts with @, which curl's --data-binary reads as a file's name; save it to a file and give -body FILE")
	default:
		data = string(body)
	}
	// Everything is checked: print it all, or nothing.
	var out bytes.Buffer
	for _, h := range headers[1:] {
		fmt.Fprintf(&out, "%s: %s\n", h[0], h[1])
	}
	fmt.Fprintf(&out, "\ncurl -sS -X %s %s", method, shellQuote(target))
	for _, h := range headers {
		fmt.Fprintf(&out, " \\\n  -H %s", shellQuote(h[0]+": "+h[1]))
	}
	fmt.Fprintf(&out, " \\\n  --data-binary %s\n", shellQuote(data))
	_, err = e.stdout.Write(out.Bytes())
	return err
}

// shellQuote quotes s for a POSIX shell, in single quotes.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// printableLine reports whether s is text that prints as itself on one
// line.
func printableLine(s string) bool { return redact.Printable(s) == s }

// printableBody reports whether body is text that a terminal shows as it
// is: valid UTF-8 whose only control characters are line breaks and tabs.
func printableBody(body []byte) bool {
	if !utf8.Valid(body) {
		return false
	}
	for _, r := range string(body) {
		if r != '\n' && r != '\t' && r != ' ' && redact.Printable(string(r)) != string(r) {
			return false
		}
	}
	return true
}
