package riverhook_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"syscall"
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
)

// eraseQueue is the queue of the erasures of
// TestEraseArgs_SurvivesAKilledProcess, worked by its child processes
// alone; the test's own process works the deliveries.
const eraseQueue = "erasure"

// erasing is a subject's deliveries to one receiver, one of them running
// into a hung endpoint, and a River client set up with Register.
type erasing struct {
	b       *receiverBundle
	client  *river.Client[pgx.Tx]
	release func() // lets the cancelled run end
	running int64  // the job of the delivery that hangs
}

// waitRescuable waits until job id's run is older than the
// RescueStuckJobsAfter the children's Register sets: a child started then
// leads, and its rescuer's first pass finds the run.
func (e *erasing) waitRescuable(t *testing.T, id int64) {
	t.Helper()
	var rescue river.Config
	eraseChildConfig(t, &rescue)
	require.Eventually(t, func() bool {
		var old bool
		err := e.b.pool.QueryRow(context.Background(), "SELECT clock_timestamp() - attempted_at > $2::interval FROM "+e.b.schema+".river_job WHERE id = $1",
			id, rescue.RescueStuckJobsAfter.String()).Scan(&old)
		return err == nil && old
	}, time.Minute, 50*time.Millisecond, "the run is old enough to be rescued")
}

// startErasureForChildren starts an erasing set-up whose process delivers
// and never leads (the rescue of a killed run is the child processes'),
// and inserts the durable erasure of erasedUser, whose job id it returns.
func startErasureForChildren(t *testing.T) (*erasing, int64) {
	t.Helper()
	e := startErasing(t, func(c *river.Config) {
		c.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}}
		c.LeaderElectionDisabled = true
	})
	inserted, err := e.client.Insert(context.Background(), riverhook.EraseArgs{Subject: erasedUser.ID}, &river.InsertOpts{Queue: eraseQueue})
	require.NoError(t, err)
	return e, inserted.Job.ID
}

// startErasing inserts, for erasedUser, a delivery echoed back (200), one
// refused quoting the email (422), and one answered 500 quoting the body,
// then hung until its request's context ends; and one for keptUser. It
// returns once the first two and keptUser's ended and the third hangs. The
// end of a run cancelled in River is held until release. tweak, if not
// nil, changes the client's configuration before Register.
func startErasing(t *testing.T, tweak func(*river.Config)) *erasing {
	t.Helper()
	ctx := context.Background()
	recv := &echoReceiver{attempts: map[string]int{}, entered: make(chan struct{})}
	b := setupReceiver(t, recv)
	w := newWorker(t, b.srv.Sender(&webhook.SenderOptions{Retry: fastPolicy(1)}), b.conns.resolve, nil)
	hold, releaseOnce := holdCancelledRuns()
	client := newClient(t, b.pool, b.schema, river.NewWorkers(), func(c *river.Config) {
		c.Middleware = []rivertype.Middleware{hold}
		if tweak != nil {
			tweak(c)
		}
		require.NoError(t, riverhook.Register(c, w))
	})
	start(t, client)
	t.Cleanup(releaseOnce) // before the client stops, which waits for the run

	ids := map[string]int64{}
	insertFor := func(u webhook.User, scenario string) {
		params, err := riverhook.InsertParams(scenario, []string{"crm"}, userPayload(u, scenario, scenario), w.InsertOptions(nil))
		require.NoError(t, err)
		inserted, err := client.InsertMany(ctx, params)
		require.NoError(t, err)
		ids[scenario] = inserted[0].Job.ID
	}
	for _, s := range []string{"delivered", "refused", "running"} {
		insertFor(erasedUser, s)
	}
	insertFor(keptUser, "kept")
	for _, s := range []string{"delivered", "refused", "kept"} {
		waitJob(t, client, ids[s], time.Minute, "ended", func(j *rivertype.JobRow) bool { return j.FinalizedAt != nil })
	}
	select {
	case <-recv.entered:
	case <-time.After(60 * time.Second):
		t.Fatal("the running delivery's second attempt did not start within 60 s")
	}
	require.Contains(t, traces(dumpSchema(t, b.schema), erasedUser.Email), "plain", "the dump holds the email before the erasure, so the test can see it")
	return &erasing{b: b, client: client, release: releaseOnce, running: ids["running"]}
}

// waitJob polls job id until cond holds, failing the test after within.
func waitJob(t *testing.T, client *river.Client[pgx.Tx], id int64, within time.Duration, what string, cond func(*rivertype.JobRow) bool) *rivertype.JobRow {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		job, err := client.JobGet(context.Background(), id)
		require.NoError(t, err)
		if cond(job) {
			return job
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d (%s, state %s, metadata %s) not %s within %v", id, job.Kind, job.State, job.Metadata, what, within)
		}
		time.Sleep(10 * time.Millisecond) // a poll, not a wait for time to pass
	}
}

// snoozes returns how many times River snoozed job.
func snoozes(t *testing.T, job *rivertype.JobRow) int {
	t.Helper()
	var m struct {
		Snoozes int `json:"snoozes"`
	}
	require.NoError(t, json.Unmarshal(job.Metadata, &m))
	return m.Snoozes
}

// assertErased checks the erasure's job completed with the totals of the
// subject's three deliveries, and reads the schema back with pg_dump: no
// trace of erasedUser is left, and keptUser's deliveries keep theirs.
func (e *erasing) assertErased(t *testing.T, job *rivertype.JobRow) {
	t.Helper()
	var got riverhook.EraseResult
	require.NoError(t, json.Unmarshal(job.Output(), &got), "the erasure's output: %s", job.Metadata)
	assert.Equal(t, riverhook.EraseResult{Erased: 3, Cancelled: 1}, got,
		"the two ended and the running one erased, the running one cancelled, nothing under way")
	running, err := e.client.JobGet(context.Background(), e.running)
	require.NoError(t, err)
	assert.Equal(t, rivertype.JobStateCancelled, running.State, "the hung delivery is cancelled")
	dump := dumpSchema(t, e.b.schema)
	assertNoTraces(t, dump, erasedUser, "after the durable erasure")
	for _, s := range personalStrings(keptUser) {
		assert.Contains(t, traces(dump, s), "plain", "the other user's deliveries keep their data: %s", s)
	}
	var n int
	require.NoError(t, e.b.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+e.b.schema+".river_job WHERE kind = $1", riverhook.EraseKind).Scan(&n))
	assert.Equal(t, 1, n, "one erasure job")
}

// TestEraseArgs_FinishesByItself inserts a durable erasure, in a
// transaction, of a user with two ended deliveries and one in flight to an
// endpoint that hangs: the erasure cancels it, waits while its run ends
// (held here), calls EraseSubject again, and completes, its output the
// totals, though River allowed it one run: snoozes count none. Nothing of the user is left in the schema's pg_dump. A second
// insert while the first waits is the same job.
func TestEraseArgs_FinishesByItself(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := startErasing(t, nil)

	tx, err := e.b.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	// One run allowed: River counts no snooze as a run.
	inserted, err := e.client.InsertTx(ctx, tx, riverhook.EraseArgs{Subject: erasedUser.ID}, &river.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	id := inserted.Job.ID
	assert.Equal(t, riverhook.EraseKind, inserted.Job.Kind)

	job := waitJob(t, e.client, id, 30*time.Second, "snoozed twice", func(j *rivertype.JobRow) bool { return snoozes(t, j) > 1 })
	assert.NotEqual(t, rivertype.JobStateCompleted, job.State, "not done while the cancelled run has not ended")
	again, err := e.client.Insert(ctx, riverhook.EraseArgs{Subject: erasedUser.ID}, nil)
	require.NoError(t, err)
	assert.True(t, again.UniqueSkippedAsDuplicate, "one erasure of a subject at a time")
	assert.Equal(t, id, again.Job.ID)

	e.release()
	job = waitJob(t, e.client, id, 30*time.Second, "completed", func(j *rivertype.JobRow) bool { return j.State == rivertype.JobStateCompleted })
	t.Logf("completed after %d snoozes, %d run(s) counted", snoozes(t, job), job.Attempt)
	assert.Equal(t, 1, job.Attempt, "snoozes count no attempt")
	e.assertErased(t, job)
}

// TestEraseArgs_RefusesAnInvalidSubject: a durable erasure of a subject
// EraseSubject would refuse is refused at its insert, by any of River's
// inserts, and nothing is inserted.
func TestEraseArgs_RefusesAnInvalidSubject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := testDB(t)
	client := newClient(t, pool, schema, nil, nil)
	for _, tc := range []struct{ name, subject string }{
		{"empty", ""},
		{"an email", "ana@example.com"},
		{"too long", strings.Repeat("u", riverhook.MaxSubjectBytes+1)},
		{"a control character", "usr_1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := client.Insert(ctx, riverhook.EraseArgs{Subject: tc.subject}, nil)
			require.ErrorIs(t, err, riverhook.ErrInvalidSubject)
			if tc.subject != "" {
				assert.NotContains(t, err.Error(), tc.subject, "the error never quotes the subject")
			}
			_, err = client.InsertMany(ctx, []river.InsertManyParams{{Args: riverhook.EraseArgs{Subject: "usr_ok"}}, {Args: &riverhook.EraseArgs{Subject: tc.subject}}})
			require.ErrorIs(t, err, riverhook.ErrInvalidSubject)
		})
	}
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".river_job").Scan(&n))
	assert.Zero(t, n, "nothing inserted")
}

// The environment of TestEraseChild: with eraseHold set, it holds its
// second run of an erasure until it is killed.
const eraseHold = "RIVERHOOK_ERASE_HOLD"

// With eraseHoldAfter set, TestEraseChild makes its first run of an
// erasure, then holds it, its end not written, until it is killed.
const eraseHoldAfter = "RIVERHOOK_ERASE_HOLD_AFTER"

// eraseChildConfig sets up config for the deliveries of a Worker whose
// Sender's attempts take at most a second, with a JobTimeout of 5 s, as
// TestEraseChild does: Register's RescueStuckJobsAfter is then the least,
// 21 s (the Worker's Timeout, 11 s, and River's 10 s stuck threshold),
// not a minute.
func eraseChildConfig(t *testing.T, config *river.Config) {
	t.Helper()
	sender, err := webhook.NewSender(&webhook.SenderOptions{AttemptTimeout: time.Second})
	require.NoError(t, err)
	config.JobTimeout = 5 * time.Second
	require.NoError(t, riverhook.Register(config, newWorker(t, sender, newResolver(nil).resolve, nil)))
}

// TestEraseChild is the worker process of
// TestEraseArgs_SurvivesAKilledProcess: a River client set up with
// Register, working the erasures' queue, until it is killed.
func TestEraseChild(t *testing.T) {
	if os.Getenv(fleetRole) != "eraser" {
		t.Skip("a child process of TestEraseArgs_SurvivesAKilledProcess")
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("TEST_DATABASE_URL"))
	require.NoError(t, err)
	defer pool.Close()
	hold := river.WorkerMiddlewareFunc(func(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
		if job.Kind == riverhook.EraseKind && os.Getenv(eraseHold) != "" && snoozes(t, job) > 0 {
			os.Stdout.WriteString("holding\n")
			select {} // until the test kills the process
		}
		if job.Kind == riverhook.EraseKind && os.Getenv(eraseHoldAfter) != "" {
			doInner(ctx) //nolint:errcheck // its end is never written: the process is killed
			os.Stdout.WriteString("holding\n")
			select {} // until the test kills the process
		}
		return doInner(ctx)
	})
	client := newClient(t, pool, os.Getenv(fleetSchema), river.NewWorkers(), func(c *river.Config) {
		c.Queues = map[string]river.QueueConfig{eraseQueue: {MaxWorkers: 1}}
		c.Middleware = []rivertype.Middleware{hold}
		eraseChildConfig(t, c)
	})
	require.NoError(t, client.Start(ctx))
	os.Stdout.WriteString("erasing\n")
	select {} // until the test kills it
}

// startEraseChild starts TestEraseChild as an OS process on schema, with
// env added; it returns once the child's client has started, with the
// lines the child writes after, and kills it when the test ends.
func startEraseChild(t *testing.T, schema string, env ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	return startChild(t, "TestEraseChild", "erasing", append([]string{fleetRole + "=eraser", fleetSchema + "=" + schema}, env...))
}

// TestEraseArgs_SurvivesAKilledProcess runs a durable erasure in a worker
// process of its own and SIGKILLs it midway, while the erasure waits for
// the hung delivery's cancelled run to end: between two of its runs, or
// during one. A second process completes it, once, and nothing of the
// user is left in the schema's pg_dump.
func TestEraseArgs_SurvivesAKilledProcess(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		during bool // killed during a run, not between two
	}{
		{"between runs", false},
		{"during a run", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.during && testing.Short() {
				t.Skip("waits for River's rescue of the killed process's run, about 25 s")
			}
			t.Parallel()
			ctx := context.Background()
			e, id := startErasureForChildren(t)

			var env []string
			if tc.during {
				env = append(env, eraseHold+"=1")
			}
			first, lines := startEraseChild(t, e.b.schema, env...)
			if tc.during {
				timeout := time.After(30 * time.Second)
				for held := false; !held; {
					select {
					case line := <-lines:
						held = line == "holding" // its second run
					case <-timeout:
						t.Fatal("the child did not hold its second run within 30 s")
					}
				}
			} else {
				waitJob(t, e.client, id, 30*time.Second, "snoozed", func(j *rivertype.JobRow) bool {
					return snoozes(t, j) > 0 && j.State != rivertype.JobStateRunning
				})
			}
			require.NoError(t, first.Process.Signal(syscall.SIGKILL))
			first.Wait()
			killed := time.Now()
			job, err := e.client.JobGet(ctx, id)
			require.NoError(t, err)
			midRun := job.State == rivertype.JobStateRunning
			t.Logf("killed the process running the erasure after %d snoozes, the job %s", snoozes(t, job), job.State)
			require.Equal(t, tc.during, midRun, "killed during a run: the job is left running")
			e.release()

			if midRun {
				// River's rescuer gives a run left running to another
				// process once it is older than the RescueStuckJobsAfter
				// Register set: the second process starts after that, so
				// that it leads (the first's leadership has expired, 15 s
				// after its last renewal) and its rescuer's first pass,
				// at its start, finds it.
				e.waitRescuable(t, id)
			}
			startEraseChild(t, e.b.schema)
			job = waitJob(t, e.client, id, 2*time.Minute, "completed", func(j *rivertype.JobRow) bool { return j.State == rivertype.JobStateCompleted })
			t.Logf("completed %v after the kill, after %d snoozes, %d run(s) counted", time.Since(killed).Round(time.Millisecond), snoozes(t, job), job.Attempt)
			if midRun {
				require.Len(t, job.Errors, 1, "the rescue")
				assert.Equal(t, "Stuck job rescued by JobRescuer", job.Errors[0].Error)
			} else {
				assert.Empty(t, job.Errors, "no run failed")
			}
			e.assertErased(t, job)
		})
	}
}

// TestEraseArgs_HoldsOneConnectionAtATime: a run of a durable erasure
// holds one of the pool's connections at a time. A run that kept its
// transaction open while its cancels (River's JobCancel, on the pool)
// waited for another connection would deadlock as many erasures as the
// pool has connections, and the River client on that pool with them, until
// JobTimeout: here one erasure on a pool of one connection.
func TestEraseArgs_HoldsOneConnectionAtATime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := testDB(t)
	config, err := pgxpool.ParseConfig(pool.Config().ConnString())
	require.NoError(t, err)
	config.MaxConns = 1
	one, err := pgxpool.NewWithConfig(ctx, config)
	require.NoError(t, err)
	t.Cleanup(one.Close)
	sender, err := webhook.NewSender(&webhook.SenderOptions{AttemptTimeout: time.Second})
	require.NoError(t, err)
	w := newWorker(t, sender, newResolver(nil).resolve, nil)
	client := newClient(t, one, schema, river.NewWorkers(), func(c *river.Config) {
		c.PollOnly = true // no listener holding the one connection
		c.JobTimeout = 5 * time.Second
		require.NoError(t, riverhook.Register(c, w))
	})
	inserter := newClient(t, pool, schema, nil, nil)

	// A delivery of the subject waiting an hour: the erasure cancels it.
	params, err := riverhook.InsertParams("waiting", []string{"crm"}, userPayload(erasedUser, "waiting", "waiting"), w.InsertOptions(nil))
	require.NoError(t, err)
	params[0].InsertOpts.ScheduledAt = time.Now().Add(time.Hour)
	_, err = inserter.InsertMany(ctx, params)
	require.NoError(t, err)
	inserted, err := inserter.Insert(ctx, riverhook.EraseArgs{Subject: erasedUser.ID}, &river.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)

	start(t, client)
	job := waitJob(t, inserter, inserted.Job.ID, time.Minute, "ended", func(j *rivertype.JobRow) bool { return j.FinalizedAt != nil })
	assert.Equal(t, rivertype.JobStateCompleted, job.State, "the erasure's errors: %v", job.Errors)
}

// TestEraseArgs_CountsTheCancelsOfARunThatFailed: a durable erasure whose
// run cancelled a delivery and then failed (its erasure waited for the
// Recover lock of an operator's transaction left idle, until the client's
// JobTimeout of 5 s, or ErrLockHeld) counts
// that cancel in the totals it completes with. EraseArgs promises its
// output is the EraseResult of its runs added up, leaving out only the
// cancels of a run cut by a crash; a run that fails is no crash, and River
// writes what a failed run recorded. The run recorded nothing before its
// error, and the retry, finding the delivery cancelled already, completed
// with Cancelled 0.
func TestEraseArgs_CountsTheCancelsOfARunThatFailed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := testDB(t)
	client := newClient(t, pool, schema, river.NewWorkers(), func(c *river.Config) { eraseChildConfig(t, c) })
	// The delivery waits in a queue no client works: under way until
	// the erasure cancels it.
	params, err := riverhook.InsertParams("parked", []string{"crm"}, userPayload(erasedUser, "parked", "delivered"),
		&riverhook.InsertOptions{InsertOpts: &river.InsertOpts{Queue: "parked"}})
	require.NoError(t, err)
	inserted, err := client.InsertMany(ctx, params)
	require.NoError(t, err)
	delivery := inserted[0].Job.ID

	// An operator's Recover of the connection, its transaction left idle.
	held, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer held.Rollback(ctx)
	_, err = riverhook.RecoverTx(ctx, client, held, "crm", riverhook.RecoverParams{Since: time.Now().Add(-time.Hour), Reason: "ops: held"}, nil)
	require.NoError(t, err)

	start(t, client)
	res, err := client.Insert(ctx, riverhook.EraseArgs{Subject: erasedUser.ID}, nil)
	require.NoError(t, err)
	id := res.Job.ID
	job := waitJob(t, client, id, 30*time.Second, "failed once", func(j *rivertype.JobRow) bool { return len(j.Errors) > 0 })
	require.Contains(t, job.Errors[0].Error, "erasing a subject's deliveries", "the first run failed waiting for the idle transaction's lock")
	cancelled, err := client.JobGet(ctx, delivery)
	require.NoError(t, err)
	require.Equal(t, rivertype.JobStateCancelled, cancelled.State, "the failed run cancelled the delivery")
	require.NoError(t, held.Rollback(ctx))

	job = waitJob(t, client, id, 30*time.Second, "completed", func(j *rivertype.JobRow) bool { return j.State == rivertype.JobStateCompleted })
	var got riverhook.EraseResult
	require.NoError(t, json.Unmarshal(job.Output(), &got), "the erasure's output: %s", job.Metadata)
	assert.Equal(t, riverhook.EraseResult{Erased: 1, Cancelled: 1}, got, "the delivery cancelled by the failed run, and erased by the next")
}

// TestEraseArgs_CountsTheErasuresOfARunCutByACrash: a durable erasure
// whose process dies after its run erased the subject's three deliveries,
// before River wrote the run's end, completes with those three in its
// totals, once another process has run it again. EraseArgs promises its
// output is its runs added up, leaving out the cancels of a run cut by a
// crash alone; the erasure is committed, and so should be its count. The
// run kept its totals in memory until its end, and the run after, finding
// everything erased, completed with Erased 0: the service's record of the
// erasure said nothing was erased.
func TestEraseArgs_CountsTheErasuresOfARunCutByACrash(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for River's rescue of the killed process's run, about 25 s")
	}
	t.Parallel()
	e, id := startErasureForChildren(t)

	first, lines := startEraseChild(t, e.b.schema, eraseHoldAfter+"=1")
	timeout := time.After(30 * time.Second)
	for held := false; !held; {
		select {
		case line := <-lines:
			held = line == "holding"
		case <-timeout:
			t.Fatal("the child did not make its first run within 30 s")
		}
	}
	require.NoError(t, first.Process.Signal(syscall.SIGKILL))
	first.Wait()
	e.release()
	e.waitRescuable(t, id) // the second process then leads, and rescues the run
	startEraseChild(t, e.b.schema)
	job := waitJob(t, e.client, id, 2*time.Minute, "completed", func(j *rivertype.JobRow) bool { return j.State == rivertype.JobStateCompleted })
	var got riverhook.EraseResult
	require.NoError(t, json.Unmarshal(job.Output(), &got), "the erasure's output: %s", job.Metadata)
	assert.Equal(t, 3, got.Erased, "the two ended deliveries and the running one, erased by the run cut by the crash: %+v", got)
	assertNoTraces(t, dumpSchema(t, e.b.schema), erasedUser, "after the durable erasure")
}
