// Package webhook sends and verifies the service's signed webhooks: JSON
// deliveries of user.identified events, signed with HMAC-SHA256 over
// "<timestamp>.<body>".
//
// # Sending
//
// The service's backend delivers a [Payload] to each [Connection] a customer
// configured with a [Sender]. [Sender.Send] validates the connection, encodes
// the payload once, signs every attempt with a fresh timestamp over the
// identical body, retries failures by its [RetryPolicy], and returns the
// delivery-attempt log as a [Result]; when every attempt failed the error is
// a [*DeliveryError] holding them all. [Sender.SendAll] delivers to several
// connections at once, [Sender.SendTest] is the dashboard's "Send Test" with
// a diagnosis a person can act on, and [Sender.Attempt] makes a single try
// for a job queue that owns the retries.
//
//	s, err := webhook.NewSender(nil)
//	...
//	res, err := s.Send(ctx, conn, payload)
//	for _, a := range res.Attempts { ... } // the log, also on failure
//
// # Receiving
//
// A customer's endpoint checks each delivery with a [Verifier]: the
// signature, the timestamp window ([DefaultTolerance] either way) and the
// body size ([DefaultMaxBodyBytes]). [Verifier.Middleware] wraps any
// http.Handler and answers 401 (413 for a body over the limit) to what fails;
// [NewHandler] also decodes the [Payload] and calls a function for each
// [EventUserIdentified] delivery. [Verify] checks one request against one
// secret with the defaults.
//
//	v, err := webhook.NewVerifier([]string{os.Getenv("WEBHOOK_SECRET")}, nil)
//	...
//	http.Handle("POST /webhooks", webhook.NewHandler(v, func(ctx context.Context, p webhook.Payload) error {
//		return crm.Upsert(ctx, p.User) // an error answers 500 and the service retries
//	}, nil))
//
// # Retries
//
// By default ([DefaultRetryPolicy]) a delivery makes one attempt and up to 3
// retries, waiting 1 s, 2 s and 4 s, and retries every failure: a non-2xx
// answer, a network error, or no answer within the attempt timeout
// ([DefaultAttemptTimeout], 30 s per attempt). A 3xx answer is a failure;
// redirects are never followed. Nothing is retried after the caller's
// context is done, when the destination was refused before sending, or when
// the wait would end past the context's deadline. [ExponentialBackoff],
// [WithJitter] and [WithRetryAfter] build other schedules.
//
// # Security
//
// Only https:// URLs are accepted. The default transport ([NewTransport])
// refuses, at dial time and on the address DNS resolved, every address that
// is not globally reachable: loopback, private, link-local (cloud
// metadata), shared, multicast, documentation, reserved, and IPv6 forms that
// carry such an IPv4 address ([ErrBlockedDestination]). It uses no proxy
// unless told, bounds response headers to 64 KiB, and no answer (1xx, 101,
// trickled headers, an endless body) holds an attempt past its timeout. A
// Client of your own keeps the guard when its transport is, or wraps, one
// from NewTransport. Custom headers cannot replace Content-Type, the
// X-Service-* headers or the transport's own headers. Secrets never appear
// in a delivery, an error, a log line, json.Marshal or the formatting of a
// [Connection]; neither do custom header values, nor a URL's path, query or
// user information, where many webhook URLs carry their credential: an
// endpoint is named by its origin, such as https://hooks.example.com/….
// Nothing is printed unless a *slog.Logger is given. What a receiver sends
// (a body, a status line, a Location header, a certificate's names) is
// printed only as printable text, without control or format characters
// ([Attempt.ResponseText]). [NewSecret] makes a secret with 256 bits of
// entropy.
//
// Verification uses the raw body as received and the timestamp exactly as
// its header carried it (canonical decimal only), compares signatures in
// constant time with [hmac.Equal], checks the signature before the window
// (so an expired-timestamp error is only ever given for an authentic
// delivery), refuses an empty secret, accepts several secrets at once for
// rotation, and never puts an expected signature in an error. The event
// header is not signed: [NewHandler] dispatches on the signed body. The
// middleware's r.Body, read after the handler returned, from any goroutine,
// fails: it never shows another request's bytes.
//
// [Sign] and [Verify] keep the keyed hash state of a bounded number of
// recently used secrets in memory, to skip key setup; a [Verifier] keeps its
// own.
//
// # Testing and durable deliveries
//
// Package webhooktest is to this package what net/http/httptest is to
// net/http: a recording, verifying HTTPS receiver with scripted answers, a
// Sender that trusts it, and signed requests for receivers' tests. The
// nested module github.com/signedhook/webhook/riverhook makes deliveries
// durable with River on PostgreSQL, one [Sender.Attempt] per job.
package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/signedhook/webhook/internal/dialguard"
)

// ErrInvalidConnection is matched by every error returned by
// [Connection.Validate], and so by [Sender.Send] for an invalid connection.
var ErrInvalidConnection = errors.New("webhook: invalid connection")

// ErrBlockedDestination is matched by the error of an attempt that the
// default transport refused to make because the connection's host resolved
// to a loopback, private, link-local, shared, multicast or otherwise
// non-public address. See SenderOptions.AllowPrivateNetworks.
var ErrBlockedDestination = dialguard.ErrBlocked

// Connection is a webhook connection a customer configured: where and how
// deliveries are sent, and the secret they are signed with.
//
// A Connection is not a storage format. Every fmt verb (through Format),
// slog (LogValue, and MarshalJSON inside slices, maps and structs) and
// json.Marshal show the name, the method, the URL's origin (scheme, host and
// port, then "/…" when the URL has a path or a query), and the names of
// custom headers; never the secret, the URL's path, query or user
// information (many webhook URLs carry their credential in the path), nor
// the values of custom headers, which may carry credentials too. fmt prints by
// reflection, calling no method and so showing every field, in three cases:
// a Connection held in an unexported struct field, and the misuses that go
// vet reports, %p of a value that is not a pointer and %w of one that is not
// an error (printed as %!p(...) and %!w(...)). Keep a Connection in an
// exported field or behind a pointer where it may be printed.
type Connection struct {
	Name    string            // a label for people; may be empty
	URL     string            // absolute https:// URL with a host
	Method  string            // POST, PUT or PATCH; empty means POST
	Headers map[string]string // custom headers added to every delivery
	Secret  string            // the signing secret; never sent
}

// reservedHeaders may not be set by a connection's custom headers: the
// library or the transport owns them. Keys are in canonical form.
var reservedHeaders = map[string]bool{
	"Content-Type":      true,
	"Host":              true,
	"Content-Length":    true,
	"Transfer-Encoding": true,
	"Connection":        true,
	"Keep-Alive":        true,
	"Proxy-Connection":  true,
	"Te":                true,
	"Trailer":           true,
	"Upgrade":           true,
	// Expect: 100-continue changes how the request is sent, and
	// Proxy-Authorization is for a proxy, not for the customer.
	"Expect":              true,
	"Proxy-Authorization": true,
}

// Validate reports the first thing wrong with c, as a [*FieldError] naming
// the field and matching [ErrInvalidConnection]: a URL that is not an
// absolute https:// URL whose host is an IP address or an ASCII host name
// (an internationalised name in its xn-- form) and whose port, if any, is 1
// to 65535; a method other than POST, PUT or PATCH; an empty secret; or a
// custom header with an invalid name or value (control characters such as CR
// and LF), one that would replace Content-Type, an X-Service-* header or a
// header the transport owns (Host, Content-Length, Transfer-Encoding,
// Connection and the other hop-by-hop headers, Expect, which changes how
// the request is sent, and Proxy-Authorization, which is for a proxy), or
// two whose names differ only in case, all compared without regard to case.
// Plain http:// is refused; there is no switch.
func (c Connection) Validate() error {
	_, err := c.validate()
	return err
}

// validate is Validate, returning the parsed URL for the request.
func (c Connection) validate() (*url.URL, error) {
	u, err := validateURL(c.URL)
	if err != nil {
		return nil, err
	}
	switch c.Method {
	case "", http.MethodPost, http.MethodPut, http.MethodPatch:
	default:
		return nil, connError("Method", fmt.Sprintf("want POST, PUT or PATCH, got %q", c.Method))
	}
	if c.Secret == "" {
		return nil, connError("Secret", "must not be empty")
	}
	names := c.headerNames() // sorted: report the same header first every time
	for i, name := range names {
		if err := validateHeader(name, c.Headers[name]); err != nil {
			return nil, err
		}
		for _, other := range names[i+1:] {
			if strings.EqualFold(name, other) {
				// Both would be sent under one canonical name, in map order.
				return nil, connError(headerField(name), fmt.Sprintf("is the same header as %q; keep one", other))
			}
		}
	}
	return u, nil
}

func validateURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, connError("URL", "must not be empty")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, connError("URL", "is not a URL")
	}
	switch {
	case u.Scheme != "https":
		return nil, connError("URL", fmt.Sprintf("must use https://, got %q", u.Scheme+"://"))
	case u.Host == "" || u.Hostname() == "":
		return nil, connError("URL", "has no host")
	case strings.Contains(u.Hostname(), ":") && !strings.HasPrefix(u.Host, "["):
		// Without brackets, the colons of an address and of a port are
		// one and the same: net/http would dial another host.
		return nil, connError("URL", "an IPv6 address must be in brackets, as in https://[2001:db8::1]/")
	case strings.Contains(u.Hostname(), "%"):
		// A zone names an interface of this machine, never a public
		// address; its text is anything the customer typed.
		return nil, connError("URL", "an IPv6 address must not have a zone (%)")
	case !validHost(u.Hostname()):
		// net/http would rewrite anything else (IDNA), or dial the raw bytes
		// when that fails: the host dialled must be the host validated.
		return nil, connError("URL", "host must be an IP address or an ASCII host name (write an internationalised name in its xn-- form)")
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 || port[0] == '0' {
			return nil, connError("URL", fmt.Sprintf("port must be a number from 1 to 65535, got %q", port))
		}
	}
	return u, nil
}

// validHost reports whether host is an ASCII host name or an IP address.
// The name is tried first: most hosts are names, and a failed address
// parse allocates its error.
func validHost(host string) bool {
	if validHostName(host) {
		return true
	}
	_, err := netip.ParseAddr(host)
	return err == nil
}

// validHostName reports whether host is an ASCII host name: dot-separated
// labels of letters, digits, hyphens and underscores, each 1 to 63 bytes,
// at most 253 in all, with an optional final dot.
func validHostName(host string) bool {
	host = strings.TrimSuffix(host, ".")
	if host == "" || len(host) > 253 {
		return false
	}
	for label := range strings.SplitSeq(host, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// headerField names a custom header in a FieldError.
func headerField(name string) string { return "Headers[" + strconv.Quote(name) + "]" }

func validateHeader(name, value string) error {
	if !validHeaderName(name) {
		return connError(headerField(name), "is not a valid header name")
	}
	canonical := http.CanonicalHeaderKey(name)
	if reservedHeaders[canonical] || strings.HasPrefix(canonical, "X-Service-") {
		return connError(headerField(name), "would replace a header the library or the transport sets")
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return connError(headerField(name), fmt.Sprintf("value has a control character (%q) at offset %d", c, i))
		}
	}
	return nil
}

// validHeaderName reports whether name is an HTTP token (RFC 9110, 5.6.2).
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func connError(field, reason string) error {
	return &FieldError{Field: field, Reason: reason, kind: ErrInvalidConnection}
}

func (c Connection) method() string {
	if c.Method == "" {
		return http.MethodPost
	}
	return c.Method
}

// String returns a description of c without secrets, such as
// `webhook connection "CRM" (POST https://crm.example.com/…)`.
func (c Connection) String() string {
	return fmt.Sprintf("webhook connection %q (%s %s)", c.Name, printable(c.method(), 0), redactURL(c.URL))
}

// GoString is String, so that %#v does not print the secret either.
func (c Connection) GoString() string { return c.String() }

// Format implements fmt.Formatter so that every verb prints String: %q
// quotes it, any other verb prints it as it is.
func (c Connection) Format(f fmt.State, verb rune) {
	if verb == 'q' {
		io.WriteString(f, strconv.Quote(c.String()))
		return
	}
	io.WriteString(f, c.String())
}

// MarshalJSON encodes what LogValue shows: name, method, the URL's origin
// and custom header names. It never encodes the secret or header values, so a
// Connection cannot be stored as JSON by accident; store your own type.
func (c Connection) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Name    string   `json:"name"`
		Method  string   `json:"method"`
		URL     string   `json:"url"`
		Headers []string `json:"headers"`
	}{printable(c.Name, 0), printable(c.method(), 0), redactURL(c.URL), c.shownHeaderNames()})
}

// LogValue returns c's name, method, the URL's origin and custom header
// names.
func (c Connection) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("name", printable(c.Name, 0)),
		slog.String("method", printable(c.method(), 0)),
		slog.String("url", redactURL(c.URL)),
		slog.Any("headers", c.shownHeaderNames()),
	)
}

// headerNames returns the names of c's custom headers, sorted.
func (c Connection) headerNames() []string {
	names := make([]string, 0, len(c.Headers))
	for name := range c.Headers {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// shownHeaderNames returns the names of c's custom headers, sorted, as
// printable text: an invalid connection's names may be anything.
func (c Connection) shownHeaderNames() []string {
	names := c.headerNames()
	for i, name := range names {
		names[i] = printable(name, 0)
	}
	return names
}

// redactURL names the endpoint of raw by its origin, scheme, host and
// port, and "/…" when it has more: many webhook URLs carry their
// credential in the path (Slack, Zapier), in the query or in the user
// information, and none of them is shown.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	switch {
	case err != nil || raw == "":
		return "(unparsable URL)"
	case u.Host == "": // a relative URL, such as a Location's
		return "/…"
	}
	origin := printable(u.Scheme+"://"+u.Host, 0) // url.Parse lets any non-ASCII through in a host
	switch {
	case u.RawQuery != "" || u.ForceQuery || (u.Path != "" && u.Path != "/"):
		return origin + "/…"
	case u.Path == "/":
		return origin + "/"
	}
	return origin
}

// FailureKind says why an attempt failed, so a program can switch on it.
// The empty kind, KindNone, is a success.
type FailureKind string

// Failure kinds.
const (
	KindNone     FailureKind = ""         // the receiver answered 2xx
	KindInvalid  FailureKind = "invalid"  // the connection or the event is invalid; nothing was sent
	KindBlocked  FailureKind = "blocked"  // the address is not public; nothing was sent
	KindDNS      FailureKind = "dns"      // the host name did not resolve
	KindRefused  FailureKind = "refused"  // the connection was refused
	KindReset    FailureKind = "reset"    // the connection (or an HTTP/2 stream) was reset or closed early
	KindTimeout  FailureKind = "timeout"  // no complete answer within the attempt timeout
	KindTLS      FailureKind = "tls"      // the TLS handshake or certificate failed
	KindRedirect FailureKind = "redirect" // a 3xx answer: redirects are never followed
	KindStatus   FailureKind = "status"   // another non-2xx answer
	KindCanceled FailureKind = "canceled" // the caller's context was done
	KindOther    FailureKind = "other"    // any other failure

	// KindInterrupted is an attempt whose process died (a crash, a
	// SIGKILL) before it ended: its outcome is unknown, the receiver may
	// have had it. Only a durable queue, which runs the delivery again,
	// logs one; it costs no retry.
	KindInterrupted FailureKind = "interrupted"
)

// Attempt is one try of a delivery: an entry of the delivery-attempt log.
type Attempt struct {
	N            int           // 1 for the first attempt
	Start        time.Time     // when it was signed and sent
	Duration     time.Duration // until the answer was read, or the failure
	Timestamp    int64         // the X-Service-Timestamp it was signed with (Unix ms)
	StatusCode   int           // the receiver's status; 0 when none came
	Err          error         // nil on success; otherwise why it failed
	Kind         FailureKind   // KindNone on success
	ResponseBody []byte        // at most the first 4 KiB of the answer's body
	Retry        bool          // whether a retry was scheduled (Send) or is due (Sender.Attempt)
	RetryIn      time.Duration // the wait before that retry; 0 when Retry is false
}

// OK reports whether the attempt succeeded: a 2xx answer.
func (a Attempt) OK() bool { return a.Err == nil }

// Result is the delivery-attempt log of one delivery to one connection.
type Result struct {
	Connection string    // the connection's Name
	Attempts   []Attempt // in order; empty when the connection was invalid
	Err        error     // nil when the last attempt succeeded; see Sender.Send
}

// DeliveryError is the error of a delivery whose every attempt failed, or
// that was stopped between attempts. It holds the whole attempt log.
type DeliveryError struct {
	Connection string    // the connection's Name
	Attempts   []Attempt // every attempt made, in order
	Err        error     // the last cause: the last attempt's error, or the context's
}

// Error says how many attempts were made and the last cause.
func (e *DeliveryError) Error() string {
	return fmt.Sprintf("webhook: delivery to %q failed after %d attempt(s): %v", e.Connection, len(e.Attempts), e.Err)
}

// Unwrap returns the last cause.
func (e *DeliveryError) Unwrap() error { return e.Err }

// DefaultAttemptTimeout is how long one attempt may take, from dialling to
// reading the answer.
const DefaultAttemptTimeout = 30 * time.Second

// DefaultMaxConcurrency is how many deliveries [Sender.SendAll] makes at once.
const DefaultMaxConcurrency = 16

// Response bodies: the log keeps the start, the rest is drained up to a
// bound so the connection can be reused.
const (
	maxLoggedBody  = 4 << 10
	maxDrainedBody = 64 << 10
)

// SenderOptions configures a [Sender]. A nil *SenderOptions, or a zero
// field, selects the documented default.
type SenderOptions struct {
	// Client makes the requests. It is copied, never modified: the copy
	// does not follow redirects (a 3xx answer is a failed attempt) and
	// AttemptTimeout replaces its Timeout. Nil means a client on
	// NewTransport's transport, guarded unless AllowPrivateNetworks is set.
	// A Client of your own keeps the private-network guard when its
	// Transport is, or wraps, one from NewTransport; any other transport
	// has no guard and no bound on response headers.
	Client *http.Client

	// Retry is the retry policy. Nil means DefaultRetryPolicy(): to turn
	// retries off, give a policy with MaxRetries 0.
	Retry *RetryPolicy

	// AttemptTimeout bounds each attempt, from dialling to the end of the
	// answer's body, whatever the receiver sends. Zero means
	// DefaultAttemptTimeout.
	AttemptTimeout time.Duration

	// MaxBodyBytes is the largest body sent. A larger one is refused before
	// sending, as an invalid payload: receivers refuse bodies over
	// DefaultMaxBodyBytes by default, so it could only fail. Zero means
	// DefaultMaxBodyBytes; raise it only for receivers that accept more.
	MaxBodyBytes int64

	// Logger receives each attempt: failures at level Warn, successes at
	// Debug. Nil means no logging; nothing is ever printed to stderr.
	Logger *slog.Logger

	// OnAttempt, if not nil, is called after each attempt with the
	// delivery's context (carrying the caller's values: trace spans,
	// request ids), its connection and its entry of the log, from the
	// goroutine making the delivery: concurrently under SendAll and
	// concurrent calls. The delivery waits for it, so it should be quick.
	OnAttempt func(ctx context.Context, c Connection, a Attempt)

	// AllowPrivateNetworks lets the default transport connect to loopback,
	// private, link-local and other non-public addresses, which it refuses
	// otherwise. It has no effect with a Client: see TransportOptions.
	AllowPrivateNetworks bool

	// Now returns the current time, used for timestamps and durations. Nil
	// means time.Now.
	Now func() time.Time

	// MaxConcurrency bounds how many deliveries SendAll makes at once. Zero
	// means DefaultMaxConcurrency.
	MaxConcurrency int
}

// Sender delivers payloads to connections, signing each attempt and
// retrying failures by its policy. It keeps no state between deliveries
// apart from its connection pool, and is safe for concurrent use. Create one
// with [NewSender]: a zero Sender refuses every delivery with an error.
type Sender struct {
	client    *http.Client
	policy    RetryPolicy
	logger    *slog.Logger
	onAttempt func(context.Context, Connection, Attempt)
	now       func() time.Time
	maxConc   int
	maxBody   int64
	timeout   time.Duration // per attempt
	routed    bool          // attempts carry a route: the transport may have a proxy

	deliveries sync.Pool // of *delivery
}

// NewSender returns a Sender configured by opts, which may be nil. It fails
// when an option is out of range.
func NewSender(opts *SenderOptions) (*Sender, error) {
	if opts == nil {
		opts = &SenderOptions{}
	}
	s := &Sender{
		logger:    opts.Logger,
		onAttempt: opts.OnAttempt,
		now:       opts.Now,
		maxConc:   opts.MaxConcurrency,
		maxBody:   opts.MaxBodyBytes,
	}
	policy := opts.Retry
	if policy == nil {
		policy = DefaultRetryPolicy()
	}
	if policy.MaxRetries < 0 {
		return nil, fmt.Errorf("webhook: RetryPolicy.MaxRetries must not be negative, got %d", policy.MaxRetries)
	}
	s.policy = *policy
	if s.policy.Backoff == nil {
		s.policy.Backoff = defaultBackoff
	}
	timeout := opts.AttemptTimeout
	switch {
	case timeout < 0:
		return nil, fmt.Errorf("webhook: AttemptTimeout must not be negative, got %v", timeout)
	case timeout == 0:
		timeout = DefaultAttemptTimeout
	}
	switch {
	case s.maxConc < 0:
		return nil, fmt.Errorf("webhook: MaxConcurrency must not be negative, got %d", s.maxConc)
	case s.maxConc == 0:
		s.maxConc = DefaultMaxConcurrency
	}
	switch {
	case s.maxBody < 0:
		return nil, fmt.Errorf("webhook: MaxBodyBytes must not be negative, got %d", s.maxBody)
	case s.maxBody == 0:
		s.maxBody = DefaultMaxBodyBytes
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	var client http.Client
	if opts.Client != nil {
		client = *opts.Client
	} else {
		client.Transport = NewTransport(&TransportOptions{AllowPrivateNetworks: opts.AllowPrivateNetworks})
	}
	rt := client.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	if t, ok := rt.(*http.Transport); !ok || t.Proxy != nil {
		s.routed = true // NewTransport's, maybe wrapped, may route through a proxy
	}
	s.timeout = timeout
	client.Transport = &attemptTransport{rt: rt}
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	client.Timeout = 0 // each attempt's request is bounded (delivery.bound), without a goroutine per request
	s.client = &client
	return s, nil
}

// AttemptTimeout returns how long one attempt may take: the
// SenderOptions.AttemptTimeout the Sender was made with, or its default. A
// job queue running [Sender.Attempt] gives each job at least this long.
func (s *Sender) AttemptTimeout() time.Duration { return s.timeout }

// CloseIdleConnections closes the idle connections of the Sender's pool.
// Deliveries in progress are not affected.
func (s *Sender) CloseIdleConnections() {
	if s.client == nil {
		return
	}
	if c, ok := s.client.Transport.(*attemptTransport).rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// Send encodes p once and delivers it to c: signed with a fresh timestamp
// for each attempt over the identical body, retried by the Sender's policy.
// It blocks until the delivery succeeds, the policy gives up, or ctx is done
// (also in the middle of a wait).
//
// The Result is never nil and holds every attempt. The error is nil when
// the last attempt succeeded; otherwise it is a [*FieldError] matching
// [ErrInvalidConnection] or [ErrInvalidPayload] when c or p is invalid
// (nothing is sent; see [Connection.Validate] and [Payload.Validate]), or a
// [*DeliveryError] holding every attempt and the last cause. A context that
// is done before the first attempt sends nothing: the Result has no attempt
// and the error wraps the context's cause. Result.Err is the same error.
func (s *Sender) Send(ctx context.Context, c Connection, p Payload) (*Result, error) {
	if s.client == nil {
		return failed(c, errZeroSender)
	}
	body, err := encodePayload(&p)
	if err != nil {
		return failed(c, err)
	}
	return s.SendBytes(ctx, c, p.Event, body)
}

// errZeroSender is the error of every delivery asked of a Sender that was
// not made by NewSender.
var errZeroSender = errors.New("webhook: the Sender is not configured; create it with NewSender")

// failed returns the Result of a delivery to c that sent nothing, and err.
func failed(c Connection, err error) (*Result, error) {
	return &Result{Connection: c.Name, Err: err}, err
}

// encodePayload validates p and encodes it, once for every attempt.
func encodePayload(p *Payload) ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	body, err := json.Marshal(p)
	if err != nil { // NaN in metadata, a time past year 9999
		return nil, fmt.Errorf("%w: cannot be encoded as JSON: %w", ErrInvalidPayload, err)
	}
	return body, nil
}

// SendBytes is Send for a body encoded already: event goes in the
// X-Service-Event header and body is sent byte for byte, unchecked. An empty
// event, one with control characters, or a body over
// SenderOptions.MaxBodyBytes is refused like an invalid payload.
func (s *Sender) SendBytes(ctx context.Context, c Connection, event string, body []byte) (*Result, error) {
	if s.client == nil {
		return failed(c, errZeroSender)
	}
	d := s.newDelivery(c, event, body, 1)
	return d.runForResult(ctx, d.maxRetries)
}

// SendAll delivers p to every connection in cs, at most
// SenderOptions.MaxConcurrency at once, each independently of the others'
// failures. It returns one Result per connection, in the order of cs; a
// failed delivery has its Result.Err set. p is validated and encoded once.
// It blocks until every delivery has ended.
func (s *Sender) SendAll(ctx context.Context, cs []Connection, p Payload) []*Result {
	results := make([]*Result, len(cs))
	body, err := encodePayload(&p)
	if s.client == nil {
		err = errZeroSender
	}
	if err != nil {
		for i, c := range cs {
			results[i] = &Result{Connection: c.Name, Err: err}
		}
		return results
	}
	sem := make(chan struct{}, s.maxConc)
	var wg sync.WaitGroup
	for i, c := range cs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			results[i], _ = s.SendBytes(ctx, c, p.Event, body)
		}()
	}
	wg.Wait()
	return results
}

// Attempt makes exactly one try, numbered n (1 for the first), of
// delivering body to c, and returns its log entry, in which Retry and
// RetryIn say whether the Sender's policy would retry it and after how long.
// It is the primitive for a durable job queue that owns the retries across
// restarts: store the Attempt, schedule attempt n+1 after RetryIn if Retry.
//
// Unlike Send, the decision ignores ctx's deadline: a queue runs each
// attempt under a deadline of its own and schedules the retry itself. An
// invalid connection, event or body gives an attempt of kind [KindInvalid],
// and a ctx done before sending one of kind [KindCanceled], with nothing
// sent and no retry.
func (s *Sender) Attempt(ctx context.Context, c Connection, event string, body []byte, n int) Attempt {
	n = max(n, 1)
	if s.client == nil {
		return Attempt{N: n, Err: errZeroSender, Kind: KindInvalid}
	}
	d := s.newDelivery(c, event, body, n)
	defer d.release()
	d.queued = true
	d.attempts = d.one[:0] // copied out below, before d is pooled
	d.run(ctx, 0)
	if len(d.attempts) == 0 {
		return Attempt{N: d.first, Start: s.now(), Err: d.err, Kind: d.errKind}
	}
	return d.attempts[0]
}

// SendTest is the dashboard's "Send Test": it makes one attempt, without
// retries, to deliver a complete, valid [EventUserIdentified] payload with
// obviously sample data (see [SamplePayload]), signed like any other delivery.
// The Result's single attempt says what happened; its [Attempt.Diagnosis]
// says it in words a person can act on. The error is as for Send.
func (s *Sender) SendTest(ctx context.Context, c Connection) (*Result, error) {
	if s.client == nil {
		return failed(c, errZeroSender)
	}
	body, err := json.Marshal(SamplePayload(s.now()))
	if err != nil { // cannot happen: the payload is fixed
		return failed(c, err)
	}
	d := s.newDelivery(c, EventUserIdentified, body, 1)
	d.maxRetries = 0 // a test is never retried
	return d.runForResult(ctx, 0)
}

// SendTestSource is the "source" metadata of the payload SendTest delivers
// (see [SamplePayload]): the marker [Payload.IsSendTest] looks for.
const SendTestSource = "send_test"

// SamplePayload returns the payload SendTest delivers: an
// [EventUserIdentified] event at now about an obviously fictitious user
// ("usr_test_0000", test.user@example.com), whose metadata "source" is
// [SendTestSource], so that a receiver can recognise it with
// [Payload.IsSendTest] and skip storing it.
func SamplePayload(now time.Time) Payload {
	t := NewTime(now)
	return Payload{
		Event:     EventUserIdentified,
		Timestamp: t,
		User: User{
			ID:        UserID("test_0000"),
			Email:     "test.user@example.com",
			Name:      "Test User",
			FirstName: "Test",
			LastName:  "User",
			Phone:     "+1 555 0100",
			Metadata:  Metadata{"plan": "test", "source": SendTestSource},
			CreatedAt: t,
			UpdatedAt: t,
		},
		Application: Application{ID: ApplicationID("test_0000"), Name: "Send Test"},
	}
}

// delivery is the state of one Send: the attempt log and the hooks that
// go-retryablehttp calls between attempts.
type delivery struct {
	s          *Sender
	rc         *retryablehttp.Client // bound to this delivery's hooks
	conn       Connection
	event      string
	body       []byte
	first      int // the number of the first attempt made
	maxRetries int // the policy's, or 0 for a test delivery
	attempts   []Attempt
	ctx        context.Context       // the delivery's; each attempt's request has its own, bounded
	req        retryablehttp.Request // the request of the attempt in flight
	cancel     context.CancelFunc    // ends the attempt in flight
	start      time.Time             // of the attempt in flight
	ts         int64                 // its timestamp
	wait       time.Duration         // decided after the last attempt, for Backoff
	queued     bool                  // Sender.Attempt: a queue schedules the retry, whatever ctx's deadline
	one        [1]Attempt            // the log of Sender.Attempt
	err        error                 // set when nothing could be sent, or by cancellation
	errKind    FailureKind           // why nothing could be sent: KindInvalid or KindCanceled
}

// newDelivery returns a delivery from the Sender's pool, whose
// go-retryablehttp client and hooks are bound once, not per delivery.
// Return it with release once its attempts are handed out.
func (s *Sender) newDelivery(c Connection, event string, body []byte, first int) *delivery {
	d, _ := s.deliveries.Get().(*delivery)
	if d == nil {
		d = &delivery{s: s}
		d.rc = &retryablehttp.Client{
			HTTPClient: s.client,
			Logger:     nil, // never go-retryablehttp's stderr logger
			CheckRetry: d.checkRetry,
			Backoff:    func(time.Duration, time.Duration, int, *http.Response) time.Duration { return d.wait },
			PrepareRetry: func(r *http.Request) error {
				r.Header = r.Header.Clone() // the previous attempt's request keeps its own
				r.Body = newRequestBody(d.body)
				d.sign(r.Header, make([]string, 2))
				d.req.Request = d.bound(r) // go-retryablehttp sends whatever req.Request is now
				return nil
			},
			ErrorHandler: func(resp *http.Response, err error, _ int) (*http.Response, error) { return resp, err },
		}
	}
	d.conn, d.event, d.body, d.first, d.maxRetries = c, event, body, first, s.policy.MaxRetries
	return d
}

// release clears d, whose attempts now belong to the caller, and pools it.
func (d *delivery) release() {
	d.conn, d.event, d.body, d.attempts, d.err, d.queued, d.one = Connection{}, "", nil, nil, nil, false, [1]Attempt{}
	d.ctx, d.req, d.cancel = nil, retryablehttp.Request{}, nil
	d.s.deliveries.Put(d)
}

// run makes the delivery, with at most maxRetries retries.
func (d *delivery) run(ctx context.Context, maxRetries int) {
	var u *url.URL
	u, d.errKind, d.err = d.check(ctx)
	if d.err != nil {
		return
	}
	// Built here from the URL Validate parsed, rather than parsed again by
	// retryablehttp.NewRequest; PrepareRetry rewinds the body. As
	// http.NewRequest does, "host:" loses its empty port.
	u.Host = strings.TrimSuffix(u.Host, ":")
	body := d.body
	d.ctx = ctx
	hreq := &http.Request{
		Method:        d.conn.method(),
		URL:           u,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        make(http.Header, 4+len(d.conn.Headers)),
		Body:          newRequestBody(body),
		GetBody:       func() (io.ReadCloser, error) { return newRequestBody(body), nil },
		ContentLength: int64(len(body)),
		Host:          u.Host,
	}
	h := hreq.Header
	for name, value := range d.conn.Headers {
		h.Set(name, value)
	}
	// One backing array for the four values; each slice has no room to
	// grow into its neighbour.
	vals := make([]string, 4)
	vals[0], vals[1] = "application/json", d.event
	h["Content-Type"], h[HeaderEvent] = vals[0:1:1], vals[1:2:2]
	d.sign(h, vals[2:4])
	d.req = retryablehttp.Request{Request: d.bound(hreq)}
	d.rc.RetryMax = maxRetries
	resp, err := d.rc.Do(&d.req)
	if resp != nil {
		resp.Body.Close() // read in checkRetry already
	}
	d.endAttempt() // in case go-retryablehttp returned before checkRetry
	if err != nil && ctx.Err() != nil && (len(d.attempts) == 0 || d.attempts[len(d.attempts)-1].Retry) {
		// Stopped while waiting for a retry: the log ends on a failure
		// whose retry never came.
		d.err = fmt.Errorf("webhook: stopped before the next attempt: %w", context.Cause(ctx))
	}
}

// check returns the connection's parsed URL, or why nothing may be sent and
// its kind: an invalid connection, event or body, or a context that is done
// already.
func (d *delivery) check(ctx context.Context) (*url.URL, FailureKind, error) {
	u, err := d.conn.validate()
	if err != nil {
		return nil, KindInvalid, err
	}
	if d.event == "" || strings.ContainsFunc(d.event, unicode.IsControl) {
		return nil, KindInvalid, payloadError("event", fmt.Sprintf("want a non-empty event kind without control characters, got %q", d.event))
	}
	if n := int64(len(d.body)); n > d.s.maxBody {
		return nil, KindInvalid, payloadError("body", fmt.Sprintf("has %d bytes, over the limit of %d (SenderOptions.MaxBodyBytes): receivers refuse it", n, d.s.maxBody))
	}
	if ctx.Err() != nil {
		return nil, KindCanceled, fmt.Errorf("webhook: nothing sent: %w", context.Cause(ctx))
	}
	return u, KindNone, nil
}

// bound returns a copy of r whose context ends when the delivery's does or
// when the attempt has taken the Sender's AttemptTimeout, from dialling to
// the end of the response body: checkRetry reads the body, then ends the
// attempt. Bounding the request itself, rather than wrapping the client's
// RoundTripper, costs one request copy and no wrapped body.
func (d *delivery) bound(r *http.Request) *http.Request {
	ctx := d.ctx
	if d.s.routed && proxying.Load() {
		ctx = withRoute(ctx) // lets NewTransport's dialer tell a proxy's connection from a direct one
	}
	ctx, cancel := context.WithTimeout(ctx, d.s.timeout)
	d.cancel = cancel
	return r.WithContext(ctx)
}

// endAttempt releases the attempt in flight, if any.
func (d *delivery) endAttempt() {
	if d.cancel != nil {
		d.cancel()
		d.cancel = nil
	}
}

// newRequestBody returns a request's body: a type net/http knows to be in
// memory, so that it writes the headers and the body in one go instead of
// flushing the headers first (a second write, a second TLS record).
func newRequestBody(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }

// sign sets a fresh timestamp and the signature over the unchanged body.
// Both values are cut from one string and stored in vals, which has room
// for two.
func (d *delivery) sign(h http.Header, vals []string) {
	d.start = d.s.now() // the attempt starts as it is signed
	d.ts = d.start.UnixMilli()
	var buf [20 + signatureLen]byte
	b := strconv.AppendInt(buf[:0], d.ts, 10)
	n := len(b)
	both := string(AppendSignature(b, d.conn.Secret, d.ts, d.body))
	vals[0], vals[1] = both[:n], both[n:]
	h[HeaderTimestamp], h[HeaderSignature] = vals[0:1:1], vals[1:2:2]
}

// checkRetry records the attempt that just ended and decides on a retry.
// go-retryablehttp passes the attempt's context; the delivery's is d.ctx.
func (d *delivery) checkRetry(_ context.Context, resp *http.Response, err error) (bool, error) {
	ctx := d.ctx
	a := Attempt{
		N:         d.first + len(d.attempts),
		Start:     d.start,
		Timestamp: d.ts,
	}
	if resp != nil {
		a.StatusCode = resp.StatusCode
		a.ResponseBody = readResponseBody(resp)
	}
	d.endAttempt()
	a.Duration = d.s.now().Sub(d.start)
	a.Kind, a.Err = classify(ctx, resp, err, d.conn.URL)
	if a.Err != nil {
		a.Retry, a.RetryIn = d.decide(ctx, resp, &a)
	}
	if a.Retry {
		// go-retryablehttp waits for the retry on the request's context:
		// the delivery's, not the attempt's, which has ended.
		d.req.Request = d.req.Request.WithContext(ctx)
	}
	d.wait = a.RetryIn
	d.attempts = append(d.attempts, a)
	d.log(ctx, &a)
	if d.s.onAttempt != nil {
		d.s.onAttempt(ctx, d.conn, a)
	}
	return a.Retry, nil
}

// decide applies the policy to the failed attempt a.
func (d *delivery) decide(ctx context.Context, resp *http.Response, a *Attempt) (bool, time.Duration) {
	p := &d.s.policy
	if a.Kind == KindCanceled || a.Kind == KindBlocked || a.N > d.maxRetries {
		return false, 0
	}
	if p.ShouldRetry != nil && !p.ShouldRetry(resp, a.Err) {
		return false, 0
	}
	wait := max(p.Backoff(a.N, resp), 0)
	// The deadline is on the process's clock, whatever SenderOptions.Now says.
	if deadline, ok := ctx.Deadline(); ok && !d.queued && time.Until(deadline) <= wait {
		return false, 0 // the deadline cannot cover the wait
	}
	return true, wait
}

// readResponseBody returns the start of resp's body, drains a bounded rest
// so the connection can be reused, and closes it. A read error (the attempt
// timing out, say) shows as a shorter body: the status has already come.
func readResponseBody(resp *http.Response) []byte {
	body := resp.Body
	resp.Body = http.NoBody
	defer body.Close()
	if resp.ContentLength == 0 {
		return nil // the common answer: nothing to read
	}
	buf := bodyBuffers.Get().(*[maxLoggedBody]byte)
	defer bodyBuffers.Put(buf)
	n, _ := io.ReadFull(body, buf[:])
	if n == len(buf) { // cut: drain a bounded rest, and end on a whole character
		io.CopyN(io.Discard, body, maxDrainedBody)
		n = len(cutAtRune(buf[:n]))
	}
	if n == 0 {
		return nil
	}
	return bytes.Clone(buf[:n])
}

var bodyBuffers = sync.Pool{New: func() any { return new([maxLoggedBody]byte) }}

// cutAtRune returns b less a last UTF-8 character that a cut at its end
// split, so that the excerpt of a text answer invents no invalid byte.
func cutAtRune(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			break
		}
	}
	return b
}

func (d *delivery) log(ctx context.Context, a *Attempt) {
	level := slog.LevelDebug
	if a.Err != nil {
		level = slog.LevelWarn
	}
	if !d.s.logger.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.Any("connection", d.conn),
		slog.Int("attempt", a.N),
		slog.Int("status", a.StatusCode),
		slog.Duration("duration", a.Duration),
	}
	if a.Err != nil {
		attrs = append(attrs, slog.String("kind", string(a.Kind)), slog.String("error", a.Err.Error()),
			slog.Bool("retry", a.Retry), slog.Duration("retry_in", a.RetryIn))
	}
	d.s.logger.LogAttrs(ctx, level, "webhook: delivery attempt", attrs...)
}

// resultWithLog is a Result allocated with room for a one-attempt log, the
// common case, in one allocation.
type resultWithLog struct {
	r   Result
	one [1]Attempt
}

// runForResult makes the delivery and returns its Result and error.
func (d *delivery) runForResult(ctx context.Context, maxRetries int) (*Result, error) {
	box := new(resultWithLog)
	d.attempts = box.one[:0]
	d.run(ctx, maxRetries)
	return d.result(&box.r)
}

// result fills r, the Result of the delivery, returns it with its error,
// and releases d.
func (d *delivery) result(r *Result) (*Result, error) {
	r.Connection, r.Attempts = d.conn.Name, d.attempts
	switch {
	case len(d.attempts) == 0:
		r.Err = d.err
	case d.err != nil:
		r.Err = &DeliveryError{Connection: d.conn.Name, Attempts: d.attempts, Err: d.err}
	case d.attempts[len(d.attempts)-1].Err != nil:
		r.Err = &DeliveryError{Connection: d.conn.Name, Attempts: d.attempts, Err: d.attempts[len(d.attempts)-1].Err}
	}
	d.release()
	return r, r.Err
}

// classify returns the kind and error of an attempt with answer resp or
// transport error err. The error's text names the endpoint by its origin
// alone (redactURL) and is printable: a status line's reason phrase, a
// Location header and a certificate's names are the receiver's text.
func classify(ctx context.Context, resp *http.Response, err error, rawURL string) (FailureKind, error) {
	if err == nil {
		code := resp.StatusCode
		switch {
		case code >= 200 && code < 300:
			return KindNone, nil
		case code >= 300 && code < 400:
			msg := "webhook: receiver answered " + resp.Status + "; redirects are not followed"
			if loc := resp.Header.Get("Location"); loc != "" {
				msg += " (Location: " + redactURL(loc) + ")"
			}
			return KindRedirect, errors.New(printable(msg, 0))
		}
		return KindStatus, errors.New(printable("webhook: receiver answered "+resp.Status, 0))
	}
	cause := err
	var ue *url.Error
	if errors.As(err, &ue) {
		cause = ue.Err
	}
	kind := KindOther
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	var recordErr tls.RecordHeaderError
	var alertErr tls.AlertError
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalidCert x509.CertificateInvalidError
	switch {
	case errors.Is(err, ErrBlockedDestination):
		kind = KindBlocked
	case ctx.Err() != nil:
		kind = KindCanceled
	case errors.As(err, &dnsErr):
		kind = KindDNS
	case errors.As(err, &certErr), errors.As(err, &recordErr), errors.As(err, &alertErr),
		errors.As(err, &unknownCA), errors.As(err, &hostErr), errors.As(err, &invalidCert),
		// net/http replaces the RecordHeaderError of a plain-HTTP answer by
		// a string error.
		strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		kind = KindTLS
	case isTimeout(err):
		kind = KindTimeout
	case errors.Is(err, syscall.ECONNREFUSED):
		kind = KindRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		// net/http's HTTP/2 stream error (RST_STREAM) is not exported.
		strings.HasPrefix(cause.Error(), "stream error: "):
		kind = KindReset
	}
	msg := "webhook: " + kindText[kind] + " " + redactURL(rawURL) + ": " + cause.Error()
	return kind, &attemptError{msg: printable(msg, 0), cause: cause}
}

// attemptError is the error of an attempt that failed without an answer:
// printable text, and the cause for errors.Is and errors.As.
type attemptError struct {
	msg   string
	cause error
}

func (e *attemptError) Error() string { return e.msg }
func (e *attemptError) Unwrap() error { return e.cause }

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}

var kindText = map[FailureKind]string{
	KindBlocked:  "refused to connect to",
	KindCanceled: "canceled request to",
	KindDNS:      "cannot resolve host of",
	KindTLS:      "TLS failed with",
	KindTimeout:  "timed out waiting for",
	KindRefused:  "connection refused by",
	KindReset:    "connection reset by",
	KindOther:    "request failed to",
}
