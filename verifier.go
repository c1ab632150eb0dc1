package webhook

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// This file holds verification itself: Verify, the Verifier and its
// options, the verification errors, and parsing the signed headers.

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
// is safe for concurrent use. It keeps no memory, so it does not refuse
// replays: use a [Verifier] for that, for several secrets or other limits.
func Verify(secret string, h http.Header, body []byte) error {
	if secret == "" {
		return fmt.Errorf("%w: set the connection's secret (\"Show Secret\" in the dashboard)", ErrEmptySecret)
	}
	var sig [sha256.Size]byte
	_, err := verify(nil, secret, DefaultTolerance, DefaultMaxBodyBytes, time.Now(), h, body, &sig)
	return err
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
	// Middleware or NewHandler was refused, and at level Info each copy
	// of a delivery they acknowledged or asked to retry. Nil means no
	// logging.
	Logger *slog.Logger

	// ErrorHandler, if not nil, answers the requests that Middleware and
	// NewHandler refuse, instead of the default answer: 413 for an error
	// matching ErrBodyTooLarge, 400 for one matching ErrUnreadableBody, 503
	// for one matching ErrReplayStore, 409 with Retry-After for one matching
	// ErrInProgress, 401 otherwise, with a short generic body. err says why:
	// it matches ErrVerification, or ErrUnreadableBody when the body could
	// not be read, or ErrReplayStore, or ErrInProgress for an authentic copy
	// of a delivery being handled (answer it so that the sender comes back
	// later: not 401).
	ErrorHandler func(w http.ResponseWriter, r *http.Request, err error)

	// ReplayStore is the replay memory: it remembers the signatures of
	// accepted deliveries until they leave the window, so that an exact
	// repeat is refused with an error matching ErrReplayed. Give a shared
	// store when several instances receive the same connection's
	// deliveries. Nil means a MemoryReplayStore of the Verifier's own, with
	// the default bound and the Verifier's Now.
	ReplayStore ReplayStore

	// AllowReplays turns the replay memory off: a delivery verifies as
	// many times as it is received within the window, as with the
	// package-level Verify, and Middleware and NewHandler hand every copy
	// to the handler. Nothing is remembered; ReplayStore and HandlerLease
	// are ignored.
	AllowReplays bool

	// HandlerLease bounds how long Middleware and NewHandler ask a copy of
	// a delivery whose handler is running to come back later, should that
	// handler never end (its instance died, with a shared ReplayStore):
	// past it, the copy is handled. Set it above your handler's longest
	// run. Zero means DefaultHandlerLease; negative is an error.
	HandlerLease time.Duration
}

// Verifier checks deliveries against one or more secrets. Configuring the
// old and the new secret of a connection at once lets a customer rotate the
// secret without refusing a delivery. A Verifier is safe for concurrent use.
// Create one with [NewVerifier]. The zero Verifier refuses every request
// until [Verifier.SetSecrets] gives it secrets; it then checks them with the
// defaults, as NewVerifier(secrets, nil) does.
//
// A Verifier remembers, by default, each authentic delivery's signature
// until its timestamp leaves the window: its replay memory, a
// [MemoryReplayStore] of its own. [Verifier.Verify] refuses an exact repeat
// with an error matching [ErrReplayed]. [Verifier.Middleware] and the event
// handlers hand a delivery to the handler once, and acknowledge its copies
// without losing one (see Middleware). The memory is bounded: about 1.6 MiB
// at 100 deliveries a second, 12.5 MiB at 1,000, and 50 MiB at the default
// bound (see [MemoryReplayStore]). It is on by default because the spec's
// window is meant "to prevent replay", yet lets a captured delivery verify
// again for 5 minutes. It never refuses a genuine delivery: the sender signs every
// attempt afresh, with a later timestamp. Only authentic, fresh deliveries
// are remembered, so a forger cannot fill the memory.
//
// One field of [VerifierOptions] turns the replay memory off, or shares it
// between the instances of a receiver:
//
//	&webhook.VerifierOptions{AllowReplays: true}  // off: every copy is handled
//	&webhook.VerifierOptions{ReplayStore: shared} // one memory for all instances
type Verifier struct {
	keys         atomic.Pointer[[]*keyedMAC] // replaced whole by SetSecrets
	tolerance    time.Duration
	maxBody      int64
	now          func() time.Time
	logger       *slog.Logger
	onError      func(http.ResponseWriter, *http.Request, error)
	made         bool               // by NewVerifier: a zero Verifier makes mem in SetSecrets
	allowReplays bool               // VerifierOptions.AllowReplays
	mem          *MemoryReplayStore // the store when it is one: no key to encode
	memClock     bool               // mem keeps the Verifier's clock: judged by the window's time
	store        ReplayStore        // otherwise
	lease        time.Duration      // VerifierOptions.HandlerLease
	zeroInit     sync.Once
}

// NewVerifier returns a Verifier that accepts deliveries signed with any of
// secrets. It fails when secrets is empty, when one of them is empty, when
// an option is out of range, or when ReplayStore holds a nil pointer (map,
// func). opts may be nil.
func NewVerifier(secrets []string, opts *VerifierOptions) (*Verifier, error) {
	if opts == nil {
		opts = &VerifierOptions{}
	}
	v := &Verifier{
		tolerance:    opts.Tolerance,
		maxBody:      opts.MaxBodyBytes,
		now:          opts.Now,
		logger:       opts.Logger,
		onError:      opts.ErrorHandler,
		made:         true,
		allowReplays: opts.AllowReplays,
		lease:        opts.HandlerLease,
	}
	if !v.allowReplays {
		switch st := opts.ReplayStore.(type) {
		case nil:
			v.mem, _ = NewMemoryReplayStore(&MemoryReplayStoreOptions{Now: opts.Now}) // cannot fail
			v.memClock = true
		case *MemoryReplayStore:
			v.mem = st
			v.memClock = st != nil && opts.Now == nil && st.onSystemClock()
		default:
			v.store = st
		}
		if nilValue(opts.ReplayStore) {
			return nil, fmt.Errorf("webhook: VerifierOptions.ReplayStore is a nil %T; leave it nil for the default memory store", opts.ReplayStore)
		}
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
	switch {
	case v.lease < 0:
		return nil, fmt.Errorf("webhook: HandlerLease must not be negative, got %v", v.lease)
	case v.lease == 0:
		v.lease = DefaultHandlerLease
	}
	if v.now == nil {
		v.now = time.Now
	}
	if v.logger == nil {
		v.logger = slog.New(slog.DiscardHandler)
	}
	return v, nil
}

// nilValue reports whether v, an interface that is not nil, holds a nil
// pointer, map, func, chan or slice: a store declared and never made.
func nilValue(v any) bool {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Slice:
		return rv.IsNil()
	}
	return false
}

// Verify checks that header h and raw body body are a delivery signed with
// one of v's secrets, within v's tolerance and body limit, and not a replay
// of one it accepted before. The error matches [ErrVerification] and one of
// the more precise errors beside it, or [ErrReplayStore] when the replay
// store failed. A delivery it accepts is remembered: a second Verify of the
// same delivery fails with an error matching [ErrReplayed], unless
// VerifierOptions.AllowReplays is set.
func (v *Verifier) Verify(h http.Header, body []byte) error {
	return v.verify(context.Background(), h, body)
}

// verify is Verify with the request's context, for the replay store.
func (v *Verifier) verify(ctx context.Context, h http.Header, body []byte) error {
	var d signed
	if err := v.authenticate(h, body, &d); err != nil || v.allowReplays {
		return err
	}
	return v.checkReplay(ctx, &d)
}

// signed is what authenticate learnt of an authentic delivery within the
// window: its signature's digest and timestamp, and the clock and
// tolerance it was checked with.
type signed struct {
	sig     [sha256.Size]byte
	ts      int64 // Unix ms
	now     time.Time
	tol     time.Duration
	claimed int64 // the memory store's time of its claim (Unix ns), for its settling
}

// authenticate checks that h and body are a delivery signed with one of
// v's secrets, within its tolerance and body limit, and fills d.
func (v *Verifier) authenticate(h http.Header, body []byte, d *signed) error {
	keys := v.keys.Load()
	if keys == nil {
		return errZeroVerifier
	}
	d.now, d.tol = v.clock(), cmp.Or(v.tolerance, DefaultTolerance)
	var err error
	d.ts, err = verify(*keys, "", d.tol, v.maxBodyBytes(), d.now, h, body, &d.sig)
	return err
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
	if !v.made {
		v.zeroInit.Do(func() {
			v.mem, _ = NewMemoryReplayStore(nil)
			v.memClock = true // time.Now, as the zero Verifier's
			v.lease = DefaultHandlerLease
		})
	}
	v.keys.Store(&keys) // after mem: a request that sees keys sees mem
	return nil
}

func bodyTooLarge(limit int64) error {
	return fmt.Errorf("%w: limit is %d bytes", ErrBodyTooLarge, limit)
}

// verify is the one verification routine behind Verify and Verifier.Verify.
// It checks the signature before the window, so that an expired timestamp is
// reported only for an authentic delivery. It returns the timestamp, and
// leaves the signature's digest in got.
func verify(keys []*keyedMAC, secret string, tolerance time.Duration, maxBody int64, now time.Time, h http.Header, body []byte, got *[sha256.Size]byte) (int64, error) {
	if int64(len(body)) > maxBody {
		return 0, bodyTooLarge(maxBody)
	}
	tsText, err := singleHeader(h, HeaderTimestamp)
	if err != nil {
		return 0, err
	}
	sigText, err := singleHeader(h, HeaderSignature)
	if err != nil {
		return 0, err
	}
	if _, err := singleHeader(h, HeaderEvent); err != nil {
		return 0, err
	}
	ts, err := parseTimestamp(tsText)
	if err != nil {
		return 0, err
	}
	if err := parseSignature(sigText, got); err != nil {
		return 0, err
	}
	if !matchesAny(keys, secret, tsText, body, got) {
		return 0, fmt.Errorf("%w: %s is not the HMAC-SHA256 of this body with the configured secret", ErrSignatureMismatch, HeaderSignature)
	}
	return ts, checkWindow(ts, now, tolerance)
}

// matchesAny reports whether got is the HMAC of "<tsText>.<body>" with one
// of keys: the timestamp as the header carried it, never re-formatted.
func matchesAny(keys []*keyedMAC, secret, tsText string, body []byte, got *[sha256.Size]byte) bool {
	var want [sha256.Size]byte
	if keys == nil { // the package-level Verify: one secret
		st := oneOffState(secret)
		oneOffs.finish(st, append(st.scratch[:0], tsText...), body, &want)
		return hmac.Equal(want[:], got[:])
	}
	for _, k := range keys {
		k.sumText(tsText, body, &want)
		if hmac.Equal(want[:], got[:]) {
			return true
		}
	}
	return false
}

// singleHeader returns the one value of header name in h. Names are matched
// case-insensitively, also in an http.Header built by hand: without the
// canonical name, the values of every spelling count together, so that two
// spellings are two values, whichever one a map's order shows first.
func singleHeader(h http.Header, name string) (string, error) {
	vs := h[name] // name is canonical: no allocation on the usual path
	if vs == nil {
		for k, kv := range h {
			if strings.EqualFold(k, name) {
				vs = append(vs[:len(vs):len(vs)], kv...)
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
