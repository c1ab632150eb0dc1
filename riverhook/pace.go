package riverhook

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/signedhook/webhook"
)

// This file paces the jobs that must wait for their connection: over
// MaxInFlightPerConnection, or to an endpoint that is down. Each such job
// is snoozed to a slot of its own, handed out at the rate the connection
// can take, rather than for a fixed time: a backlog of n jobs then costs
// River about one run per delivery made (and one to learn it must wait),
// not n runs every snooze, and healthy connections keep River's capacity.

// pacer hands out one connection's slots. Under Worker.mu.
type pacer struct {
	busyNext  time.Time           // the last slot handed to a job over the bound
	frontNext time.Time           // the last slot handed to one whose slot had passed
	downNext  time.Time           // the last slot handed to a job waiting for a down endpoint
	rateNext  time.Time           // the connection's next start at its rate, without Places
	woke      time.Time           // when its waiting deliveries were last woken (Places.Wake)
	wokeAgain time.Time           // the last wake, of the backlog or of its stragglers
	handed    time.Duration       // the slowest spacing of the fleet slots handed (Places.Slot) since its waiting jobs were last moved
	respaced  time.Time           // when its waiting jobs were last moved to a shorter spacing
	took      time.Duration       // a moving average of its attempts' durations; 0 before the first
	slots     map[int64]time.Time // job id -> its slot, until it has a place in flight
	used      time.Time           // when a job last asked for a slot
}

// observe adds an attempt's duration to the moving average (1/8 weight).
func (p *pacer) observe(d time.Duration) {
	if p.took == 0 {
		p.took = d
		return
	}
	p.took += (d - p.took) / 8
}

// busySlot returns how long job id, over the bound, snoozes: to a slot of
// its own, the slots spaced by spacing (one attempt's time over the bound:
// the time in which one place in flight frees). A slot beyond River's
// scheduler interval wakes the job that much early, so that the
// scheduler's lateness never bunches the jobs of several slots together:
// woken early, the job snoozes again exactly to its slot, which River keeps
// to the millisecond. A job that comes at or after its slot and still finds
// no place (the connection slowed) waits at the front, among the jobs whose
// slot has passed, not behind the whole backlog.
func (p *pacer) busySlot(id int64, now time.Time, spacing time.Duration) time.Duration {
	if p.slots == nil {
		p.slots = map[int64]time.Time{}
	}
	slot, ok := p.slots[id]
	if ok && slot.Sub(now) > schedulerInterval+spacing {
		// Woken long before its slot: the backlog was moved forward
		// (Places.Wake, by any process), and every slot here with it.
		p.reset(now)
		ok = false
	}
	switch {
	case ok && slot.After(now): // woken early on purpose: the rest of the wait
		return slot.Sub(now)
	case ok: // its slot came, and went to another: the front
		slot = later(now, p.frontNext).Add(spacing)
		p.frontNext = slot
	default:
		slot = later(now, p.busyNext).Add(spacing)
		p.busyNext = slot
	}
	p.slots[id] = slot
	wait := slot.Sub(now)
	if wait > schedulerInterval {
		wait -= schedulerInterval
	}
	return wait
}

// forget drops job id's slot: it has its place in flight.
func (p *pacer) forget(id int64) { delete(p.slots, id) }

// reset forgets every slot handed out: the waiting jobs were moved forward
// to run from now at the connection's pace.
func (p *pacer) reset(now time.Time) {
	clear(p.slots)
	p.busyNext, p.frontNext, p.downNext = now, now, now
}

// downSlot returns how long a job waiting for a down endpoint snoozes: at
// least until the endpoint may be tried (wait, from endpoint health), and
// after the jobs already waiting, spaced by spacing, so that the waiting
// jobs together wake at most once a spacing however many they are.
func (p *pacer) downSlot(now time.Time, wait, spacing time.Duration) time.Duration {
	slot := later(now.Add(wait), p.downNext.Add(spacing))
	p.downNext = slot
	return slot.Sub(now)
}

// idle reports whether p holds nothing worth keeping at now.
func (p *pacer) idle(now time.Time) bool {
	return len(p.slots) == 0 && !p.busyNext.After(now) && !p.frontNext.After(now) && !p.downNext.After(now)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// DefaultMaxWait is how long a delivery waits for a down endpoint by
// default: three days, the horizon of Stripe's retries, which customers of
// webhooks know. Past it the data is stale for most receivers, and a
// service that disables an endpoint after days of failures (Svix does after
// five) has stopped sending to it anyway.
const DefaultMaxWait = 72 * time.Hour

// forgetSlot drops job's slot: it passed every bound and makes its
// attempt.
func (w *Worker) forgetSlot(job *river.Job[Args]) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p := w.pacers[job.Args.ConnectionID]; p != nil {
		p.forget(job.ID)
	}
}

// waitSlot returns how long job, over its connection's bound or early for
// its rate, snoozes: to its slot. Without Places, the process's own (see
// pacer.busySlot). With Places, the fleet's next slot (Places.Slot), which
// Places.Due makes it run at on time (see Worker.due), also for a job back
// at its slot that found no place: the fleet's slots are spaced at what
// the endpoint takes, so a slot at the front would be one more than the
// places free, and the job holding the next slot would find none either,
// each miss bringing another. A store that fails snoozes the job for
// SnoozeFor, logged.
func (w *Worker) waitSlot(ctx context.Context, job *river.Job[Args], every time.Duration) time.Duration {
	id := job.Args.ConnectionID
	w.mu.Lock()
	p, now := w.pacer(id), w.now()
	spacing := w.spacing(p, every)
	if w.places == nil {
		defer w.mu.Unlock()
		return p.busySlot(job.ID, now, spacing)
	}
	// The slowest: a slot handed at the endpoint's pace, once known, must
	// not hide the slower ones handed before it, which respace moves.
	p.handed = max(p.handed, spacing)
	w.mu.Unlock()
	wait, err := w.places.Slot(ctx, id, spacing)
	if err != nil {
		w.logger.LogAttrs(ctx, slog.LevelWarn, "riverhook: cannot take a slot of the connection's; the delivery waits",
			slog.String("connection_id", id), slog.Int64("job_id", job.ID), slog.String("error", err.Error()))
		return w.snooze
	}
	return wait
}

// spacing is the time between the slots of p's connection: its attempt
// time over its bound (a place frees that often), or its time between
// starts when longer. A job a little early for its place holds on for it
// (Worker.holdOn). Under w.mu.
func (w *Worker) spacing(p *pacer, every time.Duration) time.Duration {
	if w.maxPerCon <= 0 {
		return every
	}
	took := p.took
	if took == 0 {
		took = w.snooze
	}
	return max(took/time.Duration(w.maxPerCon), every)
}

// rateEvery returns the time between starts of connection id's deliveries
// (WorkerOptions.RateLimit), or zero for no rate; or an error when
// RateLimit panicked, its value logged. RateLimit is the caller's code:
// never call it under w.mu.
func (w *Worker) rateEvery(ctx context.Context, id string) (every time.Duration, err error) {
	if w.rateLimit == nil {
		return 0, nil
	}
	defer func() {
		if v := recover(); v != nil {
			w.logger.LogAttrs(ctx, slog.LevelError, "riverhook: WorkerOptions.RateLimit panicked; the delivery waits",
				slog.String("connection_id", id), slog.Any("panic", v))
			every, err = 0, fmt.Errorf("riverhook: WorkerOptions.RateLimit panicked for connection %q", id)
		}
	}()
	return paceEvery(w.rateLimit(id)), nil
}

// pace takes job's connection's next start when it has a rate
// (WorkerOptions.RateLimit), across the fleet with Places; or returns how
// long job snoozes for one: to its slot. A store that fails snoozes the
// job for SnoozeFor, logged.
func (w *Worker) pace(ctx context.Context, job *river.Job[Args], every time.Duration) (time.Duration, bool) {
	if every <= 0 {
		return 0, true
	}
	id := job.Args.ConnectionID
	if w.places != nil {
		wait, err := w.places.Pace(ctx, id, float64(time.Second)/float64(every))
		if err != nil {
			w.logger.LogAttrs(ctx, slog.LevelWarn, "riverhook: cannot take the connection's next start; the delivery waits",
				slog.String("connection_id", id), slog.Int64("job_id", job.ID), slog.String("error", err.Error()))
			return w.snooze, false
		}
		if wait <= 0 {
			return 0, true
		}
		return w.waitSlot(ctx, job, every), false
	}
	w.mu.Lock()
	p, now := w.pacer(id), w.now()
	if !p.rateNext.After(now) {
		p.rateNext = now.Add(every)
		w.mu.Unlock()
		return 0, true
	}
	w.mu.Unlock()
	return w.waitSlot(ctx, job, every), false
}

// paces reports whether attempt a's duration is the endpoint's time to take
// a delivery, which spaces the connection's slots: an answer (2xx or not),
// or an attempt that waited for one until its timeout. An attempt never
// sent (an event the connection does not subscribe to, an invalid
// connection, an address the guard refuses, an endpoint down) took none of
// the endpoint's time, one cut by its context did not end, and one that
// could not connect (refused, DNS, TLS, reset) says how fast the endpoint
// fails, not how fast it takes deliveries: many of them would bring the
// average near zero, and the waiting jobs' slots with it, so that they ran
// again at once, and a backlog woken after an outage would all come at
// once.
func paces(a webhook.Attempt) bool {
	return answered(a) || a.Kind == webhook.KindTimeout
}

// storeTimeout bounds what a run writes to Places past its context's end
// (see detached).
const storeTimeout = 10 * time.Second

// detached returns the context of a write to Places that must outlive
// ctx, the run's (a place given back, a backlog's wake): not cut by its
// end, but bounded by storeTimeout, so that a store that hangs never holds
// the run's goroutine for ever, which River cannot end.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
}

// pacer returns id's pacer, made when needed. A pacer is forgotten once it
// holds nothing and its connection has no attempt in flight. Under w.mu.
func (w *Worker) pacer(id string) *pacer {
	p := w.pacers[id]
	if p == nil {
		p = &pacer{}
		w.pacers[id] = p
	}
	p.used = w.now()
	return p
}

// observe notes how long an attempt to connection id took, for its slots.
func (w *Worker) observe(id string, d time.Duration) {
	if w.maxPerCon <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pacer(id).observe(d)
	w.sweepPacers()
}

// sweepPacers forgets, at most once a minute, the pacers unused for ten
// minutes that hold nothing. Under w.mu.
func (w *Worker) sweepPacers() {
	now := w.now()
	if now.Sub(w.pacersSwept) < time.Minute {
		return
	}
	w.pacersSwept = now
	for id, p := range w.pacers {
		for job, slot := range p.slots {
			if now.Sub(slot) >= 10*time.Minute { // a job that never came back: deleted, or worked elsewhere
				delete(p.slots, job)
			}
		}
		if now.Sub(p.used) >= 10*time.Minute && p.idle(now) && w.inFlight[id] == 0 {
			delete(w.pacers, id)
		}
	}
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
// other jobs waiting for it (see pacer.downSlot); or, once the delivery has
// waited MaxWait, discards it with a log entry and a reason that say so,
// telling OnAttempt. A snooze costs no attempt, River's or the policy's.
func (w *Worker) waitForEndpoint(ctx context.Context, r *run, a webhook.Attempt) error {
	job := r.job
	now := w.now()
	if waited := now.Sub(job.CreatedAt); waited >= w.maxWait {
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
	wait := w.endpointSlot(r, a.RetryIn, now) // RetryIn: until the endpoint's next probe
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

// endpointSlot returns how long the job of run r waits for its endpoint,
// at least least: to a down slot behind the jobs waiting for it, or, when
// the endpoint answered while r was under way and they were woken, with
// them.
func (w *Worker) endpointSlot(r *run, least time.Duration, now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pacer(r.job.Args.ConnectionID)
	if p.woke.After(r.began) {
		slot := later(now, p.frontNext).Add(w.spacing(p, r.every))
		p.frontNext = slot
		return slot.Sub(now)
	}
	return p.downSlot(now, least, w.snooze/time.Duration(max(w.maxPerCon, 1)))
}
