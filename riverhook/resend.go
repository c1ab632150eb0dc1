package riverhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// This file holds resending: one delivery again (a dashboard's Resend
// button), and a connection's given-up deliveries again (recover).

// MaxReasonBytes bounds the reason given to [Resend] and [Recover].
const MaxReasonBytes = 500

// MaxRecovered is the most deliveries one [Recover] resends: call it again
// while RecoverResult.More says so.
const MaxRecovered = 1000

// ErrUnderWay is returned by [Resend] for a delivery that has not ended: it
// is still being delivered, and a resend would send it twice.
var ErrUnderWay = errors.New("riverhook: the delivery is still under way")

// Resend inserts a job that sends the delivery of job jobID again: the
// policy's attempts again (opts.Retry's; use [Worker.InsertOptions]),
// signed afresh, with reason, the caller's words (an operator's name and
// why), in its log ([Delivery.ResendReason], ResentFrom). The job must have
// ended, delivered or not; [ErrUnderWay] otherwise. Resending a job twice
// while its first resend is under way or delivered inserts nothing and
// returns that resend, with inserted false: a double click sends once. So
// does resending a job while a later job of its delivery (a resend of a
// resend, or the delivery inserted again) is under way or delivered: it
// returns that job. Resend the new job to send once more after that. The
// new job keeps the original's queue, priority and tags (where a worker of
// that queue works it), unless opts.InsertOpts sets a queue or a priority.
// It decides and inserts in one transaction begun on db, a pool on the
// database of client (or the caller's transaction: a savepoint).
func Resend(ctx context.Context, client *river.Client[pgx.Tx], db DB, jobID int64, reason string, opts *InsertOptions) (job *rivertype.JobRow, inserted bool, err error) {
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		job, inserted, err = ResendTx(ctx, client, tx, jobID, reason, opts)
		return err
	})
	return job, inserted, err
}

// ResendTx is [Resend] in tx: the new job exists once tx commits.
func ResendTx(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, jobID int64, reason string, opts *InsertOptions) (job *rivertype.JobRow, inserted bool, err error) {
	row, err := client.JobGetTx(ctx, tx, jobID)
	if err != nil {
		return nil, false, fmt.Errorf("riverhook: resending job %d: %w", jobID, err)
	}
	p, err := resendParams(row, reason, opts)
	if err != nil {
		return nil, false, err
	}
	later, err := client.JobListTx(ctx, tx, laterParams(row.ID, p.Args.(Args)))
	if err != nil || len(later.Jobs) > 0 {
		return laterResult(jobID, later, err)
	}
	res, err := client.InsertTx(ctx, tx, p.Args, p.InsertOpts)
	return insertResult(jobID, res, err)
}

func laterResult(jobID int64, later *river.JobListResult, err error) (*rivertype.JobRow, bool, error) {
	if err != nil {
		return nil, false, fmt.Errorf("riverhook: resending job %d: %w", jobID, err)
	}
	return later.Jobs[0], false, nil
}

func insertResult(jobID int64, res *rivertype.JobInsertResult, err error) (*rivertype.JobRow, bool, error) {
	if err != nil {
		return nil, false, fmt.Errorf("riverhook: resending job %d: %w", jobID, err)
	}
	return res.Job, !res.UniqueSkippedAsDuplicate, nil
}

// resendParams returns the insert of job's resend.
func resendParams(job *rivertype.JobRow, reason string, opts *InsertOptions) (river.InsertManyParams, error) {
	if err := checkReason(reason); err != nil {
		return river.InsertManyParams{}, err
	}
	d, err := DeliveryOf(job)
	if err != nil {
		return river.InsertManyParams{}, err
	}
	if d.Status == StatusWaiting || d.Status == StatusRetrying {
		return river.InsertManyParams{}, fmt.Errorf("%w: job %d is %s", ErrUnderWay, job.ID, job.State)
	}
	var args Args
	if err := json.Unmarshal(job.EncodedArgs, &args); err != nil {
		return river.InsertManyParams{}, fmt.Errorf("riverhook: job %d's args: %w", job.ID, err)
	}
	if args.Erased || len(args.Body) == 0 {
		return river.InsertManyParams{}, fmt.Errorf("%w: job %d", ErrErased, job.ID)
	}
	args.ResentFrom, args.ResendReason = job.ID, reason
	return resendOf(job, args, opts), nil
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
	case len(reason) > MaxReasonBytes || !utf8.ValidString(reason):
		return fmt.Errorf("riverhook: a resend's reason must be UTF-8 text of at most %d bytes", MaxReasonBytes)
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
	Pending int     `json:"pending"`  // of GivenUp, those another resend or insert reached first: not sent again
	More    bool    `json:"more"`     // more than MaxRecovered gave up: call Recover again once these are resent (or erased)
	Jobs    []int64 `json:"jobs"`
}

// Recover sends again the deliveries to connectionID that gave up since
// p.Since, as [Resend] does each: what an operator runs once a customer's
// endpoint is fixed. Only the newest job of each delivery is resent, and
// only if it gave up, so a delivery resent before is not sent twice; a
// second Recover, or one racing it, inserts nothing for the deliveries the
// first resent (River's unique insert). At most [MaxRecovered] are resent
// per call; a job that has a later job of its delivery is not listed, so a
// next call goes on with the deliveries the last one did not reach. With
// p.DryRun it only counts. A delivery whose body was erased is not listed:
// there is nothing to send. Jobs lists the jobs inserted. It decides and
// inserts in one transaction begun on db, as [Resend] does.
func Recover(ctx context.Context, client *river.Client[pgx.Tx], db DB, connectionID string, p RecoverParams, opts *InsertOptions) (res *RecoverResult, err error) {
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		res, err = RecoverTx(ctx, client, tx, connectionID, p, opts)
		return err
	})
	return res, err
}

// RecoverTx is [Recover] in tx: its resends exist once tx commits.
func RecoverTx(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, connectionID string, p RecoverParams, opts *InsertOptions) (*RecoverResult, error) {
	return recoverDeliveries(ctx, client.Schema(), connectionID, p, opts,
		func(params *river.JobListParams) (*river.JobListResult, error) {
			return client.JobListTx(ctx, tx, params)
		},
		func(params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error) {
			return client.InsertManyTx(ctx, tx, params)
		})
}

func recoverDeliveries(_ context.Context, schema, connectionID string, p RecoverParams, opts *InsertOptions,
	listJobs func(*river.JobListParams) (*river.JobListResult, error),
	insert func([]river.InsertManyParams) ([]*rivertype.JobInsertResult, error)) (*RecoverResult, error) {
	if p.Since.IsZero() {
		return nil, errors.New("riverhook: RecoverParams.Since is required")
	}
	if err := checkReason(p.Reason); err != nil {
		return nil, err
	}
	gaveUp, err := listJobs(gaveUpParams(schema, connectionID, p.Since, MaxRecovered+1))
	if err != nil {
		return nil, fmt.Errorf("riverhook: recovering the deliveries to %q: %w", connectionID, err)
	}
	jobs := gaveUp.Jobs
	res := &RecoverResult{More: len(jobs) > MaxRecovered}
	jobs = jobs[:min(len(jobs), MaxRecovered)]
	res.GivenUp = len(jobs)
	if len(jobs) == 0 {
		return res, nil
	}
	// A later job of the same delivery: a resend (under way, delivered, or
	// given up in turn, then recovered through its own row) or a new insert.
	deliveries := make([]string, len(jobs))
	for i, job := range jobs {
		var a Args
		if err := json.Unmarshal(job.EncodedArgs, &a); err != nil {
			return nil, fmt.Errorf("riverhook: job %d's args: %w", job.ID, err)
		}
		deliveries[i] = a.DeliveryID
	}
	later, err := listJobs(laterOfParams(connectionID, deliveries, jobs[0].ID))
	if err != nil {
		return nil, fmt.Errorf("riverhook: recovering the deliveries to %q: %w", connectionID, err)
	}
	newest := map[string]int64{} // delivery id -> its newest job
	for _, job := range append(jobs, later.Jobs...) {
		var a Args
		if err := json.Unmarshal(job.EncodedArgs, &a); err != nil {
			return nil, fmt.Errorf("riverhook: job %d's args: %w", job.ID, err)
		}
		newest[a.DeliveryID] = max(newest[a.DeliveryID], job.ID)
	}
	var params []river.InsertManyParams
	for _, job := range jobs {
		var a Args
		_ = json.Unmarshal(job.EncodedArgs, &a) // read above
		switch {
		case newest[a.DeliveryID] != job.ID:
			res.Pending++
			continue
		case a.Erased || len(a.Body) == 0:
			continue // erased meanwhile: nothing to send
		}
		a.ResentFrom, a.ResendReason = job.ID, p.Reason
		params = append(params, resendOf(job, a, opts))
	}
	if p.DryRun || len(params) == 0 {
		res.Resent = len(params)
		return res, nil
	}
	inserted, err := insert(params)
	if err != nil {
		return nil, fmt.Errorf("riverhook: recovering the deliveries to %q: %w", connectionID, err)
	}
	for _, r := range inserted {
		if r.UniqueSkippedAsDuplicate {
			res.Pending++
			continue
		}
		res.Resent++
		res.Jobs = append(res.Jobs, r.Job.ID)
	}
	return res, nil
}
