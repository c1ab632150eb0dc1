package riverhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// This file holds erasure: a user's personal data out of the job rows.

// ErrErased is returned by [Resend] and [Recover] for a delivery whose body
// was erased: there is nothing left to send. An erased job run again (River
// UI's Retry) is cancelled with it.
var ErrErased = errors.New("riverhook: the delivery's body was erased")

// EraseBodies erases the personal data of the given deliveries' jobs that
// have ended, delivered or not, and returns how many held some: the body
// (the payload, with the user's email, name and phone), and every text of
// the job that may quote it, which a receiver that echoes the body fills
// with it: each response excerpt and error text of the attempt log, the
// error texts River keeps of each run, a resend's reason. Each becomes
// "[erased]"; the log keeps its outcomes, statuses, times, durations and
// runs. A delivery still under way keeps its body, which its next attempt
// signs and sends: erase it once it has ended, or cancel it first
// (client.JobCancel). An erased delivery cannot be resent ([ErrErased]).
//
// For a user who asked to be forgotten, [EraseSubject] finds their
// deliveries, resends and those under way included. Call EraseBodies for
// deliveries inserted without a subject, or for every delivery once it has
// ended, to keep personal data out of River's tables and River UI at all:
// see the package documentation, "Retention and personal data". Calling it
// again erases only what was written since. It runs an UPDATE for each 64
// connections of the deliveries, each in a transaction begun on db
// (River's client has no API for it), on the database of client (any
// client will do, for its schema): a pool, or the caller's transaction (a
// savepoint, its locks held until it ends: give it, not the pool, to the
// riverhook calls that follow until then, see [ErrLockHeld]; and give it
// deliveries of at most a few hundred connections, as each holds a lock of
// PostgreSQL's lock table). On an error, the count is of what the
// transactions before it erased, and the call may be made again.
//
// Each UPDATE holds the lock of [Recover] of each of its connections, as
// [EraseSubject] does, so that it takes turns with the
// Resends, Recovers and erasures of those connections: without it, it and
// a Recover marking the same jobs resent could each lock one row and wait
// for the other's, and PostgreSQL ended one with "deadlock detected"
// (TestEraseBodies_AtOnceWithARecover). What it writes is safe from them in
// any case: every writer of a job row (the erasures, the resent mark, River
// recording a run's end) computes its write from the row as it is when it
// holds it, and River writes a run's end to the job its run holds, still
// running, which no erasure by delivery touches ([Register] keeps River's
// rescuer off a run still alive). A Resend or Recover that decided before the
// erasure inserts a resend under way, which keeps its body as any delivery
// under way does; one after finds the delivery erased ([ErrErased]).
func EraseBodies[TTx any](ctx context.Context, client *river.Client[TTx], db DB, deliveryIDs []string) (int, error) {
	ids := slices.DeleteFunc(slices.Clone(deliveryIDs), func(id string) bool { return !storable(id) }) // no delivery has them
	if len(ids) == 0 {
		return 0, nil
	}
	n, err := erase(ctx, db, client.Schema(), ids)
	if err != nil {
		return n, fmt.Errorf("riverhook: erasing %d deliveries (%d erased before the error): %w", len(deliveryIDs), n, err)
	}
	return n, nil
}

// maxCancelled bounds the deliveries one [EraseSubject] cancels.
const maxCancelled = 1000

// EraseResult says what an [EraseSubject] did, and what is left to it.
type EraseResult struct {
	// Erased counts the jobs whose personal data the call erased: ended
	// ones, those it cancelled, and running ones being cancelled. Zero when
	// every job of the subject was erased before.
	Erased int `json:"erased"`

	// Cancelled counts the deliveries under way the call cancelled: they
	// send nothing more. A running one's attempt is cancelled in its
	// process, and its job ends in a moment.
	Cancelled int `json:"cancelled"`

	// UnderWay counts the subject's deliveries that have not ended after
	// the call: the running ones it cancelled, which end within the
	// Worker's Timeout (an attempt answered just before its cancel arrived
	// may record the answer), any inserted during the call, and those
	// beyond the 1,000 one call cancels. Call EraseSubject again until it
	// is zero ([EraseArgs] does).
	UnderWay int `json:"under_way"`
}

// EraseSubject erases the personal data of subject, a user who asked to be
// forgotten, from every delivery about them ([Args.Subject]), resends
// included, and says what it did and what is left. It finds their jobs by
// their args (args @> '{"data_subject": ...}'), served by River's GIN
// index on args, and:
//   - cancels those under way (client.JobCancel): nothing more is sent
//     about them; a running attempt is cancelled in its process, which
//     writes nothing to the job as it ends (its log loaded before the
//     erasure would bring the quotes back);
//   - erases those that have ended, and those being cancelled, as
//     [EraseBodies] does: the body, and every text that may quote it (the
//     attempt log's response excerpts and error texts, River's error texts
//     of each run, a resend's reason) becomes "[erased]"; the log keeps
//     its outcomes, statuses, times, durations and runs, and
//     [Delivery].Erased is true.
//
// What is left is in [EraseResult].UnderWay: call it again until that is
// zero, a few seconds later (the running deliveries end within
// [Worker.Timeout]), or insert [EraseArgs], a job that does. Calling it
// again is safe and cheap: it erases only what holds something to erase,
// such as what a run wrote after the last call. The subject stays in each job: an id, never an email (see
// [MaxSubjectBytes]).
//
// Deliveries inserted without a subject are not found: erase them with
// [EraseBodies] by their ids. What a caller put in a job's tags or River
// metadata (InsertOptions.InsertOpts), its OnAttempt hook, its logs and its
// backups are its own to erase; PostgreSQL keeps a row's old versions in
// its files until vacuumed.
//
// db runs the erasure, on the database of client: a pool, or the caller's
// transaction. client cancels, on its own pool (not riverpgxv5.New(nil)):
// the cancels are committed at once, whatever becomes of the transaction. It blocks for one query, a cancel per
// delivery under way (at most 1,000), and the erasure's UPDATE, which it
// makes holding the lock of [Recover] of each of the subject's connections:
// a Resend or Recover deciding meanwhile commits first, and its resend is
// counted in UnderWay, or waits and finds the delivery erased. Given the
// caller's transaction, it holds them until that ends: give it, not the
// pool, to the riverhook calls that follow until then ([ErrLockHeld]).
func EraseSubject[TTx any](ctx context.Context, client *river.Client[TTx], db DB, subject string) (*EraseResult, error) {
	if err := checkErasedSubject(subject); err != nil {
		return nil, err
	}
	ids, err := toCancel(ctx, db, client.Schema(), subject, maxCancelled)
	if err != nil {
		return nil, fmt.Errorf("riverhook: erasing a subject's deliveries: %w", err)
	}
	res := &EraseResult{}
	if res.Cancelled, err = cancelJobs(ctx, client, ids); err != nil {
		return nil, err
	}
	res.Erased, res.UnderWay, err = eraseSubject(ctx, db, client.Schema(), subject)
	if err != nil {
		return nil, fmt.Errorf("riverhook: erasing a subject's deliveries: %w", err)
	}
	return res, nil
}

// cancelJobs cancels the jobs ids through client, and returns how many it
// cancelled or told to stop running.
func cancelJobs[TTx any](ctx context.Context, client *river.Client[TTx], ids []int64) (int, error) {
	n := 0
	for _, id := range ids {
		job, err := client.JobCancel(ctx, id)
		switch {
		case errors.Is(err, river.ErrNotFound):
			continue // deleted meanwhile
		case err != nil:
			return n, fmt.Errorf("riverhook: erasing a subject's deliveries: cancelling job %d: %w", id, err)
		}
		if job.State == rivertype.JobStateCancelled || job.State == rivertype.JobStateRunning {
			n++
		}
	}
	return n, nil
}

// EraseKind is the River job kind of a durable erasure ([EraseArgs]).
const EraseKind = "riverhook_erase"

// eraseAgainAfter is how long a durable erasure waits before it calls
// [EraseSubject] again while deliveries are under way. What it waits for
// is mostly the cancelled runs ending: River tells a run's process of its
// cancel by a notification, and the run ends within milliseconds, so that
// a second later the repeat finds it ended and the erasure completes. A
// run that misses its cancel ends at its [Worker.Timeout] (40 s with the
// default Sender): that is some 40 repeats, each a few indexed queries
// and an UPDATE of nothing.
const eraseAgainAfter = time.Second

// EraseArgs is the job of a durable erasure: [EraseSubject] of Subject,
// called again until nothing of the subject is under way. An HTTP request
// need not wait for it, and a crash does not lose it. The service inserts
// it in the transaction that records the user's request, with River's own
// insert, on a client set up with [Register] or an insert-only one:
//
//	res, err := client.InsertTx(ctx, tx, riverhook.EraseArgs{Subject: userID}, nil)
//
// [Register] adds its worker, so every client set up for the deliveries
// works it. A subject [EraseSubject] refuses (empty, or not an id) fails
// the insert at once with an error matching [ErrInvalidSubject], and
// nothing is inserted. The job is unique by subject until it ends: a
// second insert while one waits or runs returns that job
// (res.UniqueSkippedAsDuplicate).
//
// Each run erases what it can. While deliveries are still under way, it
// snoozes for a second and runs again. Snoozes do not count against River's
// MaxAttempts. An error does (River retries with its backoff), and so does
// a crash: River's rescuer gives the run of a dead process to another
// after the client's RescueStuckJobsAfter (a minute, as [Register] sets
// it) and up to 30 s of its interval. A run is bounded by the client's
// JobTimeout, as the service's own jobs are.
//
// The job completes once nothing of the subject is under way. The service
// learns it by the job's state, completed: client.JobGet(ctx, res.Job.ID),
// or a subscription to river.EventKindJobCompleted. Its output
// (JobRow.Output) is the [EraseResult] of its runs added up, UnderWay
// zero; the cancels of a run cut by a crash before its erasure committed
// are not counted. River
// deletes the completed job after its CompletedJobRetentionPeriod.
type EraseArgs struct {
	// Subject is the user to erase ([Args.Subject]): an id, never an
	// email.
	Subject string `json:"subject"`
}

// Kind returns [EraseKind].
func (EraseArgs) Kind() string { return EraseKind }

// InsertOpts makes the erasure unique by subject while it waits or runs:
// River requires available, pending, running and scheduled in the states,
// and retryable keeps an erasure that failed once from being doubled. An
// ended erasure does not hold the key, so that the service can erase again.
func (EraseArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRetryable,
		rivertype.JobStateRunning, rivertype.JobStateScheduled}}}
}

// Hooks returns the hook that refuses, at insert, a subject [EraseSubject]
// would refuse.
func (EraseArgs) Hooks() []rivertype.Hook { return []rivertype.Hook{&checkErasure{}} }

// checkErasure is the insert hook of [EraseArgs].
type checkErasure struct{ river.HookDefaults }

func (*checkErasure) InsertBegin(_ context.Context, params *rivertype.JobInsertParams) error {
	var subject string
	switch args := params.Args.(type) {
	case EraseArgs:
		subject = args.Subject
	case *EraseArgs:
		subject = args.Subject
	}
	return checkErasedSubject(subject)
}

// checkErasedSubject returns an error matching [ErrInvalidSubject] for a
// subject that cannot be erased: empty, or not an id.
func checkErasedSubject(subject string) error {
	if subject == "" {
		return fmt.Errorf("%w: the subject to erase must not be empty", ErrInvalidSubject)
	}
	return checkSubject(subject)
}

// eraseWork is the work of a durable erasure ([EraseArgs]), on the
// database of the River client running it.
func eraseWork(ctx context.Context, job *river.Job[EraseArgs]) error {
	if err := checkErasedSubject(job.Args.Subject); err != nil {
		return river.JobCancel(err) // inserted past the hook, by SQL: no run could erase it
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil || !client.Driver().PoolIsSet() {
		return river.JobCancel(fmt.Errorf("riverhook: a durable erasure needs a River client on a pgx pool (riverpgxv5.New(pool))"))
	}
	var total EraseResult
	if out := job.Output(); out != nil {
		if err := json.Unmarshal(out, &total); err != nil {
			return fmt.Errorf("riverhook: reading the erasure's totals: %w", err)
		}
	}
	// River's client lends no pool, only a transaction of its driver's:
	// EraseSubject's steps each run in one, its own transactions
	// savepoints in it, and a run cut by a crash commits nothing of the
	// step it was in. The cancels, on the client's pool, are made with no
	// transaction open: a run holds one of the pool's connections at a
	// time, or as many erasures as the pool has would each wait for
	// another (TestEraseArgs_HoldsOneConnectionAtATime).
	inTx := func(f func(tx pgx.Tx) error) error {
		execTx, err := client.Driver().GetExecutor().Begin(ctx)
		if err != nil {
			return fmt.Errorf("riverhook: erasing a subject: %w", err)
		}
		tx := client.Driver().UnwrapTx(execTx)
		defer tx.Rollback(context.WithoutCancel(ctx))
		if err := f(tx); err != nil {
			return fmt.Errorf("riverhook: erasing a subject's deliveries: %w", err)
		}
		return tx.Commit(ctx)
	}
	var ids []int64
	if err := inTx(func(tx pgx.Tx) (err error) {
		ids, err = toCancel(ctx, tx, client.Schema(), job.Args.Subject, maxCancelled)
		return err
	}); err != nil {
		return err
	}
	// The totals are recorded whatever the run returns: River writes them
	// with a failed run's error too, and the next run, finding the
	// deliveries this one cancelled cancelled, would not count them
	// (TestEraseArgs_CountsTheCancelsOfARunThatFailed).
	cancelled, err := cancelJobs(ctx, client, ids)
	total.Cancelled += cancelled
	if err == nil {
		var erased, left int
		if err = inTx(func(tx pgx.Tx) (err error) {
			if erased, left, err = eraseSubject(ctx, tx, client.Schema(), job.Args.Subject); err != nil {
				return err
			}
			// The totals are committed with the erasure they count, in the
			// job's own row: a run cut by a crash after this commit has
			// them read by the next (TestEraseArgs_CountsTheErasuresOfARunCutByACrash).
			return writeOutput(ctx, tx, client.Schema(), job.ID, EraseResult{
				Erased: total.Erased + erased, Cancelled: total.Cancelled, UnderWay: left})
		}); err == nil {
			total.Erased += erased
			total.UnderWay = left
		}
	}
	if rerr := river.RecordOutput(ctx, total); rerr != nil && err == nil {
		err = fmt.Errorf("riverhook: recording the erasure's totals: %w", rerr)
	}
	switch {
	case err != nil:
		return err
	case total.UnderWay > 0:
		return river.JobSnooze(eraseAgainAfter)
	}
	return nil
}
