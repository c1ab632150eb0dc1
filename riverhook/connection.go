package riverhook

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/signedhook/webhook"
)

// This file holds the Worker's connections: resolving one through the
// Resolver, and what a dashboard asks of one, its Send Test, the events
// it subscribes to and its endpoint's health, through the Worker's Sender.

// SendTest is the dashboard's "Send Test" for the connection with the
// given id: it resolves the connection with the Worker's [Resolver] and
// makes [webhook.Sender.SendTest]'s one attempt with the Worker's Sender,
// the same attempt as a real delivery's (signed alike, through the same
// transport and guard), whose [webhook.Attempt.Diagnosis] says what
// happened. The Result and error are SendTest's. When the connection does
// not resolve, the error names it by id alone (the Resolver's error, which
// may quote a URL, goes to [WorkerOptions.Logger] and is wrapped, for
// errors.Is and errors.As); it matches [ErrConnectionGone] for one that is
// gone. A Send Test is an attempt in flight like a delivery's: it takes
// one of the connection's MaxInFlightPerConnection places (across the
// fleet with [WorkerOptions.Places]), and returns [ErrBusy] when every place
// is held. It blocks for the attempt, at most the Sender's attempt
// timeout, and is safe for concurrent use.
func (w *Worker) SendTest(ctx context.Context, connectionID string) (*webhook.Result, error) {
	return w.sendTest(ctx, connectionID, func(conn webhook.Connection) (*webhook.Result, error) {
		return w.sender.SendTest(ctx, conn)
	})
}

// SendTestBytes is SendTest for an event of the caller's choosing, with
// body as its sample: [webhook.Sender.SendTestBytes]'s one attempt, sent
// whatever the connection subscribes to. The event and body are checked
// as [InsertBytesParams] checks them (an error matching
// [webhook.ErrInvalidPayload], before anything is resolved or sent).
func (w *Worker) SendTestBytes(ctx context.Context, connectionID, event string, body []byte) (*webhook.Result, error) {
	if err := checkEventBody(event, body); err != nil {
		return nil, err
	}
	return w.sendTest(ctx, connectionID, func(conn webhook.Connection) (*webhook.Result, error) {
		return w.sender.SendTestBytes(ctx, conn, event, body)
	})
}

// sendTest resolves the connection with the given id and makes its Send
// Test, send, in a place in flight.
func (w *Worker) sendTest(ctx context.Context, connectionID string, send func(webhook.Connection) (*webhook.Result, error)) (*webhook.Result, error) {
	conn, err := w.resolveConnection(ctx, connectionID, 0)
	if err != nil {
		return nil, err
	}
	done, err := w.testPlace(ctx, connectionID, cmp.Or(conn.MaxInFlight, w.maxPerCon))
	if err != nil {
		return nil, err
	}
	defer done()
	return send(conn)
}

// Events returns the events the connection with the given id subscribes
// to, as the Worker's [Resolver] gives it ([webhook.Connection.Events]):
// empty means every event. A dashboard offers a Send Test of these
// (SendTestBytes itself sends whatever it is asked). The error is as for
// [Worker.SendTest]. It is safe for concurrent use.
func (w *Worker) Events(ctx context.Context, connectionID string) ([]string, error) {
	conn, err := w.resolveConnection(ctx, connectionID, 0)
	if err != nil {
		return nil, err
	}
	return slices.Clone(conn.Events), nil // the Resolver's may be shared
}

// ErrBusy is returned by [Worker.SendTest] when the connection has
// MaxInFlightPerConnection attempts in flight (in the process, or across
// the fleet with Places): the Send Test would pass the bound the customer
// was promised. Try again once one has ended.
var ErrBusy = errors.New("riverhook: the connection has as many attempts in flight as its bound allows")

// testPlace takes a place in flight, of bound, for a Send Test to
// connection id, in the Worker's Places, and returns the function giving it
// back.
func (w *Worker) testPlace(ctx context.Context, id string, bound int) (func(), error) {
	t, err := w.admission.take(ctx, id, limits{bound: bound})
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, fmt.Errorf("%w: %d of %d (connection %q)", ErrBusy, bound, bound, id)
	}
	return func() { w.admission.give(ctx, t) }, nil
}

// EndpointHealth returns the endpoint of the connection with the given id,
// its origin as [webhook.Connection.Endpoint] names it (never its path), the
// key of its URL ([webhook.Connection.URLKey], under which marks of the URL
// are kept), and what the Worker's Sender knows of it
// ([webhook.Sender.Health]): the entries for that origin and for the
// connection's own URL, those failing or down. failing is empty when the
// endpoint answers, or when the Sender's endpoint health is off. The error
// is as for [Worker.SendTest]. It is safe for concurrent use.
func (w *Worker) EndpointHealth(ctx context.Context, connectionID string) (endpoint, urlKey string, failing []webhook.EndpointHealth, err error) {
	conn, err := w.resolveConnection(ctx, connectionID, 0)
	if err != nil {
		return "", "", nil, err
	}
	endpoint, urlKey = conn.Endpoint(), conn.URLKey()
	for _, h := range w.sender.Health() {
		if h.Endpoint == endpoint && !h.PerURL || h.PerURL && h.URLKey == urlKey {
			failing = append(failing, h)
		}
	}
	return endpoint, urlKey, failing, nil
}

// resolveConnection calls the Resolver for the connection with the given
// id, in the run of job jobID, or outside a job when jobID is zero (a Send
// Test, a health check). Its error, or panic, goes to the Logger; the error
// returned is a *resolveError.
func (w *Worker) resolveConnection(ctx context.Context, id string, jobID int64) (webhook.Connection, error) {
	conn, panicVal, err := w.callResolver(ctx, id)
	if err == nil {
		return conn, nil
	}
	re := &resolveError{id: id, errs: []error{err}, gone: errors.Is(err, ErrConnectionGone), panicked: panicVal != nil}
	attrs := []any{slog.String("connection_id", id)}
	if jobID != 0 {
		attrs = append(attrs, slog.Int64("job_id", jobID))
	}
	switch {
	case re.panicked:
		w.logger.ErrorContext(ctx, "riverhook: the Resolver panicked; no attempt is made", append(attrs, slog.Any("panic", panicVal))...)
	case re.gone:
		w.logger.InfoContext(ctx, "riverhook: the connection is gone", append(attrs, slog.String("error", err.Error()))...)
	default:
		w.logger.WarnContext(ctx, "riverhook: the Resolver failed; no attempt is made", append(attrs, slog.String("error", err.Error()))...)
	}
	if ctx.Err() != nil {
		// The client stopping: River puts the job back, uncounted, only
		// for an error that says the context was cancelled.
		re.errs = append(re.errs, ctx.Err())
	}
	return webhook.Connection{}, re
}

// callResolver calls the Resolver, turning a panic into an error and its
// value.
func (w *Worker) callResolver(ctx context.Context, id string) (c webhook.Connection, panicVal any, err error) {
	defer func() {
		if v := recover(); v != nil {
			panicVal, err = v, fmt.Errorf("riverhook: the Resolver panicked: %v", v)
		}
	}()
	c, err = w.resolve(ctx, id)
	return c, nil, err
}

// resolveError is the error of a run whose Resolver failed. Its text, which
// River keeps in the job row and shows in River UI, names the connection by
// id alone: the Resolver's error may quote a URL or a database row. It
// wraps the Resolver's error, and the context's once it is done.
type resolveError struct {
	id             string
	gone, panicked bool
	errs           []error
}

func (e *resolveError) Error() string {
	switch {
	case e.gone:
		return fmt.Sprintf("riverhook: connection %q is gone", e.id)
	case e.panicked:
		return fmt.Sprintf("riverhook: connection %q did not resolve: the Resolver panicked (logged, not kept here)", e.id)
	}
	return fmt.Sprintf("riverhook: connection %q did not resolve (the Resolver's error is logged, not kept here)", e.id)
}

func (e *resolveError) Unwrap() []error { return e.errs }
