package riverhook

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
	pool, schema := testdb.Schema(t, "riverpin", true)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	tw := rivertest.NewWorker(t, riverpgxv5.New(nil), &river.Config{Schema: schema, Logger: testdb.Quiet()}, w)
	res, err := tw.Work(ctx, t, tx, Args{ConnectionID: "crm", DeliveryID: "d1", Event: "user.identified"}, opts)
	require.Error(t, err, "the run's own error, which the pinned cases return")
	require.NotNil(t, res)
	return res
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
