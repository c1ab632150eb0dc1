package riverhook

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/signedhook/webhook"
)

// This file holds what makes a River client and its inserts agree with the
// Worker: Register, which sets up the client's configuration, and the one
// retry policy.

// Register sets up config, a River client's configuration, for the
// deliveries of w: it adds w, riverhook's maintenance (see [PruneKind],
// a periodic job run by River's leader, unless LeaderElectionDisabled) and
// the worker of durable erasures ([EraseArgs]) to config.Workers (made
// when nil), sets
// config.RescueStuckJobsAfter to [Worker.RescueStuckJobsAfter] when it is
// zero, and config.FetchPollInterval to [DefaultFetchPollInterval] (or
// the FetchCooldown, when longer: River refuses a poll shorter than it)
// when it is zero. It refuses a RescueStuckJobsAfter shorter than that, which would
// have River's rescuer run a delivery again while its attempt may still be
// under way, and a Workers that has a worker of [Kind], [PruneKind] or
// [EraseKind] already.
//
// It sets config.Test.Time to the database's clock as the process reads
// it: the process's clock (config.Test.Time when set, else time.Now)
// corrected by its offset to the database's, which the Worker reads as it
// works. River and the Worker then store every time on the database's
// clock: a snooze's or a retry's end, an error's time, a job's end. The
// Worker keeps one clock for all the clients it is registered in.
//
// Call it for every River client started on the database, also one that
// works other queues only: River's rescuer runs on whichever client leads,
// and discards a stuck job of a kind that client has no worker for. Build
// the Worker of such a client with a Sender of the same attempt timeout.
// Register changes nothing of config on error.
func Register(config *river.Config, w *Worker) error {
	least := w.RescueStuckJobsAfter(config.JobTimeout)
	if after := config.RescueStuckJobsAfter; after != 0 && after < least {
		return fmt.Errorf("riverhook: River's RescueStuckJobsAfter is %v, under the %v a delivery's run may take (Worker.RescueStuckJobsAfter): the rescuer would send deliveries again while they run", after, least)
	}
	workers := config.Workers
	if workers == nil {
		workers = river.NewWorkers()
	}
	if err := river.AddWorkerSafely(workers, w); err != nil {
		return fmt.Errorf("riverhook: registering the Worker: %w", err)
	}
	if err := river.AddWorkerSafely(workers, river.WorkFunc(prune)); err != nil {
		return fmt.Errorf("riverhook: registering its maintenance: %w", err)
	}
	if err := river.AddWorkerSafely(workers, river.WorkFunc(eraseWork)); err != nil {
		return fmt.Errorf("riverhook: registering its erasure: %w", err)
	}
	if !config.LeaderElectionDisabled { // River refuses periodic jobs then
		config.PeriodicJobs = append(config.PeriodicJobs, river.NewPeriodicJob(river.PeriodicInterval(PruneEvery),
			func() (river.JobArgs, *river.InsertOpts) { return PruneArgs{}, nil }, &river.PeriodicJobOpts{ID: PruneKind, RunOnStart: true}))
	}
	config.Workers = workers
	c := w.clock.Load()
	if !c.db {
		c = databaseClock(config.Test.Time)
		w.clock.Store(c)
	}
	setRiverClock(config, c)
	if config.RescueStuckJobsAfter == 0 {
		config.RescueStuckJobsAfter = least
	}
	if config.FetchPollInterval == 0 {
		// River refuses a poll shorter than the fetch cooldown (100 ms
		// unless set).
		config.FetchPollInterval = max(DefaultFetchPollInterval, cmp.Or(config.FetchCooldown, river.FetchCooldownDefault))
	}
	return nil
}

// PruneKind is the River job kind of riverhook's maintenance, which
// [Register] schedules every [PruneEvery] on River's elected leader (and
// once at its start): it deletes the endpoint marks of endpoints up again
// for a day (riverhook_endpoint_mark), the console's turns a day old
// (riverhook_console_turn), the paces of connections with nothing ahead
// for a day and no start in a year (riverhook_pace), and the changes of a
// connection's life older than [HistoryFor] (riverhook_connection_change).
// It does nothing in a schema [Migrate] never ran in.
const PruneKind = "riverhook_prune"

// PruneEvery is how often riverhook's maintenance runs.
const PruneEvery = time.Hour

// PruneArgs is the job of riverhook's maintenance (see [PruneKind]).
type PruneArgs struct{}

// Kind returns [PruneKind].
func (PruneArgs) Kind() string { return PruneKind }

// prune is the work of riverhook's maintenance, on the database and in
// the schema of the River client running it.
func prune(ctx context.Context, _ *river.Job[PruneArgs]) error {
	query, schema, ok := riverQuery(ctx)
	if !ok {
		return nil
	}
	_, err := pruneTables(ctx, query, schema)
	return err
}

// DefaultFetchPollInterval is the River FetchPollInterval [Register] sets
// when the configuration has none: how late, at most, a delivery whose wait ended
// runs. A job snoozed for its connection's slot (over the bound, early for
// its rate, waiting for its endpoint) becomes available at its time without
// the notification an insert sends, so River's producer takes it at its
// next poll: at River's default of a second, a slow endpoint's places stay
// idle for half a second on average after each attempt, halving what it
// receives. A poll is one indexed query per queue of a client.
const DefaultFetchPollInterval = 50 * time.Millisecond

// InsertOptions returns the [InsertOptions] of the deliveries w works: the
// retry policy of its Sender, so that the jobs' MaxAttempts and the
// Sender's attempts are one policy, and base (which may be nil) as
// InsertOptions.InsertOpts.
func (w *Worker) InsertOptions(base *river.InsertOpts) *InsertOptions {
	return &InsertOptions{Retry: &webhook.RetryPolicy{MaxRetries: w.sender.MaxRetries()}, InsertOpts: base}
}

// checkPolicy reports, on the first run of job, River's runs for it not
// being those of the Worker's Sender: the job was inserted with another
// policy (InsertOptions.Retry), so River would discard it before the
// Sender's last attempt, or give it runs the Sender never makes. The
// delivery goes on with the Sender's policy; the error says what to fix.
func (w *Worker) checkPolicy(ctx context.Context, job *river.Job[Args]) {
	want := w.sender.MaxRetries() + 1 + MaxInterruptedRuns
	if job.Attempt != 1 || job.MaxAttempts == want {
		return
	}
	w.logger.ErrorContext(ctx, "riverhook: the job was inserted for another retry policy than the Worker's Sender; insert with Worker.InsertOptions",
		slog.Int64("job_id", job.ID), slog.Int("max_attempts", job.MaxAttempts), slog.Int("want_max_attempts", want),
		slog.Int("sender_max_retries", w.sender.MaxRetries()))
}
