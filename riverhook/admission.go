package riverhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/riverqueue/river"

	"github.com/signedhook/webhook"
)

// admission decides, for each run of a delivery's job, whether its attempt
// may go now, or when the job comes back: one algorithm, the same for one
// process and for a fleet, whose shared facts live in its Places.
//
//   - The bound: an attempt takes one of its connection's places in flight
//     and gives it back when it ends; a place freed while a run of the same
//     connection holds on for one in the process goes straight to it.
//   - The rate: an attempt starts every after the connection's last start;
//     a run back at its slot takes the next start up to two spacings ahead
//     and waits for it, so that a backlog starts exactly every apart.
//   - The chain: a job that must wait is snoozed to the connection's next
//     slot, spaced at what the endpoint takes (its attempt time over the
//     bound, or the rate's spacing when longer), so that a backlog comes back
//     at that pace and costs about a run per delivery.
//   - Holding on: a job back at its slot that finds no place waits up to two
//     spacings for one rather than losing its turn.
//   - The wake: once an answer shows the endpoint takes deliveries faster
//     than the chain was handed at (a backlog that waited for a down
//     endpoint, a burst slotted before any attempt had ended), the waiting
//     jobs are moved forward to its pace, and again a second later for the
//     jobs whose snooze River stored meanwhile.
//
// It is safe for concurrent use.
type admission struct {
	places Places
	snooze time.Duration // an attempt's time before one has ended (WorkerOptions.SnoozeFor)
	logger *slog.Logger
	rewake func(f func()) // runs f a second on; tests replace it

	mu    sync.Mutex
	lanes map[string]*lane // connection id -> what the process knows of it
	swept time.Time        // the last sweep of idle lanes
}

// lane is what a process knows of a connection, under admission.mu.
type lane struct {
	took    time.Duration // a moving average of its attempts' times; 0 before the first
	waiting []waiter      // runs holding on for a place, longest first
	users   int           // runs in the admission or in an attempt
	chain   time.Time     // the end of the chain as this process last handed it a slot
	handed  time.Duration // the longest spacing this process handed slots at since the chain was last rewritten
	used    time.Time     // when a run last entered or left
	trip    time.Duration // how long the store has taken lately to answer its starts, the slowest (answered)
}

// waiter is a run holding on for a place, and its bound: a place handed
// to it must be one of its bound's.
type waiter struct {
	got   chan place
	bound int
}

// limits are a connection's bound in flight (0 for none) and time between
// starts (0 for none).
type limits struct {
	bound int
	every time.Duration
}

// ticket is a run's admission: the place it holds, if its connection has a
// bound.
type ticket struct {
	id     string
	lim    limits
	place  place
	placed bool
	back   bool      // the job came back at a slot: the connection has a chain
	since  time.Time // when the run was admitted
}

// errPlaceLost is why a run cuts its attempt: the session holding its
// place in flight ended, and another process may take the place.
var errPlaceLost = errors.New("riverhook: the session holding the attempt's place in flight ended")

// guard returns the context of t's attempt: ctx, cut with errPlaceLost
// (and why the session ended) when t's place is freed under it, so that the attempt leaves the bound
// as its place does. stop ends the guard.
func (t *ticket) guard(ctx context.Context) (_ context.Context, stop func()) {
	if !t.placed || t.place.session == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	session := t.place.session
	unwatch := context.AfterFunc(session, func() { cancel(fmt.Errorf("%w: %w", errPlaceLost, context.Cause(session))) })
	return ctx, func() {
		unwatch()
		cancel(nil)
	}
}

func newAdmission(places Places, snooze time.Duration, logger *slog.Logger) *admission {
	return &admission{places: places, snooze: snooze, logger: logger, lanes: map[string]*lane{},
		rewake: func(f func()) { time.AfterFunc(time.Second, f) }}
}

// holdOnAtLeast is the least a job back at its slot holds on for a place:
// River fetches the jobs whose snooze ended at its next poll (every 50 ms
// with Register's DefaultFetchPollInterval), so slots reach their jobs in
// batches that far apart.
const holdOnAtLeast = 100 * time.Millisecond

// tryEvery is the least time between a holding run's tries for a place
// freed by another process; a place given back in a fleet waits as long
// for a round trip to ride (ConnectionPlaces.give).
const tryEvery = 5 * time.Millisecond

// enter admits job's run to its connection, or returns how long the job
// snoozes. A store that fails snoozes it for SnoozeFor, logged.
func (a *admission) enter(ctx context.Context, job *river.Job[Args], lim limits) (*ticket, time.Duration) {
	id := job.Args.ConnectionID
	a.use(id, 1)
	t, err := a.admit(ctx, job, lim)
	switch {
	case err != nil:
		a.use(id, -1)
		a.logger.LogAttrs(ctx, slog.LevelWarn, "riverhook: cannot admit the delivery; it waits",
			slog.String("connection_id", id), slog.Int64("job_id", job.ID), slog.String("error", err.Error()))
		return nil, a.snooze
	case t == nil && ctx.Err() != nil:
		a.use(id, -1)
		return nil, a.snooze // the run is over: River keeps no snooze of it
	case t == nil:
		a.use(id, -1)
		return nil, a.wait(ctx, id, a.spacing(id, lim))
	}
	t.since, t.back = time.Now(), job.ScheduledAt.After(job.CreatedAt)
	return t, 0
}

// admit takes a place for job's attempt, then the connection's start; nil
// when it has neither. A job back at its slot (snoozed before) holds on for
// each a little; one that comes for the first time does not wait.
func (a *admission) admit(ctx context.Context, job *river.Job[Args], lim limits) (*ticket, error) {
	id := job.Args.ConnectionID
	back := job.ScheduledAt.After(job.CreatedAt)
	t, err := a.take(ctx, id, lim)
	if t == nil && err == nil && back {
		t, err = a.holdOn(ctx, id, lim)
	}
	if t == nil || err != nil || lim.every <= 0 {
		return t, err
	}
	ok, err := a.start(ctx, t, back)
	if !ok || err != nil {
		a.give(ctx, t)
		return nil, err
	}
	return t, nil
}

// start takes the connection's next start for t: now, or, when hold is set,
// one up to holdFor ahead, which it waits for; and reports whether it did.
// A start taken ahead is the run's: the fleet's next one is every after it.
//
// The store takes a start at some moment between the ask and its answer,
// so a start is used up to that round trip after its turn, more when the
// process is busy. Each start keeps room after it, for as long as the
// store's answers have taken lately, less half of startLate: the other half
// is the margin of an answer slower than those. A start used later than
// startLate and its room is given up: it could put one more than the rate
// within a second. Found so at its answer, it is first given back, when
// no other start was taken since, and asked for once more. A store that
// answers in 10 ms keeps no room, and a slower one lowers the rate a
// backlog gets, never the bound.
func (a *admission) start(ctx context.Context, t *ticket, hold bool) (bool, error) {
	var within time.Duration
	if hold {
		within = a.holdFor(t.id, t.lim)
	}
	for again := true; ; again = false {
		room := a.room(t.id)
		asked := time.Now()
		wait, mark, ok, err := a.places.start(ctx, t.id, t.lim.every, within, room)
		if err != nil {
			return false, err
		}
		a.answered(t.id, time.Since(asked))
		if !ok {
			return false, nil
		}
		if again && time.Since(asked)-wait > startLate+room {
			// Answered too late to be used: given back, unless another
			// start was taken since, and asked for once more, with the
			// room of how late the answers come now. Given up, it would
			// cost the run a spacing: a year at one a year.
			back, err := a.places.giveStart(ctx, t.id, mark, t.lim.every, room)
			if err != nil {
				return false, err
			}
			if back {
				continue
			}
		}
		// Waited from the answer, not the ask: the turn may be that late.
		if !sleep(ctx, wait) {
			return false, nil
		}
		return time.Since(asked)-wait <= startLate+room, nil
	}
}

// sleep waits for d, and reports whether ctx was not done first.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// room returns the room the next start of connection id keeps: how long
// the store has taken lately to answer its starts, less half of startLate.
// Each connection has its own: a row other processes hold (a hot
// connection's) slows its own starts only.
func (a *admission) room(id string) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return max(a.lane(id).trip-startLate/2, 0)
}

// answered notes that the store answered a start of connection id in trip:
// the room its next starts keep follows the slowest answer, coming down a
// sixteenth of the way each start, so that one quick answer does not make
// the next start late.
func (a *admission) answered(id string, trip time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.lane(id)
	l.trip = max(trip, l.trip-l.trip/16)
}

// take takes a place for a run of connection id, when it has a bound; a
// ticket without a place when it has none; nil when every place is held.
func (a *admission) take(ctx context.Context, id string, lim limits) (*ticket, error) {
	if lim.bound <= 0 {
		return &ticket{id: id, lim: lim}, nil
	}
	p, ok, err := a.places.take(ctx, id, lim.bound)
	if err != nil || !ok {
		return nil, err
	}
	return &ticket{id: id, lim: lim, place: p, placed: true}, nil
}

// holdOn waits, for a job back at its slot, up to two spacings (at least
// holdOnAtLeast, at most a second) for a place: one freed in the process
// is handed to the run that has held on longest at once (see leave); one
// freed by another process is found by trying again every tenth of the
// spacing. It holds one of River's workers meanwhile, so no more of a
// connection's runs hold on at once in the process than places free
// within the hold (at least two): the others take the next slot at once.
func (a *admission) holdOn(ctx context.Context, id string, lim limits) (*ticket, error) {
	spacing := a.spacing(id, lim)
	hold := a.holdFor(id, lim)
	got := make(chan place, 1)
	a.mu.Lock()
	l := a.lane(id)
	if spacing > 0 && len(l.waiting) >= max(2, int(hold/spacing)) {
		// As many hold on as places free within a hold: one more would
		// only hold a River worker, as a chain handed faster than the
		// endpoint's pace would have each of its jobs do.
		a.mu.Unlock()
		return nil, nil
	}
	l.waiting = append(l.waiting, waiter{got: got, bound: lim.bound})
	a.mu.Unlock()
	// However it stops holding on, a place handed to it meanwhile goes
	// on to the next run.
	defer func() {
		if p, ok := a.stopWaiting(id, got); ok {
			a.give(ctx, &ticket{id: id, lim: lim, place: p, placed: true})
		}
	}()
	step := max(hold/20, tryEvery)
	deadline := time.Now().Add(hold)
	timer := time.NewTimer(step)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, nil
		case p := <-got:
			return &ticket{id: id, lim: lim, place: p, placed: true}, nil
		case <-timer.C:
		}
		if t, err := a.take(ctx, id, lim); t != nil || err != nil {
			return t, err
		}
		if !time.Now().Before(deadline) {
			if p, ok := a.stopWaiting(id, got); ok {
				return &ticket{id: id, lim: lim, place: p, placed: true}, nil
			}
			return nil, nil
		}
		timer.Reset(step)
	}
}

// stopWaiting takes got off connection id's runs holding on, and returns
// the place handed to it before, if one was.
func (a *admission) stopWaiting(id string, got chan place) (place, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if l := a.lanes[id]; l != nil {
		if i := slices.IndexFunc(l.waiting, func(w waiter) bool { return w.got == got }); i >= 0 {
			l.waiting = slices.Delete(l.waiting, i, i+1)
		}
	}
	select {
	case p := <-got:
		return p, true
	default:
		return place{}, false
	}
}

// holdFor is how long a run holds on: two spacings, at least
// holdOnAtLeast, at most a second.
func (a *admission) holdFor(id string, lim limits) time.Duration {
	return min(max(2*a.spacing(id, lim), holdOnAtLeast), time.Second)
}

// leave ends t's admission once its attempt has ended: its place goes to
// the run of the connection that has held on longest in the process, or
// back to the Places.
func (a *admission) leave(ctx context.Context, t *ticket) {
	a.give(ctx, t)
	a.use(t.id, -1)
}

func (a *admission) give(ctx context.Context, t *ticket) {
	if !t.placed {
		return
	}
	t.placed = false
	live := t.place.held() // a place of an ended session is no one's to hand on
	a.mu.Lock()
	if l := a.lanes[t.id]; l != nil && live {
		// The place goes to the longest holding on whose bound has it: one
		// over a bound since lowered goes back, so that the connection
		// comes down to its new bound.
		if i := slices.IndexFunc(l.waiting, func(w waiter) bool { return t.place.n < w.bound }); i >= 0 {
			next := l.waiting[i].got
			l.waiting = slices.Delete(l.waiting, i, i+1)
			next <- t.place
			a.mu.Unlock()
			return
		}
	}
	a.mu.Unlock()
	ctx, cancel := detached(ctx)
	defer cancel()
	if err := a.places.give(ctx, t.place); err != nil {
		a.logger.LogAttrs(ctx, slog.LevelWarn, "riverhook: cannot give back a place in flight; it frees when the process's session ends",
			slog.String("connection_id", t.id), slog.String("error", err.Error()))
	}
}

// wait returns how long a job that must wait for connection id snoozes:
// to the chain's next slot, spacing after the last one.
func (a *admission) wait(ctx context.Context, id string, spacing time.Duration) time.Duration {
	wait, err := a.places.slot(ctx, id, spacing, spacing)
	if err != nil {
		a.logger.LogAttrs(ctx, slog.LevelWarn, "riverhook: cannot take a slot of the connection's; the delivery waits",
			slog.String("connection_id", id), slog.String("error", err.Error()))
		return a.snooze
	}
	a.handed(id, wait, spacing)
	return wait
}

// handed notes a slot handed to a job of connection id, wait from now at
// spacing: whether the chain may be behind the endpoint's pace is asked of
// the Places only by a process that handed slots ahead.
func (a *admission) handed(id string, wait, spacing time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.lane(id)
	l.chain = later(l.chain, time.Now().Add(wait))
	l.handed = max(l.handed, spacing)
}

// waitForEndpoint returns how long a job whose endpoint is down snoozes:
// at least until its next probe (least), in the chain, its waiting jobs
// waking one bound's worth per SnoozeFor however many they are.
func (a *admission) waitForEndpoint(ctx context.Context, id string, lim limits, least time.Duration) time.Duration {
	spacing := a.snooze / time.Duration(max(lim.bound, 1))
	wait, err := a.places.slot(ctx, id, max(least, spacing), spacing)
	if err != nil {
		a.logger.LogAttrs(ctx, slog.LevelWarn, "riverhook: cannot take a slot of the connection's; the delivery waits",
			slog.String("connection_id", id), slog.String("error", err.Error()))
		return max(least, a.snooze)
	}
	a.handed(id, wait, spacing)
	return wait
}

// spacing is the time between connection id's slots: its attempt time over
// its bound (a place frees that often), or its time between starts when
// longer. Before an attempt has ended, SnoozeFor over the bound, or the
// time between starts when there is a rate.
func (a *admission) spacing(id string, lim limits) time.Duration {
	if lim.bound <= 0 {
		return lim.every
	}
	var took time.Duration
	a.mu.Lock()
	if l := a.lanes[id]; l != nil {
		took = l.took
	}
	a.mu.Unlock()
	if took == 0 && lim.every > 0 {
		return lim.every // a rate says the pace before any attempt has ended
	}
	if took == 0 {
		took = a.snooze
	}
	return max(took/time.Duration(lim.bound), lim.every)
}

// ended notes what attempt at of t's run says of its endpoint: how long it
// takes a delivery, and whether it answers. An answer to a connection whose
// waiting jobs are slotted slower than it takes them moves them forward.
func (a *admission) ended(ctx context.Context, t *ticket, at webhook.Attempt, wake func(ctx context.Context, id string, every time.Duration) (int, error)) {
	if paces(at) && t.lim.bound > 0 {
		d := max(at.Duration, time.Since(t.since))
		a.mu.Lock()
		l := a.lane(t.id)
		if l.took == 0 {
			l.took = d
		} else {
			l.took += (d - l.took) / 8
		}
		a.mu.Unlock()
	}
	if !answered(at) {
		return
	}
	spacing := a.spacing(t.id, t.lim)
	a.mu.Lock()
	l := a.lane(t.id)
	// Ask the Places as this process handed the chain, or, when it has
	// handed none since it last asked, for a job that came from a slot:
	// another process handed the chain, and may have stopped.
	ahead := isBehind(time.Until(l.chain), l.handed, spacing) || t.back && l.handed == 0
	if ahead {
		l.handed = spacing // asked once: the Places' answer stands for the fleet
	}
	a.mu.Unlock()
	if !ahead {
		return
	}
	ctx, cancel := detached(ctx)
	defer cancel()
	behind, err := a.places.behind(ctx, t.id, spacing)
	if err != nil || !behind {
		return
	}
	moveForward := func(ctx context.Context) {
		n, err := wake(ctx, t.id, spacing)
		if err == nil {
			err = a.places.rechain(ctx, t.id, spacings(n, spacing), spacing)
		}
		if err != nil {
			a.logger.LogAttrs(ctx, slog.LevelWarn, "riverhook: cannot move the deliveries waiting for the connection to its pace; they come at their slots",
				slog.String("connection_id", t.id), slog.String("error", err.Error()))
			return
		}
		a.logger.LogAttrs(ctx, slog.LevelDebug, "riverhook: the deliveries waiting for the connection move to its pace",
			slog.String("connection_id", t.id), slog.Int("deliveries", n), slog.Duration("every", spacing))
	}
	moveForward(ctx)
	// A job whose run took a slot of the old chain just before, and whose
	// snooze River stored after the move, is brought along a second on.
	again := context.WithoutCancel(ctx)
	a.rewake(func() {
		ctx, cancel := detached(again)
		defer cancel()
		moveForward(ctx)
	})
}

// laneKeep is how long a lane no run uses keeps what was learnt of its
// endpoint.
const laneKeep = time.Hour

// use counts a run in, or out of, connection id's lane. A lane no run
// uses, with no slot ahead, is forgotten at once when nothing is learnt of
// its endpoint nor of its starts' room, else once idle for laneKeep (swept
// at most once per sweepEvery).
func (a *admission) use(id string, n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	l := a.lane(id)
	l.users += n
	l.used = now
	idle := func(l *lane) bool { return l.users == 0 && len(l.waiting) == 0 && l.chain.Before(now) }
	if idle(l) && l.took == 0 && l.trip <= startLate/2 {
		delete(a.lanes, id)
	}
	if now.Sub(a.swept) >= sweepEvery {
		for id, l := range a.lanes {
			if idle(l) && now.Sub(l.used) >= laneKeep {
				delete(a.lanes, id)
			}
		}
		a.swept = now
	}
}

// lane returns id's lane, made when needed. Under a.mu.
func (a *admission) lane(id string) *lane {
	l := a.lanes[id]
	if l == nil {
		l = &lane{}
		a.lanes[id] = l
	}
	return l
}

// answered reports whether a's endpoint answered: its deliveries waiting
// for it may go.
func answered(a webhook.Attempt) bool {
	return a.OK() || a.Kind == webhook.KindStatus || a.Kind == webhook.KindRedirect
}

// paces reports whether attempt a's duration is the endpoint's time to take
// a delivery, which spaces the connection's slots: an answer (2xx or not),
// or an attempt that waited for one until its timeout. An attempt never
// sent took none of the endpoint's time, one cut by its context did not
// end, and one that could not connect says how fast the endpoint fails,
// not how fast it takes deliveries.
func paces(a webhook.Attempt) bool {
	return answered(a) || a.Kind == webhook.KindTimeout
}

// storeTimeout bounds what a run writes past its context's end (see
// detached).
const storeTimeout = 10 * time.Second

// detached returns the context of a write that must outlive ctx, the
// run's (a place given back, a backlog's wake): not cut by its end, but
// bounded by storeTimeout.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
}

// DefaultMaxWait is how long a delivery waits for a down endpoint by
// default: three days, the horizon of Stripe's retries, which customers of
// webhooks know.
const DefaultMaxWait = 72 * time.Hour
