package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/internal/redact"
)

// retryPolicy is the policy of trigger -retry: the service's schedule.
// Tests replace it with a fast one.
var retryPolicy = webhook.DefaultRetryPolicy

var triggerCmd = &command{
	name:  "trigger",
	args:  "URL",
	short: "send one delivery to URL, signed exactly as the service signs it",
	long: `Trigger sends one delivery to URL as the service sends it: the connection's
method and custom headers, the X-Service-* headers, a fresh millisecond
timestamp and signature, and the sample payload (that of "Send Test"), or
-payload FILE (- for standard input), checked to be a JSON object with an
"event" unless -raw.
It prints each attempt as it happens, then the attempt log and the result. With -retry it
retries on the service's schedule: up to 3 retries, after 1 s, 2 s and 4 s,
each attempt signed afresh.

Like the service, it sends only to https:// URLs of public addresses, unless
told otherwise: -allow-http for a plain http:// URL and -allow-private for
loopback and private addresses, such as a receiver on this machine.`,
	flags: func(fs *flag.FlagSet, e *env) func(context.Context, []string) int {
		var secrets secretFlags
		secrets.register(fs, false)
		headers := &headerFlags{}
		payload := fs.String("payload", "", "send this `file`'s body (- for standard input) instead of the sample payload")
		raw := fs.Bool("raw", false, "send -payload as given, without checking that it is a payload")
		event := fs.String("event", "", "the X-Service-Event header (default: the payload's \"event\", or user.identified)")
		method := fs.String("method", "POST", "the connection's method: POST, PUT or PATCH")
		fs.Var(headers, "H", "a custom `header` of the connection, \"Name: value\" (repeatable)")
		retry := fs.Bool("retry", false, "retry failures on the service's schedule (1 s, 2 s, 4 s)")
		allowHTTP := fs.Bool("allow-http", false, "allow a plain http:// URL")
		allowPrivate := fs.Bool("allow-private", false, "allow loopback, private and other non-public addresses")
		cacert := fs.String("cacert", "", "also trust the certificates of this PEM `file` (a receiver with a certificate of its own)")
		timeout := fs.Duration("timeout", webhook.DefaultAttemptTimeout, "how long one attempt may take")
		return func(ctx context.Context, args []string) int {
			if len(args) != 1 {
				return e.fail("trigger", usagef("want one URL, got %d arguments", len(args)))
			}
			if err := headers.check(); err != nil {
				return e.fail("trigger", err)
			}
			t := trigger{e: e, url: args[0], method: *method, headers: headers.m, event: *event,
				payload: *payload, raw: *raw, retry: *retry, allowHTTP: *allowHTTP,
				allowPrivate: *allowPrivate, cacert: *cacert, timeout: *timeout}
			code, err := t.run(ctx, &secrets)
			if err != nil {
				return e.fail("trigger", err)
			}
			return code
		}
	},
}

type trigger struct {
	e                       *env
	url, method, event      string
	headers                 map[string]string
	payload                 string
	raw, retry              bool
	allowHTTP, allowPrivate bool
	cacert                  string
	timeout                 time.Duration
}

func (t *trigger) run(ctx context.Context, sf *secretFlags) (int, error) {
	secrets, err := sf.load(t.e, false)
	if err != nil {
		return 0, err
	}
	if t.timeout < 0 {
		return 0, usagef("-timeout must not be negative, got %v", t.timeout)
	}
	u, err := url.Parse(t.url)
	switch {
	case err != nil:
		// Not shown: its path or query may be a credential.
		return 0, usagef("the URL does not parse as a URL (not shown: its path may be a credential); want an absolute https:// URL")
	case u.Host == "":
		return 0, usagef("the URL has no scheme and host (not shown: its path may be a credential); want an absolute https:// URL, such as https://example.com/webhooks")
	}
	plain := false
	switch u.Scheme {
	case "https":
	case "http":
		if !t.allowHTTP {
			return 0, usagef("%s is plain http://; the service sends only to https:// (give -allow-http for a receiver of your own)", redact.URL(t.url))
		}
		// The library's Sender sends only to https:// URLs: it is given
		// the URL as https://, and the transport below sends it as http://.
		plain, u.Scheme = true, "https"
		if u.Port() == "" { // also "host:", whose port is empty
			u.Host = net.JoinHostPort(u.Hostname(), "80")
		}
	default:
		return 0, usagef("%s: want an https:// URL", redact.URL(t.url))
	}
	event, body, err := t.body()
	if err != nil {
		return 0, err
	}
	// What the Sender would refuse unsent, refused before anything is printed.
	if event == "" || strings.ContainsFunc(event, unicode.IsControl) {
		return 0, usagef("want an event kind without control characters, got %q", redact.PrintableCut(event, 40))
	}
	if len(body) > webhook.DefaultMaxBodyBytes {
		return 0, usagef("the body has %d bytes, over the %d that receivers accept by default", len(body), webhook.DefaultMaxBodyBytes)
	}
	conn := webhook.Connection{Name: "webhook trigger", URL: u.String(), Method: t.method, Headers: t.headers, Secret: secrets[0]}
	if err := conn.Validate(); err != nil {
		return 0, usagef("%v", err)
	}
	client, err := t.client(plain)
	if err != nil {
		return 0, err
	}
	policy := &webhook.RetryPolicy{MaxRetries: 0}
	if t.retry {
		policy = retryPolicy()
	}
	s, err := webhook.NewSender(&webhook.SenderOptions{
		Client:         client,
		Retry:          policy,
		AttemptTimeout: t.timeout,
		OnAttempt: func(_ context.Context, _ webhook.Connection, a webhook.Attempt) {
			fmt.Fprintln(t.e.stdout, a)
		},
	})
	if err != nil {
		return 0, usagef("%v", err)
	}
	defer s.CloseIdleConnections()
	fmt.Fprintf(t.e.stdout, "sending %s to %s (%s, %d bytes)\n", redact.Printable(conn.Method), redact.URL(t.url), redact.Printable(event), len(body))
	res, err := s.SendBytes(ctx, conn, event, body)
	if len(res.Attempts) == 0 { // nothing sent: an invalid connection or body, or interrupted
		if errors.Is(err, webhook.ErrInvalidConnection) || errors.Is(err, webhook.ErrInvalidPayload) {
			return 0, usagef("%v", err)
		}
		return 0, err
	}
	fmt.Fprintln(t.e.stdout)
	// Ends with the result: the last attempt's diagnosis. The library
	// scrubs the answer of secret texts of redact.MinLen bytes or more;
	// hide takes the shorter loaded ones too.
	var table strings.Builder
	res.WriteTable(&table)
	io.WriteString(t.e.stdout, t.e.hide(table.String()))
	if err != nil {
		if errors.Is(res.Attempts[len(res.Attempts)-1].Err, webhook.ErrBlockedDestination) {
			fmt.Fprintln(t.e.stdout, "give -allow-private to send to a receiver on this machine or your network")
		}
		return exitFailed, nil
	}
	return exitOK, nil
}

// body returns the event and body to send: the sample payload, or the
// -payload file checked to be a JSON object with an "event" unless -raw.
func (t *trigger) body() (string, []byte, error) {
	if t.payload == "" {
		p := webhook.SamplePayload(time.Now())
		body, err := json.Marshal(p)
		return firstOf(t.event, p.Event), body, err
	}
	body, err := t.e.readInput(t.payload)
	if err != nil {
		return "", nil, err
	}
	if t.raw {
		var fields map[string]json.RawMessage
		var named string
		if json.Unmarshal(body, &fields) == nil { // any body: only a JSON object's "event", exactly, names the event
			_ = json.Unmarshal(fields["event"], &named)
		}
		return firstOf(t.event, named, webhook.EventUserIdentified), body, nil
	}
	p, err := webhook.ParsePayload(body) // what a receiver takes: a JSON object with an "event"
	if err != nil {
		return "", nil, usagef("%v (give -raw to send it as it is)", err)
	}
	return firstOf(t.event, p.Event), body, nil
}

// firstOf returns the first of texts that is not empty.
func firstOf(texts ...string) string {
	for _, t := range texts {
		if t != "" {
			return t
		}
	}
	return ""
}

// client returns the Sender's client: on the library's guarded transport,
// trusting -cacert, allowing private addresses with -allow-private, and
// sending https:// requests as http:// when plain.
func (t *trigger) client(plain bool) (*http.Client, error) {
	opts := &webhook.TransportOptions{AllowPrivateNetworks: t.allowPrivate}
	if t.cacert != "" {
		pool, err := trustPool(t.cacert)
		if err != nil {
			return nil, err
		}
		opts.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	tr, err := webhook.NewTransport(opts)
	if err != nil {
		return nil, err
	}
	var rt http.RoundTripper = tr
	if plain {
		rt = plainHTTP{rt}
	}
	return &http.Client{Transport: rt}, nil
}

// plainHTTP sends each request as http://: trigger -allow-http. It wraps
// the library's transport, so it keeps its private-network guard.
type plainHTTP struct{ rt http.RoundTripper }

func (p plainHTTP) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.URL.Scheme = "http"
	return p.rt.RoundTrip(r)
}

// CloseIdleConnections closes the idle connections of the wrapped
// transport, for Sender.CloseIdleConnections.
func (p plainHTTP) CloseIdleConnections() {
	if c, ok := p.rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
