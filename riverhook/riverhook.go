// Package riverhook makes webhook deliveries durable with River, the job
// queue on PostgreSQL (github.com/riverqueue/river): a delivery is written
// in the same transaction as the change that caused it (the outbox), survives
// restarts and crashes, and is worked by as many processes as you run. It
// integrates with River rather than being a queue of its own.
//
// Each delivery to a connection is one job ([Args], kind
// "signedhook_delivery") holding the connection's id, the delivery's id, the
// event and the body as exact bytes; never a URL, a header value or a
// secret, which the [Worker] resolves when each attempt runs, so a rotated
// secret or a changed URL applies to pending retries. Each run of the job is
// one [webhook.Sender.Attempt]; the Sender's retry policy decides whether
// and when the next attempt runs, and River schedules it.
//
// # Setting up
//
// Migrate River's schema once (rivermigrate, or the river CLI), register
// the worker, and start a client:
//
//	workers := river.NewWorkers()
//	river.AddWorker(workers, riverhook.NewWorker(sender, resolve, nil))
//	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
//		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 32}},
//		Workers:       workers,
//		FetchCooldown: 10 * time.Millisecond, // the default 100 ms caps a client at MaxWorkers jobs per 100 ms
//	})
//
// Client settings that matter: FetchCooldown (above); RescueStuckJobsAfter,
// after which a job whose worker died (a crash, a SIGKILL) is retried by
// another client: keep it above the Sender's AttemptTimeout, and know that
// River's rescuer runs every 30 s on the elected leader; MaxWorkers, the
// deliveries in flight per client.
//
// # Enqueueing in your transaction
//
//	params, err := riverhook.InsertParams(deliveryID, connectionIDs, payload, nil)
//	...
//	_, err = client.InsertManyTx(ctx, tx, params) // commits with your change, or not at all
//
// A rolled-back transaction leaves no job; a repeated insert of the same
// delivery to the same connection is skipped (unique by both ids). To
// resend a delivery that ended, retry its job (client.JobRetry), or insert
// it under a new delivery id. Receivers must tolerate duplicates: a worker
// killed after the receiver answered is retried.
//
// Watch deliveries and their retries in River's own web UI (riverui): each
// job's errors name every failed attempt's kind and status, and its output
// holds the last attempt's outcome.
package riverhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/riverqueue/river"

	"github.com/signedhook/webhook"
)

// Kind is the River job kind of a delivery.
const Kind = "signedhook_delivery"

// Args is one delivery to one connection, as stored in the job. The body is
// kept as exact bytes (base64 in the job's JSON): PostgreSQL's jsonb would
// reorder a JSON object and break every signature.
type Args struct {
	ConnectionID string `json:"connection_id" river:"unique"`
	DeliveryID   string `json:"delivery_id" river:"unique"`
	Event        string `json:"event"`
	Body         []byte `json:"body"`
}

// Kind returns [Kind].
func (Args) Kind() string { return Kind }

// InsertOptions configures [InsertParams]. A nil *InsertOptions selects the
// defaults.
type InsertOptions struct {
	// Retry is the retry policy of the Sender that works the jobs: each
	// job may run its MaxRetries+1 attempts. Nil means
	// webhook.DefaultRetryPolicy().
	Retry *webhook.RetryPolicy

	// Queue is the River queue; empty means river.QueueDefault.
	Queue string
}

// InsertParams returns the jobs delivering p to each of connectionIDs, for
// your own client.InsertManyTx in the transaction that made the change (or
// InsertMany without one). deliveryID identifies the event; with a
// connection id it makes each job unique, so inserting the same delivery
// twice is skipped. p is validated and encoded once; the error matches
// webhook.ErrInvalidPayload.
func InsertParams(deliveryID string, connectionIDs []string, p webhook.Payload, opts *InsertOptions) ([]river.InsertManyParams, error) {
	if deliveryID == "" {
		return nil, errors.New("riverhook: the delivery id must not be empty")
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	body, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot be encoded as JSON: %w", webhook.ErrInvalidPayload, err)
	}
	if opts == nil {
		opts = &InsertOptions{}
	}
	policy := opts.Retry
	if policy == nil {
		policy = webhook.DefaultRetryPolicy()
	}
	params := make([]river.InsertManyParams, len(connectionIDs))
	for i, id := range connectionIDs {
		params[i] = river.InsertManyParams{
			Args: Args{ConnectionID: id, DeliveryID: deliveryID, Event: p.Event, Body: body},
			InsertOpts: &river.InsertOpts{
				MaxAttempts: policy.MaxRetries + 1,
				Queue:       opts.Queue,
				UniqueOpts:  river.UniqueOpts{ByArgs: true},
			},
		}
	}
	return params, nil
}

// DurableRetryPolicy returns a schedule for deliveries that may wait hours
// for an endpoint to come back: 6 retries after 5 s, 5 min, 30 min, 2 h, 5 h
// and 10 h, about 17.5 hours in all, every failure retried. Use it for the
// Sender of the [Worker] and for [InsertOptions.Retry] alike.
func DurableRetryPolicy() *webhook.RetryPolicy {
	waits := []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour}
	return &webhook.RetryPolicy{
		MaxRetries: len(waits),
		Backoff: func(retry int, _ *http.Response) time.Duration {
			return waits[min(max(retry, 1), len(waits))-1]
		},
	}
}

// ErrConnectionGone is returned by a [Resolver] for a connection that no
// longer exists: its pending deliveries are cancelled.
var ErrConnectionGone = errors.New("riverhook: connection gone")

// Resolver returns the connection with the given id as it is now, with its
// URL, headers and secret. It returns an error matching [ErrConnectionGone]
// when the connection was deleted; any other error fails the attempt, which
// River retries by its own client retry policy.
type Resolver func(ctx context.Context, connectionID string) (webhook.Connection, error)

// WorkerOptions configures a [Worker]. A nil *WorkerOptions, or a zero field,
// selects the documented default.
type WorkerOptions struct {
	// MaxInFlightPerConnection bounds the deliveries to one connection in
	// flight at once in this process, so that one slow endpoint cannot take
	// every worker. A job over the bound is snoozed (not counted as an
	// attempt) for SnoozeFor. Zero means no bound.
	MaxInFlightPerConnection int

	// SnoozeFor is how long a job over MaxInFlightPerConnection waits
	// before it is tried again. Zero means one second.
	SnoozeFor time.Duration

	// OnAttempt, if not nil, is called after each attempt that was made,
	// with its job and log entry: write your own delivery-attempt log here.
	// Its error is logged and never fails the delivery.
	OnAttempt func(ctx context.Context, job *river.Job[Args], a webhook.Attempt) error

	// Logger receives the errors of OnAttempt. Nil means no logging.
	Logger *slog.Logger
}

// Worker is the River worker of deliveries: register it with
// river.AddWorker. Each job is one attempt made with its Sender. It is safe
// for concurrent use, as River uses it.
//
// What it returns to River, by the attempt's outcome:
//   - delivered (2xx): nil, the job completes;
//   - failed and the policy retries: an error naming the attempt's kind
//     and status (never a secret, a header value or the URL's query), and
//     the retry is scheduled after exactly the policy's Attempt.RetryIn;
//   - failed on its last attempt: the same error, and River discards the job;
//   - a connection that is gone, invalid, or whose address is refused by the
//     private-network guard, or a failure the policy never retries: the job
//     is cancelled;
//   - the client stopping during the attempt: River puts the job back
//     without counting the attempt.
//
// The job records the attempt's outcome as its output (river.RecordOutput).
type Worker struct {
	river.WorkerDefaults[Args]

	sender    *webhook.Sender
	resolve   Resolver
	maxPerCon int
	snooze    time.Duration
	onAttempt func(context.Context, *river.Job[Args], webhook.Attempt) error
	logger    *slog.Logger

	retryAt sync.Map // job id -> time.Time of the retry the policy asked for

	mu       sync.Mutex
	inFlight map[string]int // connection id -> deliveries in flight
}

// NewWorker returns a Worker making attempts with sender, whose retry policy
// schedules the retries, and resolving connections with resolve. opts may
// be nil. It panics if sender or resolve is nil.
func NewWorker(sender *webhook.Sender, resolve Resolver, opts *WorkerOptions) *Worker {
	if sender == nil || resolve == nil {
		panic("riverhook: NewWorker needs a Sender and a Resolver")
	}
	if opts == nil {
		opts = &WorkerOptions{}
	}
	w := &Worker{
		sender:    sender,
		resolve:   resolve,
		maxPerCon: opts.MaxInFlightPerConnection,
		snooze:    opts.SnoozeFor,
		onAttempt: opts.OnAttempt,
		logger:    opts.Logger,
		inFlight:  map[string]int{},
	}
	if w.snooze <= 0 {
		w.snooze = time.Second
	}
	if w.logger == nil {
		w.logger = slog.New(slog.DiscardHandler)
	}
	return w
}

// Outcome is what a job records as its output: the last attempt, without
// anything secret.
type Outcome struct {
	Attempt    int           `json:"attempt"`
	StatusCode int           `json:"status_code,omitempty"`
	Kind       string        `json:"kind,omitempty"` // empty when delivered
	Duration   time.Duration `json:"duration_ns"`
	Timestamp  int64         `json:"timestamp"` // the X-Service-Timestamp it was signed with
	Error      string        `json:"error,omitempty"`
	RetryIn    time.Duration `json:"retry_in_ns,omitempty"`
}

// Work makes one attempt of the job's delivery. See [Worker] for what it
// returns.
func (w *Worker) Work(ctx context.Context, job *river.Job[Args]) error {
	args := job.Args
	if !w.acquire(args.ConnectionID) {
		return river.JobSnooze(w.snooze)
	}
	defer w.release(args.ConnectionID)

	conn, err := w.resolve(ctx, args.ConnectionID)
	switch {
	case errors.Is(err, ErrConnectionGone):
		return river.JobCancel(fmt.Errorf("riverhook: connection %q is gone: %w", args.ConnectionID, err))
	case err != nil:
		if ctx.Err() != nil {
			return fmt.Errorf("riverhook: resolving connection %q: %w", args.ConnectionID, ctx.Err())
		}
		return fmt.Errorf("riverhook: resolving connection %q: %w", args.ConnectionID, err)
	}

	a := w.sender.Attempt(ctx, conn, args.Event, args.Body, job.Attempt)
	if a.Kind == webhook.KindCanceled && ctx.Err() != nil {
		// Stopped or timed out: River puts a soft-stopped job back without
		// counting the attempt, and counts a timeout.
		return fmt.Errorf("riverhook: attempt %d interrupted: %w", a.N, context.Cause(ctx))
	}
	out := Outcome{Attempt: a.N, StatusCode: a.StatusCode, Kind: string(a.Kind), Duration: a.Duration,
		Timestamp: a.Timestamp, RetryIn: a.RetryIn}
	if a.Err != nil {
		out.Error = a.Err.Error()
	}
	if err := river.RecordOutput(ctx, out); err != nil {
		w.logger.WarnContext(ctx, "riverhook: recording the outcome", slog.Int64("job_id", job.ID), slog.String("error", err.Error()))
	}
	if w.onAttempt != nil {
		if err := w.onAttempt(ctx, job, a); err != nil {
			w.logger.ErrorContext(ctx, "riverhook: OnAttempt failed; the delivery goes on", slog.Int64("job_id", job.ID),
				slog.String("connection_id", args.ConnectionID), slog.String("error", err.Error()))
		}
	}
	if a.OK() {
		return nil
	}
	failure := fmt.Errorf("riverhook: attempt %d failed (%s, status %d): %w", a.N, a.Kind, a.StatusCode, a.Err)
	switch {
	case a.Kind == webhook.KindInvalid || a.Kind == webhook.KindBlocked:
		return river.JobCancel(failure)
	case a.Retry:
		w.retryAt.Store(job.ID, time.Now().Add(a.RetryIn))
		return failure
	case job.Attempt >= job.MaxAttempts:
		return failure // River discards it
	}
	return river.JobCancel(failure) // the policy gives up before River's last attempt
}

// NextRetry returns when the policy asked the failed job to be retried, so
// that River waits exactly the policy's wait.
func (w *Worker) NextRetry(job *river.Job[Args]) time.Time {
	if at, ok := w.retryAt.LoadAndDelete(job.ID); ok {
		return at.(time.Time)
	}
	return time.Time{} // the client's policy
}

// Timeout returns the Sender's attempt timeout plus room for resolving the
// connection and the hooks, so that River's job timeout covers the attempt.
func (w *Worker) Timeout(*river.Job[Args]) time.Duration {
	return w.sender.AttemptTimeout() + 10*time.Second
}

func (w *Worker) acquire(connectionID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.maxPerCon > 0 && w.inFlight[connectionID] >= w.maxPerCon {
		return false
	}
	w.inFlight[connectionID]++
	return true
}

func (w *Worker) release(connectionID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inFlight[connectionID]--; w.inFlight[connectionID] == 0 {
		delete(w.inFlight, connectionID)
	}
}
