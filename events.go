package webhook

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"sync"
	"sync/atomic"
)

// This file holds the typed event handlers: Events, a set of handlers by
// event name registered with On, and the handlers NewEventHandler and
// NewHandler serve them with.

// Events is a set of handlers, one per event name, each handed the signed
// body decoded into a type of its own; serve it with [NewEventHandler].
// The zero Events is empty and ready to use. Register with [On]; an Events
// is safe for concurrent use, and a handler registered while it serves is
// used from the next request on.
type Events struct {
	mu       sync.Mutex // serialises On
	handlers atomic.Pointer[map[string]eventFunc]
}

// eventFunc decodes a verified body and calls the handler registered for
// its event. An error matching ErrMalformedPayload or ErrInvalidPayload
// says the body was not what the handler takes.
type eventFunc func(ctx context.Context, body []byte) error

// On registers fn as the handler of the event named name in e: for each
// delivery of that event, the signed body is decoded into a T and given to
// fn with the request's context. fn's error makes the handler answer 500,
// so that the sender retries; it is called concurrently for concurrent
// requests, and, the service delivering at least once, should be
// idempotent (see [LastWriterWins]).
//
// T is decoded from the whole body with encoding/json: missing fields stay
// zero and unknown ones are ignored. A body that does not decode is
// answered 400. A type of the caller's with a Validate() error method (on
// T or *T) is validated too, and answered 400 when it fails. A [Payload]
// (or *Payload) is not: it checks only its "event", since the spec leaves
// which fields are required open. Use json.RawMessage for the body as it
// is (a copy).
//
// On panics if name is empty, fn is nil or name has a handler already, as
// http.ServeMux's Handle does.
func On[T any](e *Events, name string, fn func(ctx context.Context, event T) error) {
	if name == "" || fn == nil {
		panic("webhook: On needs an event name and a function")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	old := e.handlers.Load()
	if old != nil && (*old)[name] != nil {
		panic("webhook: On: event " + fmt.Sprintf("%q", name) + " has a handler already")
	}
	next := make(map[string]eventFunc, 1)
	if old != nil {
		maps.Copy(next, *old)
	}
	next[name] = func(ctx context.Context, body []byte) error {
		event, err := decodeEvent[T](body)
		if err != nil {
			return err
		}
		return handlerError{fn(ctx, event)}.orNil()
	}
	e.handlers.Store(&next)
}

// handlerError tells the error of a handler from one of decoding.
type handlerError struct{ err error }

func (e handlerError) Error() string { return e.err.Error() }
func (e handlerError) Unwrap() error { return e.err }

func (e handlerError) orNil() error {
	if e.err == nil {
		return nil
	}
	return e
}

// lookup returns the handler of event, or nil.
func (e *Events) lookup(event string) eventFunc {
	if m := e.handlers.Load(); m != nil {
		return (*m)[event]
	}
	return nil
}

// decodeEvent decodes body into a T, leniently: missing fields stay zero
// and unknown ones are ignored. Only a type of the caller's decides what
// more it needs, through a Validate method on T or *T. A Payload is the
// library's, and checks nothing beyond its "event": the spec leaves which
// fields are required open, and its own minimal test request has three.
func decodeEvent[T any](body []byte) (T, error) {
	var event T
	var err error
	switch p := any(&event).(type) {
	case *Payload:
		*p, err = ParsePayload(body) // shares no memory with body
		return event, err
	case **Payload:
		var v Payload
		v, err = ParsePayload(body)
		*p = &v
		return event, err
	}
	if err = decodeObject(body, &event); err != nil {
		return event, err
	}
	if v, ok := any(&event).(interface{ Validate() error }); ok {
		err = v.Validate()
	} else if v, ok := any(event).(interface{ Validate() error }); ok {
		err = v.Validate() // T is a pointer to a type of the caller's, set by decoding an object
	}
	return event, err
}

// HandlerOptions configures the handler [NewEventHandler] and [NewHandler]
// return. A nil *HandlerOptions selects the defaults.
type HandlerOptions struct {
	// Logger receives events that have no handler and event headers that
	// disagree with the signed body (level Info), bodies that do not
	// decode and errors from the handlers (level Error). Nil means no
	// logging. Refused requests and copies are logged by the Verifier's
	// own logger.
	Logger *slog.Logger
}

// NewEventHandler returns a handler that verifies each request with v's
// [Verifier.Middleware], once per delivery, and calls the handler e has for
// the signed body's "event" field (not the unsigned [HeaderEvent]). Beyond
// the Middleware's answers to refused requests and copies, it answers:
//
//   - 400 when the verified body is not a JSON object with an "event", or
//     does not decode into the handler's type, or fails that type's own
//     Validate (a [Payload] has none here: see [On]);
//   - 200, after logging it, for an event e has no handler for, as the
//     spec says: the service may add events before the receiver knows them;
//   - 500 when the event's handler returns an error, so that the sender
//     retries;
//   - 200 with the JSON acknowledgement {"ok":true} otherwise.
//
// NewEventHandler panics if v or e is nil, as a programming error.
func NewEventHandler(v *Verifier, e *Events, opts *HandlerOptions) http.Handler {
	if v == nil || e == nil {
		panic("webhook: NewEventHandler needs a Verifier and Events")
	}
	logger := slog.New(slog.DiscardHandler)
	if opts != nil && opts.Logger != nil {
		logger = opts.Logger
	}
	return &eventHandler{v: v, events: e, log: logger}
}

// NewHandler returns the handler of one event, [EventUserIdentified], with
// on as its function: NewEventHandler with Events where On(e,
// EventUserIdentified, on) is registered. Every other event is logged and
// answered 200. NewHandler panics if v or on is nil, as a programming error.
func NewHandler(v *Verifier, on func(ctx context.Context, p Payload) error, opts *HandlerOptions) http.Handler {
	if v == nil || on == nil {
		panic("webhook: NewHandler needs a Verifier and a function")
	}
	var e Events
	On(&e, EventUserIdentified, on)
	return NewEventHandler(v, &e, opts)
}

type eventHandler struct {
	v      *Verifier
	events *Events
	log    *slog.Logger
}

var ack = []byte(`{"ok":true}` + "\n")

func (h *eventHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.v.serveVerified(w, r, func(w http.ResponseWriter, body []byte) { h.serve(w, r, body) })
}

// serve dispatches a verified body. What the handler gets shares no memory
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
		h.notPayload(w, r, err)
		return
	}
	if hv := r.Header.Get(HeaderEvent); hv != envelope.Event {
		h.log.LogAttrs(ctx, slog.LevelInfo, "webhook: event header disagrees with the signed body; using the body",
			slog.String("header", hv), slog.String("body", envelope.Event))
	}
	handle := h.events.lookup(envelope.Event)
	if handle == nil {
		h.log.LogAttrs(ctx, slog.LevelInfo, "webhook: ignoring an event that has no handler", slog.String("event", envelope.Event))
		writeAck(w)
		return
	}
	err := handle(ctx, body)
	if _, ok := err.(handlerError); err != nil && !ok {
		h.notPayload(w, r, err)
		return
	}
	if err != nil {
		h.log.LogAttrs(ctx, slog.LevelError, "webhook: handler failed; answering 500 so the delivery is retried",
			slog.String("event", envelope.Event), slog.String("error", err.Error()))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	writeAck(w)
}

func (h *eventHandler) notPayload(w http.ResponseWriter, r *http.Request, err error) {
	h.log.LogAttrs(r.Context(), slog.LevelError, "webhook: verified body is not a payload", slog.String("error", err.Error()))
	http.Error(w, "body is not a webhook payload", http.StatusBadRequest)
}

func writeAck(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(ack)
}
