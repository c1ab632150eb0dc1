package webhook

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultTolerance is how far a delivery's timestamp may be from the
// receiver's clock, in the past or in the future, before it is refused.
const DefaultTolerance = 5 * time.Minute

// DefaultMaxBodyBytes is the largest body a [Verifier] reads: 1 MiB.
const DefaultMaxBodyBytes = 1 << 20

// ErrVerification is matched, with errors.Is, by every error that says a
// request is not an authentic, fresh delivery.
var ErrVerification = errors.New("webhook: verification failed")

// Verification errors. Each matches [ErrVerification] with errors.Is. The
// errors returned wrap one of them and add what was wrong; they never contain
// a secret or an expected signature.
var (
	ErrMissingHeader      = verificationError("webhook: missing header")
	ErrMalformedTimestamp = verificationError("webhook: malformed timestamp")
	ErrMalformedSignature = verificationError("webhook: malformed signature")
	ErrSignatureMismatch  = verificationError("webhook: signature mismatch")
	ErrTimestampExpired   = verificationError("webhook: timestamp expired")
	ErrTimestampInFuture  = verificationError("webhook: timestamp in the future")
	ErrBodyTooLarge       = verificationError("webhook: body too large")
	ErrEmptySecret        = verificationError("webhook: secret is empty")
)

// ErrUnreadableBody is matched by the error of a request whose body could
// not be read (the client went away, or sent a malformed chunked body). It
// does not match [ErrVerification]: nothing was verified.
var ErrUnreadableBody = errors.New("webhook: cannot read request body")

// errZeroVerifier refuses every request given to a Verifier that was not
// made by NewVerifier.
var errZeroVerifier = fmt.Errorf("%w: the Verifier has no secrets; create it with NewVerifier", ErrVerification)

type verificationErr struct{ msg string }

func verificationError(msg string) error { return &verificationErr{msg} }

func (e *verificationErr) Error() string        { return e.msg }
func (e *verificationErr) Is(target error) bool { return target == ErrVerification }

// Verify checks that a request with header h and raw body body is a delivery
// signed with secret whose timestamp is within [DefaultTolerance] of now, and
// that body is at most [DefaultMaxBodyBytes]. The error matches
// [ErrVerification] and one of the more precise errors beside it.
//
// body must be the bytes as received: a re-encoded body does not verify.
// Header names may be in any case. An empty secret (an unset environment
// variable, say) verifies nothing: the error matches [ErrEmptySecret]. Verify
// is safe for concurrent use; use a [Verifier] for several secrets or other
// limits.
func Verify(secret string, h http.Header, body []byte) error {
	if secret == "" {
		return fmt.Errorf("%w: set the connection's secret (\"Show Secret\" in the dashboard)", ErrEmptySecret)
	}
	keys := [1]*keyedMAC{cachedKey(secret)}
	return verify(keys[:], DefaultTolerance, DefaultMaxBodyBytes, time.Now(), h, body)
}

// VerifierOptions configures a [Verifier]. A nil *VerifierOptions, or a zero
// field, selects the documented default.
type VerifierOptions struct {
	// Tolerance is how far a timestamp may be from Now, in the past or in
	// the future. Zero means DefaultTolerance; negative is an error.
	Tolerance time.Duration

	// MaxBodyBytes is the largest body accepted. Zero means
	// DefaultMaxBodyBytes; negative is an error.
	MaxBodyBytes int64

	// Now returns the current time. Nil means time.Now.
	Now func() time.Time

	// Logger receives, at level Warn, why each request refused by
	// Middleware or NewHandler was refused. Nil means no logging.
	Logger *slog.Logger

	// ErrorHandler, if not nil, answers the requests that Middleware and
	// NewHandler refuse, instead of the default answer: 413 for an error
	// matching ErrBodyTooLarge, 400 for one matching ErrUnreadableBody, 401
	// otherwise, with a short generic body. err says why: it matches
	// ErrVerification, or ErrUnreadableBody when the body could not be read.
	ErrorHandler func(w http.ResponseWriter, r *http.Request, err error)
}

// Verifier checks deliveries against one or more secrets. Configuring the
// old and the new secret of a connection at once lets a customer rotate the
// secret without refusing a delivery. A Verifier is safe for concurrent use.
// Create one with [NewVerifier]. The zero Verifier refuses every request
// until [Verifier.SetSecrets] gives it secrets; it then checks them with the
// defaults, as NewVerifier(secrets, nil) does.
type Verifier struct {
	keys      atomic.Pointer[[]*keyedMAC] // replaced whole by SetSecrets
	tolerance time.Duration
	maxBody   int64
	now       func() time.Time
	logger    *slog.Logger
	onError   func(http.ResponseWriter, *http.Request, error)
}

// NewVerifier returns a Verifier that accepts deliveries signed with any of
// secrets. It fails when secrets is empty, when one of them is empty, or when
// an option is out of range. opts may be nil.
func NewVerifier(secrets []string, opts *VerifierOptions) (*Verifier, error) {
	if opts == nil {
		opts = &VerifierOptions{}
	}
	v := &Verifier{
		tolerance: opts.Tolerance,
		maxBody:   opts.MaxBodyBytes,
		now:       opts.Now,
		logger:    opts.Logger,
		onError:   opts.ErrorHandler,
	}
	if err := v.SetSecrets(secrets); err != nil {
		return nil, err
	}
	switch {
	case v.tolerance < 0:
		return nil, fmt.Errorf("webhook: Tolerance must not be negative, got %v", v.tolerance)
	case v.tolerance == 0:
		v.tolerance = DefaultTolerance
	}
	switch {
	case v.maxBody < 0:
		return nil, fmt.Errorf("webhook: MaxBodyBytes must not be negative, got %d", v.maxBody)
	case v.maxBody == 0:
		v.maxBody = DefaultMaxBodyBytes
	}
	if v.now == nil {
		v.now = time.Now
	}
	if v.logger == nil {
		v.logger = slog.New(slog.DiscardHandler)
	}
	return v, nil
}

// Verify checks that header h and raw body body are a delivery signed with
// one of v's secrets, within v's tolerance and body limit. The error matches
// [ErrVerification] and one of the more precise errors beside it.
func (v *Verifier) Verify(h http.Header, body []byte) error {
	keys := v.keys.Load()
	if keys == nil {
		return errZeroVerifier
	}
	return verify(*keys, cmp.Or(v.tolerance, DefaultTolerance), v.maxBodyBytes(), v.clock(), h, body)
}

// maxBodyBytes is the body limit: the configured one, or the default in a
// zero Verifier.
func (v *Verifier) maxBodyBytes() int64 { return cmp.Or(v.maxBody, DefaultMaxBodyBytes) }

// clock returns the current time by VerifierOptions.Now, or time.Now in a
// zero Verifier.
func (v *Verifier) clock() time.Time {
	if v.now == nil {
		return time.Now()
	}
	return v.now()
}

// VerifyRequest reads r's body (at most the body limit), verifies it with
// r's headers, and returns it. Whatever the outcome, r.Body is replaced by a
// reader of the bytes read, so the next handler reads the identical body. A
// body over the limit gives an error matching [ErrBodyTooLarge]; an error
// while reading matches [ErrUnreadableBody] and wraps the reader's error.
func (v *Verifier) VerifyRequest(r *http.Request) ([]byte, error) {
	if v.keys.Load() == nil {
		return nil, errZeroVerifier
	}
	body, err := readBody(nil, r.Body, r.ContentLength, v.maxBodyBytes())
	r.Body = &bodyReader{Reader: bytes.NewReader(body)}
	if err != nil {
		return body, err
	}
	return body, v.Verify(r.Header, body)
}

// bodyReader is the restored r.Body: the bytes read, in one allocation.
type bodyReader struct{ *bytes.Reader }

func (*bodyReader) Close() error { return nil }

// serveVerified reads r's body into a pooled buffer and verifies it. It
// answers a refusal itself; otherwise it calls serve with the body, r.Body
// holding the same bytes. When serve returns, r.Body is released and the
// buffer recycled: net/http's Handler contract forbids reading r.Body after
// ServeHTTP returns, and a read from then on, from any goroutine, fails with
// errBodyAfterServe. It never sees another request's bytes: see
// recycledBody.
func (v *Verifier) serveVerified(w http.ResponseWriter, r *http.Request, serve func(body []byte)) {
	if v.keys.Load() == nil {
		v.refuse(w, r, errZeroVerifier)
		return
	}
	buf := bodyPool.Get().(*[]byte)
	body, err := readBody((*buf)[:0], r.Body, r.ContentLength, v.maxBodyBytes())
	rd := &recycledBody{}
	rd.r.Reset(body)
	r.Body = rd
	if err == nil {
		err = v.Verify(r.Header, body)
	}
	if err != nil {
		v.refuse(w, r, err)
	} else {
		serve(body)
	}
	rd.release()
	if cap(body) <= maxPooledBody {
		*buf = body[:0]
		bodyPool.Put(buf)
	}
}

// recycledBody is r.Body while the middleware serves: the verified bytes in
// a pooled buffer, readable until the middleware returns. A goroutine of the
// handler's may still hold it then, so, as net/http's own request body does,
// every Read and the release take one mutex: once release has returned, no
// Read touches the buffer, which may then hold another request. It has no
// WriteTo, so that io.Copy goes through Read too.
type recycledBody struct {
	mu       sync.Mutex
	r        bytes.Reader
	released bool
}

// errBodyAfterServe is what a read of a recycled body gives once the
// middleware has returned.
var errBodyAfterServe = errors.New("webhook: request body read after the verifying middleware returned; read it within the next handler's ServeHTTP")

func (b *recycledBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.released {
		return 0, errBodyAfterServe
	}
	return b.r.Read(p)
}

// release ends every read: the buffer is the pool's again.
func (b *recycledBody) release() {
	b.mu.Lock()
	b.released = true
	b.r.Reset(nil)
	b.mu.Unlock()
}

func (*recycledBody) Close() error { return nil }

// Bodies of up to maxPooledBody bytes are read into pooled buffers; a larger
// one is read into its own and left to the garbage collector.
const maxPooledBody = 64 << 10

// maxReserved is the most memory a body's Content-Length reserves before
// its bytes come; past it, the buffer grows with them.
const maxReserved = 16 << 10

var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// SetSecrets replaces the secrets v accepts, for a rotation without a
// restart: every request verified after it returns uses the new secrets,
// and requests being verified finish with the ones they started with. It is
// safe to call while v serves requests. It fails, leaving the secrets as they
// were, when secrets is empty or one of them is empty.
//
// To rotate: SetSecrets(old, new); change the secret on the sending side;
// once deliveries signed with the old one have stopped, SetSecrets(new).
func (v *Verifier) SetSecrets(secrets []string) error {
	if len(secrets) == 0 {
		return errors.New("webhook: a Verifier needs at least one secret")
	}
	keys := make([]*keyedMAC, len(secrets))
	for i, s := range secrets {
		if s == "" {
			return fmt.Errorf("webhook: secret %d of %d is empty", i+1, len(secrets))
		}
		keys[i] = newKeyedMAC(s)
	}
	v.keys.Store(&keys)
	return nil
}

// readBody reads rc, at most limit bytes, appending to buf (which may be
// nil).
func readBody(buf []byte, rc io.ReadCloser, contentLength, limit int64) ([]byte, error) {
	if rc == nil || rc == http.NoBody {
		return buf, nil
	}
	if contentLength > limit {
		return buf, bodyTooLarge(limit)
	}
	size := int64(512)
	if contentLength >= 0 {
		// Room to see EOF without growing, but no more than maxReserved
		// on the word of a client not yet verified: one that declares a
		// megabyte and sends nothing must not hold a megabyte.
		size = min(contentLength+1, maxReserved)
	}
	if int64(cap(buf)) < size {
		buf = make([]byte, 0, size)
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := rc.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return buf, bodyTooLarge(limit)
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, fmt.Errorf("%w: %w", ErrUnreadableBody, err)
		}
	}
}

func bodyTooLarge(limit int64) error {
	return fmt.Errorf("%w: limit is %d bytes", ErrBodyTooLarge, limit)
}

// Middleware returns a handler that verifies each request before passing it
// to next, with r.Body holding the identical bytes. A refused request gets
// 401 (413 when the body is over the limit, 400 when it cannot be read) with
// a short generic body, or VerifierOptions.ErrorHandler's answer; the precise
// reason goes to VerifierOptions.Logger and ErrorHandler, never to the client.
//
// Its shape fits routers' Use methods, such as chi's r.Use(v.Middleware).
// The body is read into a recycled buffer: as net/http's Handler contract
// says, r.Body may be read only until next returns. A later read, from any
// goroutine (a handler that hands r.Body or r.Clone(ctx).Body to background
// work and answers at once), fails with an error that says so: every read
// gives a prefix of the request's own bytes or an error, never another
// request's bytes. Copy the body before next returns to keep it. An adapter
// for another router must run the rest of its chain inside next (see
// examples/routers for gin).
func (v *Verifier) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v.serveVerified(w, r, func([]byte) { next.ServeHTTP(w, r) })
	})
}

// refuse answers a request that failed verification or could not be read.
func (v *Verifier) refuse(w http.ResponseWriter, r *http.Request, err error) {
	if v.logger != nil { // nil only in a zero Verifier
		v.logger.LogAttrs(r.Context(), slog.LevelWarn, "webhook: request refused",
			slog.String("reason", err.Error()), slog.String("remote", r.RemoteAddr))
	}
	if v.onError != nil {
		v.onError(w, r, err)
		return
	}
	switch {
	case errors.Is(err, ErrBodyTooLarge):
		http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
	case errors.Is(err, ErrUnreadableBody): // the client went away or sent garbage
		http.Error(w, "bad request", http.StatusBadRequest)
	default:
		http.Error(w, "invalid webhook signature", http.StatusUnauthorized)
	}
}

// verify is the one verification routine behind Verify and Verifier.Verify.
// It checks the signature before the window, so that an expired timestamp is
// reported only for an authentic delivery.
func verify(keys []*keyedMAC, tolerance time.Duration, maxBody int64, now time.Time, h http.Header, body []byte) error {
	if int64(len(body)) > maxBody {
		return bodyTooLarge(maxBody)
	}
	tsText, err := singleHeader(h, HeaderTimestamp)
	if err != nil {
		return err
	}
	sigText, err := singleHeader(h, HeaderSignature)
	if err != nil {
		return err
	}
	if _, err := singleHeader(h, HeaderEvent); err != nil {
		return err
	}
	ts, err := parseTimestamp(tsText)
	if err != nil {
		return err
	}
	var got [sha256.Size]byte
	if err := parseSignature(sigText, &got); err != nil {
		return err
	}
	if !matchesAny(keys, tsText, body, &got) {
		return fmt.Errorf("%w: %s is not the HMAC-SHA256 of this body with the configured secret", ErrSignatureMismatch, HeaderSignature)
	}
	return checkWindow(ts, now, tolerance)
}

// matchesAny reports whether got is the HMAC of "<tsText>.<body>" with one
// of keys: the timestamp as the header carried it, never re-formatted.
func matchesAny(keys []*keyedMAC, tsText string, body []byte, got *[sha256.Size]byte) bool {
	var want [sha256.Size]byte
	for _, k := range keys {
		k.sumText(tsText, body, &want)
		if hmac.Equal(want[:], got[:]) {
			return true
		}
	}
	return false
}

// singleHeader returns the one value of header name in h. Names are matched
// case-insensitively, also in an http.Header built by hand.
func singleHeader(h http.Header, name string) (string, error) {
	vs := h[name] // name is canonical: no allocation on the usual path
	if vs == nil {
		for k, kv := range h {
			if strings.EqualFold(k, name) {
				vs = kv
				break
			}
		}
	}
	switch {
	case len(vs) == 0:
		return "", fmt.Errorf("%w: %s", ErrMissingHeader, name)
	case len(vs) > 1:
		return "", fmt.Errorf("%w: %s appears %d times, want once", malformed(name), name, len(vs))
	case vs[0] == "":
		return "", fmt.Errorf("%w: %s is empty", malformed(name), name)
	}
	return vs[0], nil
}

func malformed(name string) error {
	switch name {
	case HeaderTimestamp:
		return ErrMalformedTimestamp
	case HeaderSignature:
		return ErrMalformedSignature
	}
	return ErrMissingHeader
}

// maxTimestampDigits keeps a timestamp inside int64 (year 2286 in ms has 13).
const maxTimestampDigits = 18

func parseTimestamp(s string) (int64, error) {
	if len(s) > maxTimestampDigits {
		return 0, fmt.Errorf("%w: %s has %d characters, want at most %d decimal digits", ErrMalformedTimestamp, HeaderTimestamp, len(s), maxTimestampDigits)
	}
	var ts int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: %s must be decimal digits only (Unix milliseconds), found %q at offset %d", ErrMalformedTimestamp, HeaderTimestamp, c, i)
		}
		ts = ts*10 + int64(c-'0')
	}
	if s[0] == '0' && len(s) > 1 {
		// The signature covers the header's text: "017..." and "17..."
		// would be two texts for one time.
		return 0, fmt.Errorf("%w: %s has a leading zero; want canonical decimal digits", ErrMalformedTimestamp, HeaderTimestamp)
	}
	return ts, nil
}

func parseSignature(s string, out *[sha256.Size]byte) error {
	if !strings.HasPrefix(s, SignaturePrefix) {
		return fmt.Errorf("%w: %s must start with %q", ErrMalformedSignature, HeaderSignature, SignaturePrefix)
	}
	digest := s[len(SignaturePrefix):]
	if len(digest) != 2*sha256.Size {
		return fmt.Errorf("%w: %s must have %d hex digits after %q, got %d characters", ErrMalformedSignature, HeaderSignature, 2*sha256.Size, SignaturePrefix, len(digest))
	}
	// Decoded by table rather than with hex.Decode, which would need the
	// string converted to a []byte; invalid digits are caught once, at the
	// end. The loop is shaped so that the compiler drops every bounds check.
	var bad byte
	d := digest[:2*sha256.Size]
	for i := range out {
		pair := d[2*i : 2*i+2]
		hi, lo := unhexTable[pair[0]], unhexTable[pair[1]]
		bad |= hi | lo
		out[i] = hi<<4 | lo
	}
	if bad > 0xf {
		return fmt.Errorf("%w: %s has a character that is not a hex digit", ErrMalformedSignature, HeaderSignature)
	}
	return nil
}

// unhexTable maps a hex digit of either case to its value, anything else to 0xff.
var unhexTable = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for i, c := range "0123456789abcdef" {
		t[c] = byte(i)
		t[strings.ToUpper(string(c))[0]] = byte(i)
	}
	return t
}()

func checkWindow(ts int64, now time.Time, tolerance time.Duration) error {
	nowMs, tolMs := now.UnixMilli(), tolerance.Milliseconds()
	ageMs := nowMs - ts // cannot overflow: ts has at most 18 digits
	switch {
	case ageMs > tolMs:
		if ageSec := nowMs/1000 - ts; ageSec <= tolMs/1000 && -ageSec <= tolMs/1000 {
			return fmt.Errorf("%w: %s %d looks like Unix seconds; it must be Unix milliseconds", ErrTimestampExpired, HeaderTimestamp, ts)
		}
		return fmt.Errorf("%w: delivery is %s old, tolerance is %v", ErrTimestampExpired, millis(ageMs), tolerance)
	case -ageMs > tolMs:
		return fmt.Errorf("%w: delivery is %s ahead of this clock, tolerance is %v", ErrTimestampInFuture, millis(-ageMs), tolerance)
	}
	return nil
}

// millis formats a positive number of milliseconds as a duration, or in
// years when a time.Duration would overflow.
func millis(ms int64) string {
	const maxMs = int64(1<<63-1) / int64(time.Millisecond)
	if ms > maxMs {
		return fmt.Sprintf("about %d years", ms/(365*24*3600*1000))
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

// HandlerOptions configures the handler [NewHandler] returns. A nil
// *HandlerOptions selects the defaults.
type HandlerOptions struct {
	// Logger receives unknown event kinds and event headers that disagree
	// with the signed body (level Info), bodies that are not payloads and
	// errors from the function (level Error). Nil means no logging. Refused
	// requests are logged by the Verifier's own logger.
	Logger *slog.Logger
}

// NewHandler returns a handler that verifies each request with v, decodes
// its body, and calls on with the request's context for each
// [EventUserIdentified] delivery. It dispatches on the signed body's "event"
// field, not on the unsigned [HeaderEvent]. It answers:
//
//   - what v's Middleware answers, for a request that fails verification;
//   - 400 when the verified body is not a payload;
//   - 200, after logging it, for an event kind it does not know;
//   - 500 when on returns an error, so that the sender retries;
//   - 200 with the JSON acknowledgement {"ok":true} otherwise.
//
// on is called concurrently for concurrent requests. The service may deliver
// an event more than once, so on should be idempotent. NewHandler panics if v
// or on is nil, as a programming error.
func NewHandler(v *Verifier, on func(ctx context.Context, p Payload) error, opts *HandlerOptions) http.Handler {
	if v == nil || on == nil {
		panic("webhook: NewHandler needs a Verifier and a function")
	}
	logger := slog.New(slog.DiscardHandler)
	if opts != nil && opts.Logger != nil {
		logger = opts.Logger
	}
	return &eventHandler{v: v, on: on, log: logger}
}

type eventHandler struct {
	v   *Verifier
	on  func(context.Context, Payload) error
	log *slog.Logger
}

var ack = []byte(`{"ok":true}` + "\n")

func (h *eventHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.v.serveVerified(w, r, func(body []byte) { h.serve(w, r, body) })
}

// serve dispatches a verified body. The Payload it decodes shares no memory
// with body, which is recycled when serve returns.
func (h *eventHandler) serve(w http.ResponseWriter, r *http.Request, body []byte) {
	ctx := r.Context()
	var envelope struct {
		Event string `json:"event"`
	}
	if err := decodeObject(body, &envelope); err != nil || envelope.Event == "" {
		if err == nil {
			err = fmt.Errorf("%w: no \"event\" field", ErrMalformedPayload)
		}
		h.log.LogAttrs(ctx, slog.LevelError, "webhook: verified body is not a payload", slog.String("error", err.Error()))
		http.Error(w, "body is not a webhook payload", http.StatusBadRequest)
		return
	}
	if hv := r.Header.Get(HeaderEvent); hv != envelope.Event {
		h.log.LogAttrs(ctx, slog.LevelInfo, "webhook: event header disagrees with the signed body; using the body",
			slog.String("header", hv), slog.String("body", envelope.Event))
	}
	if envelope.Event != EventUserIdentified {
		h.log.LogAttrs(ctx, slog.LevelInfo, "webhook: ignoring unknown event kind", slog.String("event", envelope.Event))
		writeAck(w)
		return
	}
	p, err := ParsePayload(body)
	if err != nil {
		h.log.LogAttrs(ctx, slog.LevelError, "webhook: verified body is not a payload", slog.String("error", err.Error()))
		http.Error(w, "body is not a webhook payload", http.StatusBadRequest)
		return
	}
	if err := h.on(ctx, p); err != nil {
		h.log.LogAttrs(ctx, slog.LevelError, "webhook: handler failed; answering 500 so the delivery is retried",
			slog.String("event", p.Event), slog.String("error", err.Error()))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	writeAck(w)
}

func writeAck(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(ack)
}
