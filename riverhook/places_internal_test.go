package riverhook

import (
	"context"
	"fmt"
	"math"
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

// fullPlaces is a fleet whose places are all held by other processes.
type fullPlaces struct{}

func (fullPlaces) Take(context.Context, string, int, int64, time.Duration) (int, bool, error) {
	return 0, false, nil
}
func (fullPlaces) Give(context.Context, string, int, int64) error { return nil }
func (fullPlaces) Keep(context.Context, string, int, int64, int64, time.Duration) (bool, error) {
	return true, nil
}
func (fullPlaces) Pace(context.Context, string, float64) (time.Duration, error) {
	return 0, nil
}
func (fullPlaces) Wake(context.Context, string, time.Duration) (int, error) { return 0, nil }
func (fullPlaces) Slot(_ context.Context, _ string, spacing time.Duration) (time.Duration, error) {
	return spacing, nil
}
func (fullPlaces) Due(context.Context, time.Duration) (int, error) { return 0, nil }

// chainPlaces is a fleet whose places are all held by other processes, and
// whose slots are handed from one chain, as ConnectionPlaces' are.
type chainPlaces struct {
	fullPlaces
	last time.Duration
}

func (c *chainPlaces) Slot(_ context.Context, _ string, spacing time.Duration) (time.Duration, error) {
	c.last += spacing
	return c.last, nil
}

// TestWorker_AJobWithoutAFleetPlaceAtItsSlotTakesTheFleetsNextSlot: the
// jobs that find every place of the fleet held take the fleet's next
// slots, spaced by the connection's time over the bound; one that comes
// back at its slot and still finds none takes the fleet's next slot too.
// The slots are spaced at what the endpoint takes: a slot at the front,
// between them, would be one more than the places free, and the job whose
// slot it took would find none either (fleetbench measured 4.1-4.5 runs
// per delivery with 4 processes that way, 2.0 this way).
func TestWorker_AJobWithoutAFleetPlaceAtItsSlotTakesTheFleetsNextSlot(t *testing.T) {
	sender, err := webhook.NewSender(nil)
	require.NoError(t, err)
	w, err := NewWorker(sender, func(context.Context, string) (webhook.Connection, error) { return webhook.Connection{}, nil },
		&WorkerOptions{MaxInFlightPerConnection: 8, Places: &chainPlaces{}, SnoozeFor: time.Second})
	require.NoError(t, err)
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	w.now = func() time.Time { return now }
	try := func(id int64, scheduled time.Time) time.Duration {
		job := &river.Job[Args]{JobRow: &rivertype.JobRow{ID: id, CreatedAt: now, ScheduledAt: scheduled}, Args: Args{ConnectionID: "c"}}
		h, wait, ok := w.admit(context.Background(), job, 0)
		require.False(t, ok, "every place of the fleet held")
		require.Nil(t, h)
		w.mu.Lock()
		defer w.mu.Unlock()
		require.Zero(t, w.inFlight["c"], "the process's own place given back")
		return wait
	}
	const spacing = time.Second / 8
	for i := range int64(5) {
		assert.Equal(t, time.Duration(i+1)*spacing, try(i+1, now), "the fleet's next slot")
	}
	created := now
	now = now.Add(spacing) // job 1's slot: still no place
	job := &river.Job[Args]{JobRow: &rivertype.JobRow{ID: 1, CreatedAt: created, ScheduledAt: now}, Args: Args{ConnectionID: "c"}}
	_, wait, ok := w.admit(context.Background(), job, 0)
	require.False(t, ok)
	assert.Equal(t, 6*spacing, wait, "the fleet's sixth slot (counted from the first), after jobs 2 to 5: not between them")
}

// TestWorker_RateLimitSpacesTheStartsOfAConnection: without Places, the
// rate holds in the process: a delivery begins when the connection's next
// start has come, and one that comes early snoozes to a slot of its own,
// the slots 1/rate apart, costing no attempt.
func TestWorker_RateLimitSpacesTheStartsOfAConnection(t *testing.T) {
	sender, err := webhook.NewSender(nil)
	require.NoError(t, err)
	rates := map[string]float64{"crm": 10, "erp": 0}
	w, err := NewWorker(sender, func(context.Context, string) (webhook.Connection, error) { return webhook.Connection{}, nil },
		&WorkerOptions{RateLimit: func(id string) float64 { return rates[id] }})
	require.NoError(t, err)
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	w.now = func() time.Time { return now }
	try := func(conn string, id int64) (time.Duration, bool) {
		job := &river.Job[Args]{JobRow: &rivertype.JobRow{ID: id}, Args: Args{ConnectionID: conn}}
		every, err := w.rateEvery(context.Background(), conn)
		require.NoError(t, err)
		wait, ok := w.pace(context.Background(), job, every)
		if ok {
			w.forgetSlot(job)
		}
		return wait, ok
	}
	_, ok := try("crm", 1)
	assert.True(t, ok, "the first start")
	for id := int64(2); id <= 4; id++ {
		wait, ok := try("crm", id)
		assert.False(t, ok)
		assert.Equal(t, time.Duration(id-1)*100*time.Millisecond, wait, "job %d's slot", id)
	}
	for range 3 {
		_, ok := try("erp", 9)
		assert.True(t, ok, "no rate: no wait")
	}
	now = now.Add(100 * time.Millisecond)
	_, ok = try("crm", 2)
	assert.True(t, ok, "job 2 at its slot: the next start")
	_, ok = try("crm", 5)
	assert.False(t, ok, "a newcomer at the same instant waits")
}

// TestWorker_SendTestTakesAPlaceInFlight: a Send Test is an attempt in
// flight like a delivery's, so it never passes the bound: in the process,
// and across the fleet with Places.
func TestWorker_SendTestTakesAPlaceInFlight(t *testing.T) {
	sender, err := webhook.NewSender(nil)
	require.NoError(t, err)
	resolve := func(context.Context, string) (webhook.Connection, error) {
		return webhook.Connection{Name: "crm", URL: "https://example.invalid/hooks", Secret: "whsec_x"}, nil
	}
	w, err := NewWorker(sender, resolve, &WorkerOptions{MaxInFlightPerConnection: 1})
	require.NoError(t, err)
	job := &river.Job[Args]{JobRow: &rivertype.JobRow{ID: 1}, Args: Args{ConnectionID: "crm"}}
	h, _, ok := w.admit(context.Background(), job, 0)
	require.True(t, ok, "a delivery in flight")
	_, err = w.SendTest(context.Background(), "crm")
	require.ErrorIs(t, err, ErrBusy, "the process's bound is taken")
	w.finish(context.Background(), h)

	fleet, err := NewWorker(sender, resolve, &WorkerOptions{MaxInFlightPerConnection: 1, Places: fullPlaces{}})
	require.NoError(t, err)
	_, err = fleet.SendTest(context.Background(), "crm")
	require.ErrorIs(t, err, ErrBusy, "the fleet's places are all held")
	fleet.mu.Lock()
	defer fleet.mu.Unlock()
	assert.Empty(t, fleet.inFlight, "the process's place given back")
}

// TestWorker_AJobBackAtItsSlotHoldsOnForAPlace: a job back at its slot
// that finds the bound full waits in its run, up to two slots' spacing,
// for a place that frees a moment later, instead of costing a run and a
// slot at the front; a job that comes for the first time takes a slot at
// once; one whose place does not free in time takes a slot at the front.
func TestWorker_AJobBackAtItsSlotHoldsOnForAPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sender, err := webhook.NewSender(nil)
		require.NoError(t, err)
		w, err := NewWorker(sender, func(context.Context, string) (webhook.Connection, error) { return webhook.Connection{}, nil },
			&WorkerOptions{MaxInFlightPerConnection: 1, SnoozeFor: time.Second}) // slots a second apart
		require.NoError(t, err)
		ctx := context.Background()
		created := time.Now()
		job := func(id int64, back bool) *river.Job[Args] { return crmJob(created, id, back) }
		h1, _, ok := w.admit(ctx, job(1, false), 0)
		require.True(t, ok, "the place")

		_, wait, ok := w.admit(ctx, job(2, false), 0)
		assert.False(t, ok, "a first run does not hold on")
		assert.Equal(t, time.Second, wait)

		go func() {
			time.Sleep(300 * time.Millisecond) // job 1's attempt ends
			w.finish(ctx, h1)
		}()
		start := time.Now()
		h3, _, ok := w.admit(ctx, job(3, true), 0)
		assert.True(t, ok, "back at its slot: it holds on for the place")
		assert.Equal(t, 300*time.Millisecond, time.Since(start), "handed at once as job 1 ends")
		defer w.finish(ctx, h3)

		start = time.Now()
		_, wait, ok = w.admit(ctx, job(4, true), 0)
		assert.False(t, ok, "no place freed within two slots' spacing (at most a second)")
		assert.Equal(t, time.Second, time.Since(start))
		assert.Equal(t, time.Second, wait, "a slot at the front")
	})
}

// respaceWorker is a Worker with a bound of 8 over a fleet counting its
// wakes, its slots a second over the bound apart until an attempt has
// ended, on the test's clock *now.
func respaceWorker(t *testing.T, now *time.Time) (*Worker, *wakeCounter) {
	t.Helper()
	sender, err := webhook.NewSender(nil)
	require.NoError(t, err)
	places := &wakeCounter{}
	w, err := NewWorker(sender, func(context.Context, string) (webhook.Connection, error) { return webhook.Connection{}, nil },
		&WorkerOptions{MaxInFlightPerConnection: 8, Places: places, SnoozeFor: time.Second})
	require.NoError(t, err)
	w.now = func() time.Time { return *now }
	return w, places
}

// wakeCounter is a fleet whose places are all held, counting its Wakes.
type wakeCounter struct {
	chainPlaces
	wakes []time.Duration
}

func (c *wakeCounter) Wake(_ context.Context, _ string, every time.Duration) (int, error) {
	c.wakes = append(c.wakes, every)
	return 0, nil
}

// TestWorker_SlotsHandedTooSlowAreRespacedOnceTheEndpointIsKnown: a burst
// slotted before any attempt ended is spaced by SnoozeFor over the bound;
// once attempts show the endpoint faster by a quarter or more, its waiting
// jobs are moved to its pace (Places.Wake), at most once per rewakeFor.
func TestWorker_SlotsHandedTooSlowAreRespacedOnceTheEndpointIsKnown(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	w, places := respaceWorker(t, &now)
	ctx := context.Background()
	for id := int64(1); id <= 3; id++ {
		job := &river.Job[Args]{JobRow: &rivertype.JobRow{ID: id, CreatedAt: now, ScheduledAt: now}, Args: Args{ConnectionID: "crm"}}
		assert.Equal(t, time.Duration(id)*time.Second/8, w.waitSlot(ctx, job, 0), "slot %d, before any attempt ended", id)
	}
	w.observe("crm", 900*time.Millisecond)
	w.respace(ctx, "crm", 0)
	assert.Empty(t, places.wakes, "within a quarter of the slots handed: left")
	w.observe("crm", 100*time.Millisecond) // the average falls to 800 ms... and on
	for range 20 {
		w.observe("crm", 100*time.Millisecond)
	}
	w.respace(ctx, "crm", 0)
	require.Len(t, places.wakes, 1, "a quarter faster or more: moved to its pace")
	assert.Less(t, places.wakes[0], 75*time.Millisecond)
	w.respace(ctx, "crm", 0)
	assert.Len(t, places.wakes, 1, "once per rewakeFor")
}

// TestWorker_SlowSlotsAreRespacedThoughOneWasHandedAtThePaceSince: a
// burst slotted before any attempt ended, then one more job slotted once
// the endpoint's pace was known: the burst's slots are still too slow and
// are moved to its pace. (The last slot's spacing hid them: fleetbench's
// 500 ms endpoint then got 0.50x of what its bound allows, at random.)
func TestWorker_SlowSlotsAreRespacedThoughOneWasHandedAtThePaceSince(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	w, places := respaceWorker(t, &now)
	ctx := context.Background()
	job := func(id int64) *river.Job[Args] {
		return &river.Job[Args]{JobRow: &rivertype.JobRow{ID: id, CreatedAt: now, ScheduledAt: now}, Args: Args{ConnectionID: "crm"}}
	}
	for id := int64(1); id <= 3; id++ {
		w.waitSlot(ctx, job(id), 0) // a second over the bound apart
	}
	w.observe("crm", 500*time.Millisecond)
	w.waitSlot(ctx, job(4), 0) // at the endpoint's pace
	w.respace(ctx, "crm", 0)
	require.Len(t, places.wakes, 1, "the burst's slots, twice too slow, moved to its pace")
	assert.Equal(t, 500*time.Millisecond/8, places.wakes[0])

	// A job slotted as the wake ran, at the old chain's end, is brought
	// along by a second wake a second later.
	now = now.Add(time.Second)
	w.due(ctx)
	require.Len(t, places.wakes, 2, "woken again")
	assert.Equal(t, 500*time.Millisecond/8, places.wakes[1])
}

// TestWorker_APanickingRateLimitCostsNoAttempt: RateLimit is the caller's
// code, called from River's worker goroutines: a panic in it is logged and
// the delivery waits for SnoozeFor, costing no attempt (River would count a
// panicking run as a failed one, and run it again at once), and the Worker
// goes on working, the re-wake of a woken backlog included.
func TestWorker_APanickingRateLimitCostsNoAttempt(t *testing.T) {
	sender, err := webhook.NewSender(nil)
	require.NoError(t, err)
	var panicking atomic.Bool
	w, err := NewWorker(sender, func(context.Context, string) (webhook.Connection, error) { return webhook.Connection{}, nil },
		&WorkerOptions{MaxInFlightPerConnection: 1, Places: fullPlaces{}, SnoozeFor: 3 * time.Second, Logger: testdb.Quiet(),
			RateLimit: func(string) float64 {
				if panicking.Load() {
					panic("the settings cache is not loaded")
				}
				return 10
			}})
	require.NoError(t, err)
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	w.now = func() time.Time { return now }
	// The endpoint was down: the process handed out down slots, then an
	// answer woke the backlog.
	w.mu.Lock()
	w.pacer("crm").downNext = now.Add(time.Minute)
	w.mu.Unlock()
	w.wakeBacklog(context.Background(), "crm", 100*time.Millisecond)
	require.Contains(t, w.woken, "crm", "the backlog woken, to be woken again a second later")

	panicking.Store(true)
	now = now.Add(time.Second) // the re-wake is due in the next run
	job := &river.Job[Args]{JobRow: &rivertype.JobRow{ID: 1, CreatedAt: now, ScheduledAt: now}, Args: Args{ConnectionID: "crm"}}
	var worked error
	panicked := func() (v any) {
		defer func() { v = recover() }()
		worked = w.Work(context.Background(), job)
		return nil
	}()
	assert.Nil(t, panicked, "Work let RateLimit's panic through")
	if assert.True(t, w.mu.TryLock(), "the Worker's lock is still held: every later run would wait for it forever") {
		w.mu.Unlock()
	}
	var snooze *rivertype.JobSnoozeError
	require.ErrorAs(t, worked, &snooze)
	assert.Equal(t, 3*time.Second, snooze.Duration, "the delivery waits for SnoozeFor")
}

// TestPaceEvery: a rate is the time between two starts; no rate is zero;
// a rate too small for a time.Duration is the slowest pace there is, never
// a wrapped number taken for a million starts a second.
func TestPaceEvery(t *testing.T) {
	for _, tc := range []struct {
		perSecond float64
		want      time.Duration
	}{
		{10, 100 * time.Millisecond},
		{1, time.Second},
		{1e9, time.Microsecond}, // the finest pace
		{0, 0},
		{-1, 0},
		{math.NaN(), 0},
		{math.Inf(1), 0},
		{math.Inf(-1), 0},
		{1.0 / (24 * 3600), 24 * time.Hour},
		{1e-10, maxPaceEvery},
		{math.SmallestNonzeroFloat64, maxPaceEvery},
	} {
		assert.Equal(t, tc.want, paceEvery(tc.perSecond), "%g a second", tc.perSecond)
	}
}

// TestWorker_AttemptsNeverSentDoNotSpaceTheSlots: the slots of a
// connection's waiting jobs are spaced by its attempts' time, and an
// attempt never sent (an event the connection does not subscribe to, an
// invalid connection) took none: however many there were, a job over the
// bound waits for a slot, and never runs again at once.
func TestWorker_AttemptsNeverSentDoNotSpaceTheSlots(t *testing.T) {
	sender, err := webhook.NewSender(nil)
	require.NoError(t, err)
	resolve := func(context.Context, string) (webhook.Connection, error) {
		return webhook.Connection{Name: "crm", URL: "https://example.invalid/hooks", Secret: "whsec_x", Events: []string{"user.created"}}, nil
	}
	w, err := NewWorker(sender, resolve, &WorkerOptions{MaxInFlightPerConnection: 2, SnoozeFor: time.Second, Logger: testdb.Quiet()})
	require.NoError(t, err)
	ctx := context.Background()
	w.observe("crm", 400*time.Millisecond) // an attempt sent, answered in 400 ms
	for id := range int64(200) {
		job := &river.Job[Args]{JobRow: &rivertype.JobRow{ID: id + 1, Attempt: 1, MaxAttempts: 5},
			Args: Args{ConnectionID: "crm", DeliveryID: "d", Event: "user.deleted", Body: []byte("{}")}}
		require.ErrorIs(t, w.Work(ctx, job), webhook.ErrNotSubscribed)
	}
	for id := int64(1000); id < 1002; id++ { // the bound, taken
		_, _, ok := w.admit(ctx, &river.Job[Args]{JobRow: &rivertype.JobRow{ID: id}, Args: Args{ConnectionID: "crm"}}, 0)
		require.True(t, ok)
	}
	job := &river.Job[Args]{JobRow: &rivertype.JobRow{ID: 2000, Attempt: 1, MaxAttempts: 5},
		Args: Args{ConnectionID: "crm", DeliveryID: "e", Event: "user.created", Body: []byte("{}")}}
	var snooze *rivertype.JobSnoozeError
	require.ErrorAs(t, w.Work(ctx, job), &snooze)
	assert.Equal(t, 400*time.Millisecond/2, snooze.Duration, "the first slot: the one attempt sent over the bound")
}

// hungPlaces is a fleet whose store hangs: each call returns only when its
// context ends.
type hungPlaces struct{ fullPlaces }

func (hungPlaces) Take(context.Context, string, int, int64, time.Duration) (int, bool, error) {
	return 0, true, nil
}

func (hungPlaces) Give(ctx context.Context, _ string, _ int, _ int64) error {
	<-ctx.Done()
	return ctx.Err()
}

func (hungPlaces) Wake(ctx context.Context, _ string, _ time.Duration) (int, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

// TestWorker_AHungStoreHoldsARunAtMostStoreTimeout: what a run writes to
// Places after its context may have ended (the place given back, the wake
// of a backlog) is not cut by that end, but a store that hangs holds the
// run's goroutine storeTimeout at most, never for ever: River cannot end a
// run that does not return.
func TestWorker_AHungStoreHoldsARunAtMostStoreTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sender, err := webhook.NewSender(nil)
		require.NoError(t, err)
		w, err := NewWorker(sender, func(context.Context, string) (webhook.Connection, error) { return webhook.Connection{}, nil },
			&WorkerOptions{MaxInFlightPerConnection: 1, Places: hungPlaces{}, Logger: testdb.Quiet()})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // the run's end: River's timeout, or the client stopping
		start := time.Now()
		job := &river.Job[Args]{JobRow: &rivertype.JobRow{ID: 1}, Args: Args{ConnectionID: "crm"}}
		h, _, ok := w.admit(ctx, job, 0)
		require.True(t, ok)
		w.finish(ctx, h)
		assert.Equal(t, storeTimeout, time.Since(start), "the place given back")

		w.mu.Lock()
		w.pacer("crm").downNext = w.now().Add(time.Minute)
		w.mu.Unlock()
		start = time.Now()
		w.wakeBacklog(ctx, "crm", 100*time.Millisecond)
		assert.Equal(t, storeTimeout, time.Since(start), "the backlog's wake")
	})
}

// TestConnectionPlaces_TakeOutlivesItsRows: a connection whose place rows
// were lost (a restore, a prune, a failover) is not full for good: a Take
// that finds no place a minute after the rows were made makes them again;
// and a process forgets the connections it no longer delivers to.
func TestConnectionPlaces_TakeOutlivesItsRows(t *testing.T) {
	pool, schema := testdb.Schema(t, "places", true)
	ctx := context.Background()
	require.NoError(t, Migrate(ctx, pool, schema))
	places := NewConnectionPlaces(pool, schema)
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	places.now = func() time.Time { return now }
	_, ok, err := places.Take(ctx, "crm", 1, 1, time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, places.Give(ctx, "crm", 0, 1))
	_, err = pool.Exec(ctx, `DELETE FROM "`+schema+`".riverhook_place`)
	require.NoError(t, err)
	_, ok, err = places.Take(ctx, "crm", 1, 2, time.Minute)
	require.NoError(t, err)
	assert.False(t, ok, "the rows are gone: it looks full")
	now = now.Add(time.Minute)
	_, ok, err = places.Take(ctx, "crm", 1, 2, time.Minute)
	require.NoError(t, err)
	require.False(t, ok, "a minute on, still no row: this Take forgets them")
	_, ok, err = places.Take(ctx, "crm", 1, 2, time.Minute)
	require.NoError(t, err)
	assert.True(t, ok, "made again")

	now = now.Add(ensureAgain + time.Minute)
	_, _, err = places.Take(ctx, "erp", 1, 3, time.Minute) // sweeps
	require.NoError(t, err)
	places.mu.Lock()
	defer places.mu.Unlock()
	assert.NotContains(t, places.ensured, "crm", "not delivered to for ten minutes: forgotten")
	assert.Contains(t, places.ensured, "erp")
}

// TestWorker_ADueMakesAtMostMaxRewakes: the second wakes of many
// connections respaced at once are spread over the dues that follow, a
// bounded number each, not all made in one delivery's run.
func TestWorker_ADueMakesAtMostMaxRewakes(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	w, places := respaceWorker(t, &now)
	for i := range 40 {
		w.woken[fmt.Sprintf("c%d", i)] = now
	}
	ctx := context.Background()
	for _, want := range []int{16, 32, 40, 40} {
		now = now.Add(time.Second)
		w.due(ctx)
		assert.Len(t, places.wakes, want)
	}
}

// TestConnectionPlaces_TakesOfOneConnectionInAStatementTakePlacesOfTheirOwn:
// Takes of a connection that share a statement but differ in hold (a
// delivery's and a Send Test's) or in bound (two Workers of a process)
// each take a place of their own while the connection has free ones: none
// is refused because another Take of the statement picked the same place,
// whichever plan PostgreSQL runs the statement with (the generic plan of a
// statement pgx prepared, which PostgreSQL may choose after its fifth run,
// finds every request's places before it updates any).
func TestConnectionPlaces_TakesOfOneConnectionInAStatementTakePlacesOfTheirOwn(t *testing.T) {
	pool, schema := testdb.Schema(t, "places", true)
	ctx := context.Background()
	require.NoError(t, Migrate(ctx, pool, schema))
	for _, plan := range []string{"auto", "force_generic_plan"} {
		conn, err := pool.Acquire(ctx)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, `SET plan_cache_mode = `+plan)
		require.NoError(t, err)
		places := NewConnectionPlaces(conn, schema)
		require.NoError(t, places.ensure(ctx, "crm", 4))
		_, err = conn.Exec(ctx, `UPDATE "`+schema+`".riverhook_place SET until = '-infinity'`)
		require.NoError(t, err)
		minute, twoMinutes := time.Minute.Microseconds(), 2*time.Minute.Microseconds()
		got, err := places.take(ctx, []takeReq{
			{"crm", 4, 1, minute}, {"crm", 4, 2, twoMinutes}, // holds apart
			{"crm", 4, 3, minute}, {"crm", 5, 4, minute}, // bounds apart (its fifth row not made)
		})
		require.NoError(t, err)
		assert.NotContains(t, got, -1, "%s: 4 places free for 4 Takes: %v", plan, got)
		assert.Len(t, uniq(got), 4, "%s: a place each: %v", plan, got)
		var held int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM "`+schema+`".riverhook_place
			WHERE connection_id = 'crm' AND until > clock_timestamp()`).Scan(&held))
		assert.Equal(t, 4, held, plan)
		conn.Release()
	}
}

// TestConnectionPlaces_ATakeInAStatementIsToldItsOwnPlaceWhenHoldersRepeat:
// a Take is told the place its statement took for it, not one taken for
// another Take with the same holder number (of another connection, or of
// the same), which would hold that place for nobody until its hold ends.
func TestConnectionPlaces_ATakeInAStatementIsToldItsOwnPlaceWhenHoldersRepeat(t *testing.T) {
	pool, schema := testdb.Schema(t, "places", true)
	ctx := context.Background()
	require.NoError(t, Migrate(ctx, pool, schema))
	places := NewConnectionPlaces(pool, schema)
	_, ok, err := places.Take(ctx, "erp", 2, 100, time.Minute) // erp's place 0 held
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, places.ensure(ctx, "crm", 2))
	hold := time.Minute.Microseconds()
	got, err := places.take(ctx, []takeReq{{"crm", 2, 7, hold}, {"erp", 2, 7, hold}})
	require.NoError(t, err)
	assert.Equal(t, []int{0, 1}, got, "crm's first free place is 0, erp's is 1")

	require.NoError(t, places.ensure(ctx, "hr", 2))
	got, err = places.take(ctx, []takeReq{{"hr", 2, 8, hold}, {"hr", 2, 8, hold}})
	require.NoError(t, err)
	assert.ElementsMatch(t, []int{0, 1}, got, "both of hr's places were taken, one for each")
}

func uniq(s []int) map[int]bool {
	m := map[int]bool{}
	for _, v := range s {
		m[v] = true
	}
	return m
}
