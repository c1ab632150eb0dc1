package riverhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/signedhook/webhook"
)

// This file holds what riverhook relies on of River (v0.51) beyond its
// documented API, each assumption in one place and pinned by a case of
// TestRiver (river_internal_test.go) that fails if River changes it: the
// behaviours of its executor, the constants copied from it, and every
// query riverhook makes on River's tables, run against River's migration.

// discardAfterThisRun makes River discard job when the run returns an
// error, whatever runs it has left: River's executor decides between a
// retry and a discard on the row it handed to Work, comparing Attempt with
// MaxAttempts after the run (TestRiver/DiscardsWhenMaxAttemptsIsWrittenDuringTheRun).
func discardAfterThisRun(job *river.Job[Args]) { job.MaxAttempts = job.Attempt }

// setRiverClock makes c River's clock: River computes in Go, on
// Config.Test.Time, the times it stores of a run (a snooze's and a retry's
// scheduled_at, an error's time, a job's end), and takes its client retry
// policy's time for a NextRetry before it; its statements read the
// database's now() where NowOrNil is nil (TestRiver/TakesTestTimeAsItsClock).
func setRiverClock(config *river.Config, c *clock) { config.Test.Time = c }

// River asks NextRetry with the very *river.Job it handed to Work, right
// after Work returns an error, unless an ErrorHandler cancelled the job:
// the Worker keys the retry it computed by that pointer
// (TestRiver/AsksNextRetryWithTheJobWorkGot).
type retryKey = *river.Job[Args]

// rescuedError is the error River's rescuer adds to a job whose run it
// found stuck, in internal/maintenance/job_rescuer.go: a run whose only
// error is this one had its process die (TestRiver/RescuerErrorText).
// River decides what to do with a rescued job the way riverhook's
// [Worker.NextRetry] answers for it: now, since the Worker never saw it fail.
const rescuedError = "Stuck job rescued by JobRescuer"

// cancelPrefix starts the text River keeps for a run that returned
// river.JobCancel(err): rivertype.JobCancelError's Error
// (TestRiver/JobCancelErrorText).
const cancelPrefix = "JobCancelError: "

// cancelledText returns the error of a run that cancelled its job, without
// River's prefix, and whether text is one.
func cancelledText(text string) (string, bool) {
	return strings.CutPrefix(text, cancelPrefix)
}

// cancelStamp is what River writes in a job's metadata when it is
// cancelled from outside the run (client.JobCancel, River UI): the time,
// under "cancel_attempted_at", in riverdriver's SQL
// (TestRiver/CancelStampsMetadata).
type cancelStamp struct {
	CancelAttemptedAt time.Time `json:"cancel_attempted_at"`
}

// cancelAttemptedAt returns when job was cancelled from outside its run,
// or zero.
func cancelAttemptedAt(job *rivertype.JobRow) time.Time {
	var meta cancelStamp
	json.Unmarshal(job.Metadata, &meta) //nolint:errcheck // River wrote it; unreadable means no stamp
	return meta.CancelAttemptedAt
}

// stopping reports whether ctx was cancelled by the client stopping (Stop's
// SoftStopTimeout, StopAndCancel): River then puts back the job of a run
// whose error wraps the context's, uncounted, without asking NextRetry. A
// job cancelled in River (JobCancel) is no such stop: its context's cause
// is river.ErrJobCancelledRemotely; its timeout neither
// (TestRiver/StopPutsTheJobBackUncounted).
func stopping(ctx context.Context) bool {
	return errors.Is(ctx.Err(), context.Canceled) && !cancelledRemotely(ctx)
}

// cancelledRemotely reports whether the run's ctx was cancelled by a cancel
// of its job in River during the run (client.JobCancel, River UI's Cancel,
// [EraseSubject]): River then cancels the context with
// river.ErrJobCancelledRemotely as its cause, keeps that error's text as
// the run's, and cancels the job; and it merges what the run recorded
// into the row as it ends, whatever was written meanwhile
// (TestRiver/StopPutsTheJobBackUncounted, TestRiver/RunEndAfterACancel,
// TestEraseSubject_LeavesNoTrace).
func cancelledRemotely(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), river.ErrJobCancelledRemotely)
}

// schedulerInterval is River's JobSchedulerIntervalDefault: a job snoozed
// for longer is made available by River's scheduler, which runs this often,
// so it wakes up to this much late; a shorter snooze wakes on time
// (TestRiver/SnoozeWakesOnTimeUpToTheSchedulerInterval).
const schedulerInterval = 5 * time.Second

// uniqueStates are the states in which a delivery's job holds its unique
// key: every one, where River's default leaves out discarded and
// cancelled. River requires available, pending, running and scheduled in
// a job's unique states and allows the others
// (TestRiver/UniqueInEveryState).
func uniqueStates() []rivertype.JobState { return rivertype.JobStates() }

// maxListed is River's bound on one listing: JobListParams.First panics
// above it (TestRiver/JobListBound).
const maxListed = 10_000

// DB runs riverhook's own queries on River's tables, those River's client
// has no API for ([Count], [EraseSubject], [EraseBodies]), and begins the
// transaction in which [Resend] and [Recover] decide: a *pgxpool.Pool, a
// *pgx.Conn, or the pgx.Tx of the caller's transaction (whose Begin is a
// savepoint). It must be on the database of the River client given with
// it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// The queries below read and write these columns of River's river_job
// (TestRiver/JobColumns): id, kind, state (river_job_state), args (jsonb),
// errors (jsonb[]), metadata (jsonb), created_at, scheduled_at,
// attempted_at, finalized_at, unique_key (bytea) and unique_states
// (bit(8), read by River's function river_job_state_in_bitmask). Those
// given to River's JobListParams.Where use River's named arguments,
// prefixed riverhook_.

// jobTable is River's job table in schema ("" for the search path), quoted.
func jobTable(schema string) string {
	if schema == "" {
		return "river_job"
	}
	return `"` + strings.ReplaceAll(schema, `"`, `""`) + `".river_job`
}

// connectionWhere finds a connection's jobs by their args, served by River's
// GIN index on args. In a subquery it reads the subquery's own row.
const connectionWhere = `args @> jsonb_build_object('connection_id', @riverhook_connection_id::text)`

// underWay are the River states of a delivery that has not ended.
const underWay = `state IN ('available', 'pending', 'retryable', 'running', 'scheduled')`

// statusWhere is each status as SQL over River's job row; statusOf is the
// same in Go (TestRiver/StatusesCoverEveryJobState).
var statusWhere = map[Status]string{
	StatusDelivered: `state = 'completed'`,
	StatusGivenUp:   `state = 'discarded'`,
	StatusCancelled: `state = 'cancelled'`,
	StatusRetrying:  `(` + underWay + ` AND coalesce(cardinality(errors), 0) > 0)`,
	StatusWaiting:   `(` + underWay + ` AND coalesce(cardinality(errors), 0) = 0)`,
}

// where returns p's filter as SQL for River's JobListParams.Where
// (TestRiver/ListWhere).
func (p *ListParams) where(connectionID string) (string, river.NamedArgs, error) {
	conds := []string{connectionWhere}
	args := river.NamedArgs{"riverhook_connection_id": connectionID}
	if len(p.Statuses) > 0 {
		var either []string
		for _, s := range p.Statuses {
			w, ok := statusWhere[s]
			if !ok {
				return "", nil, fmt.Errorf("riverhook: unknown delivery status %q (want one of %v)", s, statuses)
			}
			either = append(either, w)
		}
		conds = append(conds, "("+strings.Join(either, " OR ")+")")
	}
	if p.Event != "" {
		conds = append(conds, `args @> jsonb_build_object('event', @riverhook_event::text)`)
		args["riverhook_event"] = p.Event
	}
	if !p.Since.IsZero() {
		conds = append(conds, `created_at >= @riverhook_since`)
		args["riverhook_since"] = p.Since.UTC()
	}
	if !p.Until.IsZero() {
		conds = append(conds, `created_at < @riverhook_until`)
		args["riverhook_until"] = p.Until.UTC()
	}
	if p.After != "" {
		id, err := strconv.ParseInt(p.After, 10, 64)
		if err != nil || id <= 0 {
			return "", nil, errors.New("riverhook: ListParams.After is not a cursor List returned")
		}
		conds = append(conds, `id < @riverhook_after`)
		args["riverhook_after"] = id
	}
	return strings.Join(conds, " AND "), args, nil
}

// count returns how many of connectionID's jobs created at or after since
// are in each of [Statuses], each count stopping at bound on its own: a
// status reads at most bound rows, however many the others have
// (TestRiver/Count, TestCount_BoundsEachStatusApart).
func count(ctx context.Context, db DB, schema, connectionID string, since time.Time, bound int) ([]int, error) {
	jobs := `SELECT 1 FROM ` + jobTable(schema) + ` WHERE kind = @riverhook_kind AND ` + connectionWhere +
		` AND created_at >= @riverhook_since AND `
	cols := make([]string, len(statuses))
	for i, s := range statuses {
		cols[i] = `(SELECT count(*) FROM (` + jobs + statusWhere[s] + ` LIMIT ` + strconv.Itoa(bound) + `) AS jobs)`
	}
	sql := `SELECT ` + strings.Join(cols, ", ")
	n := make([]int, len(statuses))
	dest := make([]any, len(n))
	for i := range n {
		dest[i] = &n[i]
	}
	err := db.QueryRow(ctx, sql, pgx.NamedArgs{"riverhook_kind": Kind, "riverhook_connection_id": connectionID,
		"riverhook_since": since.UTC()}).Scan(dest...)
	return n, err
}

// outcomes returns, per period of step seconds from since, the ended jobs
// of connectionID by state: rows of (period, state, count), over River's
// index on args and finalized_at (TestRiver/Outcomes).
func outcomes(ctx context.Context, db DB, schema, connectionID string, since time.Time, step time.Duration) (pgx.Rows, error) {
	sql := `SELECT floor(extract(epoch FROM finalized_at - @riverhook_since) / @riverhook_step)::int, state::text, count(*)
		FROM ` + jobTable(schema) + ` WHERE kind = @riverhook_kind AND ` + connectionWhere + `
		AND state IN ('completed', 'discarded', 'cancelled') AND finalized_at >= @riverhook_since
		GROUP BY 1, 2`
	return db.Query(ctx, sql, pgx.NamedArgs{"riverhook_kind": Kind, "riverhook_connection_id": connectionID,
		"riverhook_since": since.UTC(), "riverhook_step": step.Seconds()})
}

// erasedText takes the place, in an erased job, of each text that may
// quote the body or name its user: every response excerpt and error text of
// the attempt log (but the words of an endpoint that was down, riverhook's
// and the Sender's own, which Delivery.Reason quotes), every error text in
// River's errors column (but the texts River writes itself for a rescued
// run and a run cancelled remotely, which the log reads, and the cancel of
// an erased job run again; a cancel keeps its prefix), and a resend's
// reason. The args keep the ids, the event and the
// subject; the log its numbers, outcome words, times and durations.
const erasedText = "[erased]"

// The erasure of a job, as SQL over its own row: an UPDATE's SET computes it
// on the row it locks, so that a run's end written meanwhile is erased too
// (TestRiver/Erase). Each entry of the log keeps logKept's fields alone.
var (
	erasedArgs = `((args - 'payload_base64') || jsonb_build_object('erased', true) || CASE WHEN args ? 'resend_reason'
		THEN jsonb_build_object('resend_reason', @riverhook_erased::text) ELSE '{}'::jsonb END)`
	erasedMetadata = `(CASE WHEN jsonb_typeof(metadata->'output'->'attempts') = 'array'
		THEN jsonb_set(metadata, '{output}', jsonb_build_object('attempts', (SELECT coalesce(jsonb_agg(` + erasedEntry("e") + ` ORDER BY i), '[]'::jsonb)
			FROM jsonb_array_elements(metadata->'output'->'attempts') WITH ORDINALITY AS a(e, i))))
		ELSE metadata - 'output' END)`
	erasedErrors = `(CASE WHEN errors IS NULL THEN NULL ELSE ARRAY(SELECT jsonb_build_object('at', x->'at', 'attempt', x->'attempt', 'error',
			CASE WHEN x->>'error' IN (@riverhook_rescued::text, @riverhook_remote::text, @riverhook_erased_cancel::text) THEN x->'error'
			WHEN starts_with(x->>'error', @riverhook_cancel_prefix::text) THEN to_jsonb(@riverhook_cancel_prefix::text || @riverhook_erased::text)
			ELSE to_jsonb(@riverhook_erased::text) END, 'trace', '')
		FROM unnest(errors) WITH ORDINALITY AS u(x, i) ORDER BY i) END)`
	// eraseSet erases a job; notErased finds one that holds more.
	eraseSet  = `args = ` + erasedArgs + `, metadata = ` + erasedMetadata + `, errors = ` + erasedErrors
	notErased = `(args, metadata, errors) IS DISTINCT FROM (` + erasedArgs + `, ` + erasedMetadata + `, ` + erasedErrors + `)`
)

// erasedEntry is the erasure of the attempt log entry e (a jsonb
// expression): logKept's fields, and the marker for an error or a response.
func erasedEntry(e string) string {
	var b strings.Builder
	b.WriteString("jsonb_strip_nulls(jsonb_build_object(")
	for _, k := range logKept {
		fmt.Fprintf(&b, "'%s', %s->'%s', ", k, e, k)
	}
	fmt.Fprintf(&b, `'error', CASE WHEN NOT %[1]s ? 'error' THEN NULL WHEN %[1]s->>'kind' = @riverhook_down::text THEN %[1]s->'error'
		ELSE to_jsonb(@riverhook_erased::text) END, `, e)
	fmt.Fprintf(&b, `'response', CASE WHEN %s ? 'response' THEN to_jsonb(@riverhook_erased::text) END))`, e)
	return b.String()
}

// eraseArgs are the named arguments of the erasure's SQL.
func eraseArgs() pgx.NamedArgs {
	return pgx.NamedArgs{"riverhook_kind": Kind, "riverhook_erased": erasedText, "riverhook_rescued": rescuedError,
		"riverhook_remote": river.ErrJobCancelledRemotely.Error(), "riverhook_cancel_prefix": cancelPrefix,
		"riverhook_down": string(webhook.KindDown), "riverhook_erased_cancel": cancelPrefix + ErrErased.Error()}
}

// ended are the River states of a delivery that has ended.
const ended = `state IN ('completed', 'discarded', 'cancelled')`

// eraseConnections bounds the connections whose Recover locks a
// transaction of erase holds at once. Advisory locks share PostgreSQL's
// lock table (max_locks_per_transaction for each of max_connections: 6,400
// by default) with every lock of every session: one for each connection of
// a retention sweep's batch could exhaust it, and the server would then
// refuse locks to everyone (TestEraseBodies_HoldsTheLocksOfAFewConnectionsAtOnce).
const eraseConnections = 64

// erase erases the ended jobs of deliveryIDs, and returns how many held
// something to erase (TestRiver/Erase). It does so connection by
// connection, in transactions each holding the Recover lock of up to
// eraseConnections of them, as eraseSubject does for a subject's
// (TestEraseBodies_AtOnceWithARecover); on an error, n counts what the
// transactions before it erased. In the caller's transaction, every lock is
// held until it ends.
func erase(ctx context.Context, db DB, schema string, deliveryIDs []string) (n int, err error) {
	table := jobTable(schema)
	// In a transaction of its own too: in the caller's, a savepoint, which
	// an error rolls back rather than abort the caller's transaction
	// (TestEraseBodies_AnErrorLeavesTheCallersTransactionUsable).
	type pair struct{ conn, delivery string }
	var pairs []pair
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT DISTINCT job.args->>'connection_id', d.id FROM unnest($1::text[]) AS d(id)
			JOIN `+table+` AS job ON job.args @> jsonb_build_object('delivery_id', d.id) WHERE job.kind = $2 ORDER BY 1, 2`, deliveryIDs, Kind)
		if err != nil {
			return err
		}
		pairs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (p pair, err error) {
			return p, row.Scan(&p.conn, &p.delivery)
		})
		return err
	})
	if err != nil {
		return 0, err
	}
	// Each group's jobs found by their connection and delivery, on River's
	// GIN index on args, as the pairs were.
	sql := `WITH erased AS (UPDATE ` + table + ` SET ` + eraseSet + ` WHERE id IN (SELECT job.id
			FROM unnest(@riverhook_connections::text[], @riverhook_deliveries::text[]) AS p(conn, delivery)
			JOIN ` + table + ` AS job ON job.args @> jsonb_build_object('connection_id', p.conn, 'delivery_id', p.delivery)
			WHERE job.kind = @riverhook_kind)
		AND ` + ended + ` AND ` + notErased + ` RETURNING 1) SELECT count(*) FROM erased`
	args := eraseArgs()
	for len(pairs) > 0 {
		var conns, cs, ds []string // the group's connections, and its pairs
		for len(pairs) > 0 && (len(conns) < eraseConnections || pairs[0].conn == conns[len(conns)-1]) {
			if len(conns) == 0 || pairs[0].conn != conns[len(conns)-1] {
				conns = append(conns, pairs[0].conn)
			}
			cs, ds = append(cs, pairs[0].conn), append(ds, pairs[0].delivery)
			pairs = pairs[1:]
		}
		args["riverhook_connections"], args["riverhook_deliveries"] = cs, ds
		var m int
		err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			if err := lockConnections(ctx, tx, schema, `SELECT unnest($2::text[]) AS id`, conns); err != nil {
				return err
			}
			return tx.QueryRow(ctx, sql, args).Scan(&m)
		})
		if err != nil {
			return n, err
		}
		n += m
	}
	return n, nil
}

// subjectWhere finds a subject's jobs by their args, served by River's GIN
// index on args.
const subjectWhere = `args @> jsonb_build_object('data_subject', @riverhook_subject::text)`

// cancelling is a running job that a cancel in River has reached: its run
// is being cancelled, and River cancels the job when it ends, whatever the
// run returns but a success.
const cancelling = `(state = 'running' AND metadata ? 'cancel_attempted_at')`

// toCancel lists, oldest first, up to limit jobs of subject that have not
// ended and that no cancel has reached (TestRiver/Erase).
func toCancel(ctx context.Context, db DB, schema, subject string, limit int) ([]int64, error) {
	sql := `SELECT id FROM ` + jobTable(schema) + ` WHERE kind = @riverhook_kind AND ` + subjectWhere + ` AND ` + underWay + `
		AND NOT ` + cancelling + ` ORDER BY id LIMIT @riverhook_limit`
	rows, err := db.Query(ctx, sql, pgx.NamedArgs{"riverhook_kind": Kind, "riverhook_subject": subject, "riverhook_limit": limit})
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// eraseSubject erases the jobs of subject that have ended or are being
// cancelled, and returns how many held something to erase, and how many of
// the subject's jobs have not ended (TestRiver/Erase). It does so in a
// transaction holding the Recover lock of each connection of the subject's
// jobs (lockConnection's), so that no Resend or Recover decides meanwhile:
// one that decided before commits first, and the erasure, whose statement
// begins after, erases the job it marked and counts its resend under way;
// one after finds the job erased (TestEraseSubject_AResendCommittedDuringTheErasure).
func eraseSubject(ctx context.Context, db DB, schema, subject string) (erased, left int, err error) {
	table := jobTable(schema)
	conns := `SELECT DISTINCT args->>'connection_id' AS id FROM ` + table + ` WHERE kind = $2
		AND args @> jsonb_build_object('data_subject', $3::text)`
	sql := `WITH erased AS (UPDATE ` + table + ` SET ` + eraseSet + `
		WHERE kind = @riverhook_kind AND (` + ended + ` OR ` + cancelling + `) AND ` + subjectWhere + `
		AND ` + notErased + ` RETURNING 1)
		SELECT (SELECT count(*) FROM erased), (SELECT count(*) FROM ` + table + `
			WHERE kind = @riverhook_kind AND ` + subjectWhere + ` AND ` + underWay + `)`
	// The rows to erase are locked first, in a statement of their own: a
	// row that a writer without riverhook's locks (River UI's Retry) made
	// under way meanwhile is waited for, and left unlocked once it is no
	// longer ended; the UPDATE and its count, whose snapshot is taken
	// after, then see it under way, where one statement counted it from
	// the snapshot before its wait (TestEraseSubject_ARetryCommittedDuringTheErasure).
	// The rows locked stay as they are until the erasure commits.
	lock := `SELECT 1 FROM ` + table + ` WHERE kind = @riverhook_kind AND (` + ended + ` OR ` + cancelling + `) AND ` + subjectWhere + `
		AND ` + notErased + ` ORDER BY id FOR UPDATE`
	args := eraseArgs()
	args["riverhook_subject"] = subject
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := lockConnections(ctx, tx, schema, conns, Kind, subject); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, lock, args); err != nil {
			return err
		}
		return tx.QueryRow(ctx, sql, args).Scan(&erased, &left)
	})
	return erased, left, err
}

// writeOutput writes v as the output of the running job id (River's
// metadata "output", which river.RecordOutput writes as the run ends and
// JobRow.Output reads), in tx: committed with what it counts, before the
// run ends.
func writeOutput(ctx context.Context, tx pgx.Tx, schema string, id int64, v any) error {
	out, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `UPDATE `+jobTable(schema)+` SET metadata = jsonb_set(metadata, '{`+rivertype.MetadataKeyOutput+`}', $2::jsonb)
		WHERE id = $1 AND state = 'running'`, id, string(out))
	return err
}

// laterParams lists the newest job of the delivery of args later than job
// jobID, in any state: the job a resend of the delivery resends, if any
// (TestRiver/ResendAndRecoverListings).
func laterParams(jobID int64, args Args) *river.JobListParams {
	return river.NewJobListParams().Kinds(Kind).States(rivertype.JobStates()...).
		Where(connectionWhere+` AND args->>'delivery_id' = @riverhook_delivery_id AND id > @riverhook_job`,
			river.NamedArgs{"riverhook_connection_id": args.ConnectionID, "riverhook_delivery_id": args.DeliveryID, "riverhook_job": jobID}).
		OrderBy(river.JobListOrderByID, river.SortOrderDesc).First(1)
}

// gaveUpParams lists the first limit given-up jobs of connectionID, oldest
// first, discarded at or after since, that still hold a body, were never
// resent (no mark of markResent) and have no later job of their delivery
// (a resend, or the delivery inserted again). River's JobList names the
// job table river_job, which the subquery reads
// (TestRiver/ResendAndRecoverListings).
func gaveUpParams(schema, connectionID string, since time.Time, limit int) *river.JobListParams {
	laterJob := `SELECT 1 FROM ` + jobTable(schema) + ` AS later WHERE later.kind = river_job.kind AND later.id > river_job.id
		AND ` + connectionWhere + ` AND later.args->>'delivery_id' = river_job.args->>'delivery_id'`
	return river.NewJobListParams().Kinds(Kind).States(rivertype.JobStateDiscarded).
		Where(connectionWhere+` AND finalized_at >= @riverhook_since AND args ? 'payload_base64' AND NOT args ? 'resent_as'
			AND NOT EXISTS (`+laterJob+`)`,
			river.NamedArgs{"riverhook_connection_id": connectionID, "riverhook_since": since.UTC()}).
		OrderBy(river.JobListOrderByID, river.SortOrderAsc).First(limit)
}

// stored is what a delivery's job row holds in its args: the [Args]
// riverhook inserted, and ResentAs, the mark markResent writes once the job
// is resent.
type stored struct {
	Args
	ResentAs int64 `json:"resent_as,omitempty"`
}

// markResent writes in the args of each job jobs[i] that it was resent as
// job as[i] ("resent_as"), keeping the rest of its args. River never
// rewrites a job's args, so the mark lives as long as the row that could
// be resent again; riverhook's erasures keep it (TestRiver/MarkResent).
func markResent(ctx context.Context, db DB, schema string, jobs, as []int64) error {
	_, err := db.Exec(ctx, `UPDATE `+jobTable(schema)+` AS job SET args = job.args || jsonb_build_object('resent_as', marks.resent_as)
		FROM unnest($1::bigint[], $2::bigint[]) AS marks(id, resent_as) WHERE job.id = marks.id AND job.kind = $3`, jobs, as, Kind)
	return err
}

// riverQuery returns the query of the River client working the run whose
// context is ctx, on River's database, and River's schema: the wake and the
// due run there, with or without a fleet's Places. ok is false outside a
// River client's run (a Worker's Work called directly).
func riverQuery(ctx context.Context) (query func(ctx context.Context, sql string, args ...any) interface{ Scan(...any) error }, schema string, ok bool) {
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil || !client.Driver().PoolIsSet() {
		return nil, "", false // rivertest's driver may have no pool
	}
	exec := client.Driver().GetExecutor()
	return func(ctx context.Context, sql string, args ...any) interface{ Scan(...any) error } {
		return exec.QueryRow(ctx, sql, args...)
	}, client.Schema(), true
}

// snoozedWhere selects the delivery jobs of a connection that are waiting
// for their connection (snoozed by riverhook), not for a retry of their
// policy's: River keeps a snoozed job scheduled, or available with a
// scheduled_at to come when the snooze is shorter than its scheduler's
// interval, and a retry alike. A retry's last error is stamped with its
// run's start (attempted_at); a snooze adds no error, so a snoozed job's
// last error, if any, is older than its run (TestRiver/Wake). The error's
// time is River's clock (the database's as the process reads it, with
// Register; the process's own without), attempted_at the database's: an
// error up to a second older than attempted_at is still a retry's
// (TestWake_LeavesARetryOfAProcessWhoseClockIsBehind), and a retry waits at
// least its attempt's time before its next run. A job that never ran
// (attempted_at NULL) waits for the time its inserter chose.
const snoozedWhere = `kind = $1 AND ` + connectionWhere + ` AND state IN ('scheduled', 'available')
	AND scheduled_at > clock_timestamp() AND attempted_at IS NOT NULL
	AND NOT coalesce((errors[array_length(errors, 1)]->>'at')::timestamptz >= attempted_at - interval '1 second', false)`

// maxWoken bounds the jobs one wake moves: a backlog beyond it comes at
// its own slots, after the ones moved.
const maxWoken = 50_000

// wakeSQL moves a connection's snoozed jobs forward to run from now,
// every apart in the order they were due, never later than each was due,
// and returns how many wait. A moved job is made available at its new
// time, as River does a short snooze, so that it runs on time.
func wakeSQL(schema string) string {
	table := jobTable(schema)
	turn := `clock_timestamp() + waiting.k * $3 * interval '1 microsecond'`
	return `WITH waiting AS (
			SELECT id, scheduled_at, row_number() OVER (ORDER BY scheduled_at, id) - 1 AS k FROM (
				SELECT id, scheduled_at FROM ` + table + ` WHERE ` + strings.ReplaceAll(snoozedWhere, "@riverhook_connection_id", "$2") + `
				ORDER BY scheduled_at, id LIMIT $4 FOR UPDATE SKIP LOCKED) AS w),
		woken AS (
			UPDATE ` + table + ` AS j SET state = 'available', scheduled_at = ` + turn + `
			FROM waiting WHERE j.id = waiting.id AND waiting.scheduled_at > ` + turn + `
			RETURNING 1)
		SELECT (SELECT count(*) FROM waiting), (SELECT count(*) FROM woken)`
}

// wake runs wakeSQL for connectionID's deliveries through query, and
// returns how many wait.
func wake(ctx context.Context, query func(ctx context.Context, sql string, args ...any) interface{ Scan(...any) error }, schema, connectionID string, every time.Duration) (int, error) {
	var waiting, woken int
	err := query(ctx, wakeSQL(schema), Kind, connectionID, every.Microseconds(), maxWoken).Scan(&waiting, &woken)
	if err != nil {
		return 0, fmt.Errorf("riverhook: moving the deliveries waiting for connection %q: %w", connectionID, err)
	}
	return waiting, nil
}

// maxDue bounds the jobs one due moves.
const maxDue = 10_000

// dueSQL makes the delivery jobs whose snooze or retry ends within ahead
// (scheduled, retryable) available at their scheduled_at, which River's
// fetch waits for (TestRiver/SnoozeWakesOnTimeUpToTheSchedulerInterval):
// each then runs on time, rather than at River's scheduler's next pass, up
// to its interval late and many at once. The move is the one River's
// scheduler makes, between two of the job's unique states (TestRiver/Due):
// a job whose unique key its state does not hold is left to River's
// scheduler (TestRiver/DueLeavesAUniqueConflictToRiver). Its time is the
// statement's, which River's index on (state, queue, priority,
// scheduled_at) can bound, so that the backlog snoozed for later is never
// read (TestDue_ReadsTheDeliveriesDueNotTheBacklog).
func dueSQL(schema string) string {
	table := jobTable(schema)
	return `WITH due AS (
			SELECT id FROM ` + table + ` WHERE state IN ('scheduled', 'retryable') AND kind = $1
			AND scheduled_at <= statement_timestamp() + $2 * interval '1 microsecond'
			AND (unique_key IS NULL OR unique_states IS NULL OR ` + qualifier(schema) + `river_job_state_in_bitmask(unique_states, state))
			ORDER BY scheduled_at LIMIT $3 FOR UPDATE SKIP LOCKED),
		moved AS (UPDATE ` + table + ` AS j SET state = 'available' FROM due WHERE j.id = due.id RETURNING 1)
		SELECT count(*), statement_timestamp(), clock_timestamp() FROM moved`
}

// due runs dueSQL through query, and returns how many deliveries it made
// ready, and when the statement began and ended by the database's clock
// (the Worker reads it there: see clock.read).
func due(ctx context.Context, query func(ctx context.Context, sql string, args ...any) interface{ Scan(...any) error }, schema string, ahead time.Duration) (n int, start, end time.Time, err error) {
	if err := query(ctx, dueSQL(schema), Kind, ahead.Microseconds(), maxDue).Scan(&n, &start, &end); err != nil {
		return 0, time.Time{}, time.Time{}, fmt.Errorf("riverhook: making the deliveries due ready: %w", err)
	}
	return n, start, end, nil
}

// queryRower runs a query of one row: a DB, or a pgx.Tx.
type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// kept returns how many of connectionID's deliveries have not ended, but
// the job except, and when the oldest was inserted: what waits for a
// disabled connection, and what its Enable sends (TestRiver/Kept).
func kept(ctx context.Context, db queryRower, schema, connectionID string, except int64) (n int, since time.Time, err error) {
	var oldest *time.Time
	err = db.QueryRow(ctx, `SELECT count(*), min(created_at) FROM `+jobTable(schema)+` WHERE kind = @riverhook_kind AND `+connectionWhere+`
		AND `+underWay+` AND id <> @riverhook_except`,
		pgx.NamedArgs{"riverhook_kind": Kind, "riverhook_connection_id": connectionID, "riverhook_except": except}).Scan(&n, &oldest)
	if oldest != nil {
		since = *oldest
	}
	return n, since, err
}

// succeededSince reports whether a delivery of connectionID completed
// after since, and no later than until: an answer that broke a failing
// span, whichever process's cache missed it (TestRiver/SucceededSince).
func succeededSince(ctx context.Context, db queryRower, schema, connectionID string, since, until time.Time) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+jobTable(schema)+` WHERE kind = @riverhook_kind AND `+connectionWhere+`
		AND state = 'completed' AND finalized_at > @riverhook_since AND finalized_at <= @riverhook_until)`,
		pgx.NamedArgs{"riverhook_kind": Kind, "riverhook_connection_id": connectionID, "riverhook_since": since,
			"riverhook_until": until}).Scan(&ok)
	return ok, err
}

// moveKeptSQL makes a connection's deliveries that wait more than far
// from now (snoozed, retrying) ready from now, oldest first, a microsecond
// apart, as River does a short snooze (available at a time to come): the
// Worker's admission then spaces them at the connection's pace. A job
// running is left alone (TestRiver/MoveKept).
func moveKeptSQL(schema string) string {
	table := jobTable(schema)
	return `WITH waiting AS (
			SELECT id, row_number() OVER (ORDER BY id) - 1 AS k FROM (
				SELECT id FROM ` + table + ` WHERE kind = @riverhook_kind AND ` + connectionWhere + `
				AND state IN ('scheduled', 'available', 'retryable')
				AND scheduled_at > clock_timestamp() + @riverhook_far * interval '1 microsecond'
				ORDER BY id FOR UPDATE SKIP LOCKED) AS w),
		moved AS (
			UPDATE ` + table + ` AS j SET state = 'available', scheduled_at = clock_timestamp() + waiting.k * interval '1 microsecond'
			FROM waiting WHERE j.id = waiting.id RETURNING 1)
		SELECT count(*) FROM moved`
}

// moveKept runs moveKeptSQL for connectionID's deliveries, and returns how
// many it moved.
func moveKept(ctx context.Context, db queryRower, schema, connectionID string, far time.Duration) (int, error) {
	var n int
	err := db.QueryRow(ctx, moveKeptSQL(schema), pgx.NamedArgs{"riverhook_kind": Kind, "riverhook_connection_id": connectionID,
		"riverhook_far": far.Microseconds()}).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("riverhook: moving the deliveries kept for connection %q forward: %w", connectionID, err)
	}
	return n, nil
}

// riverClient returns the River client of the run whose context is ctx,
// and a beginner of transactions on its database, where the state of a
// connection changes with its notice. ok is false outside a River client's
// run, or for a client without a pool (rivertest's).
func riverClient(ctx context.Context) (*river.Client[pgx.Tx], beginner, bool) {
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil || !client.Driver().PoolIsSet() {
		return nil, nil, false
	}
	exec := client.Driver().GetExecutor()
	return client, beginFunc(func(ctx context.Context) (pgx.Tx, error) {
		etx, err := exec.Begin(ctx)
		if err != nil {
			return nil, err
		}
		return client.Driver().UnwrapTx(etx), nil
	}), true
}

// beginFunc is a beginner.
type beginFunc func(ctx context.Context) (pgx.Tx, error)

func (f beginFunc) Begin(ctx context.Context) (pgx.Tx, error) { return f(ctx) }
