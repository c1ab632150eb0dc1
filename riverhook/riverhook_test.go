package riverhook_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/webhooktest"
)

// TestWorkerInAClient works deliveries with started River clients. Its
// cases run one at a time, not in parallel with other tests: they time
// River's real waits.
func TestWorkerInAClient(t *testing.T) {
	t.Run("RetriesOnThePolicysScheduleThenDelivers", func(t *testing.T) {
		bundle := setupReceiver(t, nil)
		bundle.srv.Script(webhooktest.Status(500), webhooktest.Status(500))
		policy := fastPolicy(3)
		var mu sync.Mutex
		var seen []webhook.Attempt
		worker := newWorker(t, bundle.srv.Sender(&webhook.SenderOptions{Retry: policy}), bundle.conns.resolve,
			&riverhook.WorkerOptions{OnAttempt: func(_ context.Context, job *river.Job[riverhook.Args], a webhook.Attempt) error {
				mu.Lock()
				defer mu.Unlock()
				seen = append(seen, a)
				return errors.New("the caller's log is down") // logged, never fails the delivery
			}})
		client, events := workerClient(t, bundle.pool, bundle.schema, worker)
		start(t, client)

		res := insert(t, client, "d1", []string{"crm"}, policy)
		job := waitFinal(t, events, 1)[res[0].Job.ID]
		assert.Equal(t, rivertype.JobStateCompleted, job.State)
		assert.Equal(t, 3, job.Attempt)
		assert.Equal(t, 4+riverhook.MaxInterruptedRuns, job.MaxAttempts, "the policy's attempts, and runs for interrupted ones")
		require.Len(t, job.Errors, 2, "two recorded errors")
		assert.Equal(t, "riverhook: attempt 1: 500 Internal Server Error; retry in 50ms", job.Errors[0].Error)
		assert.NotContains(t, job.Errors[0].Error, secret)

		got := bundle.srv.Deliveries()
		require.Len(t, got, 3)
		for i, d := range got {
			require.NoError(t, d.Err, "arrival %d verifies", i+1)
			assert.Equal(t, got[0].Body, d.Body, "identical bodies")
			if i > 0 {
				prev, _ := strconv.ParseInt(got[i-1].Header.Get(webhook.HeaderTimestamp), 10, 64)
				ts, _ := strconv.ParseInt(d.Header.Get(webhook.HeaderTimestamp), 10, 64)
				assert.Greater(t, ts, prev, "fresh, increasing timestamps")
				wait := policy.Backoff(i, nil)
				assert.GreaterOrEqual(t, d.At.Sub(got[i-1].At), wait, "retry %d waited the policy's %v", i, wait)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, seen, 3)
		assert.Equal(t, []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 0}, []time.Duration{seen[0].RetryIn, seen[1].RetryIn, seen[2].RetryIn})
		d, err := riverhook.DeliveryOf(job)
		require.NoError(t, err)
		require.Len(t, d.Attempts, 3, "the whole attempt log")
		for i := range seen {
			assert.Equal(t, logged(seen[i]), logged(d.Attempts[i].Attempt), "entry %d", i+1)
		}
	})

	t.Run("LastAttemptFailingIsDiscarded", func(t *testing.T) {
		bundle := setupReceiver(t, nil)
		bundle.srv.Script(webhooktest.Status(503), webhooktest.Status(503))
		policy := fastPolicy(1)
		client, events := workerClient(t, bundle.pool, bundle.schema, newWorker(t, bundle.srv.Sender(&webhook.SenderOptions{Retry: policy}), bundle.conns.resolve, nil))
		start(t, client)

		res := insert(t, client, "d1", []string{"crm"}, policy)
		job := waitFinal(t, events, 1)[res[0].Job.ID]
		assert.Equal(t, rivertype.JobStateDiscarded, job.State)
		assert.Equal(t, 2, job.Attempt)
		assert.Len(t, bundle.srv.Deliveries(), 2)
	})

	t.Run("ClientStoppedMidAttemptPutsTheJobBack", func(t *testing.T) {
		arrived := make(chan struct{})
		bundle := setupReceiver(t, holdFirst(arrived))
		newWorkers := func() *river.Workers {
			workers := river.NewWorkers()
			river.AddWorker(workers, newWorker(t, bundle.srv.Sender(nil), bundle.conns.resolve, nil))
			return workers
		}
		first := newClient(t, bundle.pool, bundle.schema, newWorkers(), nil)
		require.NoError(t, first.Start(context.Background()))
		inserted := insert(t, first, "d1", []string{"crm"}, nil)
		<-arrived // the attempt is on the wire

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, first.StopAndCancel(ctx))
		job, err := first.JobGet(ctx, inserted[0].Job.ID)
		require.NoError(t, err)
		assert.Equal(t, rivertype.JobStateAvailable, job.State, "available again")
		assert.Equal(t, 0, job.Attempt, "the interrupted attempt is not counted")

		second := newClient(t, bundle.pool, bundle.schema, newWorkers(), nil)
		events := finalEvents(t, second)
		start(t, second)
		job = waitFinal(t, events, 1)[inserted[0].Job.ID]
		assert.Equal(t, rivertype.JobStateCompleted, job.State, "a second client finishes what the first started")
		assert.Equal(t, 1, job.Attempt)
		assert.Len(t, bundle.srv.Deliveries(), 2)
	})

	t.Run("TwoClientsLoseNothing", func(t *testing.T) {
		bundle := setupReceiver(t, nil)
		var clients []*river.Client[pgxTx]
		var events []<-chan *river.Event
		for range 2 {
			c, ev := workerClient(t, bundle.pool, bundle.schema, newWorker(t, bundle.srv.Sender(nil), bundle.conns.resolve, nil))
			events = append(events, ev)
			clients = append(clients, c)
		}
		const n = 60
		var params []river.InsertManyParams
		for i := range n {
			p, err := riverhook.InsertParams("d"+strconv.Itoa(i), []string{"crm"}, payload("d"+strconv.Itoa(i)), nil)
			require.NoError(t, err)
			params = append(params, p...)
		}
		_, err := clients[0].InsertMany(context.Background(), params)
		require.NoError(t, err)
		for _, c := range clients {
			start(t, c)
		}
		merged := make(chan *river.Event)
		done := make(chan struct{})
		defer close(done)
		for _, ch := range events {
			go func() {
				for {
					select {
					case ev := <-ch:
						select {
						case merged <- ev:
						case <-done:
							return
						}
					case <-done:
						return
					}
				}
			}()
		}
		jobs := waitFinal(t, merged, n)
		ids := map[string]int{}
		for _, d := range bundle.srv.Deliveries() {
			require.NoError(t, d.Err)
			p, err := d.Payload()
			require.NoError(t, err)
			ids[p.User.Metadata["delivery_id"].(string)]++
		}
		assert.Len(t, ids, n, "n distinct arrivals")
		for id, count := range ids {
			assert.Equal(t, 1, count, "delivery %s arrived once", id)
		}
		for _, j := range jobs {
			assert.Equal(t, rivertype.JobStateCompleted, j.State)
		}
	})

	t.Run("PerConnectionLimit", func(t *testing.T) {
		var inFlight, peak atomic.Int32
		bundle := setupReceiver(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			select { // a slow endpoint: 30 ms per delivery
			case <-time.After(30 * time.Millisecond):
			case <-r.Context().Done():
			}
		}))
		bundle.conns.set("slow", bundle.srv.Connection())
		client, events := workerClient(t, bundle.pool, bundle.schema, newWorker(t, bundle.srv.Sender(nil), bundle.conns.resolve,
			&riverhook.WorkerOptions{MaxInFlightPerConnection: 2, SnoozeFor: 10 * time.Millisecond}))
		const n = 12
		var params []river.InsertManyParams
		for i := range n {
			p, err := riverhook.InsertParams("d"+strconv.Itoa(i), []string{"slow"}, payload("d"+strconv.Itoa(i)), nil)
			require.NoError(t, err)
			params = append(params, p...)
		}
		_, err := client.InsertMany(context.Background(), params)
		require.NoError(t, err)
		start(t, client)
		jobs := waitFinal(t, events, n)
		for _, j := range jobs {
			assert.Equal(t, rivertype.JobStateCompleted, j.State)
			assert.Equal(t, 1, j.Attempt, "a snoozed job is not counted as an attempt")
		}
		assert.LessOrEqual(t, peak.Load(), int32(2), "never more than 2 in flight to one connection")
		assert.Len(t, bundle.srv.Deliveries(), n)
	})
}

// holdFirst is a receiver handler that holds the first delivery until the
// sender gives up, signalling its arrival, and accepts the others.
func holdFirst(arrived chan<- struct{}) http.Handler {
	var n atomic.Int32
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			close(arrived)
			<-r.Context().Done()
			panic(http.ErrAbortHandler) // a handler that returns answers 200, which could still reach the sender
		}
		w.WriteHeader(http.StatusOK)
	})
}

func TestDurableRetryPolicy(t *testing.T) {
	p := riverhook.DurableRetryPolicy()
	var got []time.Duration
	for retry := 1; retry <= p.MaxRetries; retry++ {
		got = append(got, p.Backoff(retry, nil))
	}
	assert.Equal(t, []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour}, got)
}

type otherArgs struct{}

func (otherArgs) Kind() string { return "other_work" }

type otherWorker struct {
	river.WorkerDefaults[otherArgs]
}

func (otherWorker) Work(context.Context, *river.Job[otherArgs]) error { return nil }

// TestRescue pins how a delivery whose worker process died is rescued when
// the elected leader is a client of the service's other work.
func TestRescue(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		crashed    int64                 // the job of a delivery whose process died mid-attempt
		delivering *river.Client[pgx.Tx] // working deliveries, never the leader; not started
		pool       *pgxpool.Pool
		schema     string
		srv        *webhooktest.Server
	}

	// setup returns the delivering client's Worker.
	setup := func(t *testing.T) (*riverhook.Worker, *testBundle) {
		t.Helper()
		pool, schema := testDB(t)
		srv := webhooktest.NewServer(secret, nil)
		t.Cleanup(srv.Close)
		crashed := crashedDelivery(t, pool, schema)
		w := newTestWorker(t, srv, nil, nil)
		delivering := newClient(t, pool, schema, func() *river.Workers {
			ws := river.NewWorkers()
			river.AddWorker(ws, w)
			return ws
		}(), func(c *river.Config) { c.LeaderElectionDisabled = true })
		return w, &testBundle{crashed: crashed, delivering: delivering, pool: pool, schema: schema, srv: srv}
	}

	// A service that already runs River for other work (the README's common
	// case) has clients without riverhook's worker, any of which may be the
	// elected leader, whose rescuer handles every stuck job. River's rescuer
	// discards a stuck job of a kind its own client has no worker for: a
	// worker process killed mid-attempt loses the delivery for good, though
	// another process works deliveries. This pins River's behaviour (it
	// passes); TestDocs_EveryClientRegistersTheWorker pins what the docs say of it.
	t.Run("LeaderWithoutTheWorkerDiscardsACrashedDelivery", func(t *testing.T) {
		t.Parallel()
		w, bundle := setup(t)
		ctx := context.Background()
		start(t, bundle.delivering)

		// The service's other River client, elected leader, with the
		// documented rescue threshold.
		others := river.NewWorkers()
		river.AddWorker(others, &otherWorker{})
		leader := newClient(t, bundle.pool, bundle.schema, others, func(c *river.Config) { c.RescueStuckJobsAfter = w.RescueStuckJobsAfter(0) })
		start(t, leader)

		poll := time.NewTicker(100 * time.Millisecond)
		defer poll.Stop()
		timeout := time.After(60 * time.Second) // not what is tested: a loaded machine takes longer to elect the leader and run its rescuer
		for {
			select {
			case <-poll.C: // River's rescuer emits no event
				job, err := leader.JobGet(ctx, bundle.crashed)
				require.NoError(t, err)
				require.NotEqual(t, rivertype.JobStateCompleted, job.State, "rescued and delivered: River's rescuer changed")
				if job.State == rivertype.JobStateDiscarded {
					assert.Empty(t, bundle.srv.Deliveries(), "lost: never attempted again")
					return
				}
			case <-timeout:
				t.Fatal("the stuck delivery was neither discarded nor delivered within 60 s")
			}
		}
	})

	// The docs' advice: the service's other client, elected leader and working
	// another queue only, registers a Worker too (with the same attempt
	// timeout). Its rescuer then runs the crashed delivery again, and the
	// delivering client delivers it.
	t.Run("LeaderWorkingOtherQueuesRescuesACrashedDelivery", func(t *testing.T) {
		t.Parallel()
		w, bundle := setup(t)
		events := finalEvents(t, bundle.delivering)
		start(t, bundle.delivering)

		others := river.NewWorkers()
		river.AddWorker(others, &otherWorker{})
		river.AddWorker(others, newTestWorker(t, bundle.srv, nil, nil)) // for the rescuer alone
		leader := newClient(t, bundle.pool, bundle.schema, others, func(c *river.Config) {
			c.Queues = map[string]river.QueueConfig{"other_work": {MaxWorkers: 1}}
			c.RescueStuckJobsAfter = w.RescueStuckJobsAfter(0)
		})
		start(t, leader)

		job := waitFinal(t, events, 1)[bundle.crashed]
		require.NotNil(t, job)
		assert.Equal(t, rivertype.JobStateCompleted, job.State, "rescued and delivered")
		require.Len(t, bundle.srv.Deliveries(), 1)
		d, err := riverhook.DeliveryOf(job)
		require.NoError(t, err)
		var log []string
		for _, a := range d.Attempts {
			log = append(log, brief(a.Attempt))
		}
		assert.Equal(t, []string{"n=1 interrupted", "n=1 delivered"}, log)
	})
}

// crashedDelivery inserts a delivery whose worker process died 5 minutes
// into its first attempt: running, as River's executor left it. It
// returns the job's id.
func crashedDelivery(t *testing.T, pool *pgxpool.Pool, schema string) int64 {
	t.Helper()
	inserted := insert(t, newClient(t, pool, schema, nil, nil), "d1", []string{"crm"}, nil)
	id := inserted[0].Job.ID
	_, err := pool.Exec(context.Background(), "UPDATE "+schema+".river_job SET state = 'running', attempt = 1, attempted_at = now() - interval '5 minutes', attempted_by = '{dead-worker}' WHERE id = $1", id)
	require.NoError(t, err)
	return id
}
