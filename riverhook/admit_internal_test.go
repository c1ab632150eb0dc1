package riverhook

import (
	"context"
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

// memPlaces is a fleet of one connection in memory, counting what it is
// asked.
type memPlaces struct {
	fullPlaces
	mu                  sync.Mutex
	holder              map[int]int64 // place -> the hold its row names
	takes, gives, keeps int
	keepFails           bool
}

func (m *memPlaces) Take(_ context.Context, _ string, bound int, job int64, _ time.Duration) (int, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.takes++
	for place := range bound {
		if _, held := m.holder[place]; !held {
			m.holder[place] = job
			return place, true, nil
		}
	}
	return 0, false, nil
}

func (m *memPlaces) Give(_ context.Context, _ string, place int, job int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gives++
	if m.holder[place] == job {
		delete(m.holder, place)
	}
	return nil
}

func (m *memPlaces) Keep(_ context.Context, _ string, place int, job, newJob int64, _ time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keeps++
	if m.keepFails || m.holder[place] != job {
		return false, nil
	}
	m.holder[place] = newJob
	return true, nil
}

func (m *memPlaces) counts() (takes, gives, keeps int, holder map[int]int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := map[int]int64{}
	for k, v := range m.holder {
		h[k] = v
	}
	return m.takes, m.gives, m.keeps, h
}

// crmJob is a job of connection crm inserted at created, running for the
// first time, or back at its slot a second later.
func crmJob(created time.Time, id int64, back bool) *river.Job[Args] {
	row := &rivertype.JobRow{ID: id, CreatedAt: created, ScheduledAt: created}
	if back {
		row.ScheduledAt = created.Add(time.Second)
	}
	return &river.Job[Args]{JobRow: row, Args: Args{ConnectionID: "crm"}}
}

// assertNothingHeld checks that w holds no place and has no run holding
// on for one.
func assertNothingHeld(t *testing.T, w *Worker) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	assert.Empty(t, w.inFlight, "the process's place given back")
	assert.Empty(t, w.waiting)
}

// fleetWorker is a Worker with a bound of 1 over fleet, its slots a
// second apart until an attempt has ended.
func fleetWorker(t *testing.T, fleet Places) *Worker {
	t.Helper()
	sender, err := webhook.NewSender(nil)
	require.NoError(t, err)
	w, err := NewWorker(sender, func(context.Context, string) (webhook.Connection, error) { return webhook.Connection{}, nil },
		&WorkerOptions{MaxInFlightPerConnection: 1, Places: fleet, SnoozeFor: time.Second, Logger: testdb.Quiet()})
	require.NoError(t, err)
	return w
}

// TestWorker_APlaceFreedIsHandedToARunHoldingOnForIt: a place of the
// fleet's freed as a run's attempt ends goes at once to the run of the
// same connection holding on for one in the process, at no statement while
// what is left of its hold covers the new run; renewed (Places.Keep) when
// it might not; and a place that could not be kept leaves the run without
// one, its slot at the front, the process's place given back.
func TestWorker_APlaceFreedIsHandedToARunHoldingOnForIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fleet := &memPlaces{holder: map[int]int64{}}
		w := fleetWorker(t, fleet)
		ctx := context.Background()
		created := time.Now()
		back := func(id int64) *river.Job[Args] { // a job back at its slot
			return &river.Job[Args]{JobRow: &rivertype.JobRow{ID: id, CreatedAt: created, ScheduledAt: created.Add(time.Second)},
				Args: Args{ConnectionID: "crm"}}
		}
		handOver := func(from *held, to int64) (*held, time.Duration, bool) {
			go func() {
				time.Sleep(100 * time.Millisecond) // the attempt ends
				w.finish(ctx, from)
			}()
			start := time.Now()
			h, wait, ok := w.admit(ctx, back(to), 0)
			if ok {
				assert.Equal(t, 100*time.Millisecond, time.Since(start), "at once as the attempt before ends")
			}
			return h, wait, ok
		}

		h1, _, ok := w.admit(ctx, back(1), 0)
		require.True(t, ok)
		first := h1.holder
		h2, _, ok := handOver(h1, 2)
		require.True(t, ok, "handed over")
		takes, gives, keeps, holder := fleet.counts()
		assert.Equal(t, []int{1, 0, 0}, []int{takes, gives, keeps}, "no statement: the hold covers job 2's run")
		assert.Equal(t, map[int]int64{0: first}, holder, "the row names job 1's hold still")

		h2.until = time.Now().Add(time.Second) // what is left of the hold would not cover job 3's run
		h3, _, ok := handOver(h2, 3)
		require.True(t, ok, "handed over")
		takes, gives, keeps, holder = fleet.counts()
		assert.Equal(t, []int{1, 0, 1}, []int{takes, gives, keeps}, "kept for job 3")
		assert.Equal(t, map[int]int64{0: h3.holder}, holder)
		assert.NotEqual(t, first, h3.holder, "a hold of its own")
		assert.Equal(t, w.hold(), time.Until(h3.until), "held anew")

		fleet.mu.Lock()
		fleet.keepFails = true // the hold ended meanwhile: the place may be another's
		fleet.mu.Unlock()
		h3.until = time.Now().Add(time.Second)
		_, wait, ok := handOver(h3, 4)
		assert.False(t, ok, "no place")
		assert.Equal(t, time.Second, wait, "the fleet's next slot")
		assertNothingHeld(t, w)
	})
}

// TestWorker_ARunLeavingAsAPlaceIsHandedToItPassesItOn: a run that stops
// holding on (its context ends, or it found a place of its own) just as a
// place is handed to it passes that place on, so that none is lost to the
// process.
func TestWorker_ARunLeavingAsAPlaceIsHandedToItPassesItOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fleet := &memPlaces{holder: map[int]int64{}}
		w := fleetWorker(t, fleet)
		h1, _, ok := w.admit(context.Background(), &river.Job[Args]{JobRow: &rivertype.JobRow{ID: 1}, Args: Args{ConnectionID: "crm"}}, 0)
		require.True(t, ok)
		me := &waiter{got: make(chan *held, 1)}
		w.mu.Lock()
		w.waiting["crm"] = append(w.waiting["crm"], me)
		w.mu.Unlock()
		w.finish(context.Background(), h1) // handed to me
		got := w.leave("crm", me)
		require.NotNil(t, got, "handed before it left")
		w.finish(context.Background(), got)
		_, gives, _, holder := fleet.counts()
		assert.Equal(t, 1, gives)
		assert.Empty(t, holder, "given back to the fleet")
		assertNothingHeld(t, w)
	})
}

// panickyPlaces is a fleet in memory whose Take panics once it has been
// asked takesLeft more times, from the moment panics is set.
type panickyPlaces struct {
	memPlaces
	panics    atomic.Bool
	takesLeft atomic.Int64
}

func (p *panickyPlaces) Take(ctx context.Context, id string, bound int, job int64, hold time.Duration) (int, bool, error) {
	if p.panics.Load() && p.takesLeft.Add(-1) < 0 {
		panic("a Places of the caller's")
	}
	return p.memPlaces.Take(ctx, id, bound, job, hold)
}

func (p *panickyPlaces) Keep(ctx context.Context, id string, place int, job, newJob int64, hold time.Duration) (bool, error) {
	if p.panics.Load() {
		panic("a Places of the caller's")
	}
	return p.memPlaces.Keep(ctx, id, place, job, newJob, hold)
}

// TestWorker_APanickingPlacesLosesNoPlace: a Places whose Take panics (the
// caller's code; River recovers the run's panic) neither keeps the
// process's place it was taken with, nor leaves behind a run holding on
// that a place freed later would be handed to, and lost with.
func TestWorker_APanickingPlacesLosesNoPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sender, err := webhook.NewSender(nil)
		require.NoError(t, err)
		fleet := &panickyPlaces{memPlaces: memPlaces{holder: map[int]int64{1: 99}}} // place 1 another process's
		w, err := NewWorker(sender, func(context.Context, string) (webhook.Connection, error) { return webhook.Connection{}, nil },
			&WorkerOptions{MaxInFlightPerConnection: 2, Places: fleet, SnoozeFor: time.Second, Logger: testdb.Quiet()})
		require.NoError(t, err)
		ctx := context.Background()
		created := time.Now()
		job := func(id int64, back bool) *river.Job[Args] { return crmJob(created, id, back) }
		admitRecovering := func(j *river.Job[Args]) (panicked bool) {
			defer func() { panicked = recover() != nil }()
			w.admit(ctx, j, 0)
			return false
		}

		fleet.panics.Store(true)
		require.True(t, admitRecovering(job(1, false)), "Take panicked")
		w.mu.Lock()
		assert.Empty(t, w.inFlight, "the process's place given back")
		w.mu.Unlock()

		fleet.panics.Store(false)
		h2, _, ok := w.admit(ctx, job(2, false), 0)
		require.True(t, ok)
		fleet.takesLeft.Store(1) // job 4 finds the fleet full, then Take panics as it holds on
		fleet.panics.Store(true)
		require.True(t, admitRecovering(job(4, true)), "Take panicked as job 4 held on")
		w.mu.Lock()
		assert.Empty(t, w.waiting, "job 4 no longer holds on")
		w.mu.Unlock()
		w.finish(ctx, h2)
		_, _, _, holder := fleet.counts()
		assert.Equal(t, map[int]int64{1: 99}, holder, "job 2's place given back to the fleet")
		w.mu.Lock()
		assert.Empty(t, w.inFlight, "and every place of the process")
		w.mu.Unlock()

		// A place handed to a run holding on, whose renewal panics.
		fleet.panics.Store(false)
		h5, _, ok := w.admit(ctx, job(5, false), 0)
		require.True(t, ok)
		h5.until = time.Now().Add(time.Second) // what is left of its hold would not cover job 6's run
		go func() {
			time.Sleep(10 * time.Millisecond) // job 5's attempt ends
			fleet.panics.Store(true)
			w.finish(ctx, h5)
		}()
		require.True(t, admitRecovering(job(6, true)), "Keep panicked as job 6 was handed job 5's place")
		assertNothingHeld(t, w)
	})
}

// TestWorker_AHoldIsNamedByItsOwnNumber: a place's row names the hold, not
// the job: when a place handed on without a statement outlives its hold
// (a run that overran its context) and the job that took it runs again
// and takes the same place, the end of the handed run gives back its own
// hold only, never the new run's place, and the bound holds.
func TestWorker_AHoldIsNamedByItsOwnNumber(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fleet := &memPlaces{holder: map[int]int64{}}
		w := fleetWorker(t, fleet)
		ctx := context.Background()
		created := time.Now()
		job := func(id int64, back bool) *river.Job[Args] { return crmJob(created, id, back) }
		h1, _, ok := w.admit(ctx, job(1, false), 0)
		require.True(t, ok)
		go w.finish(ctx, h1)
		h2, _, ok := w.admit(ctx, job(2, true), 0) // handed job 1's place, no statement
		require.True(t, ok)

		// Job 2's run overruns its hold: the row frees, and job 1 runs
		// again (River's retry, in another process) and takes it.
		fleet.mu.Lock()
		clear(fleet.holder)
		fleet.mu.Unlock()
		other := fleetWorker(t, fleet)
		again, _, ok := other.admit(ctx, job(1, false), 0)
		require.True(t, ok, "the freed row, taken by job 1's next run")
		defer other.finish(ctx, again)

		w.finish(ctx, h2) // job 2's attempt ends at last
		third := fleetWorker(t, fleet)
		h3, _, ok := third.admit(ctx, job(3, false), 0)
		if ok {
			third.finish(ctx, h3)
		}
		assert.False(t, ok, "job 1's run holds the one place: the bound is 1")
	})
}
