package riverhook

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook/internal/testdb"
)

// job returns a job of connection crm inserted at created: running for the
// first time, or back at its slot.
func crmJob(created time.Time, id int64, back bool) *river.Job[Args] {
	row := &rivertype.JobRow{ID: id, CreatedAt: created, ScheduledAt: created}
	if back {
		row.ScheduledAt = created.Add(time.Millisecond)
	}
	return &river.Job[Args]{JobRow: row, Args: Args{ConnectionID: "crm"}}
}

// testAdmission is an admission over places, SnoozeFor a second, whose
// second wake runs when the test calls it.
func testAdmission(places Places) (*admission, *[]func()) {
	a := newAdmission(places, time.Second, testdb.Quiet())
	var rewakes []func()
	a.rewake = func(f func()) { rewakes = append(rewakes, f) }
	return a, &rewakes
}

// TestAdmission_TheBoundAndTheChain: a connection's runs take its places
// up to the bound; the others are snoozed to slots of one chain, spaced by
// SnoozeFor over the bound until an attempt has ended, then by the
// attempt's time over the bound.
func TestAdmission_TheBoundAndTheChain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, _ := testAdmission(newMemoryPlaces(time.Now))
		ctx, now := context.Background(), time.Now()
		lim := limits{bound: 2}
		first, wait := a.enter(ctx, crmJob(now, 1, false), lim)
		require.NotNil(t, first)
		assert.Zero(t, wait)
		second, _ := a.enter(ctx, crmJob(now, 2, false), lim)
		require.NotNil(t, second)
		for i, want := range []time.Duration{500 * time.Millisecond, time.Second, 1500 * time.Millisecond} {
			tk, wait := a.enter(ctx, crmJob(now, int64(3+i), false), lim)
			assert.Nil(t, tk)
			assert.Equal(t, want, wait, "slot %d: SnoozeFor over the bound apart", i)
		}
		time.Sleep(200 * time.Millisecond)
		var moved []time.Duration
		a.ended(ctx, first, webhook.Attempt{StatusCode: 200, Duration: 200 * time.Millisecond}, func(_ context.Context, _ string, every time.Duration) (int, error) {
			moved = append(moved, every)
			return 3, nil
		})
		a.leave(ctx, first)
		assert.Equal(t, []time.Duration{100 * time.Millisecond}, moved, "the burst's slots were handed at 500 ms, the endpoint takes one each 100 ms: moved to its pace")
		third, _ := a.enter(ctx, crmJob(now, 6, false), lim)
		require.NotNil(t, third, "the place given back")
		_, wait = a.enter(ctx, crmJob(now, 7, false), lim)
		assert.Equal(t, 400*time.Millisecond, wait, "after the 3 moved jobs, at the endpoint's pace")
		a.leave(ctx, second)
		a.leave(ctx, third)
		require.Contains(t, a.lanes, "crm", "the endpoint's pace is kept")
		assert.Zero(t, a.lanes["crm"].users)
		assert.Empty(t, a.lanes["crm"].waiting)
	})
}

// TestAdmission_APlaceFreedIsHandedToARunHoldingOn: a job back at its slot
// that finds the bound full holds on, and the place freed in the process
// is handed to it without going back to the Places.
func TestAdmission_APlaceFreedIsHandedToARunHoldingOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		places := &countingPlaces{Places: newMemoryPlaces(time.Now)}
		a, _ := testAdmission(places)
		ctx, now := context.Background(), time.Now()
		lim := limits{bound: 1}
		held, _ := a.enter(ctx, crmJob(now, 1, false), lim)
		require.NotNil(t, held)
		got := make(chan *ticket)
		go func() {
			tk, _ := a.enter(ctx, crmJob(now, 2, true), lim)
			got <- tk
		}()
		synctest.Wait() // holding on
		time.Sleep(50 * time.Millisecond)
		a.leave(ctx, held)
		tk := <-got
		require.NotNil(t, tk, "handed the place")
		assert.EqualValues(t, 0, places.gives.Load(), "handed in the process, not given back")
		a.leave(ctx, tk)
		assert.EqualValues(t, 1, places.gives.Load())
	})
}

// TestAdmission_ARunHoldsOnAtMostTwoSpacings: a job back at its slot that
// finds no place within two spacings takes the chain's next slot.
func TestAdmission_ARunHoldsOnAtMostTwoSpacings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, _ := testAdmission(newMemoryPlaces(time.Now))
		ctx, now := context.Background(), time.Now()
		lim := limits{bound: 4} // spacing: 250 ms before an attempt has ended
		for i := range 4 {
			tk, _ := a.enter(ctx, crmJob(now, int64(i), false), lim)
			require.NotNil(t, tk)
		}
		start := time.Now()
		tk, wait := a.enter(ctx, crmJob(now, 9, true), lim)
		assert.Nil(t, tk)
		assert.Equal(t, 500*time.Millisecond, time.Since(start), "held on two spacings")
		assert.Equal(t, 250*time.Millisecond, wait, "then the next slot")
	})
}

// TestAdmission_TheRateDeliversWhatItSays: a backlog behind a rate starts
// exactly every 1/rate, its jobs coming back at their slots a little late
// or early as River's fetches bring them; and a rate raised takes effect at
// the next start, not after the old period.
func TestAdmission_TheRateDeliversWhatItSays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, _ := testAdmission(newMemoryPlaces(time.Now))
		ctx, t0 := context.Background(), time.Now()
		lim := limits{bound: 2, every: 200 * time.Millisecond}
		type due struct {
			id int64
			at time.Time
		}
		var starts []time.Time
		var queue []due
		for id := range int64(50) {
			queue = append(queue, due{id, t0})
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		// River's wake: the snoozed jobs move forward to now, every apart,
		// never later than due.
		wake := func(_ context.Context, _ string, every time.Duration) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			now := time.Now()
			for k := range queue {
				if turn := now.Add(time.Duration(k) * every); queue[k].at.After(turn) {
					queue[k].at = turn
				}
			}
			return len(queue), nil
		}
		for {
			mu.Lock()
			if len(queue) == 0 {
				mu.Unlock()
				break
			}
			d := queue[0]
			queue = queue[1:]
			mu.Unlock()
			if wait := time.Until(d.at); wait > 0 {
				time.Sleep(wait)
			}
			tk, wait := a.enter(ctx, crmJob(t0, d.id, d.at.After(t0)), lim)
			if tk == nil {
				// River's fetch brings it back up to 50 ms late.
				mu.Lock()
				queue = append(queue, due{d.id, time.Now().Add(wait + time.Duration(d.id%6)*10*time.Millisecond)})
				sortDue(queue, func(x, y due) bool { return x.at.Before(y.at) })
				mu.Unlock()
				continue
			}
			starts = append(starts, time.Now())
			wg.Go(func() {
				time.Sleep(30 * time.Millisecond) // the attempt
				a.ended(ctx, tk, webhook.Attempt{StatusCode: 200, Duration: 30 * time.Millisecond}, wake)
				a.leave(ctx, tk)
			})
		}
		wg.Wait()
		require.Len(t, starts, 50)
		for i := 1; i < len(starts); i++ {
			assert.GreaterOrEqual(t, starts[i].Sub(starts[i-1]), lim.every, "start %d", i)
		}
		span := starts[49].Sub(starts[0])
		rate := 49 / span.Seconds()
		t.Logf("49 gaps in %v: %.2f a second", span, rate)
		assert.GreaterOrEqual(t, rate, 0.95*5, "a backlog gets at least 0.95 of its rate (%v for 49 gaps)", span)

		// From one per 30 s to 50 a second: the next start comes at once.
		time.Sleep(30 * time.Second)
		slow := limits{bound: 2, every: 30 * time.Second}
		tk, _ := a.enter(ctx, crmJob(t0, 100, false), slow)
		require.NotNil(t, tk)
		a.leave(ctx, tk)
		time.Sleep(20 * time.Millisecond)
		fast := limits{bound: 2, every: 20 * time.Millisecond}
		tk, wait := a.enter(ctx, crmJob(t0, 101, false), fast)
		require.NotNil(t, tk, "the raised rate's next start, not the old period's (waited %v)", wait)
		a.leave(ctx, tk)
	})
}

func sortDue[T any](s []T, less func(x, y T) bool) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && less(s[j], s[j-1]); j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// TestAdmission_AnAnswerMovesASlowChainForward: once an answer shows the
// endpoint takes deliveries faster than its waiting jobs were slotted (a
// backlog that waited for it while down, a burst slotted before any
// attempt had ended), the waiting jobs are moved to its pace, and once
// more a second later for those snoozed meanwhile; the chain goes on
// after them. A chain at the endpoint's pace is left alone.
func TestAdmission_AnAnswerMovesASlowChainForward(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		places := newMemoryPlaces(time.Now)
		a, rewakes := testAdmission(places)
		ctx, now := context.Background(), time.Now()
		lim := limits{bound: 8}
		for range 2000 { // waiting for a down endpoint, at its probe in 10 s
			a.waitForEndpoint(ctx, "crm", lim, 10*time.Second)
		}
		assert.Equal(t, 10*time.Second+1999*125*time.Millisecond, places.conns["crm"].chain.Sub(now), "one bound's worth a second")

		tk, _ := a.enter(ctx, crmJob(now, 1, false), lim)
		require.NotNil(t, tk)
		var moved []time.Duration
		wake := func(_ context.Context, id string, every time.Duration) (int, error) {
			assert.Equal(t, "crm", id)
			moved = append(moved, every)
			return 2000, nil
		}
		a.ended(ctx, tk, webhook.Attempt{StatusCode: 200, Duration: 400 * time.Millisecond}, wake)
		a.leave(ctx, tk)
		assert.Equal(t, []time.Duration{50 * time.Millisecond}, moved, "the backlog at the endpoint's 400 ms over the bound")
		assert.Equal(t, 2000*50*time.Millisecond, places.conns["crm"].chain.Sub(now), "the chain after the moved jobs")
		require.Len(t, *rewakes, 1)
		(*rewakes)[0]()
		assert.Len(t, moved, 2, "moved again a second on")

		tk, _ = a.enter(ctx, crmJob(now, 2, false), lim)
		require.NotNil(t, tk)
		a.ended(ctx, tk, webhook.Attempt{StatusCode: 200, Duration: 400 * time.Millisecond}, wake)
		a.leave(ctx, tk)
		assert.Len(t, moved, 2, "a chain at the endpoint's pace stays")
	})
}

// TestAdmission_ADownEndpointsBacklogCostsOneBoundASecond: jobs waiting for
// a down endpoint come back one bound's worth per SnoozeFor, however many.
func TestAdmission_ADownEndpointsBacklogCostsOneBoundASecond(t *testing.T) {
	a, _ := testAdmission(newMemoryPlaces(time.Now))
	counts := map[int]int{}
	for range 2000 {
		wait := a.waitForEndpoint(context.Background(), "crm", limits{bound: 8}, time.Second)
		counts[int(wait/time.Second)]++
	}
	for sec, n := range counts {
		assert.LessOrEqual(t, n, 9, "second %d", sec)
	}
}

// countingPlaces counts the gives of the Places it wraps.
type countingPlaces struct {
	Places
	gives atomic.Int32
}

func (c *countingPlaces) give(ctx context.Context, p place) error {
	c.gives.Add(1)
	return c.Places.give(ctx, p)
}

// fullPlaces is a fleet whose places are all held by other processes.
type fullPlaces struct{ *memoryPlaces }

func (fullPlaces) take(context.Context, string, int) (place, bool, error) { return place{}, false, nil }

// hungPlaces is a fleet whose store hangs on give and rechain: each call
// returns only when its context ends.
type hungPlaces struct{ *memoryPlaces }

func (hungPlaces) give(ctx context.Context, _ place) error {
	<-ctx.Done()
	return ctx.Err()
}

func (hungPlaces) rechain(ctx context.Context, _ string, _, _ time.Duration) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestAdmission_AHungStoreHoldsARunAtMostStoreTimeout: what a run writes
// after its context may have ended (the place given back, the wake of a
// backlog) is not cut by that end, but a store that hangs holds the run's
// goroutine storeTimeout at most: River cannot end a run that does not
// return.
func TestAdmission_AHungStoreHoldsARunAtMostStoreTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, _ := testAdmission(hungPlaces{newMemoryPlaces(time.Now)})
		ctx, cancel := context.WithCancel(context.Background())
		tk, _ := a.enter(ctx, crmJob(time.Now(), 1, false), limits{bound: 1})
		require.NotNil(t, tk)
		cancel() // the run's end: River's timeout, or the client stopping
		start := time.Now()
		a.leave(ctx, tk)
		assert.Equal(t, storeTimeout, time.Since(start), "the place given back")

		a.waitForEndpoint(ctx, "crm", limits{bound: 1}, time.Hour)
		start = time.Now()
		a.ended(ctx, &ticket{id: "crm", lim: limits{bound: 1}}, webhook.Attempt{StatusCode: 200, Duration: time.Millisecond},
			func(context.Context, string, time.Duration) (int, error) { return 1, nil })
		assert.Equal(t, storeTimeout, time.Since(start), "the backlog's wake")
	})
}

// TestWorker_SendTestTakesAPlaceInFlight: a Send Test is an attempt in
// flight like a delivery's, so it never passes the bound: in the process,
// and across the fleet.
func TestWorker_SendTestTakesAPlaceInFlight(t *testing.T) {
	sender, err := webhook.NewSender(nil)
	require.NoError(t, err)
	resolve := func(context.Context, string) (webhook.Connection, error) {
		return webhook.Connection{Name: "crm", URL: "https://example.invalid/hooks", Secret: "whsec_x"}, nil
	}
	w, err := NewWorker(sender, resolve, &WorkerOptions{MaxInFlightPerConnection: 1})
	require.NoError(t, err)
	ctx := context.Background()
	tk, _ := w.admission.enter(ctx, crmJob(time.Now(), 1, false), limits{bound: 1})
	require.NotNil(t, tk, "a delivery in flight")
	_, err = w.SendTest(ctx, "crm")
	require.ErrorIs(t, err, ErrBusy, "the process's bound is taken")
	w.admission.leave(ctx, tk)

	fleet, err := NewWorker(sender, resolve, &WorkerOptions{MaxInFlightPerConnection: 1, Places: fullPlaces{newMemoryPlaces(time.Now)}})
	require.NoError(t, err)
	_, err = fleet.SendTest(ctx, "crm")
	require.ErrorIs(t, err, ErrBusy, "the fleet's places are all held")
}

// TestWorker_APanickingRateLimitCostsNoAttempt: RateLimit is the caller's
// code, called from River's worker goroutines: a panic in it is logged and
// the delivery waits for SnoozeFor, costing no attempt, and the Worker goes
// on working.
func TestWorker_APanickingRateLimitCostsNoAttempt(t *testing.T) {
	sender, err := webhook.NewSender(nil)
	require.NoError(t, err)
	w, err := NewWorker(sender, func(context.Context, string) (webhook.Connection, error) { return webhook.Connection{}, nil },
		&WorkerOptions{MaxInFlightPerConnection: 1, SnoozeFor: 3 * time.Second, Logger: testdb.Quiet(),
			RateLimit: func(string) float64 { panic("the settings cache is not loaded") }})
	require.NoError(t, err)
	job := crmJob(time.Now(), 1, false)
	var worked error
	panicked := func() (v any) {
		defer func() { v = recover() }()
		worked = w.Work(context.Background(), job)
		return nil
	}()
	assert.Nil(t, panicked, "Work let RateLimit's panic through")
	var snooze *rivertype.JobSnoozeError
	require.ErrorAs(t, worked, &snooze)
	assert.Equal(t, 3*time.Second, snooze.Duration, "the delivery waits for SnoozeFor")
	assert.Empty(t, w.admission.lanes, "nothing held")
}

// TestWorker_AttemptsNeverSentDoNotSpaceTheSlots: the slots of a
// connection's waiting jobs are spaced by its attempts' time, and an
// attempt never sent (an event the connection does not subscribe to) took
// none: however many there were, a job over the bound waits for a slot.
func TestWorker_AttemptsNeverSentDoNotSpaceTheSlots(t *testing.T) {
	sender, err := webhook.NewSender(nil)
	require.NoError(t, err)
	resolve := func(context.Context, string) (webhook.Connection, error) {
		return webhook.Connection{Name: "crm", URL: "https://example.invalid/hooks", Secret: "whsec_x", Events: []string{"user.created"}}, nil
	}
	w, err := NewWorker(sender, resolve, &WorkerOptions{MaxInFlightPerConnection: 2, SnoozeFor: time.Second, Logger: testdb.Quiet()})
	require.NoError(t, err)
	ctx := context.Background()
	for id := range int64(200) {
		job := &river.Job[Args]{JobRow: &rivertype.JobRow{ID: id + 1, Attempt: 1, MaxAttempts: 5},
			Args: Args{ConnectionID: "crm", DeliveryID: "d", Event: "user.deleted", Body: []byte("{}")}}
		require.ErrorIs(t, w.Work(ctx, job), webhook.ErrNotSubscribed)
	}
	for id := int64(1000); id < 1002; id++ { // the bound, taken
		tk, _ := w.admission.enter(ctx, crmJob(time.Now(), id, false), limits{bound: 2})
		require.NotNil(t, tk)
	}
	job := &river.Job[Args]{JobRow: &rivertype.JobRow{ID: 2000, Attempt: 1, MaxAttempts: 5},
		Args: Args{ConnectionID: "crm", DeliveryID: "e", Event: "user.created", Body: []byte("{}")}}
	var snooze *rivertype.JobSnoozeError
	require.ErrorAs(t, w.Work(ctx, job), &snooze)
	assert.InDelta(t, float64(time.Second/2), float64(snooze.Duration), float64(10*time.Millisecond), "the first slot: SnoozeFor over the bound, no attempt having taken time")
}

// stressAdmit runs, over two admissions (two processes of a fleet),
// goroutines that admit runs of one connection, some of them back at
// their slots (so that they hold on, and are handed places), and checks
// that no more than bound are ever in flight across both, that no place is
// held by two runs at once, and that nothing is held at the end.
func stressAdmit(t *testing.T, places func() Places, bound int) {
	t.Helper()
	admissions := []*admission{newAdmission(places(), 40*time.Millisecond, testdb.Quiet()), newAdmission(places(), 40*time.Millisecond, testdb.Quiet())}
	var (
		ids      atomic.Int64
		inFlight atomic.Int64
		most     atomic.Int64
		admitted atomic.Int64
		occupied sync.Map // place -> the run in flight on it
		wg       sync.WaitGroup
	)
	created := time.Now()
	lim := limits{bound: bound}
	for g := range 16 {
		a := admissions[g%2]
		wg.Go(func() {
			for range 40 {
				id := ids.Add(1)
				ctx, cancel := context.WithCancel(context.Background())
				if id%7 == 0 {
					cancel() // River cancels the run as it holds on
				}
				tk, _ := a.enter(ctx, crmJob(created, id, id%2 == 0), lim)
				if tk != nil {
					admitted.Add(1)
					n := inFlight.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					if other, taken := occupied.LoadOrStore(tk.place.n, id); !assert.False(t, taken, "place %d held by runs %v and %d at once", tk.place.n, other, id) {
						cancel()
						return
					}
					time.Sleep(time.Duration(id%3) * time.Millisecond) // the attempt
					occupied.Delete(tk.place.n)
					inFlight.Add(-1)
					a.leave(ctx, tk)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, most.Load(), int64(bound), "in flight across the fleet")
	assert.Positive(t, admitted.Load())
	for i, a := range admissions {
		a.mu.Lock()
		for id, l := range a.lanes {
			assert.Zero(t, l.users, "admission %d, %s: no run", i, id)
			assert.Empty(t, l.waiting, "admission %d, %s: no run holding on", i, id)
		}
		a.mu.Unlock()
	}
	t.Logf("admitted %d of %d, at most %d in flight", admitted.Load(), ids.Load(), most.Load())
}

// TestAdmission_UnderStressKeepsTheBound: many runs of one connection
// admitted and ended at once, in two processes sharing places in memory,
// never pass the bound and leave nothing held.
func TestAdmission_UnderStressKeepsTheBound(t *testing.T) {
	for _, bound := range []int{1, 3} {
		t.Run(fmt.Sprint(bound), func(t *testing.T) {
			shared := newMemoryPlaces(time.Now)
			stressAdmit(t, func() Places { return shared }, bound)
			assert.NotContains(t, shared.conns["crm"].held, true, "every place given back")
		})
	}
}

// TestConnectionPlaces_UnderStressKeepsTheBound: the same on PostgreSQL,
// two ConnectionPlaces as two processes have, each with its session.
func TestConnectionPlaces_UnderStressKeepsTheBound(t *testing.T) {
	pool, schema := testdb.Schema(t, "stress", true)
	ctx := context.Background()
	require.NoError(t, Migrate(ctx, pool, schema))
	var made []*ConnectionPlaces
	stressAdmit(t, func() Places {
		p := NewConnectionPlaces(pool, schema)
		made = append(made, p)
		return p
	}, 3)
	for _, p := range made {
		p.flush() // the last gives, which no take carried
	}
	after := NewConnectionPlaces(pool, schema)
	defer after.Close(ctx)
	for range 3 {
		_, ok, err := after.take(ctx, "crm", 3)
		require.NoError(t, err)
		assert.True(t, ok, "every place given back")
	}
	for _, p := range made {
		p.Close(ctx)
	}
}

func TestPaceEvery(t *testing.T) {
	for _, tc := range []struct {
		perSecond float64
		want      time.Duration
	}{
		{10, 102 * time.Millisecond},
		{1, 1020 * time.Millisecond},
		{1e9, time.Microsecond}, // the finest pace
		{0, 0},
		{-1, 0},
		{math.NaN(), 0},
		{math.Inf(1), 0},
		{math.Inf(-1), 0},
		{1.0 / (24 * 3600), 24 * time.Hour * 102 / 100},
		{1e-10, maxPaceEvery},
		{math.SmallestNonzeroFloat64, maxPaceEvery},
	} {
		assert.Equal(t, tc.want, paceEvery(tc.perSecond), "%g a second", tc.perSecond)
	}
}

func TestSignAfter(t *testing.T) {
	now := time.UnixMilli(1_000_000).Add(300 * time.Microsecond)
	for _, tc := range []struct {
		last int64
		want time.Duration
	}{
		{0, 0},
		{999_999, 0},
		{1_000_000, time.Millisecond},     // the same millisecond
		{1_000_004, 5 * time.Millisecond}, // another process's clock ahead
	} {
		if got := signAfter([]logEntry{{Timestamp: 5}, {Timestamp: tc.last}}, now); got != tc.want {
			t.Errorf("last signed at %d: got %v, want %v", tc.last, got, tc.want)
		}
	}
}

// TestWorker_AConnectionCarriesItsOwnBoundAndRate: the resolved
// connection's MaxInFlight and RateLimit are its limits, the Worker's
// options the defaults where they are zero; RateLimit is not asked for a
// connection that has its own rate.
func TestWorker_AConnectionCarriesItsOwnBoundAndRate(t *testing.T) {
	sender, err := webhook.NewSender(nil)
	require.NoError(t, err)
	var asked atomic.Int32
	w, err := NewWorker(sender, func(context.Context, string) (webhook.Connection, error) { return webhook.Connection{}, nil },
		&WorkerOptions{MaxInFlightPerConnection: 8, RateLimit: func(string) float64 { asked.Add(1); return 10 }})
	require.NoError(t, err)
	ctx := context.Background()
	lim, err := w.limits(ctx, "crm", webhook.Connection{MaxInFlight: 2, RateLimit: 4})
	require.NoError(t, err)
	assert.Equal(t, limits{bound: 2, every: paceEvery(4)}, lim, "the connection's own")
	assert.Zero(t, asked.Load())
	lim, err = w.limits(ctx, "erp", webhook.Connection{})
	require.NoError(t, err)
	assert.Equal(t, limits{bound: 8, every: paceEvery(10)}, lim, "the Worker's options")
	assert.EqualValues(t, 1, asked.Load())

	// A Send Test is held to the connection's own bound.
	srv := webhook.Connection{Name: "crm", URL: "https://example.invalid/hooks", Secret: "whsec_x", MaxInFlight: 1}
	w.resolve = func(context.Context, string) (webhook.Connection, error) { return srv, nil }
	tk, _ := w.admission.enter(ctx, crmJob(time.Now(), 1, false), limits{bound: 1})
	require.NotNil(t, tk)
	_, err = w.SendTest(ctx, "crm")
	require.ErrorIs(t, err, ErrBusy, "one in flight of the connection's one")
	w.admission.leave(ctx, tk)
}

// TestAdmission_SlotsHandedByAStoppedProcessAreMovedToThePace: a process
// that handed a burst its slots at its first guess, then stopped, leaves
// the chain to the others: the first job of the chain another process
// works, once answered, moves the rest to the endpoint's pace.
func TestAdmission_SlotsHandedByAStoppedProcessAreMovedToThePace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := newMemoryPlaces(time.Now) // the fleet's store
		stopped, _ := testAdmission(shared)
		other, rewakes := testAdmission(shared)
		ctx, now := context.Background(), time.Now()
		lim := limits{bound: 2}
		for range 2 {
			tk, _ := stopped.enter(ctx, crmJob(now, 0, false), lim)
			require.NotNil(t, tk)
		}
		for i := range 120 {
			_, wait := stopped.enter(ctx, crmJob(now, int64(i+1), false), lim)
			require.Positive(t, wait)
		}
		// The process stops; its places free (its session ends). A job of
		// the chain comes to the other at its slot.
		shared.conns["crm"].held = nil
		time.Sleep(500 * time.Millisecond)
		tk, _ := other.enter(ctx, crmJob(now, 1, true), lim)
		require.NotNil(t, tk)
		var moved []time.Duration
		other.ended(ctx, tk, webhook.Attempt{StatusCode: 200, Duration: 20 * time.Millisecond}, func(_ context.Context, _ string, every time.Duration) (int, error) {
			moved = append(moved, every)
			return 119, nil
		})
		other.leave(ctx, tk)
		assert.Equal(t, []time.Duration{10 * time.Millisecond}, moved, "the chain handed at 500 ms, moved to the endpoint's 20 ms over the bound")
		assert.Len(t, *rewakes, 1)
	})
}

// holdingOn returns once n runs of connection id hold on in a.
func holdingOn(a *admission, id string, n int) {
	for {
		a.mu.Lock()
		l := a.lanes[id]
		got := l != nil && len(l.waiting) >= n
		a.mu.Unlock()
		if got {
			return
		}
		runtime.Gosched()
	}
}

// TestAdmission_APlaceOfAnEndedSessionIsNotHandedOn: a run's place whose
// session ended meanwhile was freed in the database, and another process
// may hold it: it is not handed to a run holding on, which would make an
// attempt over the fleet's bound.
func TestAdmission_APlaceOfAnEndedSessionIsNotHandedOn(t *testing.T) {
	t.Parallel()
	mine, theirs := twoProcesses(t)
	a, _ := testAdmission(mine)
	ctx, now, lim := context.Background(), time.Now(), limits{bound: 1}
	first, _ := a.enter(ctx, crmJob(now, 1, false), lim)
	require.NotNil(t, first)
	done := mine.exclusive()
	pid := mine.conn.PgConn().PID()
	done()
	var ended bool
	require.NoError(t, theirs.pool.QueryRow(ctx, `SELECT pg_terminate_backend($1, 10000)`, pid).Scan(&ended))
	require.True(t, ended)
	select {
	case <-first.place.session.Done(): // read by the watch, with no statement made
	case <-time.After(10 * time.Second):
		t.Fatal("the process did not learn that its session ended")
	}
	other, ok, err := theirs.take(ctx, "crm", 1)
	require.NoError(t, err)
	require.True(t, ok, "the place freed with the session, taken by another process")

	got := make(chan *ticket)
	go func() {
		tk, _ := a.enter(ctx, crmJob(now, 2, true), lim)
		got <- tk
	}()
	holdingOn(a, "crm", 1)
	a.leave(ctx, first)
	require.NoError(t, theirs.give(ctx, other)) // the place the run may take
	tk := <-got
	require.NotNil(t, tk)
	done = mine.exclusive()
	session := mine.session
	done()
	assert.Equal(t, session, tk.place.session, "the run holds a place locked in the database, not the ended session's")
	a.leave(ctx, tk)
}

// TestAdmission_APlaceOverALoweredBoundIsNotHandedOn: once a connection's
// bound is lowered, a place over the new bound, freed, is not handed to a
// run holding on at the new bound: the connection comes down to it.
func TestAdmission_APlaceOverALoweredBoundIsNotHandedOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, _ := testAdmission(newMemoryPlaces(time.Now))
		ctx, now := context.Background(), time.Now()
		first, _ := a.enter(ctx, crmJob(now, 1, false), limits{bound: 2})
		second, _ := a.enter(ctx, crmJob(now, 2, false), limits{bound: 2})
		require.NotNil(t, first)
		require.NotNil(t, second)
		got := make(chan *ticket)
		go func() {
			tk, _ := a.enter(ctx, crmJob(now, 3, true), limits{bound: 1}) // the customer lowered the bound
			got <- tk
		}()
		synctest.Wait()
		a.leave(ctx, second)
		tk := <-got
		assert.Nil(t, tk, "one attempt in flight already: the bound of 1 is full")
		if tk != nil {
			a.leave(ctx, tk)
		}
		a.leave(ctx, first)
	})
}

// TestMemoryPlaces_ForgetsConnectionsWithNothingHeld: the process's places
// keep no memory of a connection whose places are all given back and that
// has no chain or start to keep, so that many connections over the
// process's life do not grow it.
func TestMemoryPlaces_ForgetsConnectionsWithNothingHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMemoryPlaces(time.Now)
		ctx := context.Background()
		for i := range 1000 {
			p, ok, err := m.take(ctx, fmt.Sprint("conn", i), 2)
			require.NoError(t, err)
			require.True(t, ok)
			require.NoError(t, m.give(ctx, p))
		}
		for i := range 1000 {
			_, _, ok, err := m.start(ctx, fmt.Sprint("rate", i), time.Second, 0, 0)
			require.NoError(t, err)
			require.True(t, ok)
		}
		time.Sleep(time.Hour)
		_, _, err := m.take(ctx, "last", 1)
		require.NoError(t, err)
		m.mu.Lock()
		defer m.mu.Unlock()
		assert.LessOrEqual(t, len(m.conns), 1, "only the connection holding a place")
	})
}

// TestAdmission_ForgetsIdleConnections: the admission keeps no lane of a
// connection no run has used for long, even once its attempts' time was
// learnt, so that many connections over the process's life do not grow it.
func TestAdmission_ForgetsIdleConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, _ := testAdmission(newMemoryPlaces(time.Now))
		ctx, now := context.Background(), time.Now()
		for i := range 1000 {
			job := crmJob(now, int64(i), false)
			job.Args.ConnectionID = fmt.Sprint("conn", i)
			tk, _ := a.enter(ctx, job, limits{bound: 2})
			require.NotNil(t, tk)
			a.ended(ctx, tk, webhook.Attempt{StatusCode: 200, Duration: time.Millisecond}, nil)
			a.leave(ctx, tk)
		}
		time.Sleep(24 * time.Hour)
		tk, _ := a.enter(ctx, crmJob(time.Now(), 1, false), limits{bound: 2})
		require.NotNil(t, tk)
		a.leave(ctx, tk)
		a.mu.Lock()
		defer a.mu.Unlock()
		assert.LessOrEqual(t, len(a.lanes), 1, "only the connection used lately")
	})
}

// TestConnectionPlaces_PruneKeepsAStartItsRateNeeds: Prune with a before
// of a day ago keeps the last start of a connection whose rate has its
// next start still to come, so that the rate is never passed.
func TestConnectionPlaces_PruneKeepsAStartItsRateNeeds(t *testing.T) {
	t.Parallel()
	a, _ := twoProcesses(t)
	ctx, week := context.Background(), 7*24*time.Hour
	_, _, ok, err := a.start(ctx, "crm", week, 0, 0) // one delivery a week
	require.NoError(t, err)
	require.True(t, ok)
	_, err = a.pool.Exec(ctx, `UPDATE `+a.pace+` SET last_start = last_start - interval '2 days'`)
	require.NoError(t, err) // the start was two days ago
	_, err = a.Prune(ctx, time.Now().Add(-24*time.Hour))
	require.NoError(t, err)
	wait, _, ok, err := a.start(ctx, "crm", week, week, 0)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Greater(t, wait, 4*24*time.Hour, "the next start is five days on")
}

// TestWake_LeavesARetryOfAProcessWhoseClockIsBehind: River stamps a
// failed run's error with its process's clock (the run's start), and its
// attempted_at with the database's; a process a little behind the
// database stamps its retries before attempted_at. The wake still takes
// them for retries, never moving one ahead of its policy's wait.
func TestWake_LeavesARetryOfAProcessWhoseClockIsBehind(t *testing.T) {
	client, pool := pinClient(t)
	ctx := context.Background()
	res, err := client.Insert(ctx, Args{ConnectionID: "crm", DeliveryID: "r", Event: "user.identified", Body: []byte("{}")}, nil)
	require.NoError(t, err)
	id := res.Job.ID
	// Fetched at the database's now; run by a process 50 ms behind it,
	// which failed and whose policy retries in 4 s (River makes a retry
	// that soon available at its time).
	_, err = pool.Exec(ctx, `UPDATE `+jobTable(client.Schema())+` SET attempted_at = now(), state = 'available',
		errors = ARRAY[jsonb_build_object('at', now() - interval '50 milliseconds', 'attempt', 1)],
		scheduled_at = now() + interval '4 seconds' WHERE id = $1`, id)
	require.NoError(t, err)
	before, err := client.JobGet(ctx, id)
	require.NoError(t, err)
	n, err := wake(ctx, poolQuery(pool), client.Schema(), "crm", time.Millisecond)
	require.NoError(t, err)
	assert.Zero(t, n, "a retry is no snooze to cut short")
	after, err := client.JobGet(ctx, id)
	require.NoError(t, err)
	assert.True(t, after.ScheduledAt.Equal(before.ScheduledAt), "its policy's time, %v, not %v", before.ScheduledAt, after.ScheduledAt)
}

// doAsFirst and doAsSecond make a call on p, closing returned when done:
// two functions, so that a goroutine's stack tells whose it is.
func doAsFirst(p *ConnectionPlaces, c *call, returned chan struct{}) {
	p.do(context.Background(), c)
	close(returned)
}

func doAsSecond(p *ConnectionPlaces, c *call, returned chan struct{}) {
	p.do(context.Background(), c)
	close(returned)
}

// inRoundTrip reports whether a goroutine started by fn waits for the
// session in a round trip of the places' (in exclusive itself, not the
// func it returns, which a round trip ending runs).
func inRoundTrip(fn string) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "(*ConnectionPlaces).exclusive(") && strings.Contains(g, "riverhook."+fn+"(") {
			return true
		}
	}
	return false
}

// TestConnectionPlaces_ACallerReturnsOnceItsCallIsMade: the caller making
// the round trips returns once its own call is made, handing the round
// trips of the calls that came meanwhile to one of their callers: under a
// steady stream of calls it would otherwise make them for ever, its run
// held past its context, its attempt never made.
func TestConnectionPlaces_ACallerReturnsOnceItsCallIsMade(t *testing.T) {
	p := NewConnectionPlaces(nil, "")
	stale := func() *call { // a flush with no give queued: a round trip without a statement
		return &call{flush: true, done: make(chan struct{}), turn: make(chan struct{}, 1)}
	}
	queued := func(flushing bool, n int) {
		for {
			p.qmu.Lock()
			ok := p.flushing == flushing && len(p.queue) == n
			p.qmu.Unlock()
			if ok {
				return
			}
			runtime.Gosched()
		}
	}
	p.mu.Lock() // the round trips wait
	first, firstReturned := stale(), make(chan struct{})
	go doAsFirst(p, first, firstReturned)
	queued(true, 0) // its round trip under way
	second, secondReturned := stale(), make(chan struct{})
	go doAsSecond(p, second, secondReturned)
	queued(true, 1)
	p.qmu.Lock()
	p.mu.Unlock()
	<-first.done // its own call made
	p.mu.Lock()  // the next round trip waits
	p.qmu.Unlock()
	for {
		select {
		case <-firstReturned:
			p.mu.Unlock()
			<-secondReturned
			return
		default:
		}
		if inRoundTrip("doAsFirst") {
			p.mu.Unlock()
			t.Fatal("the first caller makes the second's round trip, its own call made")
		}
		runtime.Gosched()
	}
}

// distantPlaces is the process's memory behind a round trip: each start
// is taken half a trip after it is asked for, and answered half a trip
// after that, as a store in PostgreSQL does.
type distantPlaces struct {
	*memoryPlaces
	trip time.Duration
}

func (d distantPlaces) start(ctx context.Context, id string, every, within, room time.Duration) (time.Duration, time.Time, bool, error) {
	time.Sleep(d.trip / 2)
	defer time.Sleep(d.trip / 2)
	return d.memoryPlaces.start(ctx, id, every, within, room)
}

// TestAdmission_TheRateDeliversWhatItSaysThroughARoundTrip: a backlog
// behind 50 a second, its starts taken over a store a millisecond away,
// starts at 0.95-1.0 of the rate and never more than 50 within any second:
// a start asked for again after its wait came a round trip late each time
// (0.91x measured by fleetbench).
func TestAdmission_TheRateDeliversWhatItSaysThroughARoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		starts := runBacklog(t, distantPlaces{newMemoryPlaces(time.Now), time.Millisecond}, limits{bound: 8, every: paceEvery(50)}, 200)
		rate := startRate(starts)
		assert.GreaterOrEqual(t, rate/50, 0.95, "a backlog gets at least 0.95 of its rate: %.2f a second", rate)
		assert.LessOrEqual(t, rate/50, 1.0, "and never more: %.2f a second", rate)
		assert.LessOrEqual(t, mostWithinASecond(starts), 50, "starts within any second")
	})
}

// lateAnswerPlaces is a store whose answer to a start comes back late
// after it took the start, by late(n) for the nth start: a reply held up
// on its way back from PostgreSQL (a slow commit, a busy network).
type lateAnswerPlaces struct {
	*memoryPlaces
	n    *atomic.Int64
	late func(n int64) time.Duration
}

func (l lateAnswerPlaces) start(ctx context.Context, id string, every, within, room time.Duration) (time.Duration, time.Time, bool, error) {
	defer time.Sleep(l.late(l.n.Add(1)))
	return l.memoryPlaces.start(ctx, id, every, within, room)
}

func answeredLate(late func(n int64) time.Duration) lateAnswerPlaces {
	return lateAnswerPlaces{newMemoryPlaces(time.Now), new(atomic.Int64), late}
}

// TestAdmission_AStartAnsweredLateIsNotUsedLate: a store answers each
// start some time after taking it. The run used it then, as though on
// time, and the next start came every after the one taken: two went out
// milliseconds apart, 11 within a second at a rate of 10 (review). A start
// is judged late from when it was asked for, and the starts a process
// takes keep room for how late its answers come: never more than the rate
// within a second, whether the answers come 100 ms late, anywhere from 0
// to 100 ms late, or 1.5 s late (slow commits), and never stalled. The
// room costs a backlog part of its rate: at 100 ms, about half of it (the
// spacing 102 ms and 90 ms of room).
func TestAdmission_AStartAnsweredLateIsNotUsedLate(t *testing.T) {
	for _, tc := range []struct {
		name      string
		late      func(n int64) time.Duration
		n         int
		leastPart float64 // of the rate, for the room kept
	}{
		{"100ms", func(int64) time.Duration { return 100 * time.Millisecond }, 40, 0.5},
		// Which run gets which answer varies with the bubble's scheduling:
		// 0.38-0.50 of the rate in 180 runs.
		{"0-100ms", func(n int64) time.Duration { return time.Duration(n*37%101) * time.Millisecond }, 40, 0.3},
		{"1.5s", func(int64) time.Duration { return 1500 * time.Millisecond }, 10, 0.05},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				starts := runBacklog(t, answeredLate(tc.late), limits{bound: 8, every: paceEvery(10)}, tc.n)
				assert.LessOrEqual(t, mostWithinASecond(starts), 10, "starts within any second")
				rate := startRate(starts)
				assert.GreaterOrEqual(t, rate/10, tc.leastPart, "the backlog goes on: %.2f a second", rate)
			})
		})
	}
}

// runBacklog runs n jobs of connection crm, all due now, through an
// admission over places with limits lim, in a synctest bubble: each run
// comes back at its slot, up to 50 ms late as River's fetches bring it,
// until it starts; each attempt takes 5 ms. It returns when the runs
// started, in order.
func runBacklog(t *testing.T, places Places, lim limits, n int) []time.Time {
	a, _ := testAdmission(places)
	ctx, t0 := context.Background(), time.Now()
	var mu sync.Mutex
	var starts []time.Time
	var wg sync.WaitGroup
	var run func(id int64, at time.Time)
	run = func(id int64, at time.Time) {
		time.Sleep(time.Until(at))
		tk, wait := a.enter(ctx, crmJob(t0, id, at.After(t0)), lim)
		if tk == nil {
			wg.Go(func() { run(id, time.Now().Add(wait+time.Duration(id%6)*10*time.Millisecond)) })
			return
		}
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		time.Sleep(5 * time.Millisecond) // the attempt
		a.ended(ctx, tk, webhook.Attempt{StatusCode: 200, Duration: 5 * time.Millisecond}, func(context.Context, string, time.Duration) (int, error) { return 0, nil })
		a.leave(ctx, tk)
	}
	for id := range int64(n) {
		wg.Go(func() { run(id, t0) })
	}
	wg.Wait()
	slices.SortFunc(starts, time.Time.Compare)
	require.Len(t, starts, n)
	return starts
}

// startRate is the rate of the sorted starts, a second.
func startRate(starts []time.Time) float64 {
	return float64(len(starts)-1) / starts[len(starts)-1].Sub(starts[0]).Seconds()
}

// mostWithinASecond is the most of the sorted starts within any second.
func mostWithinASecond(starts []time.Time) int {
	most, j := 0, 0
	for i := range starts {
		for starts[i].Sub(starts[j]) >= time.Second {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// TestAdmission_AYearlyRatesBacklogNeverWrapsItsWait: RateLimit goes down
// to one delivery a year. A backlog of about 290 such deliveries puts the
// chain more than 292 years ahead, past time.Duration's range: a wait
// computed from the fleet's microseconds wrapped to a negative one, which
// River's JobSnooze refuses with a panic, so the run failed without an
// attempt, again, until River discarded the delivery (review). The wait
// saturates, as one process's does.
func TestAdmission_AYearlyRatesBacklogNeverWrapsItsWait(t *testing.T) {
	pool, schema := testdb.Schema(t, "yearly", true)
	ctx := context.Background()
	require.NoError(t, Migrate(ctx, pool, schema))
	fleet := NewConnectionPlaces(pool, schema)
	t.Cleanup(func() { fleet.Close(ctx) })
	for name, places := range map[string]Places{"one process": newMemoryPlaces(time.Now), "a fleet": fleet} {
		a := newAdmission(places, time.Second, testdb.Quiet())
		lim := limits{every: paceEvery(1.0 / (365 * 24 * 3600))}
		var last time.Duration
		for i := range 300 {
			wait := a.wait(ctx, "yearly", a.spacing("yearly", lim))
			require.GreaterOrEqual(t, wait, last, "%s: slot %d waits %v, less than the slot before", name, i, wait)
			last = wait
		}
		assert.Equal(t, time.Duration(math.MaxInt64), last, "%s: the last slots wait as long as a wait can", name)
	}
}

// TestSpacings_Saturate: n spacings past time.Duration's range are the
// longest Duration, not a wrapped one.
func TestSpacings_Saturate(t *testing.T) {
	assert.Equal(t, 3*time.Second, spacings(3, time.Second))
	assert.Equal(t, time.Duration(0), spacings(0, maxPaceEvery))
	assert.Equal(t, time.Duration(math.MaxInt64), spacings(300, maxPaceEvery))
	assert.Equal(t, 2*time.Microsecond, micros(2))
	assert.Equal(t, time.Duration(math.MaxInt64), micros(math.MaxInt64/1000+1))
}

// TestAdmission_ASlowEndpointsBacklogHoldsFewWorkers: a burst to a
// connection with a bound of 1 and a rate of 100 a second is slotted at the
// rate's 10 ms before any attempt has ended; its endpoint then takes a
// second an attempt. The jobs back at those 10 ms slots must not each hold
// on a second for the one place, which frees once a second: each holds
// one of River's workers meanwhile, and MaxInFlightPerConnection promises
// that one slow endpoint cannot take every worker (River's MaxWorkers, 32
// in the README's set-up). No more runs hold on at once than the places
// that free within a hold: 100 ms at 10 ms, then one a second.
func TestAdmission_ASlowEndpointsBacklogHoldsFewWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, _ := testAdmission(newMemoryPlaces(time.Now))
		ctx, t0 := context.Background(), time.Now()
		lim := limits{bound: 1, every: paceEvery(100)}
		var most int
		done, sampled := make(chan struct{}), make(chan struct{})
		go func() { // samples the runs holding on, every millisecond
			defer close(sampled)
			for {
				select {
				case <-done:
					return
				case <-time.After(time.Millisecond):
				}
				a.mu.Lock()
				if l := a.lanes["crm"]; l != nil {
					most = max(most, len(l.waiting))
				}
				a.mu.Unlock()
			}
		}()
		noWake := func(context.Context, string, time.Duration) (int, error) { return 0, nil }
		var wg sync.WaitGroup
		for id := range int64(200) {
			wg.Go(func() {
				back := false
				for {
					tk, wait := a.enter(ctx, crmJob(t0, id, back), lim)
					if tk == nil {
						time.Sleep(wait) // River brings it back at its slot
						back = true
						continue
					}
					time.Sleep(time.Second) // the attempt
					a.ended(ctx, tk, webhook.Attempt{StatusCode: 200, Duration: time.Second}, noWake)
					a.leave(ctx, tk)
					return
				}
			})
		}
		wg.Wait()
		close(done)
		<-sampled // most is the sampler's until it returns
		t.Logf("the most runs of the connection holding on at once: %d", most)
		assert.LessOrEqual(t, most, 10, "runs of one connection holding on, each with one of River's workers, at once")
	})
}

// TestWorker_ASnoozeForOfNanosecondsIsRefused: SnoozeFor: 1, written for a
// second, is a nanosecond. The slots of a burst over the bound are then
// spaced by nothing: each job over it snoozes for no time and runs again
// at River's next fetch, every one of the backlog at once, until an
// attempt ends; and the jobs waiting for a down endpoint all come back
// together. NewWorker refuses it, saying so, as it refuses a negative one.
func TestWorker_ASnoozeForOfNanosecondsIsRefused(t *testing.T) {
	sender, err := webhook.NewSender(nil)
	require.NoError(t, err)
	w, err := NewWorker(sender, func(context.Context, string) (webhook.Connection, error) { return webhook.Connection{}, nil },
		&WorkerOptions{MaxInFlightPerConnection: 2, SnoozeFor: 1})
	if err != nil {
		assert.ErrorContains(t, err, "SnoozeFor")
		return
	}
	ctx, now, lim := context.Background(), time.Now(), limits{bound: 2}
	for id := range int64(2) {
		tk, _ := w.admission.enter(ctx, crmJob(now, id, false), lim)
		require.NotNil(t, tk)
	}
	var waits []time.Duration
	for id := range int64(5) {
		_, wait := w.admission.enter(ctx, crmJob(now, 2+id, false), lim)
		waits = append(waits, wait)
	}
	assert.Greater(t, waits[4], waits[0], "the jobs over the bound wait in a chain, not all for nothing: %v", waits)
}

// TestAdmission_AStoreSlowingDownStillStarts: answers growing a
// millisecond a start (30 to 80 ms): room kept from the slowest answer
// lately, less the slack, gave up every start (review: 0 of 50 used).
func TestAdmission_AStoreSlowingDownStillStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, _ := testAdmission(answeredLate(func(n int64) time.Duration { return 30*time.Millisecond + time.Duration(n)*time.Millisecond }))
		ctx := context.Background()
		tk := &ticket{id: "crm", lim: limits{every: paceEvery(10)}}
		used := 0
		for range 50 {
			ok, err := a.start(ctx, tk, false)
			require.NoError(t, err)
			if ok {
				used++
			}
			time.Sleep(time.Second)
		}
		assert.GreaterOrEqual(t, used, 25, "starts used of 50 asked a second apart")
	})
}

// TestAdmission_AnswersThatVaryALittleDoNotBurnStarts: answers 100 to
// 102 ms late gave up a start whenever one came a millisecond slower than
// the slowest lately less its decay (review: 0.22 of the rate).
func TestAdmission_AnswersThatVaryALittleDoNotBurnStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		late := func(n int64) time.Duration { return 100*time.Millisecond + time.Duration(n%3)*time.Millisecond }
		starts := runBacklog(t, answeredLate(late), limits{bound: 8, every: paceEvery(10)}, 40)
		rate := startRate(starts)
		assert.GreaterOrEqual(t, rate/10, 0.4, "the backlog goes on as at 100 ms: %.3f a second", rate)
		assert.LessOrEqual(t, mostWithinASecond(starts), 10, "starts within any second")
	})
}

// TestAdmission_ASlowRatesStartAnsweredSlowOnceIsNotGivenUp: a process's
// first start keeps no room, and one answered 30 ms late was given up:
// its job snoozed a spacing, a year at one a year, a minute at one a
// minute (review). It is given back to the store, no other start having
// been taken since, and asked for again with room: the delivery starts at
// once.
func TestAdmission_ASlowRatesStartAnsweredSlowOnceIsNotGivenUp(t *testing.T) {
	for _, rate := range []float64{1.0 / (365 * 24 * 3600), 1.0 / 60} {
		t.Run(fmt.Sprint(rate), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				t0 := time.Now()
				places := answeredLate(func(n int64) time.Duration {
					if n == 1 {
						return 30 * time.Millisecond
					}
					return time.Millisecond
				})
				starts := runBacklog(t, places, limits{bound: 8, every: paceEvery(rate)}, 1)
				assert.Less(t, starts[0].Sub(t0), time.Second, "the one delivery starts at once")
			})
		})
	}
}

// TestMemoryPlaces_AStartIsGivenBackOnlyIfNoneWasTakenSince: a start
// given back is as though not taken; one followed by another start stays
// taken, and the one after it comes every later.
func TestMemoryPlaces_AStartIsGivenBackOnlyIfNoneWasTakenSince(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		testGiveStart(t, newMemoryPlaces(time.Now))
	})
}

func testGiveStart(t *testing.T, p Places) {
	t.Helper()
	ctx, every, room := context.Background(), time.Hour, time.Minute
	_, mark, ok, err := p.start(ctx, "crm", every, 0, room)
	require.NoError(t, err)
	require.True(t, ok)
	back, err := p.giveStart(ctx, "crm", mark, every, room)
	require.NoError(t, err)
	require.True(t, back, "no start taken since")
	wait, mark, ok, err := p.start(ctx, "crm", every, 0, room)
	require.NoError(t, err)
	require.True(t, ok, "the start given back is taken again, now")
	assert.Less(t, wait, time.Second)

	_, _, ok, err = p.start(ctx, "crm", every, 2*every, room)
	require.NoError(t, err)
	require.True(t, ok, "another start, taken ahead")
	back, err = p.giveStart(ctx, "crm", mark, every, room)
	require.NoError(t, err)
	assert.False(t, back, "a start followed by another is not given back")
	back, err = p.giveStart(ctx, "erp", mark, every, room)
	require.NoError(t, err)
	assert.False(t, back, "nor one of another connection")
}

// perConnLate is a store whose answers to a connection's starts come late
// by late[id]: a row other processes hold, say.
type perConnLate struct {
	*memoryPlaces
	late map[string]time.Duration
}

func (p perConnLate) start(ctx context.Context, id string, every, within, room time.Duration) (time.Duration, time.Time, bool, error) {
	defer time.Sleep(p.late[id])
	return p.memoryPlaces.start(ctx, id, every, within, room)
}

// TestAdmission_AFastConnectionPaysNoOtherConnectionsRoom: connection
// erp's starts answered 200 ms late (its row hot) made connection crm,
// answered at once, keep room too, with one estimate per process: 0.83 of
// a rate of 50 (review). Each connection keeps its own.
func TestAdmission_AFastConnectionPaysNoOtherConnectionsRoom(t *testing.T) {
	for _, erp := range []time.Duration{0, 200 * time.Millisecond} {
		synctest.Test(t, func(t *testing.T) {
			a, _ := testAdmission(perConnLate{newMemoryPlaces(time.Now), map[string]time.Duration{"erp": erp}})
			ctx := context.Background()
			end := time.Now().Add(10 * time.Second)
			done := make(chan struct{})
			defer func() { <-done }()
			go func() {
				defer close(done)
				tk := &ticket{id: "erp", lim: limits{every: paceEvery(1)}}
				for time.Now().Before(end) {
					_, _ = a.start(ctx, tk, false)
					time.Sleep(time.Second)
				}
			}()
			tk := &ticket{id: "crm", lim: limits{every: paceEvery(50)}}
			used := 0
			for time.Now().Before(end) {
				if ok, _ := a.start(ctx, tk, true); ok {
					used++
				} else {
					time.Sleep(time.Millisecond)
				}
			}
			assert.GreaterOrEqual(t, float64(used)/10/50, 0.95, "crm, erp answered in %v: %d starts in 10 s", erp, used)
		})
	}
}
