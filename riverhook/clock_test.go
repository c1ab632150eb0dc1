package riverhook_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/webhooktest"
)

// skewedClock is the wall clock of a process off the database's by its
// value: River's Config.Test.Time, which Register makes the Worker's too.
type skewedClock time.Duration

func (s skewedClock) Now() time.Time     { return time.Now().Add(time.Duration(s)) }
func (skewedClock) NowOrNil() *time.Time { return nil }

// skew is how far the clocks of skewedFleet's two processes are off the
// database's, one ahead and one behind.
const skew = 30 * time.Second

// skewedFleet starts two River clients on schema, each as a process of
// the README's fleet (its own Worker with bound in flight and the places
// in PostgreSQL, its Sender with the shared marks), one whose clock is
// skew ahead of the database's and one skew behind, delivering to srv
// as connection "crm" with policy. Each works a queue of its own (see
// skewedQueues), so that each clock handles deliveries of its own, and
// retries them too.
func skewedFleet(t *testing.T, pool *pgxpool.Pool, schema string, srv *webhooktest.Server, bound int, policy *webhook.RetryPolicy) {
	t.Helper()
	require.NoError(t, riverhook.Migrate(context.Background(), pool, schema))
	conns := newResolver(map[string]webhook.Connection{"crm": srv.Connection()})
	for i, off := range []time.Duration{skew, -skew} {
		sender := srv.Sender(&webhook.SenderOptions{Retry: policy,
			Health: &webhook.HealthOptions{Marks: riverhook.NewEndpointMarks(pool, schema), ConfirmUpEvery: time.Minute}})
		places := riverhook.NewConnectionPlaces(pool, schema)
		t.Cleanup(func() { places.Close(context.Background()) })
		w := newWorker(t, sender, conns.resolve, &riverhook.WorkerOptions{MaxInFlightPerConnection: bound, Places: places})
		client := newClient(t, pool, schema, nil, func(config *river.Config) {
			config.Queues = map[string]river.QueueConfig{skewedQueues[i]: {MaxWorkers: 10}}
			config.Test.Time = skewedClock(off)
			require.NoError(t, riverhook.Register(config, w))
		})
		start(t, client)
	}
}

// skewedQueues are the queues of skewedFleet's processes: ahead, behind.
var skewedQueues = []string{"clock_ahead", "clock_behind"}

// insertDeliveries inserts n deliveries to connection "crm" with policy,
// in skewedQueues in turn, their ids prefix and a number, and returns
// when.
func insertDeliveries(t *testing.T, pool *pgxpool.Pool, schema, prefix string, n int, policy *webhook.RetryPolicy) time.Time {
	t.Helper()
	client := newClient(t, pool, schema, nil, nil)
	var params []river.InsertManyParams
	for i := range n {
		id := fmt.Sprint(prefix, i)
		p, err := riverhook.InsertParams(id, []string{"crm"}, payload(id), &riverhook.InsertOptions{Retry: policy,
			InsertOpts: &river.InsertOpts{Queue: skewedQueues[i%len(skewedQueues)]}})
		require.NoError(t, err)
		params = append(params, p...)
	}
	inserted := time.Now()
	_, err := client.InsertMany(context.Background(), params)
	require.NoError(t, err)
	return inserted
}

// TestClock_DeliveriesWaitingForAPlaceComeOnTheDatabasesTime: in a fleet
// whose processes' clocks are 30 s ahead and 30 s behind the database's,
// a burst over the bound reaches a slow endpoint at its pace, as it does
// with true clocks: the slots are the database's, and so are the times
// River stores for the snoozes.
func TestClock_DeliveriesWaitingForAPlaceComeOnTheDatabasesTime(t *testing.T) {
	pool, schema := testDB(t)
	const deliveries = 10
	ep := newSlowEndpoint(t) // 100 ms an answer
	policy := &webhook.RetryPolicy{}
	skewedFleet(t, pool, schema, ep.srv, 1, policy)
	// One delivery for each process first: each learns the endpoint's
	// time, and slots the burst at its pace (no wake moves it after).
	insertDeliveries(t, pool, schema, "first", 2, policy)
	ep.waitFor(t, 2, 2*skew+10*time.Second)
	inserted := insertDeliveries(t, pool, schema, "d", deliveries, policy)
	ep.waitFor(t, 2+deliveries, 2*skew+10*time.Second)
	took := time.Since(inserted)
	t.Logf("%d deliveries, bound 1, endpoint at 100 ms, clocks %v ahead and behind: all arrived in %v (peak %d in flight)",
		deliveries, skew, took.Round(time.Millisecond), ep.peakInFlight(time.Time{}))
	// About 1 s at the endpoint's pace; a snooze stored by the clock
	// ahead waits 30 s more.
	assert.Less(t, took, skew/3, "the deliveries come at the endpoint's pace, whatever the processes' clocks")
	assert.LessOrEqual(t, ep.peakInFlight(time.Time{}), 1, "the bound holds")
}

// TestClock_ARetryComesAfterItsWaitOnTheDatabasesTime: in the same fleet,
// an attempt answered 503 is retried after the policy's wait of 2 s, by
// the database's clock: not 30 s late (a clock ahead), nor at once (a
// clock behind), the first runs of a process included.
func TestClock_ARetryComesAfterItsWaitOnTheDatabasesTime(t *testing.T) {
	pool, schema := testDB(t)
	const deliveries, wait = 10, 2 * time.Second
	var mu sync.Mutex
	arrivals := map[string][]time.Time{} // delivery -> its attempts' arrivals
	done := make(chan struct{}, deliveries)
	srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		p, err := webhook.ParsePayload(body)
		assert.NoError(t, err)
		id := p.User.ID
		mu.Lock()
		arrivals[id] = append(arrivals[id], time.Now())
		n := len(arrivals[id])
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		done <- struct{}{}
	})})
	t.Cleanup(srv.Close)
	policy := &webhook.RetryPolicy{MaxRetries: 1, Backoff: func(int, *http.Response) time.Duration { return wait }}
	// Inserted before the processes start: their first runs come at once,
	// before a reading of the database's clock could end.
	insertDeliveries(t, pool, schema, "d", deliveries, policy)
	skewedFleet(t, pool, schema, srv, 0, policy)
	deadline := time.After(2*skew + 10*time.Second)
	for range deliveries {
		select {
		case <-done:
		case <-deadline:
			t.Fatalf("the retries did not all arrive within %v", 2*skew+10*time.Second)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for id, at := range arrivals {
		require.Len(t, at, 2, "delivery %s: an attempt and its retry", id)
		gap := at[1].Sub(at[0])
		t.Logf("delivery %s retried %v after its first attempt (policy: %v)", id, gap.Round(time.Millisecond), wait)
		// The retry is due the policy's wait after the first attempt's
		// answer, which came after its arrival.
		assert.GreaterOrEqual(t, gap, wait-50*time.Millisecond, "delivery %s: not before its wait", id)
		assert.Less(t, gap, wait+skew/3, "delivery %s: not a clock's skew late", id)
	}
}

// TestClock_MarksAreOrderedByTheDatabasesTime: the endpoint marks of two
// processes, one whose clock is 30 s ahead and one 30 s behind, are
// ordered by the database's clock: the process behind finds the endpoint
// up after the one ahead found it down, and its up is what the table
// keeps. Each reads the marks on its own clock: another's mark written a
// moment ago changed a moment ago.
func TestClock_MarksAreOrderedByTheDatabasesTime(t *testing.T) {
	pool, schema := testDB(t)
	ctx := context.Background()
	require.NoError(t, riverhook.Migrate(ctx, pool, schema))
	clocks := []skewedClock{skewedClock(skew), skewedClock(-skew)}
	var marks []*riverhook.EndpointMarks
	for _, c := range clocks {
		m := riverhook.NewEndpointMarks(pool, schema)
		riverhook.SetMarksClock(m, c)
		marks = append(marks, m)
	}
	const origin = "https://hooks.example.com:443"

	at := clocks[0].Now()
	down := webhook.EndpointHealth{Endpoint: origin, Down: true, Since: at, Changed: at, NextProbe: at.Add(5 * time.Second), Failures: 3,
		LastFailure: webhook.Attempt{Kind: webhook.KindRefused}}
	require.NoError(t, marks[0].Mark(ctx, down), "the process ahead finds the endpoint down")

	read, _, err := marks[1].Since(ctx, time.Time{})
	require.NoError(t, err)
	require.Len(t, read, 1)
	now := clocks[1].Now()
	t.Logf("the mark down read by the process behind: changed %v before its now, next probe %v after",
		now.Sub(read[0].Changed).Round(time.Millisecond), read[0].NextProbe.Sub(now).Round(time.Millisecond))
	assert.True(t, read[0].Down)
	assert.Less(t, now.Sub(read[0].Changed).Abs(), skew/3, "changed a moment ago, on the reader's clock")
	assert.Less(t, read[0].NextProbe.Sub(now), 5*time.Second+skew/3, "the next probe 5 s on, on the reader's clock")

	up := webhook.EndpointHealth{Endpoint: origin, Changed: clocks[1].Now(), Confirmed: true}
	require.NoError(t, marks[1].Mark(ctx, up), "then the process behind finds it up")
	for i, m := range marks {
		got, err := m.Endpoint(ctx, origin)
		require.NoError(t, err)
		require.Len(t, got, 1)
		assert.False(t, got[0].Down, "process %d: the later change by the database's clock is what the table keeps", i)
	}
}
