package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
)

// This file holds the HTTP side of receiving: reading a request's body
// under its limit (into recycled buffers, guarded against late readers),
// the Middleware, and the typed event handler of NewHandler.

// ErrUnreadableBody is matched by the error of a request whose body could
// not be read (the client went away, or sent a malformed chunked body). It
// does not match [ErrVerification]: nothing was verified.
var ErrUnreadableBody = errors.New("webhook: cannot read request body")

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
	return body, v.verify(r.Context(), r.Header, body)
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
		err = v.verify(r.Context(), r.Header, body)
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

// Middleware returns a handler that verifies each request before passing it
// to next, with r.Body holding the identical bytes. A refused request gets
// 401 (413 when the body is over the limit, 400 when it cannot be read, 503
// when the replay store failed) with a short generic body, or
// VerifierOptions.ErrorHandler's answer; the precise reason goes to
// VerifierOptions.Logger and ErrorHandler, never to the client. A replay is
// answered 401 like any failed verification, and logged as
// "webhook: replayed delivery refused".
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
		msg := "webhook: request refused"
		if errors.Is(err, ErrReplayed) {
			msg = "webhook: replayed delivery refused"
		}
		v.logger.LogAttrs(r.Context(), slog.LevelWarn, msg,
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
	default:
		http.Error(w, "invalid webhook signature", http.StatusUnauthorized)
	}
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
