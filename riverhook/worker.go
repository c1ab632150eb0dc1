package riverhook

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"

	"github.com/signedhook/webhook"
)

// ErrConnectionGone is returned by a [Resolver] for a connection that no
// longer exists: its pending deliveries are cancelled.
var ErrConnectionGone = errors.New("riverhook: connection gone")

// Resolver returns the connection with the given id as it is now, with its
// URL, headers and secret, and its own bound in flight and rate
// (webhook.Connection.MaxInFlight and RateLimit, the WorkerOptions'
// defaults where zero). It is called at each run of a job, before the run
// is admitted: answer from memory or one indexed read. It returns an error matching [ErrConnectionGone]
// when the connection was deleted; any other error, or a panic, ends the
// run without an attempt: River runs the job again by its client retry
// policy, and the run costs none of the Sender's attempts (see
// [MaxInterruptedRuns]).
//
// Its error text, or panic value, goes to [WorkerOptions.Logger] and never
// to the job row, since it may quote a URL or a database row: River keeps
// a fixed text naming the connection by id, such as
// `riverhook: connection "crm" did not resolve (the Resolver's error is
// logged, not kept here)` or `riverhook: connection "crm" is gone`. The
// error River's ErrorHandler gets wraps the Resolver's, for errors.Is and
// errors.As.
type Resolver func(ctx context.Context, connectionID string) (webhook.Connection, error)

// Worker is the River worker of deliveries: register it with
// river.AddWorker. Each run of a job makes one attempt with its Sender and
// adds it to the job's attempt log (see the package documentation). It is
// safe for concurrent use, as River uses it.
//
// The number given to [webhook.Sender.Attempt] counts the attempts that
// reached an outcome, so the Sender's retry policy decides on the attempts
// that were made, whatever River counted. What a run returns to River, by
// the attempt's outcome:
//   - delivered (2xx): nil, and the job completes;
//   - failed, and the policy retries: an error such as
//     "riverhook: attempt 1: 503 Service Unavailable; retry in 1s", and
//     River runs the job again after exactly the policy's wait
//     ([Worker.NextRetry]);
//   - failed, and the policy gives up: the job is discarded;
//   - a connection that is gone, invalid, or whose address the
//     private-network guard refuses: the job is cancelled;
//   - an endpoint that is down, with the Sender's endpoint health on
//     (webhook.SenderOptions.Health): nothing is sent, and the job is
//     snoozed, costing no attempt, at least until the endpoint's next probe
//     and after the jobs already waiting for it (see
//     [WorkerOptions.SnoozeFor]); once a probe finds it up, the job's
//     attempt goes out. The job whose run is the probe waits the same way
//     when the probe finds the endpoint still down (no connection, or no
//     answer): its log shows the probe ("probe": true), which costs it no
//     attempt of its policy. A delivery that has waited
//     [WorkerOptions.MaxWait] is discarded, its log and [Delivery].Reason
//     saying so;
//   - the client stopping during the attempt: River puts the job back
//     without counting the run;
//   - the job cancelled in River during the attempt (client.JobCancel,
//     River UI, [EraseSubject]), also when the attempt's answer is read
//     after the cancel: River cancels it; the run adds nothing to its log;
//   - a disabled connection ([StateDisabled]): nothing is sent, nothing
//     is logged, and the job is snoozed an hour at a time until
//     [LifePolicy].KeepFor after the disable, costing no attempt; [Enable]
//     moves it forward. Past KeepFor it is discarded, its log saying why;
//   - an erased job ([Args.Erased]) run again, by River UI's Retry: the job
//     is cancelled with [ErrErased], and nothing is sent;
//   - the process dying during the attempt: once River's rescuer finds the
//     job (see [Worker.RescueStuckJobsAfter]), it runs again at once, and
//     the log shows the cut attempt as interrupted; it costs no attempt.
//
// A job ends, whatever happens, after River's MaxAttempts runs: the
// policy's attempts plus [MaxInterruptedRuns], for an [InsertParams] job.
// The error River keeps for a failed attempt wraps the attempt's Err, for
// errors.Is and errors.As in a river.ErrorHandler.
type Worker struct {
	river.WorkerDefaults[Args]

	sender    *webhook.Sender
	resolve   Resolver
	maxPerCon int
	rateLimit func(string) float64
	snooze    time.Duration
	maxWait   time.Duration
	onAttempt func(context.Context, *river.Job[Args], webhook.Attempt) error
	logger    *slog.Logger
	noLog     bool             // benchmarks only: no attempt log (export_test.go)
	now       func() time.Time // the clock's Now, when not the tests'
	clock     atomic.Pointer[clock]

	admission *admission
	life      LifePolicy // WorkerOptions.Life, defaults set
	states    stateCache

	mu      sync.Mutex
	dueAt   time.Time                 // the last due
	retries map[retryKey]pendingRetry // runs whose NextRetry River is about to ask
	swept   time.Time                 // the last sweep of retries
}

// pendingRetry is what a failed run asks River's NextRetry for.
type pendingRetry struct {
	wait   time.Duration // the policy's wait before the next attempt
	client bool          // River's client retry policy decides instead
	stored time.Time
}

// retryKeep is how long a stored retry waits for River's NextRetry, which
// River asks right after Work returns unless an ErrorHandler cancelled the
// job (the only case storeRetry cannot foresee); older entries are freed.
const retryKeep = time.Minute

// NewWorker returns a Worker making attempts with sender, whose retry policy
// schedules the retries, and resolving connections with resolve. opts may
// be nil. It returns an error if sender or resolve is nil, or if an option
// is negative: as everywhere in the library, zero selects the default and a
// negative value is refused, never taken for zero. River's NewClient
// validates its Config the same way.
//
// Register a Worker in every River client started on the database, also
// those working other queues only: the elected leader's rescuer discards a
// stuck job of a kind its client has no worker for, losing a delivery
// whose process died. A client that works no delivery needs one only for
// the rescuer, which asks its [Worker.Timeout] and [Worker.NextRetry]:
// build it with a Sender of the same attempt timeout. See the package
// documentation.
func NewWorker(sender *webhook.Sender, resolve Resolver, opts *WorkerOptions) (*Worker, error) {
	if sender == nil || resolve == nil {
		return nil, errors.New("riverhook: NewWorker needs a Sender and a Resolver")
	}
	if opts == nil {
		opts = &WorkerOptions{}
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	w := &Worker{
		sender:    sender,
		resolve:   resolve,
		maxPerCon: opts.MaxInFlightPerConnection,
		rateLimit: opts.RateLimit,
		snooze:    cmp.Or(opts.SnoozeFor, time.Second),
		maxWait:   cmp.Or(opts.MaxWait, DefaultMaxWait),
		onAttempt: opts.OnAttempt,
		logger:    opts.Logger,
		retries:   map[retryKey]pendingRetry{},
	}
	w.life, _ = opts.Life.withDefaults() // validated
	w.clock.Store(processClock(nil))
	w.now = func() time.Time { return w.clock.Load().Now() }
	if w.logger == nil {
		w.logger = slog.New(slog.DiscardHandler)
	}
	places := opts.Places
	if places == nil {
		places = newMemoryPlaces(time.Now)
	}
	w.admission = newAdmission(places, w.snooze, w.logger)
	return w, nil
}

// Work runs the job once: one attempt of its delivery, added to its attempt
// log. It blocks for the attempt, at most [Worker.Timeout]. See [Worker] for
// what it returns.
func (w *Worker) Work(ctx context.Context, job *river.Job[Args]) error {
	if job.Args.Erased {
		// Run again after its erasure (River UI's Retry): nothing to send.
		return river.JobCancel(ErrErased)
	}
	w.due(ctx)
	conn, err := w.resolveConnection(ctx, job.Args.ConnectionID, job.ID)
	if err != nil {
		if !cancelledRemotely(ctx) {
			w.record(ctx, job, w.load(ctx, job).entries)
		}
		if errors.Is(err, ErrConnectionGone) {
			return river.JobCancel(err)
		}
		if !stopping(ctx) {
			w.storeRetry(job, pendingRetry{client: true})
		}
		return err
	}
	st, err := w.state(ctx, job.Args.ConnectionID)
	if err != nil {
		w.logger.LogAttrs(ctx, slog.LevelError, "riverhook: cannot read the connection's state; no attempt is made",
			slog.String("connection_id", job.Args.ConnectionID), slog.Int64("job_id", job.ID), slog.String("error", err.Error()))
		if !stopping(ctx) {
			w.storeRetry(job, pendingRetry{client: true})
		}
		return err
	}
	if st.State == StateDisabled {
		return w.keep(ctx, job, st)
	}
	lim, err := w.limits(ctx, job.Args.ConnectionID, conn)
	if err != nil {
		return river.JobSnooze(w.snooze)
	}
	t, wait := w.admission.enter(ctx, job, lim)
	if t == nil {
		return river.JobSnooze(wait)
	}
	defer w.admission.leave(ctx, t)
	w.checkPolicy(ctx, job)

	r := w.load(ctx, job)
	r.ticket = t
	if wait := signAfter(r.entries, time.Now()); wait > 0 {
		// The attempt before was signed at this millisecond or later (a
		// retry due at once, another process's clock ahead): this one's
		// timestamp must pass it, so that no receiver takes it for a copy.
		if r.cut > 0 {
			w.record(ctx, job, r.entries) // the interrupted runs, told once
		}
		return river.JobSnooze(wait)
	}
	attempt, stop := ctx, func() {}
	if !slices.ContainsFunc(r.entries, logEntry.placeCut) {
		// One cut a delivery: a session that keeps ending under its
		// attempts (an idle_session_timeout shorter than an attempt) would
		// cut them for ever, each a copy at the receiver.
		attempt, stop = t.guard(ctx)
	}
	a := w.sender.Attempt(attempt, conn, job.Args.Event, job.Args.Body, r.n)
	stop()
	if cause := context.Cause(attempt); a.Kind == webhook.KindCanceled && errors.Is(cause, errPlaceLost) && ctx.Err() == nil {
		return w.interrupt(ctx, r, a, cause)
	}
	return w.result(ctx, r, a)
}

// interrupt logs attempt a of run r, cut as its place in flight was lost
// (cause says why the session holding it ended: the process's log has it,
// the attempt log only that it was lost), as interrupted (it costs no
// retry), and snoozes the job to its connection's next slot.
func (w *Worker) interrupt(ctx context.Context, r *run, a webhook.Attempt, cause error) error {
	w.logger.LogAttrs(ctx, slog.LevelWarn, "riverhook: an attempt was cut: the session holding its place in flight ended; it runs again",
		slog.String("connection_id", r.ticket.id), slog.Int64("job_id", r.job.ID), slog.String("error", cause.Error()))
	a.Kind, a.Err = webhook.KindInterrupted, errPlaceLost
	r.entries = append(r.entries, newLogEntry(a, r.job.Attempt))
	w.record(ctx, r.job, r.entries)
	w.notify(ctx, r.hooked, a)
	return river.JobSnooze(w.admission.wait(ctx, r.ticket.id, w.admission.spacing(r.ticket.id, r.ticket.lim)))
}

// run is one run of a job: its attempt log as loaded, and the number of
// the attempt it makes.
type run struct {
	job     *river.Job[Args]
	hooked  *river.Job[Args] // what OnAttempt gets: a copy, the caller's to keep
	entries []logEntry
	cut     int     // the interrupted attempts this run added to the log
	n       int     // the policy's number of this run's attempt
	ticket  *ticket // its admission
}

// load reads job's attempt log, adds the attempts that crashed runs cut
// (telling OnAttempt of them), and numbers this run's attempt.
func (w *Worker) load(ctx context.Context, job *river.Job[Args]) *run {
	r := &run{job: job, hooked: job, n: job.Attempt}
	if w.onAttempt != nil {
		// OnAttempt gets a copy, the caller's to keep: the Worker writes
		// River's job (MaxAttempts, when the policy gives up).
		row := *job.JobRow
		r.hooked = &river.Job[Args]{JobRow: &row, Args: job.Args}
	}
	if w.noLog {
		return r
	}
	entries, err := readLog(job.JobRow)
	if err != nil {
		w.logger.WarnContext(ctx, "riverhook: the job's attempt log is unreadable; starting a new one",
			slog.Int64("job_id", job.ID), slog.String("error", err.Error()))
	}
	cut := interrupted(job.JobRow, entries, job.Attempt-1)
	r.entries, r.cut = append(entries, cut...), len(cut)
	for _, e := range cut {
		w.notify(ctx, r.hooked, e.attempt())
	}
	r.n = attemptsMade(r.entries) + 1
	return r
}

// result logs attempt a of run r and maps it to what Work returns River.
func (w *Worker) result(ctx context.Context, r *run, a webhook.Attempt) error {
	job := r.job
	if a.Kind == webhook.KindDown {
		return w.waitForEndpoint(ctx, r, a)
	}
	w.admission.ended(ctx, r.ticket, a, w.wake)
	if a.Kind == webhook.KindCanceled && ctx.Err() != nil {
		// The client stopping (River puts the job back and does not count
		// the run), the job cancelled in River, or its timeout. A run
		// cancelled in River writes no log: the row holds what it loaded,
		// unless an erasure (EraseSubject) rewrote it meanwhile, which the
		// write would undo; DeliveryOf finds the interrupted runs it added
		// from River's errors, as OnAttempt was told of them.
		if !cancelledRemotely(ctx) {
			w.record(ctx, job, r.entries)
		}
		if !stopping(ctx) {
			w.storeRetry(job, pendingRetry{client: true})
		}
		return fmt.Errorf("riverhook: attempt %d not made: %w", r.n, context.Cause(ctx))
	}
	if cancelledRemotely(ctx) {
		// The job was cancelled in River before the attempt's answer was
		// read: net/http returns an answer that races the cancel, such as
		// one a receiver gives as the cancelled request's connection
		// closes. As any run cancelled in River, it writes no log (an
		// erasure may have rewritten the row since it was loaded), and
		// River cancels the job, whatever the answer: a success would
		// complete it.
		w.notify(ctx, r.hooked, a)
		return fmt.Errorf("riverhook: attempt %d answered after the job was cancelled in River: %w", r.n, context.Cause(ctx))
	}
	// The delivery ends with this run when the policy gives up, or when
	// River has no run left for the retry.
	w.observe(ctx, job, a, !a.Retry || !stillDown(a) && job.Attempt >= job.MaxAttempts)
	if stillDown(a) {
		return w.waitForEndpoint(ctx, r, a)
	}
	r.entries = append(r.entries, newLogEntry(a, job.Attempt))
	w.record(ctx, job, r.entries)
	w.notify(ctx, r.hooked, a)

	switch {
	case a.OK():
		return nil
	case a.Kind == webhook.KindInvalid || a.Kind == webhook.KindBlocked || a.Kind == webhook.KindSkipped:
		return river.JobCancel(&runError{a: a})
	case !a.Retry:
		// River discards a job that fails on its last run; this is the
		// last one, whatever runs River kept for interrupted attempts.
		discardAfterThisRun(job)
		return &runError{a: a, next: "the policy gives up"}
	case job.Attempt >= job.MaxAttempts:
		return &runError{a: a, next: fmt.Sprintf("no run left for its retry: River's %d runs are spent, %d of them without an attempt",
			job.MaxAttempts, job.Attempt-attemptsMade(r.entries))}
	}
	w.storeRetry(job, pendingRetry{wait: a.RetryIn})
	return &runError{a: a, next: "retry in " + a.RetryIn.String()}
}

// NextRetry returns when River runs a failed job again: exactly the
// policy's wait after now for a failed attempt, whatever the wait (0
// included); River's client retry policy for a run that could not make its
// attempt (the Resolver failed); and now for a job River rescued after its
// process died, which the Worker never saw fail. Now is the database's
// time as the process reads it, once [Register] has set up the client.
func (w *Worker) NextRetry(job *river.Job[Args]) time.Time {
	w.mu.Lock()
	p, ok := w.retries[job]
	delete(w.retries, job)
	w.mu.Unlock()
	now := w.clock.Load().Now()
	switch {
	case !ok:
		return now
	case p.client:
		return time.Time{}
	}
	return now.Add(p.wait)
}

// Timeout returns the Sender's attempt timeout plus ten seconds of room for
// resolving the connection and OnAttempt: River ends a run after it, and
// its rescuer leaves a running job alone until it has passed. It bounds
// this worker's jobs alone, whatever the client's JobTimeout.
func (w *Worker) Timeout(*river.Job[Args]) time.Duration {
	return w.sender.AttemptTimeout() + 10*time.Second
}

// RescueStuckJobsAfter returns the least river.Config.RescueStuckJobsAfter
// that never rescues a delivery still running: the worker's [Worker.Timeout]
// plus River's JobStuckThresholdDefault, the time River gives a job past
// its timeout before calling it stuck; or clientJobTimeout, the client's
// JobTimeout (zero means River's default, one minute), when that is longer,
// as River requires. With the default Sender it is one minute: a delivery
// whose process died runs again within about a minute and a half, as
// River's rescuer looks every 30 seconds. River's default is one hour.
//
// The setting is the client's, for every job kind, and it is safe for
// them: River's rescuer also leaves a job alone until its kind's own
// timeout (or the client's JobTimeout) has passed, and a kind without a
// timeout is never rescued.
func (w *Worker) RescueStuckJobsAfter(clientJobTimeout time.Duration) time.Duration {
	if clientJobTimeout == 0 {
		clientJobTimeout = river.JobTimeoutDefault
	}
	return max(w.Timeout(nil)+river.JobStuckThresholdDefault, clientJobTimeout)
}

// record stores the job's attempt log as its River output.
func (w *Worker) record(ctx context.Context, job *river.Job[Args], entries []logEntry) {
	if w.noLog {
		return
	}
	if entries == nil {
		entries = []logEntry{} // "attempts": [], not null
	}
	out, err := marshalLog(entries)
	if err == nil {
		err = river.RecordOutput(ctx, json.RawMessage(out))
	}
	if err != nil {
		w.logger.WarnContext(ctx, "riverhook: recording the attempt log", slog.Int64("job_id", job.ID), slog.String("error", err.Error()))
	}
}

// notify calls OnAttempt, logging its error or panic.
func (w *Worker) notify(ctx context.Context, job *river.Job[Args], a webhook.Attempt) {
	if w.onAttempt == nil {
		return
	}
	defer func() {
		if v := recover(); v != nil {
			w.logger.ErrorContext(ctx, "riverhook: OnAttempt panicked; the delivery goes on", slog.Int64("job_id", job.ID),
				slog.String("connection_id", job.Args.ConnectionID), slog.Any("panic", v))
		}
	}()
	if err := w.onAttempt(ctx, job, a); err != nil {
		w.logger.ErrorContext(ctx, "riverhook: OnAttempt failed; the delivery goes on", slog.Int64("job_id", job.ID),
			slog.String("connection_id", job.Args.ConnectionID), slog.String("error", err.Error()))
	}
}

// storeRetry keeps what NextRetry returns for the failed run of job, which
// River asks right after Work returns, unless this is the job's last run
// (River discards it) or an ErrorHandler cancels the job; it frees the
// entries River never asked for.
func (w *Worker) storeRetry(job *river.Job[Args], p pendingRetry) {
	if job.Attempt >= job.MaxAttempts {
		return
	}
	now := w.now()
	p.stored = now
	w.mu.Lock()
	defer w.mu.Unlock()
	if now.Sub(w.swept) >= retryKeep {
		for j, old := range w.retries {
			if now.Sub(old.stored) >= retryKeep {
				delete(w.retries, j)
			}
		}
		w.swept = now
	}
	w.retries[job] = p
}

// runError is the error a run returns to River for a failed attempt:
// "riverhook: attempt 4: 500 Internal Server Error; retry in 8s", as River
// UI shows it. It wraps the attempt's Err.
type runError struct {
	a    webhook.Attempt
	next string // what follows: "retry in 1s", "the policy gives up"
}

func (e *runError) Error() string {
	s := "riverhook: " + attemptText(e.a)
	if e.next != "" {
		s += "; " + e.next
	}
	return s
}

func (e *runError) Unwrap() error { return e.a.Err }

// attemptText is a failed attempt in a few words: "attempt 4: 500 Internal
// Server Error", "attempt 2: timeout: timed out waiting for https://host/…:
// ...". The attempt's error text is cut as its log entry's is (a receiver
// chooses a reason phrase of up to the response header bound), so what
// River keeps of a run is bounded too.
func attemptText(a webhook.Attempt) string {
	if a.Kind == webhook.KindStatus && a.StatusCode != 0 {
		text := http.StatusText(a.StatusCode)
		if text == "" {
			text = "status"
		}
		return fmt.Sprintf("attempt %d: %d %s", a.N, a.StatusCode, text)
	}
	if a.Err == nil {
		return fmt.Sprintf("attempt %d: %s", a.N, a.Kind)
	}
	return fmt.Sprintf("attempt %d: %s: %s", a.N, a.Kind, cutJSON(strings.TrimPrefix(a.Err.Error(), "webhook: "), maxErrorBytes))
}

// signAfter returns how long to wait before an attempt signed at now would
// carry a timestamp later than every attempt of entries: zero, but when the
// last was signed at now's millisecond or later.
func signAfter(entries []logEntry, now time.Time) time.Duration {
	var last int64
	for _, e := range entries {
		last = max(last, e.Timestamp)
	}
	if ms := now.UnixMilli(); last >= ms {
		return time.Duration(last+1-ms) * time.Millisecond
	}
	return 0
}

// limits returns the bound in flight and the time between starts of conn,
// the connection with the given id: its own MaxInFlight and RateLimit, or
// the Worker's options where they are zero; or an error when RateLimit
// panicked, its value logged.
func (w *Worker) limits(ctx context.Context, id string, conn webhook.Connection) (lim limits, err error) {
	lim.bound = cmp.Or(conn.MaxInFlight, w.maxPerCon)
	if conn.RateLimit > 0 || w.rateLimit == nil {
		lim.every = paceEvery(conn.RateLimit)
		return lim, nil
	}
	defer func() {
		if v := recover(); v != nil {
			w.logger.LogAttrs(ctx, slog.LevelError, "riverhook: WorkerOptions.RateLimit panicked; the delivery waits",
				slog.String("connection_id", id), slog.Any("panic", v))
			err = fmt.Errorf("riverhook: WorkerOptions.RateLimit panicked for connection %q", id)
		}
	}()
	lim.every = paceEvery(w.rateLimit(id))
	return lim, nil
}

// due makes the deliveries due within the next two seconds ready at their
// time, at most once a second per process: a snoozed job then runs at its
// slot, not at River's next scheduler pass (every 5 s, and all that came
// due since at once). It runs in Work, so while the process works
// deliveries; when none runs, River's scheduler still makes them available.
// Its statement reads the database's clock for the Worker's (see clock).
func (w *Worker) due(ctx context.Context) {
	query, schema, ok := riverQuery(ctx)
	if !ok {
		return
	}
	c := w.clock.Load()
	w.mu.Lock()
	now := time.Now()
	if now.Sub(w.dueAt) < time.Second {
		w.mu.Unlock()
		if c.unread() {
			// A run of the process's first: it must not store a time before
			// the clock has read the database's.
			w.readClock(ctx, query, c)
		}
		return
	}
	w.dueAt = now
	w.mu.Unlock()
	sent := c.local.Now()
	_, start, end, err := due(ctx, query, schema, 2*time.Second)
	if err != nil {
		w.logger.LogAttrs(ctx, slog.LevelWarn, "riverhook: cannot make the deliveries due ready; River's scheduler does",
			slog.String("error", err.Error()))
		return
	}
	c.read(sent, c.local.Now(), start, end) // the database's clock, read with the statement
}

// readClock reads the database's clock for c through query, the River
// client's; on an error, c stays as it was (logged).
func (w *Worker) readClock(ctx context.Context, query func(ctx context.Context, sql string, args ...any) interface{ Scan(...any) error }, c *clock) {
	var start, end time.Time
	sent := c.local.Now()
	if err := query(ctx, `SELECT statement_timestamp(), clock_timestamp()`).Scan(&start, &end); err != nil {
		w.logger.LogAttrs(ctx, slog.LevelWarn, "riverhook: cannot read the database's clock; the run goes on the process's",
			slog.String("error", err.Error()))
		return
	}
	c.read(sent, c.local.Now(), start, end)
}

// wake moves connection id's snoozed deliveries forward, every apart from
// now, and returns how many wait.
func (w *Worker) wake(ctx context.Context, id string, every time.Duration) (int, error) {
	query, schema, ok := riverQuery(ctx)
	if !ok {
		return 0, nil
	}
	return wake(ctx, query, schema, id, every)
}

// stillDown reports whether a was the probe of a down endpoint (origin or
// URL) that found it still down, as the Sender saw it (webhook.Attempt.Probe:
// no connection, or no answer, and the endpoint still held back). Such a
// probe is a wait for the endpoint, as a refusal to send is (KindDown), not
// an attempt of the delivery's policy.
func stillDown(a webhook.Attempt) bool { return a.Probe }

// probeEntry is the log entry of a, a probe that found its endpoint still
// down: attemptsMade does not count it.
func probeEntry(a webhook.Attempt, run int) logEntry {
	e := newLogEntry(a, run)
	e.Probe = true
	return e
}

// appendProbe appends e, a probe's entry, to entries, in place of the
// probe entry they end with: a delivery waiting days for a dead endpoint,
// the probe of each of its wakes, keeps the last of a run of probes, so
// that its log, rewritten at every run, stays the size of its attempts.
func appendProbe(entries []logEntry, e logEntry) []logEntry {
	// A probe signed before the one it follows (another process's clock
	// behind) does not replace it: signAfter reads the latest timestamp
	// sent from the log.
	if n := len(entries); n > 0 && entries[n-1].Probe && e.Timestamp >= entries[n-1].Timestamp {
		entries[n-1] = e
		return entries
	}
	return append(entries, e)
}

// waitForEndpoint snoozes the job of run r, whose attempt a was not sent
// because its endpoint is down, or was its probe and found it still down
// (logged, and told to OnAttempt, with the snooze as its retry), after the
// other jobs waiting for it (see admission.waitForEndpoint); or, once the delivery has
// waited MaxWait, discards it with a log entry and a reason that say so,
// telling OnAttempt. A snooze costs no attempt, River's or the policy's.
func (w *Worker) waitForEndpoint(ctx context.Context, r *run, a webhook.Attempt) error {
	job := r.job
	now := w.now()
	since := job.CreatedAt
	if now.Sub(since) >= w.maxWait {
		// Kept while its connection was disabled, the wait counts from
		// Enable: read once the wait is over, which is rare.
		if query, schema, ok := riverQuery(ctx); ok {
			if s, err := readState(ctx, query, schema, job.Args.ConnectionID); err == nil && s.EnabledAt.After(since) {
				since = s.EnabledAt
			}
		}
	}
	if waited := now.Sub(since); waited >= w.maxWait {
		a.Retry, a.RetryIn = false, 0
		gaveUp := fmt.Errorf("riverhook: gave up after waiting %s for the endpoint (WorkerOptions.MaxWait)", waited.Round(time.Minute).String())
		if a.Probe {
			// The probe is logged as made, then the end, as a refusal to
			// send: an entry of kind down, whose words an erasure keeps
			// and Delivery.Reason reads.
			r.entries = appendProbe(r.entries, probeEntry(a, job.Attempt))
			end := newLogEntry(webhook.Attempt{N: a.N, Kind: webhook.KindDown, Err: fmt.Errorf("%w; its last probe: %s", gaveUp, a.Kind)}, job.Attempt)
			r.entries = append(r.entries, end)
			a.Err = fmt.Errorf("%w: %w", gaveUp, a.Err)
		} else {
			a.Err = fmt.Errorf("%w: %w", gaveUp, a.Err)
			r.entries = append(r.entries, newLogEntry(a, job.Attempt))
		}
		w.record(ctx, job, r.entries)
		w.notify(ctx, r.hooked, a)
		discardAfterThisRun(job)
		return &runError{a: a, next: "gave up waiting for the endpoint"}
	}
	wait := w.admission.waitForEndpoint(ctx, job.Args.ConnectionID, r.ticket.lim, a.RetryIn) // RetryIn: until the endpoint's next probe
	switch {
	case a.Probe: // sent, and logged; it costs no attempt (probeEntry)
		a.Retry, a.RetryIn = true, wait
		r.entries = appendProbe(r.entries, probeEntry(a, job.Attempt))
		w.record(ctx, job, r.entries)
		w.notify(ctx, r.hooked, a)
	case r.cut > 0:
		w.record(ctx, job, r.entries) // the log has nothing new but interrupted runs
	}
	return river.JobSnooze(wait)
}

// state returns the state of connection id: as the process read the
// states not active within stateCacheFor, or reads them now; a disabled
// one is read at each run, so that a run after Enable finds it active at
// once. Outside a River client's run with a pool (rivertest's), every
// connection is active.
func (w *Worker) state(ctx context.Context, id string) (ConnectionState, error) {
	s, _, err := w.knownState(ctx, id)
	if err != nil || s.State != StateDisabled {
		return s, err
	}
	query, schema, ok := riverQuery(ctx)
	if !ok {
		return s, nil
	}
	s, err = readState(ctx, query, schema, id)
	if err != nil {
		return s, err
	}
	w.states.put(id, s)
	return s, nil
}

// knownState returns connection id's state as the process knows it,
// reading the states not active first when what it knows is older than
// stateCacheFor; fresh is false outside a River client's run with a pool
// (rivertest's), where every connection is active.
func (w *Worker) knownState(ctx context.Context, id string) (s ConnectionState, fresh bool, err error) {
	if s, fresh = w.states.get(id); fresh {
		return s, true, nil
	}
	query, schema, ok := riverQuery(ctx)
	if !ok {
		return ConnectionState{ConnectionID: id, State: StateActive}, false, nil
	}
	err = w.states.refresh(ctx, func(ctx context.Context) (map[string]ConnectionState, error) {
		return readStates(ctx, query, schema)
	})
	if err != nil {
		return s, false, err
	}
	s, fresh = w.states.get(id)
	return s, fresh, nil
}

// observe moves the state of job's connection as attempt a says (see
// [LifePolicy]), when it moves it enough to be written: a change, and its
// notices, are decided again under the state row's lock, in one
// transaction. A notice does not count job as waiting when its delivery
// ends with this run.
func (w *Worker) observe(ctx context.Context, job *river.Job[Args], a webhook.Attempt, ends bool) {
	id := job.Args.ConnectionID
	o := outcomeOf(a)
	if o == outcomeNone {
		return
	}
	// Decided on what the process knows, read once a second for every
	// connection: an attempt longer than that must not cost a locking
	// transaction when it changes nothing.
	if s, fresh, err := w.knownState(ctx, id); err == nil && fresh && !w.life.worth(s, o, w.now()) {
		return
	}
	client, db, ok := riverClient(ctx)
	if !ok {
		return
	}
	ctx, cancel := detached(ctx)
	defer cancel()
	var ending int64
	if ends {
		ending = job.ID
	}
	s, changes, err := transition(ctx, client, db, id, ending, func(cur ConnectionState, now time.Time) (ConnectionState, []Change) {
		if !w.life.worth(cur, o, now) {
			return cur, nil
		}
		return w.life.next(cur, o, now)
	})
	if err != nil {
		w.logger.LogAttrs(ctx, slog.LevelWarn, "riverhook: cannot write the connection's state; the next attempt tries again",
			slog.String("connection_id", id), slog.String("error", err.Error()))
		return
	}
	w.states.put(id, s)
	for _, c := range changes {
		w.logger.LogAttrs(ctx, slog.LevelInfo, "riverhook: the connection's life changed",
			slog.String("connection_id", id), slog.String("change", string(c)), slog.String("reason", string(s.Reason)))
	}
}

// keep snoozes job, a delivery to a disabled connection (state s), until
// the end of [LifePolicy].KeepFor, making no attempt and adding nothing to
// its log: [Enable] moves it forward. Past KeepFor, the delivery is given
// up, its log and [Delivery].Reason saying why.
func (w *Worker) keep(ctx context.Context, job *river.Job[Args], s ConnectionState) error {
	if wait := s.DisabledAt.Add(w.life.KeepFor).Sub(w.now()); wait > 0 {
		return river.JobSnooze(min(wait, keepAtMost))
	}
	r := w.load(ctx, job)
	a := webhook.Attempt{N: r.n, Kind: webhook.KindDown, Err: fmt.Errorf("riverhook: gave up: the connection was disabled (%s) at %s, longer ago than LifePolicy.KeepFor (%s)",
		s.Reason, s.DisabledAt.UTC().Format(time.RFC3339), w.life.KeepFor)}
	r.entries = append(r.entries, newLogEntry(a, job.Attempt))
	w.record(ctx, job, r.entries)
	w.notify(ctx, r.hooked, a)
	discardAfterThisRun(job)
	return &runError{a: a, next: "gave up: the connection is disabled"}
}
