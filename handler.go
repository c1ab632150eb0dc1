package webhook

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"sync"
)

// This file holds the HTTP side of receiving: reading a request's body
// under its limit (into recycled buffers, guarded against late readers),
// the Middleware, handing each delivery to the handler once, and its
// answers to refused requests; events.go dispatches the typed events.

// ErrUnreadableBody is matched by the error of a request whose body could
// not be read (the client went away, or sent a malformed chunked body). It
// does not match [ErrVerification]: nothing was verified.
var ErrUnreadableBody = errors.New("webhook: cannot read request body")

// VerifyRequest reads r's body (at most the body limit), verifies it with
// r's headers, and returns it. Whatever the outcome, r.Body is replaced by a
// reader of the bytes read, so the next handler reads the identical body
// (a zero Verifier, which refuses every request, reads nothing). A
// body over the limit, or over that of an http.MaxBytesReader in front
// (http.MaxBytesHandler), gives an error matching [ErrBodyTooLarge]; an error
// while reading matches [ErrUnreadableBody] and wraps the reader's error.
//
// Inside the Middleware or NewHandler of a Verifier on the same replay
// store, the request they serve is not taken for a replay when r.Body is
// the one they hand on: that Verifier settles it by what is answered.
// [Verifier.Verify] of the bytes there would refuse it as a replay: read
// r.Body instead, which holds the verified bytes.
func (v *Verifier) VerifyRequest(r *http.Request) ([]byte, error) {
	if v.keys.Load() == nil {
		return nil, errZeroVerifier
	}
	in := r.Body // the Middleware's further out may have marked it (recordedOutside)
	body, err := readBody(nil, in, r.ContentLength, v.maxBodyBytes())
	br := &bodyReader{Reader: bytes.NewReader(body)}
	r.Body = br
	if err != nil {
		return body, err
	}
	var d signed
	if err := v.authenticate(r.Header, body, &d); err != nil || v.allowReplays {
		return body, err
	}
	// The Middleware or NewHandler of a Verifier on this store, further
	// out, claimed this very request, and settles it by its answer: it is
	// not a copy of itself.
	if !v.recordedOutside(nil, in, &d.sig) {
		if err := v.checkReplay(r.Context(), &d); err != nil {
			return body, err
		}
	}
	// Recorded: NewHandler or the Middleware of a Verifier on this store,
	// further in, serves this request rather than take it for a copy of
	// itself.
	br.mark = claimMark{by: v, sig: d.sig}
	return body, nil
}

// bodyReader is the restored r.Body: the bytes read, in one allocation,
// and the delivery VerifyRequest recorded, if it did.
type bodyReader struct {
	*bytes.Reader
	mark claimMark
}

func (*bodyReader) Close() error { return nil }

// serveVerified reads r's body into a pooled buffer and verifies it. It
// answers a refusal itself; otherwise it calls serve with the body, r.Body
// holding the same bytes, once per signature (see serveOnce). When serve
// returns, r.Body is released and the buffer recycled: net/http's Handler
// contract forbids reading r.Body after ServeHTTP returns, and a read from
// then on, from any goroutine, fails with errBodyAfterServe. It never sees
// another request's bytes: see bodySlot.
func (v *Verifier) serveVerified(w http.ResponseWriter, r *http.Request, serve func(w http.ResponseWriter, body []byte)) {
	if v.keys.Load() == nil {
		v.refuse(w, r, errZeroVerifier)
		return
	}
	outer := r.Body // a Verifier's further out may have marked it (recordedOutside)
	slot := bodySlots.Get().(*bodySlot)
	body, err := readBody(slot.buf[:0], r.Body, r.ContentLength, v.maxBodyBytes())
	// The request's own: user code may keep r.Body or the writer.
	sv := &serving{slot: slot, gen: slot.gen}
	slot.r.Reset(body) // no view of an earlier request reads it: see bodySlot
	r.Body = (*servedBody)(sv)
	defer slot.release(body) // also when serve panics
	var d signed
	if err == nil {
		err = v.authenticate(r.Header, body, &d)
	}
	switch {
	case err != nil:
		v.refuse(w, r, err)
	case v.allowReplays:
		serve(w, body)
	case v.recordedOutside(w, outer, &d.sig):
		// A Verifier on v's store further out recorded this very request
		// (a router's group middleware around NewHandler(v, ...)): it
		// settles the outcome by what is answered here. The claim goes on
		// with the body, for a VerifyRequest further in.
		slot.mark = claimMark{by: v, sig: d.sig}
		serve(w, body)
	default:
		sv.w = w
		slot.mark = claimMark{by: v, sig: d.sig}
		v.serveOnce((*statusWriter)(sv), r, &d, body, serve)
	}
}

// serving is what serveVerified makes per request, in one small
// allocation that is never reused: a ticket to the request's bodySlot,
// which r.Body is a view of (servedBody), and the status the handler
// answers, which the writer it is given is a view of (statusWriter).
type serving struct {
	slot   *bodySlot
	gen    uint64              // slot.gen while this request is served
	w      http.ResponseWriter // the writer underneath (statusWriter's)
	status int                 // the final status written, 0 before
}

// serveOnce hands the authentic delivery d to serve unless its signature
// was handled (a copy is acknowledged) or is being handled (a copy is asked
// to come back). The outcome is recorded when serve returns: handled on a
// 2xx answer; otherwise, or when serve panics, forgotten, so that a copy is
// handled.
func (v *Verifier) serveOnce(sw *statusWriter, r *http.Request, d *signed, body []byte, serve func(http.ResponseWriter, []byte)) {
	w := sw.w
	state, err := v.claim(r.Context(), d)
	switch {
	case err != nil:
		v.refuse(w, r, err)
		return
	case state == ReplayHandling:
		v.refuse(w, r, fmt.Errorf("%w: a copy of this delivery (the same signature) is being handled; retry once it has an outcome", ErrInProgress))
		return
	case state != ReplayUnseen && state != ReplayHandling && state != ReplayHandled:
		v.refuse(w, r, fmt.Errorf("%w: Claim answered %v, which is no ReplayState", ErrReplayStore, state))
		return
	case state == ReplayHandled:
		if v.logger != nil { // nil only in a zero Verifier
			v.logger.LogAttrs(r.Context(), slog.LevelInfo, "webhook: duplicate delivery acknowledged; it was handled before",
				slog.String("remote", r.RemoteAddr))
		}
		writeAck(w)
		return
	}
	ended := false
	defer func() { v.settle(r.Context(), d, ended && sw.succeeded()) }()
	serve(sw, body)
	ended = true
}

// statusWriter records the status a handler answers, for serveOnce: a
// view of the request's serving, whose body's mark tells the delivery
// claimed for the handler (see recordedOutside). Unwrap lets
// http.ResponseController reach the writer underneath.
type statusWriter serving

func (w *statusWriter) Header() http.Header { return w.w.Header() }

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.w.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.w.Write(p)
}

// Flush flushes the writer underneath, if it can: a flush before any
// status sends 200. A writer that cannot flush sent nothing, and the status
// is still the handler's to choose.
func (w *statusWriter) Flush() {
	err := http.NewResponseController(w.w).Flush()
	if w.status == 0 && !errors.Is(err, http.ErrNotSupported) {
		w.status = http.StatusOK
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.w }

// succeeded reports whether the answer is a 2xx: a handler that wrote
// nothing is answered 200 by net/http.
func (w *statusWriter) succeeded() bool { return w.status == 0 || w.status >= 200 && w.status < 300 }

// bodySlot is what a request's body takes while the middleware serves,
// recycled (bodySlots): the verified bytes in a pooled buffer, readable
// until the middleware returns. A goroutine of the handler's may still hold
// r.Body then, so, as net/http's own request body does, every read takes
// the slot's mutex and checks the generation its view was issued at: once
// release has returned, the slot has moved on, no read of that view touches
// the buffer, and the next request's bytes are never read through it.
// Setting a slot up for the next request needs no lock: a view of an earlier
// request reads nothing but gen, under the lock, and release wrote gen
// before the pool handed the slot on.
type bodySlot struct {
	mu  sync.Mutex
	gen uint64 // bumped by release
	r   bytes.Reader
	buf []byte // the pooled buffer, empty; nil after a body too large to keep

	// mark is the delivery claimed for the handler this body is read by;
	// set before the handler runs, never after.
	mark claimMark
}

var bodySlots = sync.Pool{New: func() any { return &bodySlot{buf: make([]byte, 0, 4<<10)} }}

// release ends every read of the request served, and recycles the slot
// with body's buffer, unless it grew past maxPooledBody.
func (s *bodySlot) release(body []byte) {
	s.mu.Lock()
	s.gen++
	s.r.Reset(nil)
	s.mark = claimMark{}
	s.mu.Unlock()
	s.buf = nil // readBody makes one to the next body's measure
	if cap(body) <= maxPooledBody {
		s.buf = body[:0]
	}
	bodySlots.Put(s)
}

// servedBody is r.Body while the middleware serves: a view of the
// request's bodySlot. It has no WriteTo, so that io.Copy goes through Read
// too.
type servedBody serving

func (b *servedBody) Read(p []byte) (int, error) {
	s := b.slot
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen != b.gen {
		return 0, errBodyAfterServe
	}
	return s.r.Read(p)
}

func (*servedBody) Close() error { return nil }

// claimed returns the mark of the request b is the body of, while it is
// served.
func (b *servedBody) claimed() (claimMark, bool) {
	s := b.slot
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen != b.gen { // gen first: the next request may be setting mark
		return claimMark{}, false
	}
	return s.mark, s.mark.by != nil
}

// claimMark is a delivery a Verifier recorded for the request at hand,
// claimed by its middleware or NewHandler (on the request's body, and on
// the writer the handler is given) or recorded as handled by VerifyRequest
// (on the body). A Verifier further in that shares the store finds it and
// serves the request, rather than take it for a copy of itself: a router
// may put the middleware of a group around a route's NewHandler, and
// another middleware between them may wrap the body (a size limit) or the
// writer (a logger), or both.
type claimMark struct {
	by  *Verifier // nil: none
	sig [32]byte
}

// maxUnwrap bounds the writers recordedOutside looks through.
const maxUnwrap = 16

// recordedOutside reports whether a Verifier on v's store, further out,
// recorded the delivery whose signature's digest is sig for this request:
// a mark on its body as it came in, or on a writer under w (through Unwrap, as
// http.ResponseController looks for one).
func (v *Verifier) recordedOutside(w http.ResponseWriter, body io.ReadCloser, sig *[32]byte) bool {
	switch b := body.(type) {
	case *servedBody:
		if m, ok := b.claimed(); ok && v.sharesMark(&m, sig) {
			return true
		}
	case *bodyReader:
		if v.sharesMark(&b.mark, sig) {
			return true
		}
	}
	for range maxUnwrap {
		if sw, ok := w.(*statusWriter); ok {
			if m, ok := (*servedBody)(sw).claimed(); ok && v.sharesMark(&m, sig) {
				return true
			}
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return false
		}
		w = u.Unwrap()
	}
	return false
}

// sharesMark reports whether m records sig by a Verifier on v's store.
func (v *Verifier) sharesMark(m *claimMark, sig *[32]byte) bool {
	return m.by != nil && m.sig == *sig && v.sharesStore(m.by)
}

// sharesStore reports whether v and o record deliveries in one store.
func (v *Verifier) sharesStore(o *Verifier) bool {
	switch {
	case v == o:
		return true
	case v.mem != nil || o.mem != nil:
		return v.mem == o.mem
	case v.store == nil || o.store == nil:
		return false
	}
	// Interfaces of one dynamic type; == panics for a value that is not
	// comparable (a struct holding a map, or an interface field holding
	// one, which reflect.Type.Comparable does not see), then no match.
	vv, ov := reflect.ValueOf(v.store), reflect.ValueOf(o.store)
	return vv.Type() == ov.Type() && vv.Comparable() && ov.Comparable() && v.store == o.store
}

// errBodyAfterServe is what a read of a recycled body gives once the
// middleware has returned.
var errBodyAfterServe = errors.New("webhook: request body read after the verifying middleware returned; read it within the next handler's ServeHTTP")

// Bodies of up to maxPooledBody bytes are read into pooled buffers; a larger
// one is read into its own and left to the garbage collector.
const maxPooledBody = 64 << 10

// maxReserved is the most memory a body's Content-Length reserves before
// its bytes come; past it, the buffer grows with them.
const maxReserved = 16 << 10

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
			// A limit of the receiver's own in front (http.MaxBytesHandler)
			// is a body too large, not one that cannot be read.
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return buf, bodyTooLarge(mbe.Limit)
			}
			return buf, fmt.Errorf("%w: %w", ErrUnreadableBody, err)
		}
	}
}

// Middleware returns a handler that verifies each request before passing it
// to next, with r.Body holding the identical bytes, once per delivery. It
// answers:
//
//   - 401 to a request that fails verification (413 when the body is over
//     the limit, 400 when it cannot be read), with a short generic body;
//   - 200 {"ok":true} to a copy of a delivery that was handled (next
//     answered 2xx), without calling next: the spec asks receivers to
//     tolerate duplicates, and the sender is satisfied;
//   - 409 with Retry-After to a copy of a delivery whose handler is still
//     running, without calling next, so that the sender comes back once it
//     has an outcome;
//   - 503 when the replay store failed, so that the sender retries;
//   - otherwise what next answers. A delivery next did not answer 2xx, or
//     panicked on, is forgotten, so that its copy (a retry of the same
//     request) is handled: a copy is never lost.
//
// A copy is a request with the same signature: a proxy's or a load
// balancer's retry, a request a queue stored. The sender's own retries are
// signed afresh and are new deliveries. With VerifierOptions.AllowReplays,
// every copy is handed to next. VerifierOptions.ErrorHandler answers in
// place of the 401, 413, 400, 409 and 503 above; the precise reason goes to
// VerifierOptions.Logger and ErrorHandler, never to the client.
//
// Its shape fits routers' Use methods, such as chi's r.Use(v.Middleware).
// The body is read into a recycled buffer: as net/http's Handler contract
// says, r.Body may be read only until next returns. A later read, from any
// goroutine (a handler that hands r.Body or r.Clone(ctx).Body to background
// work and answers at once), fails with an error that says so: every read
// gives a prefix of the request's own bytes or an error, never another
// request's bytes. Copy the body before next returns to keep it. An adapter
// for another router must run the rest of its chain inside next (see
// examples/routers for gin): the status next answers decides whether the
// delivery was handled.
//
// Nested, as a router's group middleware around a route's NewHandler (or
// a second Middleware), of v or of another Verifier sharing its
// ReplayStore, the inner one hands the request on as the outer claimed it,
// and the outer records the outcome: one request is handled once, never
// answered as a copy of itself. The inner one finds the outer's claim on
// the body it is given, or on the writer, through Unwrap: a middleware
// between them may wrap either (a body size limit, a logging writer), not
// both without Unwrap. A request v.VerifyRequest recorded is handed on by
// NewHandler(v, ...) too when it gets the body VerifyRequest left: a
// middleware between them that wraps the body hides the record, and the
// request is then acknowledged as a copy of one handled. Use the
// Middleware rather than VerifyRequest in front of NewHandler. Inside the
// Middleware, VerifyRequest of the request served finds the claim on the
// body it is given; Verify, given no request, takes it for a replay.
func (v *Verifier) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v.serveVerified(w, r, func(w http.ResponseWriter, _ []byte) { next.ServeHTTP(w, r) })
	})
}

// retryAfterInProgress is the Retry-After, in seconds, of the answer to a
// copy of a delivery being handled: the spec asks receivers to answer
// within 5 seconds.
const retryAfterInProgress = "5"

// refuse answers a request that failed verification, could not be read, or
// is a copy of a delivery being handled.
func (v *Verifier) refuse(w http.ResponseWriter, r *http.Request, err error) {
	if v.logger != nil { // nil only in a zero Verifier
		msg, level := "webhook: request refused", slog.LevelWarn
		switch {
		case errors.Is(err, ErrReplayed):
			msg = "webhook: replayed delivery refused"
		case errors.Is(err, ErrInProgress):
			msg, level = "webhook: copy of a delivery being handled; asked to retry", slog.LevelInfo
		}
		v.logger.LogAttrs(r.Context(), level, msg,
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
	case errors.Is(err, ErrReplayStore): // perhaps authentic: let the sender retry
		http.Error(w, "service unavailable", http.StatusServiceUnavailable)
	case errors.Is(err, ErrInProgress): // authentic: come back once the first has an outcome
		w.Header().Set("Retry-After", retryAfterInProgress)
		http.Error(w, "this delivery is being handled; retry later", http.StatusConflict)
	default:
		http.Error(w, "invalid webhook signature", http.StatusUnauthorized)
	}
}
