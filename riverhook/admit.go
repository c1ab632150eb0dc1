package riverhook

import (
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/riverqueue/river"
)

// This file admits a run's attempt to its connection: one of the process's
// MaxInFlightPerConnection and, with Places, one of the fleet's places,
// taken before the attempt and given back after it; or handed straight
// from a run whose attempt ended to a run of the same connection holding
// on for one in the process, which costs the fleet no statement.

// held is what a run holds while its attempt is in flight.
type held struct {
	id     string    // the connection
	fleet  bool      // a place of the fleet's is held (Places)
	place  int       // its number
	holder int64     // the number its row names: the hold's own (see holdNumber)
	until  time.Time // when its hold ends at the earliest, on the Worker's clock
	since  time.Time // when this run got it
}

// waiter is a run back at its slot holding on for a place (Worker.holdOn).
type waiter struct {
	got chan *held // the place handed to it; buffered, sent to once
}

// placeMargin is how much longer than a run's Timeout a place of the
// fleet's is held: a place handed from one run to the next (Worker.finish)
// needs no statement while what is left of its hold covers the next run's
// Timeout, so that a connection kept busy renews its places once per
// margin, not once per attempt. It is the most a process that died holds a
// place past the Timeout of the run it died in.
const placeMargin = 20 * time.Second

// holdNumber is the number a place's row names while it is held: one of
// its own for each Take and Keep, never River's job id, so that a hold that
// ended (a run that overran its context) and a later run of the same job
// taking the same place are never confused: giving back the old hold
// leaves the new one held. Positive, as a Send Test's are negative.
func holdNumber() int64 { return rand.Int64N(math.MaxInt64) + 1 }

// hold is how long a place of the fleet's is held by a run that takes it:
// its Timeout and placeMargin.
func (w *Worker) hold() time.Duration { return w.Timeout(nil) + placeMargin }

// admit takes a place in flight for job's attempt, or returns how long job
// snoozes for one: to its slot (see Worker.waitSlot), or for SnoozeFor
// when the store of Places fails. every is the connection's time between
// starts (RateLimit), or zero. A job back at its slot that finds no place
// holds on for one (Worker.holdOn); one that comes for the first time does
// not wait.
func (w *Worker) admit(ctx context.Context, job *river.Job[Args], every time.Duration) (*held, time.Duration, bool) {
	h, err := w.tryAdmit(ctx, job)
	if h == nil && err == nil && job.ScheduledAt.After(job.CreatedAt) {
		h, err = w.holdOn(ctx, job, every)
	}
	switch {
	case err != nil:
		w.logger.LogAttrs(ctx, slog.LevelWarn, "riverhook: cannot take a place in flight; the delivery waits",
			slog.String("connection_id", job.Args.ConnectionID), slog.Int64("job_id", job.ID), slog.String("error", err.Error()))
		return nil, w.snooze, false
	case h == nil && ctx.Err() != nil:
		return nil, w.snooze, false // the run is over: River keeps no snooze of it, and a slot would be spent
	case h == nil:
		return nil, w.waitSlot(ctx, job, every), false
	}
	return h, 0, true
}

// tryAdmit takes one of the process's places for job's connection and,
// with Places, one of the fleet's; nil when every place is held.
func (w *Worker) tryAdmit(ctx context.Context, job *river.Job[Args]) (*held, error) {
	id := job.Args.ConnectionID
	w.mu.Lock()
	if w.maxPerCon > 0 && w.inFlight[id] >= w.maxPerCon {
		w.mu.Unlock()
		return nil, nil
	}
	w.inFlight[id]++
	w.mu.Unlock()
	h := &held{id: id, holder: holdNumber(), since: w.now()}
	if w.places == nil || w.maxPerCon <= 0 {
		return h, nil
	}
	// The process's place goes back unless the fleet's is taken, also
	// when Take panics (a Places of the caller's): River recovers the run,
	// and the place would be lost to the process for good.
	taken := false
	defer func() {
		if !taken {
			w.release(id)
		}
	}()
	hold := w.hold()
	place, ok, err := w.places.Take(ctx, id, w.maxPerCon, h.holder, hold)
	if err != nil || !ok {
		return nil, err
	}
	taken = true
	h.fleet, h.place, h.until = true, place, h.since.Add(hold)
	return h, nil
}

// holdOnAtLeast is the least a job back at its slot holds on for a place:
// River fetches the jobs whose snooze ended at its next poll (every 50 ms
// with Register's DefaultFetchPollInterval), so a fast endpoint's slots
// reach their jobs in batches that far apart, and a job of one batch holds
// on until the next comes (fleetbench's drain: 1.5 runs per delivery at
// 100 ms, 2.3 at 50).
const holdOnAtLeast = 100 * time.Millisecond

// holdOn waits, for a job back at its slot, up to two slots' spacing (at
// least holdOnAtLeast, at most a second) for a place: a place that frees a
// moment after the slot, as the endpoint's answers and River's fetches
// vary, then goes to this job instead of costing it a run and a slot at
// the front. A place freed in the process is handed to the run that has
// held on longest at once (Worker.finish); one freed by another process is
// found by trying again every tenth of the spacing (at least 5 ms, with
// Places a statement each while the process has a place of its own free).
// It holds one of River's workers meanwhile.
func (w *Worker) holdOn(ctx context.Context, job *river.Job[Args], every time.Duration) (*held, error) {
	id := job.Args.ConnectionID
	me := &waiter{got: make(chan *held, 1)}
	w.mu.Lock()
	spacing := w.spacing(w.pacer(id), every)
	w.waiting[id] = append(w.waiting[id], me)
	w.mu.Unlock()
	// However it stops holding on (its context ended, a place of its own
	// found, or a panic of Places'), the run leaves, and a place handed
	// to it meanwhile is the next one's: a run left holding on would be
	// handed places, and lose them.
	defer func() {
		if h := w.leave(id, me); h != nil {
			w.finish(ctx, h)
		}
	}()
	step := max(spacing/10, 5*time.Millisecond)
	timer := time.NewTimer(step)
	defer timer.Stop()
	deadline := time.Now().Add(min(max(2*spacing, holdOnAtLeast), time.Second))
	for {
		select {
		case <-ctx.Done():
			return nil, nil
		case h := <-me.got:
			return w.keep(ctx, job, h)
		case <-timer.C:
		}
		h, err := w.tryAdmit(ctx, job)
		if h != nil || err != nil {
			return h, err
		}
		if !time.Now().Before(deadline) {
			if got := w.leave(id, me); got != nil {
				return w.keep(ctx, job, got)
			}
			return nil, nil
		}
		timer.Reset(step)
	}
}

// leave takes me off connection id's runs holding on, and returns the
// place handed to it before it left, if one was.
func (w *Worker) leave(id string, me *waiter) *held {
	w.mu.Lock()
	defer w.mu.Unlock()
	if q := w.waiting[id]; len(q) > 0 {
		if i := slices.Index(q, me); i >= 0 {
			w.waiting[id] = slices.Delete(q, i, i+1)
		}
		if len(w.waiting[id]) == 0 {
			delete(w.waiting, id)
		}
	}
	select {
	case h := <-me.got:
		return h
	default:
		return nil
	}
}

// keep makes place h, handed by a run whose attempt ended, job's: as it
// is, while what is left of its hold covers job's run; its hold renewed
// for job otherwise (Places.Keep). A renewal that finds the place no longer
// held (its hold ended) leaves job without a place.
func (w *Worker) keep(ctx context.Context, job *river.Job[Args], h *held) (*held, error) {
	now := w.now()
	h.since = now
	if !h.fleet || h.until.Sub(now) >= w.Timeout(job) {
		return h, nil
	}
	// The place is not this run's, or not known to be (Keep failed, or
	// panicked): the process's goes back, and the fleet's row frees it
	// when its hold ends, within the Timeout.
	kept := false
	defer func() {
		if !kept {
			w.release(h.id)
		}
	}()
	hold := w.hold()
	holder := holdNumber()
	ok, err := w.places.Keep(ctx, h.id, h.place, h.holder, holder, hold)
	if err != nil || !ok {
		return nil, err
	}
	kept = true
	h.holder, h.until = holder, now.Add(hold)
	return h, nil
}

// finish gives back h once its run's attempt has ended: to the run of the
// same connection that has held on longest in the process, or, when none
// does, to the process and, with Places, to the fleet (Places.Give).
func (w *Worker) finish(ctx context.Context, h *held) {
	w.mu.Lock()
	if q := w.waiting[h.id]; len(q) > 0 {
		next := q[0]
		if w.waiting[h.id] = q[1:]; len(q) == 1 {
			delete(w.waiting, h.id)
		}
		next.got <- h
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	w.release(h.id)
	if !h.fleet {
		return
	}
	ctx, cancel := detached(ctx)
	defer cancel()
	if err := w.places.Give(ctx, h.id, h.place, h.holder); err != nil {
		w.logger.LogAttrs(ctx, slog.LevelWarn, "riverhook: cannot give back a place in flight; it is free when its hold ends",
			slog.String("connection_id", h.id), slog.String("error", err.Error()))
	}
}

// release gives back one of the process's places for connection id.
func (w *Worker) release(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inFlight[id]--; w.inFlight[id] == 0 {
		delete(w.inFlight, id)
	}
}
