package riverhook_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/riverhook/internal/testdb"
)

func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv("TEST_DATABASE_URL") == "" && os.Getenv("CI") == "" {
		// Tests skip themselves (testdb.URL); Examples cannot, so they are
		// left out here. Under CI=true they run, and fail without one.
		fmt.Fprintln(os.Stderr, "riverhook: TEST_DATABASE_URL is not set: skipping the tests and Examples that need PostgreSQL (run .ci/run, or point it at one)")
		skip := databaseExamples
		if s := flag.Lookup("test.skip").Value.String(); s != "" {
			skip = s + "|" + skip
		}
		flag.Set("test.skip", skip)
	}
	goleak.VerifyTestMain(m)
}

// testDB returns a pool and a fresh schema migrated with rivermigrate.
func testDB(t testing.TB) (*pgxpool.Pool, string) { return testdb.Schema(t, "riverhook", true) }

func quietLogger() *slog.Logger { return testdb.Quiet() }

// newClient returns a River client on schema working with the given
// workers, not started.
func newClient(t testing.TB, pool *pgxpool.Pool, schema string, workers *river.Workers, tweak func(*river.Config)) *river.Client[pgx.Tx] {
	t.Helper()
	cfg := &river.Config{
		Schema:            schema,
		Workers:           workers,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}},
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            quietLogger(),
	}
	if workers == nil {
		cfg.Queues = nil // an insert-only client
	}
	if tweak != nil {
		tweak(cfg)
	}
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	require.NoError(t, err)
	return client
}

// workerClient returns a client working with worker alone, not started, and
// its events of jobs reaching a final state.
func workerClient(t testing.TB, pool *pgxpool.Pool, schema string, worker *riverhook.Worker) (*river.Client[pgx.Tx], <-chan *river.Event) {
	t.Helper()
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client := newClient(t, pool, schema, workers, nil)
	return client, finalEvents(t, client)
}

// start starts client and stops it at the end of the test.
func start(t testing.TB, client *river.Client[pgx.Tx]) {
	t.Helper()
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		client.StopAndCancel(ctx)
	})
}

// waitFinal waits for n jobs to reach a final state (completed, cancelled or
// discarded) and returns their rows by id.
func waitFinal(t testing.TB, events <-chan *river.Event, n int) map[int64]*rivertype.JobRow {
	t.Helper()
	got := map[int64]*rivertype.JobRow{}
	timeout := time.NewTimer(60 * time.Second)
	defer timeout.Stop()
	for len(got) < n {
		select {
		case ev := <-events:
			switch ev.Job.State {
			case rivertype.JobStateCompleted, rivertype.JobStateCancelled, rivertype.JobStateDiscarded:
				got[ev.Job.ID] = ev.Job
			}
		case <-timeout.C:
			t.Fatalf("%d of %d jobs ended within 60 s", len(got), n)
		}
	}
	return got
}

func finalEvents(t testing.TB, client *river.Client[pgx.Tx]) <-chan *river.Event {
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobCancelled, river.EventKindJobFailed)
	t.Cleanup(cancel)
	return events
}

type pgxTx = pgx.Tx

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

func itoa(n int) string { return strconv.Itoa(n) }
