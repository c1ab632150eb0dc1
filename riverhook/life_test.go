package riverhook_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
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
	"github.com/signedhook/webhook/riverhook/internal/testdb"
	"github.com/signedhook/webhook/webhooktest"
)

// lifeReceiver answers every delivery with its status (500 until set),
// counting the requests and the most in flight at once.
type lifeReceiver struct {
	status   atomic.Int32
	requests atomic.Int32
	inFlight atomic.Int32
	peak     atomic.Int32
	last     atomic.Int64 // the last request's arrival, Unix nanoseconds
}

func (r *lifeReceiver) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	r.requests.Add(1)
	r.last.Store(time.Now().UnixNano())
	n := r.inFlight.Add(1)
	defer r.inFlight.Add(-1)
	for p := r.peak.Load(); n > p && !r.peak.CompareAndSwap(p, n); p = r.peak.Load() {
	}
	time.Sleep(5 * time.Millisecond) // an endpoint's time, so that attempts overlap
	w.WriteHeader(int(r.status.Load()))
}

// lifeBundle is a started River client working a Worker whose connection
// "crm" is a lifeReceiver, and a worker of the notices sending them to
// notices.
type lifeBundle struct {
	recv    *lifeReceiver
	pool    *pgxpool.Pool
	schema  string
	worker  *riverhook.Worker
	client  *river.Client[pgx.Tx]
	notices chan riverhook.NoticeArgs
	events  <-chan *river.Event // completed, snoozed, failed
}

func setupLife(t *testing.T, life *riverhook.LifePolicy) *lifeBundle {
	t.Helper()
	b := &lifeBundle{recv: &lifeReceiver{}, notices: make(chan riverhook.NoticeArgs, 100)}
	b.recv.status.Store(http.StatusInternalServerError)
	srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: b.recv})
	t.Cleanup(srv.Close)
	sender := srv.Sender(&webhook.SenderOptions{Retry: &webhook.RetryPolicy{MaxRetries: 200,
		Backoff: func(int, *http.Response) time.Duration { return 50 * time.Millisecond }}})
	b.worker = newWorker(t, sender, newResolver(map[string]webhook.Connection{"crm": srv.Connection()}).resolve,
		&riverhook.WorkerOptions{MaxInFlightPerConnection: 2, Life: life, Logger: quietLogger()})
	b.pool, b.schema = testDB(t)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(_ context.Context, job *river.Job[riverhook.NoticeArgs]) error {
		b.notices <- job.Args
		return nil
	}))
	b.client = newClient(t, b.pool, b.schema, workers, func(cfg *river.Config) {
		cfg.Queues[riverhook.NoticeQueue] = river.QueueConfig{MaxWorkers: 1}
		require.NoError(t, riverhook.Register(cfg, b.worker))
	})
	events, cancel := b.client.SubscribeConfig(&river.SubscribeConfig{ChanSize: 10_000,
		Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobSnoozed, river.EventKindJobFailed}})
	t.Cleanup(cancel)
	b.events = events
	start(t, b.client)
	return b
}

// insert inserts deliveries to crm with the Worker's policy, and returns
// their job ids.
func (b *lifeBundle) insert(t *testing.T, deliveryIDs ...string) map[int64]bool {
	t.Helper()
	ids := map[int64]bool{}
	var params []river.InsertManyParams
	for _, d := range deliveryIDs {
		p, err := riverhook.InsertParams(d, []string{"crm"}, payload(d), b.worker.InsertOptions(nil))
		require.NoError(t, err)
		params = append(params, p...)
	}
	res, err := b.client.InsertMany(context.Background(), params)
	require.NoError(t, err)
	for _, r := range res {
		ids[r.Job.ID] = true
	}
	return ids
}

// notice waits for the next notice.
func (b *lifeBundle) notice(t *testing.T) riverhook.NoticeArgs {
	t.Helper()
	select {
	case n := <-b.notices:
		return n
	case <-time.After(30 * time.Second):
		t.Fatal("no notice within 30 s")
		return riverhook.NoticeArgs{}
	}
}

// waitKept waits until each job of ids was snoozed as kept, about an hour
// ahead (keepAtMost; a slot of the chain is seconds ahead).
func (b *lifeBundle) waitKept(t *testing.T, ids map[int64]bool) {
	t.Helper()
	waitEvents(t, b.events, ids, func(ev *river.Event) bool {
		return ev.Kind == river.EventKindJobSnoozed && time.Until(ev.Job.ScheduledAt) > 50*time.Minute
	})
}

// waitEvents waits until each job of ids had an event that match takes.
func waitEvents(t *testing.T, events <-chan *river.Event, ids map[int64]bool, match func(*river.Event) bool) {
	t.Helper()
	left := map[int64]bool{}
	for id := range ids {
		left[id] = true
	}
	timeout := time.NewTimer(60 * time.Second)
	defer timeout.Stop()
	for len(left) > 0 {
		select {
		case ev := <-events:
			if left[ev.Job.ID] && match(ev) {
				delete(left, ev.Job.ID)
			}
		case <-timeout.C:
			t.Fatalf("%d of %d jobs had no such event within 60 s", len(left), len(ids))
		}
	}
}

// noticeJobs counts the notice jobs in River's table.
func (b *lifeBundle) noticeJobs(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+b.schema+`.river_job WHERE kind = $1`,
		riverhook.NoticeKind).Scan(&n))
	return n
}

func TestLife_FailingWarnedDisabledKeptEnabled(t *testing.T) {
	b := setupLife(t, &riverhook.LifePolicy{DisableAfter: 1500 * time.Millisecond, WarnBefore: time.Second})
	ctx := context.Background()
	first := b.insert(t, "d1")

	failing := b.notice(t)
	assert.Equal(t, riverhook.ChangeFailing, failing.Change)
	assert.Equal(t, riverhook.StateFailing, failing.State)
	assert.Equal(t, "crm", failing.ConnectionID)
	assert.Equal(t, 1, failing.Waiting)
	warning := b.notice(t)
	assert.Equal(t, riverhook.ChangeWarning, warning.Change)
	assert.True(t, warning.DisableAt.Equal(failing.DisableAt), "the warning names the date: got %v, want %v", warning.DisableAt, failing.DisableAt)
	assert.Less(t, warning.DisableAt.Sub(warning.At), time.Second+time.Millisecond, "a second or less before")
	disabled := b.notice(t)
	assert.Equal(t, riverhook.ChangeDisabled, disabled.Change)
	assert.Equal(t, riverhook.ReasonFailing, disabled.Reason)
	assert.False(t, disabled.At.Before(failing.DisableAt), "not before the date given")

	b.waitKept(t, first)
	s, err := riverhook.StateOf(ctx, b.client, b.pool, "crm")
	require.NoError(t, err)
	assert.Equal(t, riverhook.StateDisabled, s.State)
	assert.Equal(t, riverhook.ReasonFailing, s.Reason)
	assert.True(t, s.DisabledAt.Equal(disabled.At))
	assert.Equal(t, 3, b.noticeJobs(t), "each notice once")

	dialled := b.recv.requests.Load()
	later := b.insert(t, "d2", "d3", "d4", "d5", "d6")
	b.waitKept(t, later)
	assert.Equal(t, dialled, b.recv.requests.Load(), "nothing dialled while disabled")

	dry, err := riverhook.Enable(ctx, b.client, b.pool, "crm", riverhook.EnableParams{DryRun: true}, b.worker.InsertOptions(nil))
	require.NoError(t, err)
	assert.Equal(t, 6, dry.Waiting, "d1 and the five inserted while disabled")
	assert.False(t, dry.Enabled)
	s, err = riverhook.StateOf(ctx, b.client, b.pool, "crm")
	require.NoError(t, err)
	assert.Equal(t, riverhook.StateDisabled, s.State, "a dry run changes nothing")

	b.recv.status.Store(http.StatusOK)
	b.recv.peak.Store(0)
	res, err := riverhook.Enable(ctx, b.client, b.pool, "crm", riverhook.EnableParams{}, b.worker.InsertOptions(nil))
	require.NoError(t, err)
	assert.True(t, res.Enabled)
	assert.Equal(t, dry.Waiting, res.Waiting)
	all := map[int64]bool{}
	for id := range first {
		all[id] = true
	}
	for id := range later {
		all[id] = true
	}
	waitEvents(t, b.events, all, func(ev *river.Event) bool { return ev.Job.State == rivertype.JobStateCompleted })
	assert.Equal(t, int32(dry.Waiting), b.recv.requests.Load()-dialled, "each kept delivery sent once, as the dry run counted")
	assert.LessOrEqual(t, b.recv.peak.Load(), int32(2), "no more in flight than the bound")
	enabled := b.notice(t)
	assert.Equal(t, riverhook.ChangeEnabled, enabled.Change)
	assert.Equal(t, riverhook.StateActive, enabled.State)
	assert.Equal(t, 6, enabled.Waiting)
	assert.Equal(t, 4, b.noticeJobs(t))

	history, err := riverhook.History(ctx, b.client, b.pool, "crm", 10)
	require.NoError(t, err)
	want := []riverhook.NoticeArgs{enabled, disabled, warning, failing}
	require.Len(t, history, len(want), "each change once, as told")
	for i := range want {
		assert.Equal(t, want[i].Change, history[i].Change)
		assert.Equal(t, want[i].Reason, history[i].Reason)
		assert.Equal(t, want[i].Waiting, history[i].Waiting)
		assert.True(t, want[i].At.Equal(history[i].At), "%s at %v, told at %v", want[i].Change, history[i].At, want[i].At)
	}
	latest, err := riverhook.History(ctx, b.client, b.pool, "crm", 1)
	require.NoError(t, err)
	require.Len(t, latest, 1)
	assert.Equal(t, riverhook.ChangeEnabled, latest[0].Change, "newest first")
}

func TestLife_GoneDisablesAtOnce(t *testing.T) {
	b := setupLife(t, nil)
	ctx := context.Background()
	b.recv.status.Store(http.StatusGone)
	b.insert(t, "d1") // a 410 is never retried: it gives up
	n := b.notice(t)
	assert.Equal(t, riverhook.ChangeDisabled, n.Change)
	assert.Equal(t, riverhook.ReasonGone, n.Reason)
	assert.Equal(t, riverhook.StateDisabled, n.State)
	assert.Zero(t, n.Waiting, "d1 gave up with its 410: nothing waits")
	b.waitKept(t, b.insert(t, "d2"))
	assert.Equal(t, int32(1), b.recv.requests.Load(), "d1's one attempt; d2 kept")
	s, err := riverhook.StateOf(ctx, b.client, b.pool, "crm")
	require.NoError(t, err)
	assert.Equal(t, riverhook.StateDisabled, s.State)
	assert.Equal(t, riverhook.ReasonGone, s.Reason)
	assert.Equal(t, 1, b.noticeJobs(t), "one notice: disabled")

	p := riverhook.EnableParams{DryRun: true, IncludeGivenUp: true, Reason: "test: the endpoint is back"}
	dry, err := riverhook.Enable(ctx, b.client, b.pool, "crm", p, b.worker.InsertOptions(nil))
	require.NoError(t, err)
	assert.Equal(t, 1, dry.Waiting, "d2")
	assert.Equal(t, 1, dry.GivenUp, "d1, given up as the connection was disabled")
}

// A delivery on River's last run ends with it, though the policy would
// retry: the notice of the change it makes does not count it as waiting.
func TestLife_ANoticeDoesNotCountADeliveryOnItsLastRun(t *testing.T) {
	b := setupLife(t, nil) // 500s; the Sender retries 200 times
	body, err := json.Marshal(payload("d1"))
	require.NoError(t, err)
	res, err := b.client.Insert(context.Background(), riverhook.Args{ConnectionID: "crm", DeliveryID: "d1",
		Event: "user.identified", Body: body}, &river.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	failing := b.notice(t)
	assert.Equal(t, riverhook.ChangeFailing, failing.Change)
	waitEvents(t, b.events, map[int64]bool{res.Job.ID: true}, func(ev *river.Event) bool {
		return ev.Job.State == rivertype.JobStateDiscarded
	})
	assert.Zero(t, failing.Waiting, "d1 was discarded with the run that made the change")
}

func TestLife_SuccessAfterFailuresIsActiveAgain(t *testing.T) {
	b := setupLife(t, nil)
	ids := b.insert(t, "d1")
	assert.Equal(t, riverhook.ChangeFailing, b.notice(t).Change)
	assert.Equal(t, riverhook.ChangeWarning, b.notice(t).Change, "the default warning, a day before a 12 hours' span, comes at once")
	b.recv.status.Store(http.StatusOK)
	waitEvents(t, b.events, ids, func(ev *river.Event) bool { return ev.Job.State == rivertype.JobStateCompleted })
	n := b.notice(t)
	assert.Equal(t, riverhook.ChangeActive, n.Change)
	assert.Equal(t, riverhook.StateActive, n.State)
}

// 2,000 deliveries kept for a disabled connection cost one run each, then
// none: they wait for Enable.
func TestLife_KeptDeliveriesCostNoRuns(t *testing.T) {
	b := setupLife(t, nil)
	ctx := context.Background()
	_, err := riverhook.Disable(ctx, b.client, b.pool, "crm")
	require.NoError(t, err)
	n := b.notice(t)
	assert.Equal(t, riverhook.ChangeDisabled, n.Change)
	assert.Equal(t, riverhook.ReasonService, n.Reason)
	deliveries := make([]string, 2000)
	for i := range deliveries {
		deliveries[i] = "d" + itoa(i)
	}
	ids := b.insert(t, deliveries...)
	b.waitKept(t, ids)
	const window = 3 * time.Second
	timer := time.NewTimer(window)
	defer timer.Stop()
	runs := 0
	for done := false; !done; {
		select {
		case ev := <-b.events:
			if ids[ev.Job.ID] {
				runs++
			}
		case <-timer.C:
			done = true
		}
	}
	t.Logf("2,000 kept deliveries: %d runs in %v", runs, window)
	assert.LessOrEqual(t, runs, int(window/time.Second), "at most a run a second in all")
	assert.Zero(t, b.recv.requests.Load(), "nothing dialled")
	dry, err := riverhook.Enable(ctx, b.client, b.pool, "crm", riverhook.EnableParams{DryRun: true}, nil)
	require.NoError(t, err)
	assert.Equal(t, 2000, dry.Waiting)
}

func TestLife_AMissingTableIsAClearError(t *testing.T) {
	srv := webhooktest.NewServer(secret, nil)
	t.Cleanup(srv.Close)
	w := newWorker(t, srv.Sender(nil), newResolver(map[string]webhook.Connection{"crm": srv.Connection()}).resolve, nil)
	pool, schema := testdb.Schema(t, "riverhook", true) // River's tables alone
	client, _ := workerClient(t, pool, schema, w)
	events, cancel := client.Subscribe(river.EventKindJobFailed)
	t.Cleanup(cancel)
	start(t, client)
	res, err := client.Insert(context.Background(), riverhook.Args{ConnectionID: "crm", DeliveryID: "d1", Event: "user.identified", Body: []byte(`{}`)}, nil)
	require.NoError(t, err)
	select {
	case ev := <-events:
		require.Equal(t, res.Job.ID, ev.Job.ID)
		require.NotEmpty(t, ev.Job.Errors)
		assert.Contains(t, ev.Job.Errors[0].Error, "riverhook_connection_state is missing: run riverhook.Migrate")
	case <-time.After(30 * time.Second):
		t.Fatal("the run did not fail within 30 s")
	}
	assert.Empty(t, srv.Deliveries(), "no attempt")
}

// Enable's dry run, which a console page makes at each view of a disabled
// connection, writes nothing and takes no lock of the state's row.
func TestEnable_DryRunWritesNothing(t *testing.T) {
	pool, schema := testDB(t)
	client := newClient(t, pool, schema, nil, nil)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = riverhook.Disable(ctx, client, tx, "crm") // held by tx until it ends
	require.NoError(t, err)
	res, err := riverhook.Enable(ctx, client, pool, "fresh", riverhook.EnableParams{DryRun: true}, nil)
	require.NoError(t, err)
	assert.Equal(t, riverhook.StateActive, res.State)
	var rows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.riverhook_connection_state`).Scan(&rows))
	assert.Zero(t, rows, "no row for a connection only counted")
	wait, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	res, err = riverhook.Enable(wait, client, pool, "crm", riverhook.EnableParams{DryRun: true}, nil)
	require.NoError(t, err, "not held up by the row another transaction holds")
	assert.Equal(t, riverhook.StateActive, res.State, "the committed state: tx has not committed its disable")
}

// Disable and Enable refuse a connection id the insert refuses, over
// MaxConnectionIDBytes, saying so: past a third of a page, PostgreSQL's
// btree refuses the state's key with an error that names neither.
func TestLife_AConnectionIDTooLongIsRefusedSayingSo(t *testing.T) {
	pool, schema := testDB(t)
	client := newClient(t, pool, schema, nil, nil)
	ctx := context.Background()
	long := strings.Repeat("c", riverhook.MaxConnectionIDBytes+1)
	_, err := riverhook.Disable(ctx, client, pool, long)
	assert.ErrorContains(t, err, "MaxConnectionIDBytes")
	_, err = riverhook.Enable(ctx, client, pool, long, riverhook.EnableParams{DryRun: true}, nil)
	assert.ErrorContains(t, err, "MaxConnectionIDBytes")
	_, err = riverhook.Disable(ctx, client, pool, strings.Repeat("c", riverhook.MaxConnectionIDBytes))
	assert.NoError(t, err, "at the bound")
}

// A Disable made elsewhere (the API tier) reaches a Worker that read the
// connection active a moment before within 2 s: deliveries inserted every
// 100 ms from then on are dialled at most until then, and kept after.
func TestLife_AWorkerSeesADisableWithin2s(t *testing.T) {
	b := setupLife(t, nil)
	ctx := context.Background()
	b.recv.status.Store(http.StatusOK)
	first := b.insert(t, "d0")
	waitEvents(t, b.events, first, func(ev *river.Event) bool { return ev.Job.State == rivertype.JobStateCompleted })
	_, err := riverhook.Disable(ctx, b.client, b.pool, "crm") // the Worker's cache still says active
	require.NoError(t, err)
	disabled := time.Now()
	ids := map[int64]bool{}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := range 25 {
		<-tick.C // a delivery every 100 ms, for 2.5 s
		for id := range b.insert(t, "d"+itoa(i+1)) {
			ids[id] = true
		}
	}
	waitEvents(t, b.events, ids, func(ev *river.Event) bool {
		return ev.Job.State == rivertype.JobStateCompleted || ev.Kind == river.EventKindJobSnoozed && time.Until(ev.Job.ScheduledAt) > 50*time.Minute
	})
	last := time.Unix(0, b.recv.last.Load())
	t.Logf("the last delivery dialled %v after the Disable; %d of 26 dialled", last.Sub(disabled).Round(time.Millisecond), b.recv.requests.Load())
	assert.Less(t, last.Sub(disabled), 2*time.Second, "dialled no later than 2 s after the Disable")
	assert.Less(t, b.recv.requests.Load(), int32(26), "the later ones kept")
}

// TestLife_FailuresCloserThanWithinAreOneSpan: LifePolicy.Within says a
// failure that long or more after the one before starts a new span. An
// endpoint refusing every attempt, about 50 ms apart, with a Within of 3 s,
// fails in one span and is disabled at DisableAfter (6 s), warned before.
// The last failure is written at most a minute apart, whatever Within is:
// the failure 3 s after the first written reads a gap of 3 s, starts a new
// span (ChangeFailing again, DisableAt pushed back), and so every 3 s for
// ever: the connection is never disabled, and the service is told it began
// failing again and again.
func TestLife_FailuresCloserThanWithinAreOneSpan(t *testing.T) {
	b := setupLife(t, &riverhook.LifePolicy{DisableAfter: 6 * time.Second, Within: 3 * time.Second, WarnBefore: time.Second})
	b.insert(t, "d1") // 500s, retried every 50 ms
	failing := b.notice(t)
	require.Equal(t, riverhook.ChangeFailing, failing.Change)
	warning := b.notice(t)
	assert.Equal(t, riverhook.ChangeWarning, warning.Change, "the failures never stopped: one span, warned before its date; got %+v", warning)
	disabled := b.notice(t)
	assert.Equal(t, riverhook.ChangeDisabled, disabled.Change, "disabled at the span's date; got %+v", disabled)
	assert.True(t, disabled.At.Sub(failing.At) < 7*time.Second, "disabled %v after the first failure", disabled.At.Sub(failing.At))
}
