// Package webhook sends and verifies the service's signed webhooks: JSON
// deliveries of events, signed with HMAC-SHA256 over "<timestamp>.<body>".
//
// # Sending
//
// The service's backend delivers a [Payload] to each [Connection] a customer
// configured, with a [Sender]. [Sender.Send] validates the connection and
// encodes the payload once. It signs every attempt with a fresh timestamp over
// the identical body, and retries failures by its [RetryPolicy]. It returns
// the delivery-attempt log as a [Result]. When every attempt failed, the error
// is a [*DeliveryError] holding them all.
//
//   - [Sender.SendAll] delivers to several connections at once.
//
//   - [Sender.SendTest] is the dashboard's "Send Test", with a diagnosis a
//     person can act on.
//
//   - [Sender.Attempt] makes a single try, for a job queue that owns the
//     retries.
//
//     s, err := webhook.NewSender(nil)
//     ...
//     res, err := s.Send(ctx, conn, payload)
//     for _, a := range res.Attempts { ... } // the log, also on failure
//
// # Receiving
//
// A customer's endpoint checks each delivery with a [Verifier]. It checks the
// signature, the timestamp window ([DefaultTolerance] either way) and the body
// size ([DefaultMaxBodyBytes]). [Verifier.Middleware] wraps any http.Handler.
// It answers 401 to what fails, and 413 to a body over the limit.
// [NewEventHandler] also decodes each event into the type its handler takes
// ([On]). [NewHandler] is the one-liner for [EventUserIdentified].
//
// Both hand a delivery to the handler once. A copy of a handled delivery is
// acknowledged 200 without a second run. A copy of one whose handler failed is
// handled. [LastWriterWins] makes a handler idempotent on a key and a version,
// and reports what it did. [Verifier.Verify] refuses an exact repeat with
// [ErrReplayed]. [Verify] checks one request against one secret with the
// defaults, and keeps no memory. Route every method to the handler: a
// connection's method is POST, PUT or PATCH, and what is not signed is
// refused.
//
//	v, err := webhook.NewVerifier([]string{os.Getenv("WEBHOOK_SECRET")}, nil)
//	...
//	http.Handle("/webhooks", webhook.NewHandler(v, func(ctx context.Context, p webhook.Payload) error {
//		return crm.Upsert(ctx, p.User) // an error answers 500 and the service retries
//	}, nil))
//
// # Memory
//
// The package writes nothing to disk. It keeps three things in memory:
//
//   - The replay memory of each [Verifier], on by default: the signature of
//     each delivery accepted within the window. It is bounded by
//     [MemoryReplayStoreOptions].MaxEntries. It takes about 1.6 MiB at 100
//     deliveries a second, and 12.5 MiB at 1,000.
//     [VerifierOptions].AllowReplays turns it off. [VerifierOptions].ReplayStore
//     shares it.
//   - The timestamps each [Sender] signed lately: the last one per secret and
//     body, for two seconds at most.
//   - Endpoint health, when [SenderOptions].Health is set: the endpoints
//     failing or with attempts waiting on them, and the URLs that answered
//     slower than a first answer is waited for. An endpoint no attempt goes
//     to is forgotten after an hour, or a day when down.
//
// A [Verifier] also keeps the keyed hash states of its secrets. A [Sender]
// keeps, for 4,096 secrets at most, their keyed hash states and the URL each
// last signed for, parsed and checked once. [Sign] and [Verify] reuse the
// states of their last secrets from a pool that the garbage collector
// empties.
//
// # Retries
//
// By default ([DefaultRetryPolicy]) a delivery makes one attempt and up to 3
// retries, waiting 1 s, 2 s and 4 s. It retries every failure but a 410
// Gone: a non-2xx answer, a network error, or no answer within the attempt
// timeout ([DefaultAttemptTimeout], 30 s). A 3xx answer is a failure;
// redirects are never followed. Nothing is retried after a 410 Gone
// ([ErrEndpointGone]), after the caller's context is done, or when the
// destination was refused before sending. Nor is it retried when the
// wait would end past the context's deadline. [ExponentialBackoff],
// [WithJitter] and [WithRetryAfter] build other schedules.
//
// Endpoint health ([HealthOptions], opt-in) holds deliveries back from an
// endpoint that keeps failing without an answer. It probes the endpoint until
// it answers.
//
// # Security
//
// Only https:// URLs are accepted. The default transport ([NewTransport])
// refuses every address that is not globally reachable. It checks at dial time,
// on the address DNS resolved. It refuses loopback, private, link-local (cloud
// metadata), shared, multicast, documentation and reserved addresses. It also
// refuses IPv6 forms that carry such an IPv4 address ([ErrBlockedDestination]).
// A Client of your own keeps the guard when its transport is, or wraps, one
// from NewTransport.
//
// The transport uses no proxy unless told. It bounds response headers to 64
// KiB. No answer (1xx, 101, trickled headers, an endless body) holds an
// attempt past its timeout. Over HTTP/2, a receiver that stops reading holds
// it 5 seconds more at most: then its connection is closed. A connection on
// which one write waits 30 seconds is closed too, also before any answer.
// Custom headers cannot replace Content-Type, the X-Service-* headers or the
// transport's own headers.
//
// Secrets never appear in a delivery, an error, a log line, json.Marshal or
// the formatting of a [Connection]. Neither do custom header values, nor a
// URL's path, query or user information, where many webhook URLs carry their
// credential. An endpoint is named by its origin, such as
// https://hooks.example.com/…. Nothing is printed unless a *slog.Logger is
// given. What a receiver sends is printed only as printable text, without
// control or format characters ([Attempt.ResponseText]), and bounded: an
// attempt's error quotes at most 1,024 characters of it. [NewSecret] makes a
// secret with 256 bits of entropy.
//
// Verification uses the raw body as received. It uses the timestamp exactly as
// its header carried it (canonical decimal only). It compares signatures in
// constant time with [hmac.Equal]. It checks the signature before the window,
// so an expired-timestamp error is only ever given for an authentic delivery.
// It refuses an empty secret, and accepts several secrets at once for
// rotation. It never puts an expected signature in an error. The event header
// is not signed: [NewHandler] dispatches on the signed body. The middleware's
// r.Body, read after the handler returned, from any goroutine, fails. It never
// shows another request's bytes.
//
// # Testing and durable deliveries
//
// Package webhooktest is to this package what net/http/httptest is to
// net/http. It has a recording, verifying HTTPS receiver with scripted
// answers, a Sender that trusts it, and signed requests for receivers' tests.
// The nested module github.com/signedhook/webhook/riverhook makes deliveries
// durable with River on PostgreSQL, one [Sender.Attempt] per job.
package webhook

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/signedhook/webhook/internal/redact"
)

// This file holds the package documentation above and Connection: what a
// webhook connection is, its validation and its redaction.

// ErrInvalidConnection is matched by every error returned by
// [Connection.Validate], and so by [Sender.Send] for an invalid connection.
var ErrInvalidConnection = errors.New("webhook: invalid connection")

// Connection is a webhook connection a customer configured: where and how
// deliveries are sent, and the secret they are signed with.
//
// A Connection is not a storage format. fmt, slog and json.Marshal show its
// name, its method, the URL's origin and the names of its custom headers.
// They never show the secret, the URL's path, query or user information, nor
// header values: each may carry a credential. See [Connection.Format] for the
// fmt cases go vet reports.
type Connection struct {
	Name    string            // a label for people; may be empty
	URL     string            // absolute https:// URL with a host
	Method  string            // POST, PUT or PATCH; empty means POST
	Headers map[string]string // custom headers added to every delivery
	Secret  string            // the signing secret; never sent

	// Events are the events the connection subscribes to: a delivery of
	// another event is skipped, with an error matching ErrNotSubscribed.
	// Empty means every event.
	Events []string

	// MaxInFlight bounds the connection's attempts in flight at once, and
	// RateLimit the deliveries a second that may begin to it (a
	// customer's throttle), for a queue that admits attempts, such as
	// riverhook's Worker. Zero means the queue's default. The Sender
	// itself makes the attempts it is asked for.
	MaxInFlight int
	RateLimit   float64
}

// ErrNotSubscribed is matched by the error of a delivery of an event that
// its connection does not subscribe to ([Connection].Events): nothing was
// sent. The Result has no attempt and its JSON outcome is "skipped";
// Sender.Attempt's attempt has kind [KindSkipped], with no retry.
var ErrNotSubscribed = errors.New("webhook: connection does not subscribe to the event")

// Subscribes reports whether c subscribes to event: whether Events is
// empty or holds it.
func (c Connection) Subscribes(event string) bool {
	return len(c.Events) == 0 || slices.Contains(c.Events, event)
}

// reservedHeaders may not be set by a connection's custom headers, each
// with why: the library or the transport owns most. Keys are in canonical
// form.
var reservedHeaders = map[string]string{
	"Content-Type":      ownedHeader,
	"Host":              ownedHeader,
	"Content-Length":    ownedHeader,
	"Transfer-Encoding": ownedHeader,
	"Connection":        ownedHeader,
	"Keep-Alive":        ownedHeader,
	"Proxy-Connection":  ownedHeader,
	"Te":                ownedHeader,
	"Trailer":           ownedHeader,
	"Upgrade":           ownedHeader,
	// Expect: 100-continue changes how the request is sent, and
	// Proxy-Authorization is for a proxy, not for the customer.
	"Expect":              ownedHeader,
	"Proxy-Authorization": ownedHeader,
	"Idempotency-Key":     resentHeader,
	"X-Idempotency-Key":   resentHeader,
}

const (
	ownedHeader  = "would replace a header the library or the transport sets"
	resentHeader = "makes net/http send the request again, signature and all, on a connection that closes under it: the library never repeats a signature"
)

// Validate reports the first thing wrong with c. The error is a
// [*FieldError] naming the field as JSON does ("url", "method", "secret",
// `headers["X-Tenant"]`) and matches [ErrInvalidConnection].
//
// The URL must be an absolute https:// URL of at most [MaxURLBytes] bytes.
// Its host is an IP address or an ASCII host name (an internationalised name
// in its xn-- form), and its port, if any, 1 to 65535. A host whose last
// label is a number (127.1, 2130706433, 0x7f.0.0.1, 127.0.0.1.) is an IPv4
// address to browsers and proxies: only the dotted form, without a final
// dot, is taken. Plain http:// is
// refused; there is no switch.
//
// The method is POST, PUT or PATCH, and the secret is not empty.
//
// A custom header has a valid name and no control character (CR, LF) in
// its value. It may not replace Content-Type, an X-Service-* header (nor
// X_Service_*: CGI-style servers read '_' as '-'), or a header the
// transport owns: Host, Content-Length, Transfer-Encoding,
// Connection and the other hop-by-hop headers, Expect and
// Proxy-Authorization. Nor may it be Idempotency-Key or X-Idempotency-Key,
// with which net/http sends a request again, signature and all, when a
// connection closes under it. Two names may not differ only in case. Names
// are compared without regard to case.
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
	if err := c.validateFields(); err != nil {
		return nil, err
	}
	return u, nil
}

// validateFields is Validate for the fields other than the URL.
func (c Connection) validateFields() error {
	switch c.Method {
	case "", http.MethodPost, http.MethodPut, http.MethodPatch:
	default:
		return connError("method", fmt.Sprintf("want POST, PUT or PATCH, got %q", c.Method))
	}
	if c.Secret == "" {
		return connError("secret", "must not be empty")
	}
	if c.MaxInFlight < 0 {
		return connError("maxInFlight", fmt.Sprintf("must not be negative, got %d (zero means the default)", c.MaxInFlight))
	}
	if c.RateLimit < 0 || math.IsNaN(c.RateLimit) || math.IsInf(c.RateLimit, 0) {
		return connError("rateLimit", fmt.Sprintf("want a finite number of deliveries a second, zero for the default, got %v", c.RateLimit))
	}
	for i, event := range c.Events {
		if !validEvent(event) {
			return connError(fmt.Sprintf("events[%d]", i), fmt.Sprintf("want a non-empty event name without control characters, got %q", redact.Printable(event)))
		}
	}
	names := c.headerNames() // sorted: report the same header first every time
	for i, name := range names {
		if err := validateHeader(name, c.Headers[name]); err != nil {
			return err
		}
		for _, other := range names[i+1:] {
			if strings.EqualFold(name, other) {
				// Both would be sent under one canonical name, in map order.
				return connError(headerField(name), fmt.Sprintf("is the same header as %q; keep one", other))
			}
		}
	}
	return nil
}

// unbracketedColons reports whether raw's authority (less any user
// information) has a host of several colons outside brackets: an IPv6
// address written without them.
func unbracketedColons(raw string) bool {
	_, rest, ok := strings.Cut(raw, "//")
	if !ok {
		return false
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		rest = rest[i+1:]
	}
	return strings.Count(rest, ":") > 1 && !strings.HasPrefix(rest, "[")
}

// MaxURLBytes is the longest URL a [Connection] may hold: most servers
// refuse longer ones anyway, and what the library keeps of a URL to scrub
// from answers grows with it.
const MaxURLBytes = 8 << 10

func validateURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, connError("url", "must not be empty")
	}
	if len(raw) > MaxURLBytes {
		return nil, connError("url", fmt.Sprintf("has %d bytes, over the limit of %d", len(raw), MaxURLBytes))
	}
	u, err := url.Parse(raw)
	if err != nil {
		if unbracketedColons(raw) { // which Go 1.26's url.Parse refuses itself
			return nil, connError("url", "an IPv6 address must be in brackets, as in https://[2001:db8::1]/")
		}
		return nil, connError("url", "is not a URL")
	}
	host := u.Hostname()
	switch {
	case u.Scheme == "":
		return nil, connError("url", "has no scheme; want an absolute https:// URL")
	case u.Scheme != "https":
		return nil, connError("url", fmt.Sprintf("must use https://, got %q", u.Scheme+"://"))
	case host == "":
		return nil, connError("url", "has no host")
	case strings.Contains(host, ":") && !strings.HasPrefix(u.Host, "["):
		// Without brackets, the colons of an address and of a port are
		// one and the same: net/http would dial another host.
		return nil, connError("url", "an IPv6 address must be in brackets, as in https://[2001:db8::1]/")
	case strings.Contains(host, "%"):
		// A zone names an interface of this machine, never a public
		// address; its text is anything the customer typed.
		return nil, connError("url", "an IPv6 address must not have a zone (%)")
	case !validHost(host):
		// net/http would rewrite anything else (IDNA), or dial the raw bytes
		// when that fails: the host dialled must be the host validated.
		return nil, connError("url", "host must be an IP address or an ASCII host name (write an internationalised name in its xn-- form)")
	case endsInNumber(host) && !validIPv4(host):
		// 127.1, 2130706433, 0x7f.0.0.1, 127.0.0.1.: an IPv4 address to
		// inet_aton, browsers and the egress proxies that resolve what
		// they are given, a host name to netip, so the guard's check of IP
		// literals before a proxy would let it pass.
		return nil, connError("url", "a host ending in a number must be an IPv4 address in its dotted form, such as 203.0.113.7, without a final dot")
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 || port[0] == '0' {
			return nil, connError("url", fmt.Sprintf("port must be a number from 1 to 65535, got %q", port))
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

// endsInNumber reports whether host's last label (less a final dot) is a
// number, decimal or 0x hexadecimal, as the WHATWG URL standard has it: such
// a host is read as an IPv4 address, whatever form it is in.
func endsInNumber(host string) bool {
	if strings.Contains(host, ":") { // an IPv6 address, which may end in an IPv4 one
		return false
	}
	host = strings.TrimSuffix(host, ".")
	last := host[strings.LastIndexByte(host, '.')+1:]
	if last == "" {
		return false
	}
	if len(last) >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X') {
		last = last[2:]
		for i := 0; i < len(last); i++ {
			if !('0' <= last[i] && last[i] <= '9' || 'a' <= last[i] && last[i] <= 'f' || 'A' <= last[i] && last[i] <= 'F') {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(last); i++ {
		if last[i] < '0' || last[i] > '9' {
			return false
		}
	}
	return true
}

// validIPv4 reports whether host is an IPv4 address in its dotted form.
func validIPv4(host string) bool {
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Is4()
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
func headerField(name string) string { return "headers[" + strconv.Quote(name) + "]" }

func validateHeader(name, value string) error {
	if !validHeaderName(name) {
		return connError(headerField(name), "is not a valid header name")
	}
	canonical := http.CanonicalHeaderKey(name)
	if why, ok := reservedHeaders[canonical]; ok {
		return connError(headerField(name), why)
	}
	// CGI-style servers (PHP, WSGI, Rack) read '_' as '-': to them,
	// X_Service_Signature is the signature's header.
	if strings.HasPrefix(http.CanonicalHeaderKey(strings.ReplaceAll(name, "_", "-")), "X-Service-") {
		return connError(headerField(name), ownedHeader)
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

func (c *Connection) method() string {
	if c.Method == "" {
		return http.MethodPost
	}
	return c.Method
}

// Endpoint returns the endpoint of c's URL as endpoint health names it
// ([EndpointHealth].Endpoint): its origin in one spelling, scheme, host in
// lower case and port written, such as "https://hooks.example.com:443"
// for "https://Hooks.Example.com/in". A service stores it beside the
// connection and joins OnChange's reports on it. Empty when the URL is not
// valid.
func (c Connection) Endpoint() string {
	u, err := validateURL(c.URL)
	if err != nil {
		return ""
	}
	return endpointKey(u)
}

// URLKey returns the key of c's URL as endpoint health reports a URL
// ([EndpointHealth].URLKey): 32 hexadecimal digits of the URL's SHA-256,
// never the URL, whose path may be a credential.
func (c Connection) URLKey() string { return urlKey(c.URL) }

func urlKey(raw string) string {
	sum := sha256.Sum256([]byte(raw))
	return hex.EncodeToString(sum[:16])
}

// String returns a description of c without secrets, such as
// `webhook connection "CRM" (POST https://crm.example.com/…)`.
func (c Connection) String() string {
	return fmt.Sprintf("webhook connection %q (%s %s)", c.Name, redact.Printable(c.method()), redact.URL(c.URL))
}

// GoString is String, so that %#v does not print the secret either.
func (c Connection) GoString() string { return c.String() }

// Format implements fmt.Formatter so that every verb prints String: %q
// quotes it, any other verb prints it as it is.
//
// fmt calls no method, and so prints every field, secret included, in three
// cases: a Connection held in an unexported struct field (fmt prints those
// by reflection), %p of a value that is not a pointer, and %w of one that is
// not an error (go vet reports the last two). Keep a Connection in an
// exported field or behind a pointer where it may be printed.
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
	}{redact.Printable(c.Name), redact.Printable(c.method()), redact.URL(c.URL), c.shownHeaderNames()})
}

// LogValue returns c's name, method, the URL's origin and custom header
// names.
func (c Connection) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("name", redact.Printable(c.Name)),
		slog.String("method", redact.Printable(c.method())),
		slog.String("url", redact.URL(c.URL)),
		slog.Any("headers", c.shownHeaderNames()),
	)
}

// headerNames returns the names of c's custom headers, sorted.
func (c Connection) headerNames() []string {
	if len(c.Headers) == 0 {
		return nil
	}
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
		names[i] = redact.Printable(name)
	}
	return names
}

// secrets returns the texts of c that no text the library makes may show,
// which a receiver may echo (a 404 page quoting the path, a 401 page the
// Authorization header): see redact.NewSecrets.
func (c Connection) secrets() *redact.Secrets {
	values := make([]string, 0, len(c.Headers))
	for _, v := range c.Headers {
		values = append(values, v)
	}
	return redact.NewSecrets(c.URL, values, c.Secret)
}
