package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/signedhook/webhook/internal/redact"
)

// This file holds one delivery's attempts: signing each one, the retry
// decision, reading and bounding the answer, and what an attempt learns of
// its connection (connTrace); classify.go names what kind of failure an
// attempt had.

// Response bodies: the log keeps the start, the rest is drained up to a
// bound so the connection can be reused.
const (
	maxLoggedBody  = 4 << 10
	maxDrainedBody = 64 << 10
)

// delivery is one delivery: the retry loop whose hooks are
// bound to it once, and the state of the delivery under way, which release
// clears whole, so that no field (a probe's lease, a connection's secret
// texts) can outlive its delivery.
type delivery struct {
	s    *Sender
	loop *retryLoop // bound to this delivery's hooks
	deliveryState
}

// mode is how a delivery is made: Send's, Attempt's or SendTest's.
type mode struct {
	first      int  // the number of the first attempt made
	maxRetries int  // the policy's, or 0 for a test delivery
	queued     bool // Sender.Attempt: one try; a queue schedules the retry, whatever ctx's deadline
	bypass     bool // SendTest: sent whatever the endpoint's health
}

// deliveryState is what one delivery holds while it is made.
type deliveryState struct {
	mode
	conn     Connection
	key      *connKey // what the Sender keeps of conn's secret
	event    string
	body     []byte
	attempts []Attempt
	ctx      context.Context // the delivery's; each attempt's request has its own, bounded
	cur      inFlight        // the attempt in flight, taken whole by finish once its answer is read
	one      [1]Attempt      // the log of Sender.Attempt
	err      error           // set when nothing could be sent, or by cancellation
	errKind  FailureKind     // why nothing could be sent: KindInvalid, KindCanceled or KindDown
	endpoint string          // the URL's origin, with endpoint health on
	downWait time.Duration   // with KindDown: until the endpoint may be tried again
	secrets  *redact.Secrets // the connection's secret texts, once needed (scrubText)
	lastTS   int64           // the timestamp of the attempt before, which the next one passes
	held     bool            // waiting to retry, it holds a place among what waits on endpoints not answering
}

// inFlight is what the attempt in flight holds from its preparation (admit,
// sign, bound) to finish, which takes it whole: nothing of one attempt is
// left for the next to read.
type inFlight struct {
	ticket ticket             // endpoint health's admission
	start  time.Time          // when it was signed
	ts     int64              // its timestamp
	ctx    context.Context    // its request's, which ends at its deadline
	cancel context.CancelFunc // ends ctx
	trace  *connTrace         // whether it got a connection, with endpoint health on
}

// newDelivery returns a delivery from the Sender's pool, whose
// retry loop and hooks are bound once, not per delivery, set
// to deliver body to c in mode m. Return it with release once its attempts
// are handed out.
func (s *Sender) newDelivery(c Connection, event string, body []byte, m mode) *delivery {
	d, _ := s.deliveries.Get().(*delivery)
	if d == nil {
		d = &delivery{s: s}
		d.loop = newRetryLoop(s.client, d)
	}
	d.deliveryState = deliveryState{mode: m, conn: c, event: event, body: body}
	return d
}

// release clears d, whose attempts now belong to the caller, and pools it;
// an attempt a panic left in flight is ended first (abandon).
func (d *delivery) release() {
	d.abandon()
	d.deliveryState = deliveryState{}
	d.s.deliveries.Put(d)
}

// run makes the delivery: its mode's retries, or one try when queued.
func (d *delivery) run(ctx context.Context) {
	req := d.request(ctx)
	if req == nil {
		return
	}
	retries := d.maxRetries
	if d.queued {
		retries = 0 // one try: the policy's decision goes to the queue
	}
	err := d.loop.do(ctx, req, retries)
	if d.held { // its retry never came: ctx ended while it waited
		d.held = false
		d.s.health.unhold()
	}
	if err != nil && ctx.Err() != nil && (len(d.attempts) == 0 || d.attempts[len(d.attempts)-1].Retry) {
		// Stopped while waiting for a retry: the log ends on a failure
		// whose retry never came.
		d.err = fmt.Errorf("webhook: stopped before the next attempt: %w", context.Cause(ctx))
	}
}

// request checks the delivery and returns its request, signed and bounded
// by the attempt's timeout, or nil with d.err set when nothing is to be
// sent. It is run's first half, in a frame of its own: the attempts' round
// trips run below run's frame, at the bottom of the caller's goroutine
// (a queue's job often has one of its own with the smallest stack), and a
// smaller frame above them keeps that stack from being grown (copied) in
// the round trip.
func (d *delivery) request(ctx context.Context) *http.Request {
	var u *url.URL
	u, d.errKind, d.err = d.check(ctx)
	if d.err != nil {
		return nil
	}
	// Built here from the URL Validate parsed, rather than parsed again by
	// retryablehttp.NewRequest; PrepareRetry rewinds the body. As
	// http.NewRequest does, "host:" loses its empty port.
	u.Host = strings.TrimSuffix(u.Host, ":")
	if d.s.health != nil {
		d.endpoint = endpointKey(u)
		d.s.health.seeded(ctx)
		if !d.admit(ctx) {
			return nil
		}
	}
	body := d.body
	d.ctx = ctx
	h := make(http.Header, 4+len(d.conn.Headers))
	for name, value := range d.conn.Headers {
		h.Set(name, value)
	}
	// One backing array for the four values; each slice has no room to
	// grow into its neighbour.
	vals := make([]string, 4)
	vals[0], vals[1] = "application/json", d.event
	h["Content-Type"], h[HeaderEvent] = vals[0:1:1], vals[1:2:2]
	d.sign(h, vals[2:4])
	// Field by field, not a composite literal: the compiler builds a
	// literal with calls in it on the stack, then copies it.
	hreq := new(http.Request)
	hreq.Method = d.conn.method()
	hreq.URL, hreq.Host = u, u.Host
	hreq.Proto, hreq.ProtoMajor, hreq.ProtoMinor = "HTTP/1.1", 1, 1
	hreq.Header = h
	hreq.Body = newRequestBody(body)
	hreq.ContentLength = int64(len(body)) // GetBody is the attempt's: see bound
	return d.bound(hreq)
}

// admit asks endpoint health whether the next attempt may be sent, and
// whether it is the endpoint's probe. When the endpoint is down it ends the
// delivery: nothing is sent, and the error matches ErrEndpointDown. An
// attempt to a URL not heard from, whose first attempt is in flight, waits
// for that answer and asks again, also a while later (the URL may have been
// found silent meanwhile), as long as health says. A Send Test is always sent: a
// customer who fixed the endpoint sees it answer.
func (d *delivery) admit(ctx context.Context) bool {
	if d.bypass {
		d.cur.ticket = d.s.health.admitTest(d.endpoint, d.conn.URL)
		return true
	}
	deadline, _ := ctx.Deadline() // waiting for a URL's first answer leaves the attempt its time
	for {
		t, wait, err := d.s.health.admit(d.endpoint, d.conn.URL, d.held, deadline)
		d.held = false
		if err != nil {
			d.err, d.errKind, d.downWait = err, KindDown, wait
			return false
		}
		if t.await == nil {
			d.cur.ticket = t
			return true
		}
		d.await(ctx, t, wait)
		if ctx.Err() != nil {
			d.err, d.errKind = fmt.Errorf("webhook: stopped before the attempt: %w", context.Cause(ctx)), KindCanceled
			return false
		}
	}
}

// await waits for the answer t awaits, for wait or until ctx is done, and
// then gives t's wait back: also when ctx panics, or the wait's place among
// what waits on endpoints not answering would be lost for good.
func (d *delivery) await(ctx context.Context, t ticket, wait time.Duration) {
	defer d.s.health.unwait(t)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-t.await:
	case <-timer.C:
	case <-ctx.Done():
	}
}

// check returns the connection's parsed URL, or why nothing may be sent and
// its kind: an invalid connection, event or body, or a context that is done
// already.
func (d *delivery) check(ctx context.Context) (*url.URL, FailureKind, error) {
	u, err := d.checkConn()
	if err != nil {
		return nil, KindInvalid, err
	}
	if !validEvent(d.event) {
		return nil, KindInvalid, payloadError("event", fmt.Sprintf("want a non-empty event kind without control characters, got %q", d.event))
	}
	if !d.bypass && !d.conn.Subscribes(d.event) {
		return nil, KindSkipped, fmt.Errorf("%w: %q is not among the %d event(s) it subscribes to; nothing was sent", ErrNotSubscribed, d.event, len(d.conn.Events))
	}
	if n := int64(len(d.body)); n > d.s.maxBody {
		return nil, KindInvalid, payloadError("body", fmt.Sprintf("has %d bytes, over the limit of %d (SenderOptions.MaxBodyBytes): receivers refuse it", n, d.s.maxBody))
	}
	if ctx.Err() != nil {
		return nil, KindCanceled, fmt.Errorf("webhook: nothing sent: %w", context.Cause(ctx))
	}
	return u, KindNone, nil
}

// checkConn validates the connection as Connection.Validate does, and keeps
// what the Sender keeps of its secret for signing: its URL is checked once
// per secret and URL (connKey.checkURL), not on every delivery.
func (d *delivery) checkConn() (*url.URL, error) {
	if d.conn.Secret == "" { // refused, after the URL's checks
		return d.conn.validate()
	}
	d.key = d.s.keys.get(d.conn.Secret)
	u, err := d.key.checkURL(d.conn.URL)
	if err == nil {
		err = d.conn.validateFields()
	}
	if err != nil {
		return nil, err
	}
	return u, nil
}

// bound returns a copy of r whose context ends when the delivery's does or
// when the attempt has taken the Sender's AttemptTimeout, from dialling to
// the end of the response body: finish reads the body, then ends the
// attempt. Bounding the request itself, rather than wrapping the client's
// RoundTripper, costs one request copy and no wrapped body.
func (d *delivery) bound(r *http.Request) *http.Request {
	deadline := time.Now().Add(d.s.timeout)
	// Lets NewTransport's dialer bound the dial and TLS handshake by the
	// attempt, and tell a proxy's connection from a direct one.
	scope := withDialScope(d.ctx, deadline)
	caller := httptrace.ContextClientTrace(scope)
	d.cur.trace = &scope.trace
	d.cur.trace.body = d.body
	ctx := httptrace.WithClientTrace(scope, &d.cur.trace.trace)
	if caller != nil && caller.Got1xxResponse != nil {
		ctx = bound1xx(ctx, httptrace.ContextClientTrace(ctx), caller.Got1xxResponse, &d.cur.trace.got1xx)
	}
	d.cur.ctx, d.cur.cancel = context.WithDeadline(ctx, deadline)
	bounded := r.WithContext(d.cur.ctx) // a name of its own: r stays where its caller made it
	bounded.GetBody = d.cur.trace.getBody
	return bounded
}

// validEvent reports whether event may name an event: not empty, no
// control character.
func validEvent(event string) bool {
	return event != "" && !strings.ContainsFunc(event, unicode.IsControl)
}

// newRequestBody returns a request's body: a type net/http knows to be in
// memory, so that it writes the headers and the body in one go instead of
// flushing the headers first (a second write, a second TLS record).
func newRequestBody(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }

// sign sets a fresh timestamp and the signature over the unchanged body.
// The timestamp is later than the attempt before's, also when a retry
// follows in the same millisecond (Retry-After: 0) or the clock stepped
// back: a receiver that refuses a repeated signature never refuses a
// retry. It is also one no other call of the Sender signed (issued): the
// same body for the same secret sent twice at one millisecond, by Attempt or
// by two goroutines, goes out as two signatures. Both values are cut from
// one string and stored in vals, which has room for two.
func (d *delivery) sign(h http.Header, vals []string) {
	d.cur.start = d.s.now() // the attempt starts as it is signed
	nowMs := d.cur.start.UnixMilli()
	d.cur.ts = d.s.issued.next(d.s.issued.key(d.key, d.body), max(nowMs, d.lastTS+1), nowMs)
	d.lastTS = d.cur.ts
	var buf [20 + signatureLen]byte
	b := strconv.AppendInt(buf[:0], d.cur.ts, 10)
	n := len(b)
	both := string(d.key.mac.appendSignature(b, d.cur.ts, d.body))
	vals[0], vals[1] = both[:n], both[n:]
	h[HeaderTimestamp], h[HeaderSignature] = vals[0:1:1], vals[1:2:2]
}

// prepare makes the request of the next attempt from the last one: admitted
// by endpoint health, re-signed over the same body, bounded.
func (d *delivery) prepare(last *http.Request) (*http.Request, error) {
	if d.s.health != nil && !d.admit(d.ctx) {
		return nil, d.err // the endpoint went down meanwhile: the retry is not sent
	}
	last.Header = last.Header.Clone() // the previous attempt's request keeps its own
	last.Body = newRequestBody(d.body)
	d.sign(last.Header, make([]string, 2))
	return d.bound(last), nil
}

// finish reads, classifies and logs the attempt that just ended with resp
// or err, and decides on a retry.
func (d *delivery) finish(resp *http.Response, err error) (bool, time.Duration) {
	ctx, cur := d.ctx, d.cur
	a := Attempt{
		N:         d.first + len(d.attempts),
		Start:     cur.start,
		Timestamp: cur.ts,
	}
	if resp != nil && cur.ctx.Err() != nil {
		// Handed over once the attempt's time was up: net/http can read an
		// answer that its own cut provoked (closing a TLS connection writes
		// close_notify first, and a handler that returns when its request
		// ends answers 200 then). The attempt timed out. The retry loop,
		// which holds resp too, finds its body read and closed.
		body := resp.Body
		resp.Body = http.NoBody
		stop := boundOverrun(cur.ctx, cur.trace) // over HTTP/2, a close with unread data writes
		body.Close()
		stop()
		resp, err = nil, context.Cause(cur.ctx)
	}
	if resp != nil {
		a.StatusCode = resp.StatusCode
		a.ResponseBody = d.scrubBody(readResponseBody(cur.ctx, resp, cur.trace))
	}
	cur.cancel() // the attempt ends once its answer is read
	cur.trace.done()
	a.Duration = d.s.now().Sub(cur.start)
	a.Kind, a.Err = classify(ctx, resp, err, d.conn.URL, d.scrubText)
	// Taken once the answer is read and classified (the RoundTripper's
	// body and error, which may panic): until then abandon ends it
	// (TestAttempt_APanicReadingTheAnswerLeavesNothingInFlight).
	d.cur = inFlight{}
	if d.s.health != nil {
		d.s.health.record(cur.ticket, &a, cur.trace != nil && cur.trace.connected.Load(), d.body)
	}
	if a.Err != nil {
		a.Retry, a.RetryIn = d.decide(ctx, resp, &a)
	}
	if (cur.ticket.lease != 0 || cur.ticket.urlLease != 0) && probeFoundDown(a.Kind) {
		// The probe of an endpoint held back: when it leaves the endpoint
		// held back, it says so, and for a queue it is a wait for the
		// endpoint, as a refusal to send is, whatever the policy says.
		if wait, down := d.s.health.downFor(d.endpoint, d.conn.URL); down {
			a.Probe = true
			if d.queued {
				a.Retry, a.RetryIn = true, wait
			}
		}
	}
	if a.Retry && !d.queued && d.s.health != nil && !d.bypass {
		// The endpoint went down meanwhile, or it does not answer and
		// enough wait on such endpoints: the delivery ends now, not after
		// waiting for a retry that would not be sent.
		held, wait, err := d.s.health.holdRetry(d.endpoint, d.conn.URL)
		if err != nil {
			a.Retry, a.RetryIn = false, 0
			d.err, d.errKind, d.downWait = err, KindDown, wait
		}
		d.held = held
	}
	d.attempts = append(d.attempts, a)
	d.log(ctx, &a)
	if d.s.onAttempt != nil {
		d.s.onAttempt(ctx, d.conn, a)
	}
	return a.Retry, a.RetryIn
}

// decide applies the policy to the failed attempt a.
func (d *delivery) decide(ctx context.Context, resp *http.Response, a *Attempt) (bool, time.Duration) {
	p := &d.s.policy
	if a.Kind == KindCanceled || a.Kind == KindBlocked || a.N > d.maxRetries || a.StatusCode == http.StatusGone {
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
// ctx is the attempt's, and t its connection trace: over HTTP/2, the reads
// and the close can wait on the connection once ctx is done, for a bounded
// time (boundOverrun).
func readResponseBody(ctx context.Context, resp *http.Response, t *connTrace) (excerpt []byte, cut bool) {
	body := resp.Body
	resp.Body = http.NoBody
	if resp.ContentLength == 0 { // the common answer: nothing to read, nor to give back
		body.Close()
		return nil, false
	}
	if resp.ProtoMajor == 2 {
		defer boundOverrun(ctx, t)() // after the close
	}
	defer body.Close()
	buf := bodyBuffers.Get().(*[maxLoggedBody]byte)
	defer bodyBuffers.Put(buf)
	n, _ := io.ReadFull(body, buf[:])
	if n == len(buf) { // cut: drain a bounded rest, and end on a whole character
		io.CopyN(io.Discard, body, maxDrainedBody)
		return bytes.Clone(cutAtRune(buf[:n])), true
	}
	if n == 0 {
		return nil, false
	}
	return bytes.Clone(buf[:n]), false
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

// scrubBody returns b, an answer's excerpt, without the connection's
// secret texts, which a receiver may echo (see Connection.secrets), nor
// the start of one where the excerpt was cut.
func (d *delivery) scrubBody(b []byte, cut bool) []byte {
	if len(b) < redact.MinLen {
		return b
	}
	text := string(b)
	clean := d.scrubText(text)
	if cut {
		clean = d.secrets.CutTail(clean)
	}
	if clean != text {
		return []byte(clean)
	}
	return b
}

// scrubText returns s without the connection's secret texts, found once per
// delivery.
func (d *delivery) scrubText(s string) string {
	if len(s) < redact.MinLen {
		return s
	}
	if d.secrets == nil {
		d.secrets = d.conn.secrets()
	}
	return d.secrets.Scrub(s)
}

// connTrace notes the connection an attempt got (httptrace's GotConn):
// endpoint health counts only the attempts that got none against their
// endpoint, and a connection of NewTransport's reads what its attempts
// lend it (readbudget.go). One is made per attempt (withDialScope), since
// net/http may call it from another goroutine.
type connTrace struct {
	connected atomic.Bool
	conn      atomic.Pointer[boundedConn] // lent the attempt's allowance
	h2        atomic.Bool                 // the connection it got last speaks HTTP/2
	sent      atomic.Bool                 // its headers, signature and all, were written on an HTTP/2 connection
	answered  atomic.Bool                 // a final answer came (attemptTransport)
	body      []byte                      // the delivery's, for getBody
	got1xx    informational
	trace     httptrace.ClientTrace
}

// init sets t's hooks.
func (t *connTrace) init() {
	t.trace.GotConn = t.gotConn
	t.trace.Got1xxResponse = func(_ int, h textproto.MIMEHeader) error { return t.got1xx.count(h) }
	t.trace.WroteHeaders = t.wroteHeaders
}

// errNotResent fails an attempt whose request net/http would send again,
// signature and all: see connTrace.getBody.
var errNotResent = errors.New("webhook: the receiver's HTTP/2 connection dropped the request after it was sent (GOAWAY, or its stream refused or reset), and it is not sent again with the same signature; a retry is signed afresh")

// getBody is the request's GetBody, with which net/http sends a request
// again within its round trip: over HTTP/1, only when nothing of it was
// written (a kept-alive connection closed under it); over HTTP/2, also
// after its stream was refused or reset, or its connection went away
// (GOAWAY), its HEADERS sent: a receiver answering each request with
// GOAWAY got it again and again on new connections until the attempt's
// time was up, thousands of copies of one signature. Once the headers went
// out on an HTTP/2 connection with no answer, it refuses: the attempt
// fails, and the policy's retry is signed afresh. (After a final answer,
// net/http's client asks for the body of a 307 or 308's redirect, which
// is never sent; a 1xx answer is none: a 103 then a GOAWAY was sent again.)
func (t *connTrace) getBody() (io.ReadCloser, error) {
	if t.sent.Load() && !t.answered.Load() {
		return nil, errNotResent
	}
	return newRequestBody(t.body), nil
}

func (t *connTrace) wroteHeaders() {
	if t.h2.Load() {
		t.sent.Store(true)
	}
}

func (t *connTrace) gotConn(info httptrace.GotConnInfo) {
	t.connected.Store(true)
	tc, ok := info.Conn.(*tls.Conn)
	t.h2.Store(ok && tc.ConnectionState().NegotiatedProtocol == "h2")
	if c := boundedOf(info.Conn); c != nil {
		c.begin()
		if old := t.conn.Swap(c); old != nil {
			old.end() // net/http retried the request on another connection
		}
	}
}

// done ends the attempt's loan to its connection, once its answer is read.
func (t *connTrace) done() {
	if c := t.conn.Swap(nil); c != nil {
		c.end()
	}
}
