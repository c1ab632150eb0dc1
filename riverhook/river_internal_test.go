package riverhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook/internal/testdb"
)

// TestRiver pins each behaviour of River that riverhook relies on beyond
// River's documented API (river.go): each case fails if River changes it.
// The cases that need River's executor run it through rivertest on a real
// PostgreSQL; the texts River writes are read from River's own source, of
// the version this module requires.
func TestRiver(t *testing.T) {
	t.Run("JobCancelErrorText", func(t *testing.T) {
		err := river.JobCancel(errors.New("riverhook: connection \"crm\" is gone"))
		text, ok := cancelledText(err.Error())
		require.True(t, ok, "River's text of a JobCancel error no longer starts with %q: %q", cancelPrefix, err.Error())
		assert.Equal(t, `riverhook: connection "crm" is gone`, text)
	})

	t.Run("RescuerErrorText", func(t *testing.T) {
		src := riverSource(t, "github.com/riverqueue/river", "internal/maintenance/job_rescuer.go")
		assert.Contains(t, src, `Error:   "`+rescuedError+`"`, "River's rescuer no longer writes %q", rescuedError)
	})

	t.Run("CancelStampsMetadata", func(t *testing.T) {
		src := riverSource(t, "github.com/riverqueue/river/riverdriver/riverpgxv5", "internal/dbsqlc/river_job.sql")
		assert.Contains(t, src, "'{cancel_attempted_at}'", "River no longer stamps a cancelled job's metadata with cancel_attempted_at")

		pool, schema := testdb.Schema(t, "riverpin", true)
		client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema, Logger: testdb.Quiet()})
		require.NoError(t, err)
		ctx := context.Background()
		res, err := client.Insert(ctx, Args{ConnectionID: "crm", DeliveryID: "d1", Event: "user.identified"},
			&river.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		before := time.Now().Add(-time.Minute) // the database's clock may differ a little
		row, err := client.JobCancel(ctx, res.Job.ID)
		require.NoError(t, err)
		assert.Equal(t, rivertype.JobStateCancelled, row.State)
		assert.True(t, cancelAttemptedAt(row).After(before), "no cancel_attempted_at in %s", row.Metadata)
	})

	t.Run("StopPutsTheJobBackUncounted", func(t *testing.T) {
		// River tells a soft stop by the context's cause (rivercommon.ErrStop,
		// unexported) and a run's error wrapping context.Canceled; a remote
		// cancel by river.ErrJobCancelledRemotely. The behaviour end to end:
		// TestWorkerInAClient/ClientStoppedMidAttemptPutsTheJobBack.
		src := riverSource(t, "github.com/riverqueue/river", "internal/jobexecutor/job_executor.go")
		assert.Contains(t, src, "errors.Is(context.Cause(ctx), rivercommon.ErrStop) &&\n\t\t(errors.Is(err, context.Canceled)")
		assert.Contains(t, src, "e.CancelFunc(rivertype.ErrJobCancelledRemotely)")
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(river.ErrJobCancelledRemotely)
		assert.False(t, stopping(ctx), "a remote cancel is not a stop")
		ctx, cancel = context.WithCancelCause(context.Background())
		cancel(errors.New("stopping"))
		assert.True(t, stopping(ctx))
	})

	// A run's end is written whatever happened to the row during the run:
	// River merges the run's metadata updates (the attempt log, its
	// output) into the row's and appends its error, so a run that ends
	// after an erasure rewrites the log it recorded; a run cancelled in
	// River keeps River's own text as its error, not the Worker's; a
	// running job cancelled in River stays running, stamped, until its run
	// ends, and River's rescuer cancels it, not runs it again, should its
	// process die. The behaviour end to end: TestEraseSubject_LeavesNoTrace.
	t.Run("RunEndAfterACancel", func(t *testing.T) {
		executor := riverSource(t, "github.com/riverqueue/river", "internal/jobexecutor/job_executor.go")
		assert.Contains(t, executor, "if res.Err != nil && errors.Is(context.Cause(ctx), rivertype.ErrJobCancelledRemotely) {\n\t\tres.Err = context.Cause(ctx)")
		sql := riverSource(t, "github.com/riverqueue/river/riverdriver/riverpgxv5", "internal/dbsqlc/river_job.sql")
		assert.Contains(t, sql, "THEN river_job.metadata || job_input.metadata_updates")
		assert.Contains(t, sql, "THEN array_append(river_job.errors, job_input.errors)")
		assert.Contains(t, sql, "state = CASE WHEN state = 'running' THEN state ELSE 'cancelled' END")
		rescuer := riverSource(t, "github.com/riverqueue/river", "internal/maintenance/job_rescuer.go")
		assert.Contains(t, rescuer, "if !metadata.CancelAttemptedAt.IsZero() {")
	})

	t.Run("DiscardsWhenMaxAttemptsIsWrittenDuringTheRun", func(t *testing.T) {
		w := &pinWorker{work: func(_ context.Context, job *river.Job[Args]) error {
			discardAfterThisRun(job)
			return errors.New("the policy gives up")
		}}
		res := pinWork(t, w, &river.InsertOpts{MaxAttempts: 5})
		assert.Equal(t, rivertype.JobStateDiscarded, res.Job.State, "River no longer decides on the row Work was handed")
	})

	t.Run("AsksNextRetryWithTheJobWorkGot", func(t *testing.T) {
		var worked, asked *river.Job[Args]
		w := &pinWorker{
			work: func(_ context.Context, job *river.Job[Args]) error { worked = job; return errors.New("retry") },
			next: func(job *river.Job[Args]) time.Time { asked = job; return time.Now().Add(time.Hour) },
		}
		res := pinWork(t, w, &river.InsertOpts{MaxAttempts: 5})
		assert.Equal(t, rivertype.JobStateRetryable, res.Job.State)
		require.NotNil(t, asked, "River did not ask NextRetry")
		assert.Same(t, worked, asked, "River asks NextRetry with another *Job than Work got: the Worker's retries are keyed by it")
	})

	t.Run("SnoozeWakesOnTimeUpToTheSchedulerInterval", func(t *testing.T) {
		src := riverSource(t, "github.com/riverqueue/river", "internal/maintenance/job_scheduler.go")
		assert.Contains(t, src, fmt.Sprintf("JobSchedulerIntervalDefault = %d * time.Second", schedulerInterval/time.Second))
		for snooze, want := range map[time.Duration]rivertype.JobState{
			schedulerInterval:               rivertype.JobStateAvailable, // fetched at its time
			schedulerInterval + time.Second: rivertype.JobStateScheduled, // made available by the scheduler
		} {
			w := &pinWorker{work: func(context.Context, *river.Job[Args]) error { return river.JobSnooze(snooze) }}
			res, err := pinRun(t, w, nil)
			require.NoError(t, err)
			assert.Equal(t, want, res.Job.State, "a snooze of %v", snooze)
			assert.NotNil(t, res.Job.AttemptedAt, "a snoozed job keeps the time of its run, by which Wake tells it from a job scheduled at its insert")
		}
	})

	// River takes Config.Test.Time as its clock for the times it computes
	// in Go (a snooze's and a retry's scheduled_at, an error's time, a
	// job's end), and takes its client retry policy's time for a
	// NextRetry before it; its statements take the database's now() when
	// NowOrNil is nil. Register's clock rests on it (setRiverClock).
	t.Run("TakesTestTimeAsItsClock", func(t *testing.T) {
		src := riverSource(t, "github.com/riverqueue/river", "client.go")
		assert.Contains(t, src, "archetype.Time = &baseservice.TimeGeneratorWithStubWrapper{TimeGenerator: config.Test.Time}")
		src = riverSource(t, "github.com/riverqueue/river", "internal/jobexecutor/job_executor.go")
		assert.Contains(t, src, "nextAttemptScheduledAt := e.Time.Now().Add(snoozeErr.Duration)")
		assert.Contains(t, src, "if nextRetryScheduledAt.Before(now) {")
		assert.Contains(t, src, "riverdriver.JobSetStateCompleted(jobRow.ID, e.Time.Now(), metadataUpdatesBytes)")
		src = riverSource(t, "github.com/riverqueue/river/riverdriver/riverpgxv5", "internal/dbsqlc/river_job.sql")
		assert.Contains(t, src, "AND scheduled_at <= coalesce(sqlc.narg('now')::timestamptz, now())", "River's fetch")

		ahead := databaseClock(skewed(time.Hour)) // no reading: an hour ahead
		w := &pinWorker{work: func(context.Context, *river.Job[Args]) error { return river.JobSnooze(time.Second) }}
		res, err := pinRunAt(t, w, nil, ahead)
		require.NoError(t, err)
		assert.WithinDuration(t, time.Now().Add(time.Hour+time.Second), res.Job.ScheduledAt, time.Minute, "a snooze on River's clock")
	})

	// The wake tells a job waiting for its policy's retry from a snoozed
	// one by River's own stamps (snoozedWhere): a failed run's error is
	// stamped after the run's attempted_at, also when River makes a short
	// retry available at once; a snooze adds no error. The stamp is the
	// process's clock, attempted_at the database's: here one machine's.
	t.Run("ARetryIsStampedAfterItsRun", func(t *testing.T) {
		w := &pinWorker{
			work: func(context.Context, *river.Job[Args]) error { return errors.New("503") },
			next: func(*river.Job[Args]) time.Time { return time.Now().Add(3 * time.Second) },
		}
		res := pinWork(t, w, &river.InsertOpts{MaxAttempts: 5})
		assert.Equal(t, rivertype.JobStateAvailable, res.Job.State, "a retry within the scheduler's interval")
		require.NotEmpty(t, res.Job.Errors)
		require.NotNil(t, res.Job.AttemptedAt)
		assert.False(t, res.Job.Errors[len(res.Job.Errors)-1].At.Before(*res.Job.AttemptedAt), "the error is stamped after its run began")

		snoozed := &pinWorker{work: func(context.Context, *river.Job[Args]) error { return river.JobSnooze(3 * time.Second) }}
		got, err := pinRun(t, snoozed, nil)
		require.NoError(t, err)
		assert.Equal(t, rivertype.JobStateAvailable, got.Job.State)
		assert.Empty(t, got.Job.Errors, "a snooze adds no error")
	})

	t.Run("JobListBound", func(t *testing.T) {
		assert.NotPanics(t, func() { river.NewJobListParams().First(maxListed) })
		assert.Panics(t, func() { river.NewJobListParams().First(maxListed + 1) }, "River's bound on a listing is no longer %d", maxListed)
	})

	t.Run("JobColumns", func(t *testing.T) {
		pool, schema := testdb.Schema(t, "riverpin", true)
		rows, err := pool.Query(context.Background(), `SELECT column_name, udt_name FROM information_schema.columns
			WHERE table_schema = $1 AND table_name = 'river_job'`, schema)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) ([2]string, error) {
			var c [2]string
			return c, row.Scan(&c[0], &c[1])
		})
		require.NoError(t, err)
		types := map[string]string{}
		for _, c := range got {
			types[c[0]] = c[1]
		}
		for column, udt := range map[string]string{"id": "int8", "kind": "text", "state": "river_job_state", "args": "jsonb",
			"errors": "_jsonb", "metadata": "jsonb", "created_at": "timestamptz", "scheduled_at": "timestamptz",
			"attempted_at": "timestamptz", "finalized_at": "timestamptz", "unique_key": "bytea", "unique_states": "bit"} {
			assert.Equal(t, udt, types[column], "river_job.%s, which riverhook's queries read", column)
		}
	})

	t.Run("StatusesCoverEveryJobState", func(t *testing.T) {
		pool, schema := testdb.Schema(t, "riverpin", true)
		ctx := context.Background()
		var states []string
		require.NoError(t, pool.QueryRow(ctx, `SELECT array_agg(enumlabel::text ORDER BY enumlabel) FROM pg_enum
			JOIN pg_type ON pg_type.oid = enumtypid JOIN pg_namespace ON pg_namespace.oid = typnamespace
			WHERE typname = 'river_job_state' AND nspname = $1`, schema).Scan(&states))
		var want []string
		for _, st := range rivertype.JobStates() {
			want = append(want, string(st))
		}
		slices.Sort(want)
		require.Equal(t, want, states, "River's job states in its migration and in rivertype")
		cols := make([]string, len(statuses))
		for i, s := range statuses {
			cols[i] = statusWhere[s]
		}
		sql := `SELECT ` + strings.Join(cols, ", ") + ` FROM (SELECT $1::text::"` + schema + `".river_job_state AS state,
			(CASE $2::int WHEN 0 THEN NULL WHEN 1 THEN '{}' ELSE ARRAY['{"error": "500"}'::jsonb] END)::jsonb[] AS errors) AS river_job`
		for _, st := range rivertype.JobStates() {
			for errs := range 3 {
				in := make([]bool, len(statuses))
				dest := make([]any, len(in))
				for i := range in {
					dest[i] = &in[i]
				}
				require.NoError(t, pool.QueryRow(ctx, sql, string(st), errs).Scan(dest...))
				job := &rivertype.JobRow{State: st}
				if errs == 2 {
					job.Errors = []rivertype.AttemptError{{Error: "500"}}
				}
				var got []Status
				for i, s := range statuses {
					if in[i] {
						got = append(got, s)
					}
				}
				assert.Equal(t, []Status{statusOf(job)}, got, "state %s with %d errors: SQL and Go disagree", st, errs)
			}
		}
	})

	t.Run("ListWhere", func(t *testing.T) {
		client, _ := pinClient(t)
		ctx := context.Background()
		res, err := client.Insert(ctx, Args{ConnectionID: "crm", DeliveryID: "d1", Event: "user.identified"}, nil)
		require.NoError(t, err)
		p := &ListParams{Statuses: Statuses(), Event: "user.identified", Since: time.Now().Add(-time.Hour),
			Until: time.Now().Add(time.Hour), After: strconv.FormatInt(res.Job.ID+1, 10)}
		where, args, err := p.where("crm")
		require.NoError(t, err)
		got, err := client.JobList(ctx, river.NewJobListParams().Where(where, args))
		require.NoError(t, err)
		require.Len(t, got.Jobs, 1)
		assert.Equal(t, res.Job.ID, got.Jobs[0].ID)
	})

	t.Run("Count", func(t *testing.T) {
		client, pool := pinClient(t)
		ctx := context.Background()
		var ids []int64
		for _, d := range []string{"d1", "d2"} {
			res, err := client.Insert(ctx, Args{ConnectionID: "crm", DeliveryID: d, Event: "user.identified", Body: []byte("{}")}, nil)
			require.NoError(t, err)
			ids = append(ids, res.Job.ID)
		}
		_, err := pool.Exec(ctx, `UPDATE `+jobTable(client.Schema())+` SET state = 'completed', finalized_at = now() WHERE args->>'delivery_id' = 'd1'`)
		require.NoError(t, err)
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx)
		for _, db := range []DB{pool, tx} {
			n, err := count(ctx, db, client.Schema(), "crm", time.Time{}, MaxCounted)
			require.NoError(t, err)
			assert.Equal(t, []int{1, 0, 1, 0, 0}, n, "delivered, retrying, waiting, given up, cancelled")
		}
		n, err := erase(ctx, tx, client.Schema(), []string{"d1", "d2"})
		require.NoError(t, err)
		assert.Equal(t, 1, n, "the ended delivery")
		job, err := client.JobGetTx(ctx, tx, ids[0])
		require.NoError(t, err)
		assert.JSONEq(t, `{"connection_id": "crm", "delivery_id": "d1", "event": "user.identified", "erased": true}`, string(job.EncodedArgs))
	})

	t.Run("Kept", func(t *testing.T) {
		client, pool := pinClient(t)
		ctx := context.Background()
		var created []time.Time
		var ids []int64
		for _, d := range []string{"waiting", "retrying", "delivered", "other"} {
			conn := "crm"
			if d == "other" {
				conn = "erp"
			}
			res, err := client.Insert(ctx, Args{ConnectionID: conn, DeliveryID: d, Event: "user.identified", Body: []byte("{}")}, nil)
			require.NoError(t, err)
			created = append(created, res.Job.CreatedAt)
			ids = append(ids, res.Job.ID)
		}
		_, err := pool.Exec(ctx, `UPDATE `+jobTable(client.Schema())+` SET
			state = (CASE args->>'delivery_id' WHEN 'retrying' THEN 'retryable' WHEN 'delivered' THEN 'completed' ELSE state::text END)::"`+client.Schema()+`".river_job_state,
			finalized_at = (CASE args->>'delivery_id' WHEN 'delivered' THEN now() END)`)
		require.NoError(t, err)
		n, since, err := kept(ctx, pool, client.Schema(), "crm", 0)
		require.NoError(t, err)
		assert.Equal(t, 2, n, "the waiting and the retrying deliveries of crm")
		assert.True(t, since.Equal(created[0]), "since the oldest: got %v, want %v", since, created[0])
		n, since, err = kept(ctx, pool, client.Schema(), "crm", ids[0])
		require.NoError(t, err)
		assert.Equal(t, 1, n, "the retrying one, the waiting one excepted")
		assert.True(t, since.Equal(created[1]), "since the oldest left: got %v, want %v", since, created[1])
		n, since, err = kept(ctx, pool, client.Schema(), "none", 0)
		require.NoError(t, err)
		assert.Zero(t, n)
		assert.True(t, since.IsZero())
	})

	t.Run("SucceededSince", func(t *testing.T) {
		client, pool := pinClient(t)
		ctx := context.Background()
		for _, d := range []string{"delivered", "failed", "other"} {
			conn := "crm"
			if d == "other" {
				conn = "erp"
			}
			_, err := client.Insert(ctx, Args{ConnectionID: conn, DeliveryID: d, Event: "user.identified", Body: []byte("{}")}, nil)
			require.NoError(t, err)
		}
		_, err := pool.Exec(ctx, `UPDATE `+jobTable(client.Schema())+` SET
			state = (CASE args->>'delivery_id' WHEN 'failed' THEN 'discarded' ELSE 'completed' END)::"`+client.Schema()+`".river_job_state,
			finalized_at = now() - (CASE args->>'delivery_id' WHEN 'delivered' THEN interval '1 hour' ELSE interval '1 minute' END)`)
		require.NoError(t, err)
		for _, tc := range []struct {
			id   string
			ago  time.Duration
			want bool
		}{
			{"crm", 2 * time.Hour, true},     // delivered an hour ago
			{"crm", 30 * time.Minute, false}, // only the given-up one since
			{"erp", 30 * time.Minute, true},  // its own
			{"none", 2 * time.Hour, false},
		} {
			var now time.Time
			require.NoError(t, pool.QueryRow(ctx, `SELECT now()`).Scan(&now))
			got, err := succeededSince(ctx, pool, client.Schema(), tc.id, now.Add(-tc.ago), now)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got, "%s since %v ago", tc.id, tc.ago)
		}
	})

	t.Run("MoveKept", func(t *testing.T) {
		client, pool := pinClient(t)
		ctx := context.Background()
		ids := map[string]int64{}
		for _, d := range []string{"far1", "far2", "soon", "running", "other"} {
			conn := "crm"
			if d == "other" {
				conn = "erp"
			}
			res, err := client.Insert(ctx, Args{ConnectionID: conn, DeliveryID: d, Event: "user.identified", Body: []byte("{}")}, nil)
			require.NoError(t, err)
			ids[d] = res.Job.ID
		}
		// far2 was inserted after far1 but snoozed less far: the move keeps
		// the insertion order.
		_, err := pool.Exec(ctx, `UPDATE `+jobTable(client.Schema())+` SET
			state = (CASE args->>'delivery_id' WHEN 'running' THEN 'running' ELSE 'scheduled' END)::"`+client.Schema()+`".river_job_state,
			attempted_at = now(),
			scheduled_at = now() + (CASE args->>'delivery_id' WHEN 'far1' THEN interval '30 days' WHEN 'far2' THEN interval '20 days'
				WHEN 'soon' THEN interval '10 minutes' ELSE interval '30 days' END)`)
		require.NoError(t, err)
		n, err := moveKept(ctx, pool, client.Schema(), "crm", time.Hour)
		require.NoError(t, err)
		assert.Equal(t, 2, n, "far1 and far2; not soon (under an hour), running, or erp's")
		jobs := map[string]*rivertype.JobRow{}
		for d, id := range ids {
			jobs[d], err = client.JobGet(ctx, id)
			require.NoError(t, err)
		}
		assert.Equal(t, rivertype.JobStateAvailable, jobs["far1"].State)
		assert.Equal(t, rivertype.JobStateAvailable, jobs["far2"].State)
		assert.True(t, jobs["far1"].ScheduledAt.Before(jobs["far2"].ScheduledAt), "oldest first")
		assert.WithinDuration(t, time.Now(), jobs["far2"].ScheduledAt, 10*time.Second)
		assert.Equal(t, rivertype.JobStateScheduled, jobs["soon"].State)
		assert.Equal(t, rivertype.JobStateRunning, jobs["running"].State)
		assert.Equal(t, rivertype.JobStateScheduled, jobs["other"].State)
		n, err = moveKept(ctx, pool, client.Schema(), "crm", 0)
		require.NoError(t, err)
		assert.Equal(t, 1, n, "soon too, with no least wait; far1 and far2 are due already")
	})

	t.Run("Wake", func(t *testing.T) {
		client, pool := pinClient(t)
		ctx := context.Background()
		// d0 to d4 of crm: snoozed briefly (available, due in 30 s),
		// snoozed far (scheduled), snoozed briefly (due in 45 s), waiting
		// for the policy's retry (retryable), and snoozed 10 minutes; d5 is
		// erp's. The times are long next to the statements' own time, so
		// that a slow machine runs the same case.
		ids := map[string]int64{}
		for _, d := range []string{"d0", "d1", "d2", "d3", "d4", "d5"} {
			conn := "crm"
			if d == "d5" {
				conn = "erp"
			}
			res, err := client.Insert(ctx, Args{ConnectionID: conn, DeliveryID: d, Event: "user.identified", Body: []byte("{}")}, nil)
			require.NoError(t, err)
			ids[d] = res.Job.ID
		}
		// Each has run (River's fetch wrote attempted_at, which its snooze
		// keeps; d3's retry wrote its error after it).
		_, err := pool.Exec(ctx, `UPDATE `+jobTable(client.Schema())+` SET attempted_at = now() - interval '1 second',
			errors = CASE args->>'delivery_id' WHEN 'd3' THEN ARRAY[jsonb_build_object('at', now(), 'attempt', 1)]
				WHEN 'd2' THEN ARRAY[jsonb_build_object('at', now() - interval '1 minute', 'attempt', 1)] END,
			state = (CASE args->>'delivery_id' WHEN 'd1' THEN 'scheduled' WHEN 'd3' THEN 'retryable' WHEN 'd5' THEN 'scheduled' ELSE 'available' END)::"`+client.Schema()+`".river_job_state,
			scheduled_at = now() + (CASE args->>'delivery_id' WHEN 'd1' THEN interval '1 hour' WHEN 'd2' THEN interval '45 seconds'
				WHEN 'd3' THEN interval '1 hour' WHEN 'd4' THEN interval '10 minutes' WHEN 'd0' THEN interval '30 seconds' ELSE interval '1 hour' END)`)
		require.NoError(t, err)
		// d6 of crm was inserted to be sent in an hour
		// (InsertOptions.InsertOpts.ScheduledAt), and never ran: its time is
		// its inserter's, not a wait of riverhook's.
		later := time.Now().Add(time.Hour).Truncate(time.Microsecond)
		res, err := client.Insert(ctx, Args{ConnectionID: "crm", DeliveryID: "d6", Event: "user.identified", Body: []byte("{}")},
			&river.InsertOpts{ScheduledAt: later})
		require.NoError(t, err)
		ids["d6"] = res.Job.ID
		get := func(d string) *rivertype.JobRow {
			job, err := client.JobGet(ctx, ids[d])
			require.NoError(t, err)
			return job
		}
		// d7 failed, and its policy retries it in 4 s: River made it
		// available at that time, as it does a short snooze.
		res, err = client.Insert(ctx, Args{ConnectionID: "crm", DeliveryID: "d7", Event: "user.identified", Body: []byte("{}")}, nil)
		require.NoError(t, err)
		ids["d7"] = res.Job.ID
		_, err = pool.Exec(ctx, `UPDATE `+jobTable(client.Schema())+` SET attempted_at = now() - interval '1 second', state = 'available',
			errors = ARRAY[jsonb_build_object('at', now(), 'attempt', 1)], scheduled_at = now() + interval '4 seconds' WHERE id = $1`, ids["d7"])
		require.NoError(t, err)
		d7Due := get("d7").ScheduledAt
		d2Due := get("d2").ScheduledAt
		// The wake's clock is read between before and after. A second is
		// allowed either side for the database's clock; the turns are a
		// minute apart.
		const every, slack = time.Minute, time.Second
		before := time.Now()
		n, err := wake(ctx, poolQuery(pool), client.Schema(), "crm", every)
		after := time.Now()
		require.NoError(t, err)
		turn := func(k int, got time.Time, msg string) {
			t.Helper()
			lo, hi := before.Add(time.Duration(k)*every-slack), after.Add(time.Duration(k)*every+slack)
			assert.True(t, !got.Before(lo) && !got.After(hi), "%s: %v not within [%v, %v]", msg, got, lo, hi)
		}
		assert.Equal(t, 4, n, "in line d0 (its turn now), d2 (1 min: it stays, due before its turn), d4 (2 min), d1 (3 min); d3 and d7 wait for their retries")
		d0, d2, d4, d1 := get("d0"), get("d2"), get("d4"), get("d1")
		assert.Equal(t, rivertype.JobStateAvailable, d0.State)
		turn(0, d0.ScheduledAt, "the first in line: now")
		assert.Equal(t, rivertype.JobStateAvailable, d2.State)
		assert.True(t, d2.ScheduledAt.Equal(d2Due), "kept: never later than due, %v, not %v", d2Due, d2.ScheduledAt)
		assert.Equal(t, rivertype.JobStateAvailable, d4.State)
		turn(2, d4.ScheduledAt, "the third in line: 2 min from now")
		assert.Equal(t, rivertype.JobStateAvailable, d1.State, "made available, as River's own short snooze is: fetched at its time")
		turn(3, d1.ScheduledAt, "the fourth: 3 min from now")
		assert.Equal(t, rivertype.JobStateRetryable, get("d3").State)
		assert.True(t, get("d7").ScheduledAt.Equal(d7Due), "a retry due within the scheduler's interval keeps its policy's time")
		assert.Equal(t, rivertype.JobStateScheduled, get("d5").State, "another connection's")
		d6 := get("d6")
		assert.Equal(t, rivertype.JobStateScheduled, d6.State, "a delivery its inserter scheduled for later is no wait to cut short")
		assert.True(t, d6.ScheduledAt.Equal(later), "d6 is sent at its time, %v, not %v", later, d6.ScheduledAt)
	})

	t.Run("WakeLeavesARetryDueMadeReady", func(t *testing.T) {
		client, pool := pinClient(t)
		ctx := context.Background()
		res, err := client.Insert(ctx, Args{ConnectionID: "crm", DeliveryID: "r", Event: "user.identified", Body: []byte("{}")}, nil)
		require.NoError(t, err)
		id := res.Job.ID
		// It failed, and its policy retries it in 1.5 s: due makes it
		// available at that time, as it does a snooze.
		_, err = pool.Exec(ctx, `UPDATE `+jobTable(client.Schema())+` SET attempted_at = now() - interval '1 second', state = 'retryable',
			errors = ARRAY[jsonb_build_object('at', now(), 'attempt', 1)],
			scheduled_at = now() + interval '1500 milliseconds' WHERE id = $1`, id)
		require.NoError(t, err)
		retryAt, err := client.JobGet(ctx, id)
		require.NoError(t, err)
		n, _, _, err := due(ctx, poolQuery(pool), client.Schema(), 2*time.Second)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		n, err = wake(ctx, poolQuery(pool), client.Schema(), "crm", time.Millisecond)
		require.NoError(t, err)
		assert.Zero(t, n, "a retry made ready ahead of its time is no snooze to cut short")
		job, err := client.JobGet(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, rivertype.JobStateAvailable, job.State)
		assert.True(t, job.ScheduledAt.Equal(retryAt.ScheduledAt), "its policy's time, %v, not %v", retryAt.ScheduledAt, job.ScheduledAt)

		// Its retry ran, at its time 1.5 s after the error, and snoozed (over
		// the bound): a wait of riverhook's, which a wake moves.
		_, err = pool.Exec(ctx, `UPDATE `+jobTable(client.Schema())+` SET attempted_at = now(), state = 'scheduled',
			errors = ARRAY[jsonb_build_object('at', now() - interval '2 seconds', 'attempt', 1)],
			scheduled_at = now() + interval '1 hour' WHERE id = $1`, id)
		require.NoError(t, err)
		n, err = wake(ctx, poolQuery(pool), client.Schema(), "crm", time.Millisecond)
		require.NoError(t, err)
		assert.Equal(t, 1, n, "snoozed since: woken")
	})

	t.Run("Due", func(t *testing.T) {
		client, pool := pinClient(t)
		ctx := context.Background()
		ids := map[string]int64{}
		for _, d := range []string{"soon", "retry", "far", "other"} {
			res, err := client.Insert(ctx, Args{ConnectionID: "crm", DeliveryID: d, Event: "user.identified", Body: []byte("{}")}, nil)
			require.NoError(t, err)
			ids[d] = res.Job.ID
		}
		_, err := pool.Exec(ctx, `UPDATE `+jobTable(client.Schema())+` SET
			state = (CASE args->>'delivery_id' WHEN 'retry' THEN 'retryable' ELSE 'scheduled' END)::"`+client.Schema()+`".river_job_state,
			kind = (CASE args->>'delivery_id' WHEN 'other' THEN 'another_kind' ELSE kind END),
			scheduled_at = now() + (CASE args->>'delivery_id' WHEN 'far' THEN interval '1 hour' ELSE interval '500 milliseconds' END)`)
		require.NoError(t, err)
		before := map[string]time.Time{}
		for d, id := range ids {
			job, err := client.JobGet(ctx, id)
			require.NoError(t, err)
			before[d] = job.ScheduledAt
		}
		n, _, _, err := due(ctx, poolQuery(pool), client.Schema(), 2*time.Second)
		require.NoError(t, err)
		assert.Equal(t, 2, n, "a snoozed delivery and a retry, due within 2 s")
		for d, want := range map[string]rivertype.JobState{"soon": rivertype.JobStateAvailable, "retry": rivertype.JobStateAvailable,
			"far": rivertype.JobStateScheduled, "other": rivertype.JobStateScheduled} {
			job, err := client.JobGet(ctx, ids[d])
			require.NoError(t, err)
			assert.Equal(t, want, job.State, d)
			assert.True(t, job.ScheduledAt.Equal(before[d]), "%s keeps its time, which River's fetch waits for", d)
		}
	})

	// A job whose own unique states leave out retryable (the caller's
	// InsertOpts.UniqueOpts) may wait for its retry beside a copy of its
	// delivery inserted since: River's scheduler discards it when its time
	// comes. Due leaves it to River, and moves the others.
	t.Run("DueLeavesAUniqueConflictToRiver", func(t *testing.T) {
		client, pool := pinClient(t)
		ctx := context.Background()
		unique := &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: []rivertype.JobState{rivertype.JobStateAvailable,
			rivertype.JobStatePending, rivertype.JobStateRunning, rivertype.JobStateScheduled}}}
		args := Args{ConnectionID: "crm", DeliveryID: "d1", Event: "user.identified", Body: []byte("{}")}
		first, err := client.Insert(ctx, args, unique)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `UPDATE `+jobTable(client.Schema())+` SET state = 'retryable', attempted_at = now(),
			scheduled_at = now() + interval '500 milliseconds' WHERE id = $1`, first.Job.ID)
		require.NoError(t, err)
		copied, err := client.Insert(ctx, args, unique)
		require.NoError(t, err)
		require.False(t, copied.UniqueSkippedAsDuplicate, "the retryable job holds no key")
		other, err := client.Insert(ctx, Args{ConnectionID: "crm", DeliveryID: "d2", Event: "user.identified", Body: []byte("{}")},
			&river.InsertOpts{ScheduledAt: time.Now().Add(500 * time.Millisecond)})
		require.NoError(t, err)

		n, _, _, err := due(ctx, poolQuery(pool), client.Schema(), 2*time.Second)
		require.NoError(t, err, "one conflict fails the move of every delivery due")
		assert.Equal(t, 1, n)
		for id, want := range map[int64]rivertype.JobState{first.Job.ID: rivertype.JobStateRetryable, other.Job.ID: rivertype.JobStateAvailable} {
			job, err := client.JobGet(ctx, id)
			require.NoError(t, err)
			assert.Equal(t, want, job.State, "job %d", id)
		}
	})

	// The erasure rewrites a job's args, the attempt log in its metadata and
	// River's errors column, as River writes them, keeping all but the texts;
	// a job that ends later, or whose run writes after it, is erased by the
	// next call; nothing else is touched.
	t.Run("Erase", func(t *testing.T) {
		client, pool := pinClient(t)
		ctx := context.Background()
		start := time.Date(2026, 11, 24, 18, 3, 7, 215000000, time.UTC)
		entries := []logEntry{
			{N: 1, Run: 1, Kind: "status", Start: start, Status: 500, Took: "3.2ms", Timestamp: 1795543387215, RetryIn: "1s",
				Error: "webhook: receiver answered 500 ada@example.org", Response: `{"email":"ada@example.org"}`},
			{N: 2, Run: 3, Kind: "redirect", Start: start.Add(time.Minute), Status: 307, Took: "2ms", Timestamp: 1795543447215, RetryIn: "2s",
				Error: "webhook: receiver answered 307 Ada Lovelace moved; redirects are not followed", Response: "Ada"},
			{N: 3, Run: 4, Kind: "down", Start: start.Add(2 * time.Minute), Took: "0s", RetryIn: "5s",
				Error: "webhook: endpoint down: https://crm.example failed 3 times since 2026-11-24T18:03:07Z, last: timeout"},
			{N: 3, Run: 5, Kind: "delivered", Start: start.Add(3 * time.Minute), Status: 200, Took: "1ms", Timestamp: 1795543567215,
				Response: "stored ada@example.org"},
		}
		out, err := json.Marshal(attemptLog{Attempts: entries})
		require.NoError(t, err)
		runErrors := []rivertype.AttemptError{
			{At: start, Attempt: 1, Error: "riverhook: attempt 1: 500 Internal Server Error; retry in 1s"},
			{At: start.Add(time.Minute), Attempt: 3, Error: "riverhook: attempt 2: redirect: receiver answered 307 Ada Lovelace moved", Trace: "goroutine 7: ada@example.org"},
			{At: start.Add(2 * time.Minute), Attempt: 4, Error: river.ErrJobCancelledRemotely.Error()},
			{At: start.Add(3 * time.Minute), Attempt: 5, Error: cancelPrefix + "riverhook: connection \"crm\" is gone: ada@example.org"},
			{At: start.Add(4 * time.Minute), Attempt: 6, Error: rescuedError},
		}
		var errs []string
		for _, e := range runErrors {
			b, err := json.Marshal(e)
			require.NoError(t, err)
			errs = append(errs, string(b))
		}
		ids := map[string]int64{}
		for _, d := range []struct{ id, subject, state string }{
			{"ended", "usr_1", "completed"}, {"under-way", "usr_1", "retryable"}, {"other", "usr_2", "discarded"}, {"no-log", "usr_1", "cancelled"},
			{"cancelling", "usr_1", "running"}, {"running", "usr_1", "running"},
		} {
			res, err := client.Insert(ctx, Args{ConnectionID: "crm", DeliveryID: d.id, Event: "user.identified", Subject: d.subject,
				Body: []byte(`{"email":"ada@example.org"}`), ResentFrom: 7, ResendReason: "ana: Ada asked"}, &river.InsertOpts{Metadata: []byte(`{"tenant": 42}`)})
			require.NoError(t, err)
			ids[d.id] = res.Job.ID
			if d.id == "no-log" {
				_, err = pool.Exec(ctx, `UPDATE `+jobTable(client.Schema())+` SET state = 'cancelled', finalized_at = now() WHERE id = $1`, res.Job.ID)
			} else {
				_, err = pool.Exec(ctx, `UPDATE `+jobTable(client.Schema())+` SET state = $2::text::"`+client.Schema()+`".river_job_state,
					finalized_at = CASE WHEN $2 IN ('retryable', 'running') THEN NULL ELSE now() END, attempt = 6,
					metadata = metadata || jsonb_build_object('output', $3::jsonb, 'snoozes', 1)
						|| CASE WHEN $5 THEN '{"cancel_attempted_at": "2026-11-24T18:07:00Z"}'::jsonb ELSE '{}' END,
					errors = $4::jsonb[] WHERE id = $1`, res.Job.ID, d.state, string(out), errs, d.id != "running")
			}
			require.NoError(t, err)
		}
		get := func(d string) *rivertype.JobRow {
			t.Helper()
			job, err := client.JobGet(ctx, ids[d])
			require.NoError(t, err)
			return job
		}
		before := map[string]*rivertype.JobRow{}
		for d := range ids {
			before[d] = get(d)
		}

		listed, err := toCancel(ctx, pool, client.Schema(), "usr_1", 10)
		require.NoError(t, err)
		assert.Equal(t, []int64{ids["under-way"], ids["running"]}, listed, "under way, and no cancel has reached them")
		listed, err = toCancel(ctx, pool, client.Schema(), "usr_1", 1)
		require.NoError(t, err)
		assert.Equal(t, []int64{ids["under-way"]}, listed, "oldest first, bounded")
		n, left, err := eraseSubject(ctx, pool, client.Schema(), "usr_1")
		require.NoError(t, err)
		assert.Equal(t, 3, n, "the subject's ended deliveries, and the one being cancelled")
		assert.Equal(t, 3, left, "under way: the one waiting, and the two running")
		for _, d := range []string{"under-way", "other", "running"} {
			assert.Equal(t, before[d], get(d), "%s is untouched", d)
		}
		assert.Equal(t, erasedText, get("cancelling").Errors[0].Error, "the one being cancelled is erased")

		job := get("ended")
		var fields map[string]any
		require.NoError(t, json.Unmarshal(job.EncodedArgs, &fields))
		assert.Equal(t, map[string]any{"connection_id": "crm", "delivery_id": "ended", "event": "user.identified", "data_subject": "usr_1",
			"resent_from": 7.0, "resend_reason": erasedText, "erased": true}, fields, "the ids, the event and the subject stay")
		var meta map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(job.Metadata, &meta))
		assert.JSONEq(t, `42`, string(meta["tenant"]), "the rest of the metadata stays")
		assert.JSONEq(t, `1`, string(meta["snoozes"]))
		assert.JSONEq(t, `"2026-11-24T18:07:00Z"`, string(meta["cancel_attempted_at"]))
		got, err := readLog(job)
		require.NoError(t, err)
		want := slices.Clone(entries)
		for i := range want {
			if want[i].Error != "" && want[i].Kind != "down" {
				want[i].Error = erasedText
			}
			if want[i].Response != "" {
				want[i].Response = erasedText
			}
		}
		assert.Equal(t, want, got, "the log keeps all but its texts, and the words of an endpoint that was down")
		wantErrors := slices.Clone(runErrors)
		wantErrors[0].Error, wantErrors[1].Error, wantErrors[1].Trace = erasedText, erasedText, ""
		wantErrors[3].Error = cancelPrefix + erasedText
		assert.Equal(t, wantErrors, job.Errors, "River's texts for a rescue and a remote cancel stay, and a cancel's prefix")

		was, err := DeliveryOf(before["ended"])
		require.NoError(t, err)
		is, err := DeliveryOf(job)
		require.NoError(t, err)
		require.Len(t, is.Attempts, len(was.Attempts))
		for i, a := range is.Attempts {
			w := was.Attempts[i]
			assert.Equal(t, []any{w.N, w.Run, w.Kind, w.Start, w.StatusCode, w.Duration, w.Timestamp, w.Retry, w.RetryIn},
				[]any{a.N, a.Run, a.Kind, a.Start, a.StatusCode, a.Duration, a.Timestamp, a.Retry, a.RetryIn}, "attempt %d", i)
		}
		assert.Equal(t, webhook.KindInterrupted, is.Attempts[len(is.Attempts)-1].Kind, "the rescued run is still told")
		assert.Equal(t, was.Status, is.Status)
		assert.True(t, is.Erased)

		n, _, err = eraseSubject(ctx, pool, client.Schema(), "usr_1")
		require.NoError(t, err)
		assert.Zero(t, n, "nothing more to erase")
		n, err = erase(ctx, pool, client.Schema(), []string{"ended", "under-way", "other", "no-log"})
		require.NoError(t, err)
		assert.Equal(t, 1, n, "by delivery: the other subject's ended one")

		// A run that ends after the erasure writes its log and its error as
		// River does (metadata merged, errors appended): the next call erases
		// them.
		_, err = pool.Exec(ctx, `UPDATE `+jobTable(client.Schema())+` SET metadata = metadata || jsonb_build_object('output', $2::jsonb),
			errors = array_append(errors, $3::jsonb) WHERE id = $1`, ids["ended"], string(out), errs[0])
		require.NoError(t, err)
		n, _, err = eraseSubject(ctx, pool, client.Schema(), "usr_1")
		require.NoError(t, err)
		assert.Equal(t, 1, n)
		got, err = readLog(get("ended"))
		require.NoError(t, err)
		assert.Equal(t, want, got)
	})

	t.Run("Outcomes", func(t *testing.T) {
		client, pool := pinClient(t)
		ctx := context.Background()
		for _, d := range []string{"d1", "d2", "d3", "d4"} {
			_, err := client.Insert(ctx, Args{ConnectionID: "crm", DeliveryID: d, Event: "user.identified", Body: []byte("{}")}, nil)
			require.NoError(t, err)
		}
		_, err := pool.Exec(ctx, `UPDATE `+jobTable(client.Schema())+` SET finalized_at = now() - interval '90 minutes',
			state = (CASE args->>'delivery_id' WHEN 'd1' THEN 'completed' WHEN 'd2' THEN 'discarded' WHEN 'd3' THEN 'cancelled' ELSE 'available' END)::"`+client.Schema()+`".river_job_state
			WHERE args->>'delivery_id' <> 'd4'`)
		require.NoError(t, err)
		rows, err := outcomes(ctx, pool, client.Schema(), "crm", time.Now().Add(-2*time.Hour), time.Hour)
		require.NoError(t, err)
		got := map[string]int{}
		for rows.Next() {
			var i, n int
			var state string
			require.NoError(t, rows.Scan(&i, &state, &n))
			got[fmt.Sprint(i, " ", state)] = n
		}
		require.NoError(t, rows.Err())
		assert.Equal(t, map[string]int{"0 completed": 1, "0 discarded": 1, "0 cancelled": 1}, got, "the ended jobs of the first hour, by state; the one under way left out")
	})

	t.Run("UniqueInEveryState", func(t *testing.T) {
		assert.NotContains(t, rivertype.UniqueOptsByStateDefault(), rivertype.JobStateDiscarded, "River's default unique states")
		assert.NotContains(t, rivertype.UniqueOptsByStateDefault(), rivertype.JobStateCancelled, "River's default unique states")
		client, pool := pinClient(t)
		ctx := context.Background()
		for _, state := range rivertype.JobStates() {
			args := Args{ConnectionID: "crm", DeliveryID: "d-" + string(state), Event: "user.identified", Body: []byte("{}")}
			first, err := client.Insert(ctx, args, nil)
			require.NoError(t, err, "River refuses the unique states %v", uniqueStates())
			_, err = pool.Exec(ctx, `UPDATE `+jobTable(client.Schema())+` SET state = $1::text::"`+client.Schema()+`".river_job_state,
				finalized_at = CASE WHEN $1 IN ('completed', 'discarded', 'cancelled') THEN now() END WHERE id = $2`, string(state), first.Job.ID)
			require.NoError(t, err)
			again, err := client.Insert(ctx, args, nil)
			require.NoError(t, err)
			assert.True(t, again.UniqueSkippedAsDuplicate, "a repeated insert while the first job is %s", state)
			assert.Equal(t, first.Job.ID, again.Job.ID)
			args.ResentFrom = first.Job.ID
			resent, err := client.Insert(ctx, args, nil)
			require.NoError(t, err)
			assert.False(t, resent.UniqueSkippedAsDuplicate, "a resend is a job of its own")
		}
		// Once River deleted the first job, a repeated insert is inserted.
		args := Args{ConnectionID: "crm", DeliveryID: "d-discarded", Event: "user.identified", Body: []byte("{}")}
		_, err := pool.Exec(ctx, `DELETE FROM `+jobTable(client.Schema())+` WHERE args->>'delivery_id' = 'd-discarded' AND NOT args ? 'resent_from'`)
		require.NoError(t, err)
		again, err := client.Insert(ctx, args, nil)
		require.NoError(t, err)
		assert.False(t, again.UniqueSkippedAsDuplicate)
	})

	t.Run("MarkResent", func(t *testing.T) {
		src := riverSource(t, "github.com/riverqueue/river/riverdriver/riverpgxv5", "internal/dbsqlc/river_job.sql")
		assert.NotRegexp(t, `(?i)\bargs\s*=|SET\s+args\b`, src, "River rewrites a job's args: a mark written there may be lost")
		client, pool := pinClient(t)
		ctx := context.Background()
		var ids []int64
		for _, d := range []string{"d1", "d2", "d3"} {
			res, err := client.Insert(ctx, Args{ConnectionID: "crm", DeliveryID: d, Event: "user.identified", Body: []byte("{}"), ResentFrom: 7, ResendReason: "why"}, nil)
			require.NoError(t, err)
			ids = append(ids, res.Job.ID)
		}
		_, err := pool.Exec(ctx, `UPDATE `+jobTable(client.Schema())+` SET state = 'discarded', finalized_at = now()`)
		require.NoError(t, err)
		require.NoError(t, markResent(ctx, pool, client.Schema(), ids[:2], []int64{41, 42}))
		for i, want := range []int64{41, 42, 0} {
			job, err := client.JobGet(ctx, ids[i])
			require.NoError(t, err)
			d, err := DeliveryOf(job)
			require.NoError(t, err)
			assert.Equal(t, want, d.ResentAs, "job %d", ids[i])
			assert.Equal(t, []string{"crm", fmt.Sprint("d", i+1), "why"}, []string{d.ConnectionID, d.DeliveryID, d.ResendReason}, "the rest of the args stays")
			assert.Equal(t, int64(7), d.ResentFrom)
		}
		_, err = erase(ctx, pool, client.Schema(), []string{"d1"})
		require.NoError(t, err)
		job, err := client.JobGet(ctx, ids[0])
		require.NoError(t, err)
		d, err := DeliveryOf(job)
		require.NoError(t, err)
		assert.True(t, d.Erased)
		assert.Equal(t, int64(41), d.ResentAs, "an erasure keeps the mark")
	})

	t.Run("Locks", func(t *testing.T) {
		_, pool := pinClient(t)
		ctx := context.Background()
		// held begins a transaction holding the locks of take.
		held := func(take func(pgx.Tx) error) pgx.Tx {
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			t.Cleanup(func() { tx.Rollback(ctx) })
			require.NoError(t, take(tx))
			return tx
		}
		// waits reports whether take waits for the locks of the
		// transactions holding them (a lock_timeout ends the wait).
		waits := func(take func(pgx.Tx) error) bool {
			tx := held(func(tx pgx.Tx) error { _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '50ms'`); return err })
			defer tx.Rollback(ctx)
			err := take(tx)
			if err == nil {
				return false
			}
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr)
			require.Equal(t, "55P03", pgErr.Code, "lock_not_available")
			return true
		}
		resend := func(schema, conn, delivery string) func(pgx.Tx) error {
			return func(tx pgx.Tx) error { return lockDelivery(ctx, tx, schema, conn, delivery) }
		}
		recover := func(schema, conn string) func(pgx.Tx) error {
			return func(tx pgx.Tx) error { return lockConnection(ctx, tx, schema, conn) }
		}

		first := held(resend("s", "crm", "d1"))
		assert.True(t, waits(resend("s", "crm", "d1")), "two Resends of a delivery")
		assert.True(t, waits(recover("s", "crm")), "a Recover of its connection")
		assert.False(t, waits(resend("s", "crm", "d2")), "a Resend of another delivery")
		assert.False(t, waits(resend("s", "erp", "d1")), "another connection's delivery of that id")
		assert.False(t, waits(resend("t", "crm", "d1")), "another schema's")
		assert.False(t, waits(resend("s", "crm\",\"d1", "")), "ids that join alike")
		var search string
		require.NoError(t, pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&search))
		require.NoError(t, first.Rollback(ctx))

		first = held(recover(search, "crm"))
		assert.True(t, waits(resend("", "crm", "d1")), "a Resend of the connection, the search path's schema named or not")
		assert.True(t, waits(recover("", "crm")), "two Recovers of a connection")
		assert.False(t, waits(recover(search, "erp")), "another connection's")
		var locks int
		require.NoError(t, first.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'`).Scan(&locks))
		assert.Equal(t, 1, locks, "a Recover holds one lock")
	})

	t.Run("ResendAndRecoverListings", func(t *testing.T) {
		client, pool := pinClient(t)
		ctx := context.Background()
		args := Args{ConnectionID: "crm", DeliveryID: "d1", Event: "user.identified", Body: []byte("{}")}
		first, err := client.Insert(ctx, args, nil)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `UPDATE `+jobTable(client.Schema())+` SET state = 'discarded', finalized_at = now()`)
		require.NoError(t, err)
		other := args // the same delivery to another connection: not a later job of crm's
		other.ConnectionID = "erp"
		_, err = client.Insert(ctx, other, nil)
		require.NoError(t, err)
		since := time.Now().Add(-time.Hour)
		gaveUp, err := client.JobList(ctx, gaveUpParams(client.Schema(), "crm", since, 10))
		require.NoError(t, err)
		require.Len(t, gaveUp.Jobs, 1, "the subquery's connection condition reads the later job's args")

		args.ResentFrom = first.Job.ID
		resent, err := client.Insert(ctx, args, nil)
		require.NoError(t, err)
		gaveUp, err = client.JobList(ctx, gaveUpParams(client.Schema(), "crm", since, 10))
		require.NoError(t, err)
		assert.Empty(t, gaveUp.Jobs, "a job with a later job of its delivery is not given up for Recover")
		later, err := client.JobList(ctx, laterParams(first.Job.ID, args))
		require.NoError(t, err)
		require.Len(t, later.Jobs, 1)
		assert.Equal(t, resent.Job.ID, later.Jobs[0].ID)
		_, err = pool.Exec(ctx, `UPDATE `+jobTable(client.Schema())+` SET state = 'cancelled', finalized_at = now() WHERE id = $1`, resent.Job.ID)
		require.NoError(t, err)
		later, err = client.JobList(ctx, laterParams(first.Job.ID, args))
		require.NoError(t, err)
		require.Len(t, later.Jobs, 1, "a later job in any state")

		// A job marked resent is not given up for Recover, without a later
		// job too.
		_, err = client.JobDelete(ctx, resent.Job.ID)
		require.NoError(t, err)
		gaveUp, err = client.JobList(ctx, gaveUpParams(client.Schema(), "crm", since, 10))
		require.NoError(t, err)
		require.Len(t, gaveUp.Jobs, 1)
		require.NoError(t, markResent(ctx, pool, client.Schema(), []int64{first.Job.ID}, []int64{resent.Job.ID}))
		gaveUp, err = client.JobList(ctx, gaveUpParams(client.Schema(), "crm", since, 10))
		require.NoError(t, err)
		assert.Empty(t, gaveUp.Jobs, "a job marked resent is not given up for Recover")
	})
}

// pinClient returns an insert-only River client on a fresh schema, and its
// pool.
func pinClient(t *testing.T) (*river.Client[pgx.Tx], *pgxpool.Pool) {
	t.Helper()
	pool, schema := testdb.Schema(t, "riverpin", true)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema, Logger: testdb.Quiet()})
	require.NoError(t, err)
	return client, pool
}

// pinWorker is a worker of Args whose Work and NextRetry are the test's.
type pinWorker struct {
	river.WorkerDefaults[Args]
	work func(context.Context, *river.Job[Args]) error
	next func(*river.Job[Args]) time.Time
}

func (w *pinWorker) Work(ctx context.Context, job *river.Job[Args]) error { return w.work(ctx, job) }

func (w *pinWorker) NextRetry(job *river.Job[Args]) time.Time {
	if w.next == nil {
		return time.Time{}
	}
	return w.next(job)
}

// pinWork runs one job of w through River's executor (rivertest) in a
// transaction rolled back at the end; the run must fail.
func pinWork(t *testing.T, w *pinWorker, opts *river.InsertOpts) *rivertest.WorkResult {
	t.Helper()
	res, err := pinRun(t, w, opts)
	require.Error(t, err, "the run's own error, which the pinned cases return")
	return res
}

// pinRun runs one job of w through River's executor (rivertest) in a
// transaction rolled back at the end, and returns its result and error.
func pinRun(t *testing.T, w *pinWorker, opts *river.InsertOpts) (*rivertest.WorkResult, error) {
	return pinRunAt(t, w, opts, nil)
}

// pinRunAt is pinRun with River's clock (Config.Test.Time) at now (nil:
// River's own).
func pinRunAt(t *testing.T, w *pinWorker, opts *river.InsertOpts, now rivertype.TimeGenerator) (*rivertest.WorkResult, error) {
	t.Helper()
	pool, schema := testdb.Schema(t, "riverpin", true)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	config := &river.Config{Schema: schema, Logger: testdb.Quiet()}
	config.Test.Time = now
	tw := rivertest.NewWorker(t, riverpgxv5.New(nil), config, w)
	res, err := tw.Work(ctx, t, tx, Args{ConnectionID: "crm", DeliveryID: "d1", Event: "user.identified"}, opts)
	require.NotNil(t, res, "%v", err)
	return res, err
}

// skewed is a process's clock off by its value.
type skewed time.Duration

func (s skewed) Now() time.Time     { return time.Now().Add(time.Duration(s)) }
func (skewed) NowOrNil() *time.Time { return nil }

// poolQuery is wake's and due's query on pool.
func poolQuery(pool *pgxpool.Pool) func(ctx context.Context, sql string, args ...any) interface{ Scan(...any) error } {
	return func(ctx context.Context, sql string, args ...any) interface{ Scan(...any) error } {
		return pool.QueryRow(ctx, sql, args...)
	}
}

// riverSource returns the text of file in module, at the version this
// module requires.
func riverSource(t *testing.T, module, file string) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module).Output()
	require.NoError(t, err, "go list -m %s", module)
	b, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), file))
	require.NoError(t, err)
	return string(b)
}

// TestCount_BoundsEachStatusApart pins that each status is counted up to
// the bound on its own: a rare status is counted however many jobs of
// another status the connection has.
func TestCount_BoundsEachStatusApart(t *testing.T) {
	client, pool := pinClient(t)
	ctx := context.Background()
	const bound = 2
	var params []river.InsertManyParams
	for i := range 6 * bound {
		params = append(params, river.InsertManyParams{Args: Args{ConnectionID: "crm", DeliveryID: fmt.Sprint("d", i), Event: "user.identified"}})
	}
	_, err := client.InsertMany(ctx, params)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE `+jobTable(client.Schema())+` SET state = 'completed', finalized_at = now()`)
	require.NoError(t, err)
	_, err = client.Insert(ctx, Args{ConnectionID: "crm", DeliveryID: "rare", Event: "user.identified"}, nil)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE `+jobTable(client.Schema())+` SET state = 'discarded', finalized_at = now() WHERE args->>'delivery_id' = 'rare'`)
	require.NoError(t, err)
	n, err := count(ctx, pool, client.Schema(), "crm", time.Time{}, bound)
	require.NoError(t, err)
	assert.Equal(t, []int{bound, 0, 0, 1, 0}, n, "delivered, retrying, waiting, given up, cancelled")
}

// TestDue_ReadsTheDeliveriesDueNotTheBacklog: Due runs once a second in
// every process, so its cost follows the deliveries due, not the backlog
// snoozed for later: River's index on (state, queue, priority,
// scheduled_at) bounds the time in the index, and no row of the backlog
// is read from the table.
func TestDue_ReadsTheDeliveriesDueNotTheBacklog(t *testing.T) {
	client, pool := pinClient(t)
	ctx := context.Background()
	table := jobTable(client.Schema())
	// 20,000 deliveries snoozed over the next hours, 5 due within 2 s. The
	// backlog starts an hour out, so that however long the insert and
	// ANALYZE take, none of it is due yet.
	_, err := pool.Exec(ctx, `INSERT INTO `+table+` (args, kind, max_attempts, queue, state, scheduled_at, attempted_at)
		SELECT jsonb_build_object('connection_id', 'c' || g % 50, 'delivery_id', 'd' || g), $1, 10, 'default', 'scheduled',
			now() + CASE WHEN g <= 5 THEN interval '1 second' ELSE interval '1 hour' + g * interval '1 second' END, now()
		FROM generate_series(1, 20000) AS g`, Kind)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `ANALYZE `+table)
	require.NoError(t, err)
	var plan []struct{ Plan map[string]any }
	require.NoError(t, pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+dueSQL(client.Schema()),
		Kind, (2*time.Second).Microseconds(), maxDue).Scan(&plan))
	require.Len(t, plan, 1)
	read := 0
	var walk func(node map[string]any)
	walk = func(node map[string]any) {
		for _, k := range []string{"Rows Removed by Filter", "Rows Removed by Index Recheck"} {
			if n, ok := node[k].(float64); ok {
				read += int(n)
			}
		}
		if plans, ok := node["Plans"].([]any); ok {
			for _, p := range plans {
				walk(p.(map[string]any))
			}
		}
	}
	walk(plan[0].Plan)
	assert.Less(t, read, 100, "rows of the backlog read and dropped: Due reads what is not due")
	var moved int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE state = 'available'`).Scan(&moved))
	assert.Equal(t, 5, moved)
}
