package riverhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// This file holds resending: one delivery again (a dashboard's Resend
// button), and a connection's given-up deliveries again (recover).

// MaxReasonBytes bounds the reason given to [Resend] and [Recover], UTF-8
// text without NUL.
const MaxReasonBytes = 500

// MaxRecovered is the most deliveries one [Recover] resends: call it again
// while RecoverResult.More says so.
const MaxRecovered = 1000

// ErrUnderWay is returned by [Resend] for a delivery that has not ended: it
// is still being delivered, and a resend would send it twice.
var ErrUnderWay = errors.New("riverhook: the delivery is still under way")

// ErrResent is returned by [Resend] for a job that was resent before and
// whose resend River has since deleted (after its retention period: 24
// hours once delivered, by default): the delivery was sent again then, and
// is not sent a second time. Resend a later job of the delivery, or insert
// it anew, to send it once more.
var ErrResent = errors.New("riverhook: the job was resent already")

// Resend inserts a job that sends the delivery of job jobID again: the
// policy's attempts again (opts.Retry's; use [Worker.InsertOptions]),
// signed afresh, with reason, the caller's words (an operator's name and
// why), in its log ([Delivery.ResendReason], ResentFrom). It is a
// dashboard's Resend button.
//
// A delivery is sent again by resending its newest job, once. The job must
// have ended, delivered or not ([ErrUnderWay] otherwise). While a later
// job of its delivery exists (its resend, a resend of that, or the
// delivery inserted again), Resend inserts nothing and returns the newest
// one, with inserted false: a double click sends once, and so does a click
// on an older row of the log; resend the job it returns, once ended, to
// send once more. A job whose resend River has deleted since is not resent
// again ([ErrResent]); one whose body was erased cannot be ([ErrErased]).
// The resent job is marked in its row (args "resent_as", the new job's id)
// in the transaction that inserts the new one.
//
// The new job keeps the original's queue, priority and tags (where a worker
// of that queue works it), unless opts.InsertOpts sets a queue or a
// priority.
//
// Resend decides and inserts in one transaction begun on db, a pool on the
// database of client (or the caller's transaction: a savepoint), holding a
// lock of the delivery's that [Recover] takes too: two Resends, or a Resend
// and a Recover, of one delivery at the same moment insert one job,
// whatever processes they run in. It blocks while another decides on the
// delivery, as long as ctx allows, but for a decider idle in its
// transaction, such as the caller's own: [ErrLockHeld].
func Resend(ctx context.Context, client *river.Client[pgx.Tx], db DB, jobID int64, reason string, opts *InsertOptions) (job *rivertype.JobRow, inserted bool, err error) {
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		job, inserted, err = ResendTx(ctx, client, tx, jobID, reason, opts)
		return err
	})
	return job, inserted, err
}

// ResendTx is [Resend] in tx: the new job exists once tx commits, and the
// delivery's lock is held until tx ends, so keep tx short, and until then
// give tx, not the pool, to the riverhook calls that follow: one on the
// pool would wait for tx, which waits for it ([ErrLockHeld]). At READ
// COMMITTED, PostgreSQL's default, the second of two deciders on a delivery
// waits for the first's transaction and then sees its job; at REPEATABLE
// READ or SERIALIZABLE it may fail with a serialization error instead.
func ResendTx(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, jobID int64, reason string, opts *InsertOptions) (job *rivertype.JobRow, inserted bool, err error) {
	if err := checkReason(reason); err != nil {
		return nil, false, err
	}
	row, err := client.JobGetTx(ctx, tx, jobID)
	if err != nil {
		return nil, false, fmt.Errorf("riverhook: resending job %d: %w", jobID, err)
	}
	stored, err := storedOf(row)
	if err != nil {
		return nil, false, err
	}
	if err := lockDelivery(ctx, tx, client.Schema(), stored.ConnectionID, stored.DeliveryID); err != nil {
		return nil, false, fmt.Errorf("riverhook: resending job %d: %w", jobID, err)
	}
	// Decide on what the deciders before this one committed: the job as it
	// is now (its mark), and the delivery's later jobs.
	if row, err = client.JobGetTx(ctx, tx, jobID); err != nil {
		return nil, false, fmt.Errorf("riverhook: resending job %d: %w", jobID, err)
	}
	if stored, err = storedOf(row); err != nil {
		return nil, false, err
	}
	if s := statusOf(row); s == StatusWaiting || s == StatusRetrying {
		return nil, false, fmt.Errorf("%w: job %d is %s", ErrUnderWay, row.ID, row.State)
	}
	later, err := client.JobListTx(ctx, tx, laterParams(row.ID, stored.Args))
	switch {
	case err != nil:
		return nil, false, fmt.Errorf("riverhook: resending job %d: %w", jobID, err)
	case len(later.Jobs) > 0:
		return later.Jobs[0], false, nil
	case stored.ResentAs != 0:
		return nil, false, fmt.Errorf("%w: job %d was resent as job %d, which River has deleted since", ErrResent, row.ID, stored.ResentAs)
	case stored.Erased || len(stored.Body) == 0:
		return nil, false, fmt.Errorf("%w: job %d", ErrErased, row.ID)
	}
	args := stored.Args
	args.ResentFrom, args.ResendReason = row.ID, reason
	p := resendOf(row, args, opts)
	res, err := client.InsertTx(ctx, tx, p.Args, p.InsertOpts)
	if err == nil {
		err = markResent(ctx, tx, client.Schema(), []int64{row.ID}, []int64{res.Job.ID})
	}
	if err != nil {
		return nil, false, fmt.Errorf("riverhook: resending job %d: %w", jobID, err)
	}
	return res.Job, !res.UniqueSkippedAsDuplicate, nil
}

// storedOf returns what job's args hold, riverhook's mark included; an
// error for a job of another kind.
func storedOf(job *rivertype.JobRow) (stored, error) {
	var s stored
	if job.Kind != Kind {
		return s, fmt.Errorf("riverhook: job %d has kind %q, not %q", job.ID, job.Kind, Kind)
	}
	if err := json.Unmarshal(job.EncodedArgs, &s); err != nil {
		return s, fmt.Errorf("riverhook: job %d's args: %w", job.ID, err)
	}
	return s, nil
}

// resendOf returns the insert of args, job's resend: in job's queue, at its
// priority, with its tags, unless opts' InsertOpts sets a queue or a
// priority of its own.
func resendOf(job *rivertype.JobRow, args Args, opts *InsertOptions) river.InsertManyParams {
	p := insertParams(args, opts)
	io := p.InsertOpts
	var base river.InsertOpts
	if opts != nil && opts.InsertOpts != nil {
		base = *opts.InsertOpts
	}
	if base.Queue == "" {
		io.Queue = job.Queue
	}
	if base.Priority == 0 {
		io.Priority = job.Priority
	}
	for _, tag := range job.Tags {
		if !slices.Contains(io.Tags, tag) {
			io.Tags = append(io.Tags, tag)
		}
	}
	return p
}

func checkReason(reason string) error {
	switch {
	case reason == "":
		return errors.New("riverhook: a resend needs a reason: who asked, and why")
	case len(reason) > MaxReasonBytes || !utf8.ValidString(reason) || strings.Contains(reason, "\x00"):
		// PostgreSQL's jsonb, the job's args, holds no NUL.
		return fmt.Errorf("riverhook: a resend's reason must be UTF-8 text without NUL of at most %d bytes", MaxReasonBytes)
	}
	return nil
}

// RecoverParams says which given-up deliveries [Recover] sends again.
type RecoverParams struct {
	// Since keeps the deliveries that gave up (their job was discarded)
	// at or after Since. Required: recovering "everything ever" is never
	// what an operator means.
	Since time.Time

	// Reason is recorded in each resend, as for [Resend]. Required.
	Reason string

	// DryRun counts what would be resent, and resends nothing.
	DryRun bool
}

// RecoverResult says what a [Recover] found and did.
type RecoverResult struct {
	GivenUp int     `json:"given_up"` // given-up deliveries found since RecoverParams.Since and not resent since, at most MaxRecovered
	Resent  int     `json:"resent"`   // resends inserted; in a dry run, those that would be
	Pending int     `json:"pending"`  // of GivenUp, those whose resend River found inserted already (its unique key): not sent again
	More    bool    `json:"more"`     // more than MaxRecovered gave up: call Recover again once these are resent (or erased)
	Jobs    []int64 `json:"jobs"`
}

// Recover sends again the deliveries to connectionID that gave up since
// p.Since, as [Resend] does each: what an operator runs once a customer's
// endpoint is fixed. A delivery's newest job is resent if it gave up and
// was never resent, so that a delivery is sent again once: the original
// of a resend River has deleted since is not (River keeps a given-up job 7
// days and a delivered one 24 hours, by default). At most [MaxRecovered]
// are resent per call, oldest first: call it again while More says so.
// With p.DryRun it only counts. A delivery whose body was erased is not
// listed: there is nothing to send. Jobs lists the jobs inserted.
//
// Recover decides and inserts in one transaction begun on db, as [Resend]
// does, holding the connection's lock: run twice, or at the same moment as
// another Recover or a Resend of the connection's deliveries, whatever
// processes they run in, it sends each delivery once. Resends of the
// connection wait for it, and it for them, but for one idle in its
// transaction ([ErrLockHeld]).
func Recover(ctx context.Context, client *river.Client[pgx.Tx], db DB, connectionID string, p RecoverParams, opts *InsertOptions) (res *RecoverResult, err error) {
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		res, err = RecoverTx(ctx, client, tx, connectionID, p, opts)
		return err
	})
	return res, err
}

// RecoverTx is [Recover] in tx: its resends exist once tx commits, and the
// connection's lock is held until tx ends: give tx, not the pool, to the
// riverhook calls that follow until then (see [ResendTx]).
func RecoverTx(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, connectionID string, p RecoverParams, opts *InsertOptions) (*RecoverResult, error) {
	if p.Since.IsZero() {
		return nil, errors.New("riverhook: RecoverParams.Since is required")
	}
	if err := checkReason(p.Reason); err != nil {
		return nil, err
	}
	if !storable(connectionID) {
		return &RecoverResult{}, nil // no delivery has it
	}
	fail := func(err error) (*RecoverResult, error) {
		return nil, fmt.Errorf("riverhook: recovering the deliveries to %q: %w", connectionID, err)
	}
	if err := lockConnection(ctx, tx, client.Schema(), connectionID); err != nil {
		return fail(err)
	}
	gaveUp, err := client.JobListTx(ctx, tx, gaveUpParams(client.Schema(), connectionID, p.Since, MaxRecovered+1))
	if err != nil {
		return fail(err)
	}
	jobs := gaveUp.Jobs
	res := &RecoverResult{More: len(jobs) > MaxRecovered}
	jobs = jobs[:min(len(jobs), MaxRecovered)]
	res.GivenUp = len(jobs)
	var params []river.InsertManyParams
	for _, job := range jobs {
		s, err := storedOf(job)
		if err != nil {
			return nil, err
		}
		if s.Erased || len(s.Body) == 0 {
			continue // erased meanwhile: nothing to send
		}
		a := s.Args
		a.ResentFrom, a.ResendReason = job.ID, p.Reason
		params = append(params, resendOf(job, a, opts))
	}
	if p.DryRun || len(params) == 0 {
		res.Resent = len(params)
		return res, nil
	}
	inserted, err := client.InsertManyTx(ctx, tx, params)
	if err != nil {
		return fail(err)
	}
	resent, as := make([]int64, len(inserted)), make([]int64, len(inserted))
	for i, r := range inserted {
		s, err := storedOf(r.Job)
		if err != nil {
			return nil, err
		}
		resent[i], as[i] = s.ResentFrom, r.Job.ID
		if r.UniqueSkippedAsDuplicate {
			res.Pending++
			continue
		}
		res.Resent++
		res.Jobs = append(res.Jobs, r.Job.ID)
	}
	if err := markResent(ctx, tx, client.Schema(), resent, as); err != nil {
		return fail(err)
	}
	return res, nil
}
