package riverhook

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook/internal/testdb"
)

// fastClock is a Worker's clock that moves a second at each reading, so
// that the holds of places handed from run to run come short and are
// renewed (Places.Keep) as well as passed as they are.
type fastClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fastClock) read() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Second)
	return c.now
}

// stressAdmit runs, in each of two Workers (two processes of a fleet),
// goroutines that admit jobs of one connection back at their slots (so
// that they hold on, and are handed places) and finish them, and checks
// that no more than bound are ever in flight across both, that no fleet
// place is ever held by two runs at once, and that every place of the
// process is given back at the end.
func stressAdmit(t *testing.T, places func() Places, bound int) {
	t.Helper()
	sender, err := webhook.NewSender(nil)
	require.NoError(t, err)
	clock := &fastClock{now: time.Now()}
	var workers []*Worker
	for range 2 {
		w, err := NewWorker(sender, func(context.Context, string) (webhook.Connection, error) { return webhook.Connection{}, nil },
			&WorkerOptions{MaxInFlightPerConnection: bound, Places: places(), SnoozeFor: 40 * time.Millisecond, Logger: testdb.Quiet()})
		require.NoError(t, err)
		w.now = clock.read
		workers = append(workers, w)
	}
	var (
		ids      atomic.Int64
		inFlight atomic.Int64
		most     atomic.Int64
		admitted atomic.Int64
		occupied = make([]atomic.Int64, bound) // place -> the job in flight on it
		wg       sync.WaitGroup
	)
	created := time.Now()
	for g := range 16 {
		w := workers[g%2]
		wg.Go(func() {
			for range 40 {
				id := ids.Add(1)
				job := &river.Job[Args]{JobRow: &rivertype.JobRow{ID: id, CreatedAt: created, ScheduledAt: created.Add(time.Second)},
					Args: Args{ConnectionID: "crm"}}
				ctx, cancel := context.WithCancel(context.Background())
				if id%7 == 0 {
					cancel() // River cancels the run as it holds on
				}
				h, _, ok := w.admit(ctx, job, 0)
				if ok {
					admitted.Add(1)
					n := inFlight.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					if !assert.True(t, h.fleet) || !assert.True(t, occupied[h.place].CompareAndSwap(0, id), "place %d held by job %d and job %d at once", h.place, occupied[h.place].Load(), id) {
						cancel()
						return
					}
					time.Sleep(time.Duration(id%3) * time.Millisecond) // the attempt
					occupied[h.place].Store(0)
					inFlight.Add(-1)
					w.finish(ctx, h)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, most.Load(), int64(bound), "in flight across the fleet")
	assert.Positive(t, admitted.Load())
	for i, w := range workers {
		w.mu.Lock()
		assert.Empty(t, w.inFlight, "worker %d: its places given back", i)
		assert.Empty(t, w.waiting, "worker %d: no run holding on", i)
		w.mu.Unlock()
	}
	t.Logf("admitted %d of %d, at most %d in flight", admitted.Load(), ids.Load(), most.Load())
}

// TestWorker_AdmitUnderStressKeepsTheBound: many runs of one connection
// admitted and finished at once, in two processes sharing a fleet in
// memory, never pass the bound and leave no place held.
func TestWorker_AdmitUnderStressKeepsTheBound(t *testing.T) {
	for _, bound := range []int{1, 3} {
		t.Run(fmt.Sprint(bound), func(t *testing.T) {
			fleet := &memPlaces{holder: map[int]int64{}}
			stressAdmit(t, func() Places { return fleet }, bound)
			_, _, keeps, holder := fleet.counts()
			assert.Empty(t, holder, "every place of the fleet given back")
			assert.Positive(t, keeps, "some places renewed as they were handed")
		})
	}
}

// TestConnectionPlaces_AdmitUnderStressKeepsTheBound: the same on
// PostgreSQL, two ConnectionPlaces as two processes have.
func TestConnectionPlaces_AdmitUnderStressKeepsTheBound(t *testing.T) {
	pool, schema := testdb.Schema(t, "stress", true)
	ctx := context.Background()
	require.NoError(t, Migrate(ctx, pool, schema))
	stressAdmit(t, func() Places { return NewConnectionPlaces(pool, schema) }, 3)
	var held int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.riverhook_place WHERE until > clock_timestamp()`).Scan(&held))
	assert.Zero(t, held, "every place of the fleet given back")
}
