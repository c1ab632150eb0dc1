package riverhook_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/webhooktest"
)

// stateTracer counts the statements that lock a connection's state row.
type stateTracer struct{ locks atomic.Int32 }

func (s *stateTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "riverhook_connection_state") && strings.Contains(d.SQL, "FOR UPDATE") {
		s.locks.Add(1)
	}
	return ctx
}

func (*stateTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestLife_ASlowSuccessLocksNoStateRow: an endpoint that answers 200 in
// 1.2 s (a slow but healthy receiver, common) says nothing new of a
// connection never seen failing; yet, as the process's cache of the states
// is older than stateCacheFor when the attempt ends, observe opens a
// transaction per attempt, inserts the connection's row and locks it FOR
// UPDATE: at 1,000 connections x N deliveries a second, N transactions (4
// statements) a second each, serialised on one row per connection.
func TestLife_ASlowSuccessLocksNoStateRow(t *testing.T) {
	ctx := context.Background()
	base, schema := testDB(t)
	cfg, err := pgxpool.ParseConfig(base.Config().ConnString())
	require.NoError(t, err)
	tracer := &stateTracer{}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	var requests atomic.Int32
	srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		time.Sleep(1200 * time.Millisecond)
		w.WriteHeader(http.StatusOK)
	})})
	t.Cleanup(srv.Close)
	worker := newWorker(t, srv.Sender(nil), newResolver(map[string]webhook.Connection{"crm": srv.Connection()}).resolve,
		&riverhook.WorkerOptions{MaxInFlightPerConnection: 8, Logger: quietLogger()})
	client, events := workerClient(t, pool, schema, worker)
	start(t, client)

	const n = 8
	var params []river.InsertManyParams
	for i := range n {
		p, err := riverhook.InsertParams(string(rune('a'+i)), []string{"crm"}, payload(string(rune('a'+i))), worker.InsertOptions(nil))
		require.NoError(t, err)
		params = append(params, p...)
	}
	_, err = client.InsertMany(ctx, params)
	require.NoError(t, err)
	waitFinal(t, events, n)
	require.EqualValues(t, n, requests.Load())

	var rows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.riverhook_connection_state`).Scan(&rows))
	assert.Zero(t, tracer.locks.Load(), "state-row locks for %d successful attempts to an active connection", n)
	assert.Zero(t, rows, "rows written for a connection never seen failing")
}

// TestLife_AKeptDeliverySnoozesAnHourAtMost: a delivery kept for a
// disabled connection snoozes an hour at a time, not until KeepFor (30
// days): a run that read the connection disabled just before Enable, and
// whose snooze River stored after Enable's moves, waits an hour at most
// (review: it waited 30 days, no one told).
func TestLife_AKeptDeliverySnoozesAnHourAtMost(t *testing.T) {
	b := setupLife(t, nil)
	b.recv.status.Store(http.StatusOK)
	ctx := context.Background()
	_, err := riverhook.Disable(ctx, b.client, b.pool, "crm")
	require.NoError(t, err)
	ids := b.insert(t, "kept-1")
	b.waitKept(t, ids)
	var id int64
	for id = range ids {
	}
	var ahead time.Duration
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT extract(epoch FROM scheduled_at - now()) * 1e9 FROM `+b.schema+`.river_job WHERE id = $1`, id).Scan(&ahead))
	assert.Greater(t, ahead, 50*time.Minute, "kept, not run again soon")
	assert.LessOrEqual(t, ahead, time.Hour, "snoozed an hour at most")
}

// TestLife_ASuccessAProcessTookForNoChangeStillBreaksTheSpan: a process
// whose view of the states predates another's failing write takes a 2xx
// for no change, and writes nothing; the span broke all the same. The next
// write of a failure, due to disable the connection, finds the completed
// delivery and starts a new span instead (review: a healthy connection was
// disabled), and tells the service first that the connection was active
// (review: the history read failing, then failing again, and the service
// never learned it came back).
func TestLife_ASuccessAProcessTookForNoChangeStillBreaksTheSpan(t *testing.T) {
	b := setupLife(t, nil)
	b.recv.status.Store(http.StatusOK)
	ctx := context.Background()
	ok := b.insert(t, "answered")
	waitEvents(t, b.events, ok, func(ev *river.Event) bool { return ev.Kind == river.EventKindJobCompleted })
	// Another process wrote the connection failing 30 seconds ago, due to
	// be disabled already; the 2xx above came 29 seconds ago, in a process
	// whose view was read before that write and took it for no change.
	_, err := b.pool.Exec(ctx, `UPDATE `+b.schema+`.river_job SET finalized_at = now() - interval '29 seconds' WHERE kind = $1`, riverhook.Kind)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `INSERT INTO `+b.schema+`.riverhook_connection_state
		(connection_id, state, failing_since, last_failure, disable_at, changed)
		VALUES ('crm', 'failing', now() - interval '30 seconds', now() - interval '30 seconds', now() - interval '1 second', now() - interval '30 seconds')`)
	require.NoError(t, err)

	b.recv.status.Store(http.StatusInternalServerError)
	b.insert(t, "failed")
	n := b.notice(t)
	assert.Equal(t, riverhook.ChangeActive, n.Change, "the broken span told first: %+v", n)
	assert.Equal(t, riverhook.StateActive, n.State, "the active notice tells the state it moved to")
	n = b.notice(t)
	assert.Equal(t, riverhook.ChangeFailing, n.Change, "a new span, not disabled: %+v", n)
	s, err := riverhook.StateOf(ctx, b.client, b.pool, "crm")
	require.NoError(t, err)
	assert.Equal(t, riverhook.StateFailing, s.State)
	assert.Less(t, time.Since(s.FailingSince), time.Minute, "the span began again at this failure")
}

// TestLife_ASuccessTakenForNoChangeBreaksTheSpanAtTheNextWrite: the same
// success, taken for no change a second after the failing write, as it
// can be (a view read before the write, stateCacheFor at most). The next
// write of a failure comes a minute on at the earliest (lastFailureEvery:
// a failure sooner is not worth one), so transitionTx, which looks for the
// success only while the span is younger than unseenSuccessFor, never
// looks: the span that broke goes on, and the service is never told the
// connection came back.
func TestLife_ASuccessTakenForNoChangeBreaksTheSpanAtTheNextWrite(t *testing.T) {
	b := setupLife(t, nil)
	b.recv.status.Store(http.StatusOK)
	ctx := context.Background()
	ok := b.insert(t, "answered")
	waitEvents(t, b.events, ok, func(ev *river.Event) bool { return ev.Kind == river.EventKindJobCompleted })
	// Another process wrote the connection failing 61 seconds ago; the 2xx
	// came a second later, in a process whose view predates that write.
	_, err := b.pool.Exec(ctx, `UPDATE `+b.schema+`.river_job SET finalized_at = now() - interval '60 seconds' WHERE kind = $1`, riverhook.Kind)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `INSERT INTO `+b.schema+`.riverhook_connection_state
		(connection_id, state, failing_since, last_failure, disable_at, changed)
		VALUES ('crm', 'failing', now() - interval '61 seconds', now() - interval '61 seconds', now() + interval '3 days', now() - interval '61 seconds')`)
	require.NoError(t, err)

	b.recv.status.Store(http.StatusInternalServerError)
	b.insert(t, "failed")
	var s *riverhook.ConnectionState
	require.Eventually(t, func() bool {
		s, err = riverhook.StateOf(ctx, b.client, b.pool, "crm")
		return err == nil && time.Since(s.LastFailure) < 30*time.Second
	}, 20*time.Second, 50*time.Millisecond, "the failure is written")
	assert.Less(t, time.Since(s.FailingSince), 30*time.Second, "the span broke at the success: a new one began at this failure, not 61 s ago")
	select {
	case n := <-b.notices:
		assert.Equal(t, riverhook.ChangeActive, n.Change, "the broken span told first: %+v", n)
	case <-time.After(5 * time.Second):
		t.Error("no notice: the service never learns the connection came back")
	}
}
