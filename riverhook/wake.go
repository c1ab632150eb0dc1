package riverhook

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/signedhook/webhook"
)

// This file holds what wakes a connection's waiting deliveries with
// Places: the ones due made ready on time (Places.Due), a backlog that
// waited for a down endpoint moved to the connection's pace once it
// answers (Places.Wake), and slots handed too slow moved to its pace.

// due makes, with Places, the deliveries due within the next two seconds
// ready at their time (Places.Due), at most once a second per process: a
// snoozed job then runs at its slot, not at River's next scheduler pass
// (every 5 s, and all that came due since at once). It runs in Work, so
// while the process works deliveries; when none runs, River's scheduler
// still makes them available.
func (w *Worker) due(ctx context.Context) {
	if w.places == nil {
		return
	}
	w.mu.Lock()
	now := w.now()
	if now.Sub(w.dueAt) < time.Second {
		w.mu.Unlock()
		return
	}
	w.dueAt = now
	var again []string
	for id, at := range w.woken {
		if len(again) == maxRewakes {
			break // the rest at the next due, a second on
		}
		if now.Sub(at) >= time.Second {
			again = append(again, id)
			delete(w.woken, id)
		}
	}
	w.mu.Unlock()
	if _, err := w.places.Due(ctx, 2*time.Second); err != nil {
		w.logger.LogAttrs(ctx, slog.LevelWarn, "riverhook: cannot make the deliveries due ready; River's scheduler does",
			slog.String("error", err.Error()))
	}
	// A delivery whose run found the endpoint down just before it was
	// woken was still running then, and its snooze to a down slot landed
	// after the wake: a second one, a second later, brings it along.
	for _, id := range again {
		every, err := w.rateEvery(ctx, id)
		if err != nil {
			continue
		}
		w.mu.Lock()
		spacing := w.spacing(w.pacer(id), every)
		w.mu.Unlock()
		if _, err := w.places.Wake(ctx, id, spacing); err != nil {
			w.logger.LogAttrs(ctx, slog.LevelWarn, "riverhook: cannot wake the deliveries that waited for the endpoint; they wake at their slots",
				slog.String("connection_id", id), slog.String("error", err.Error()))
		}
	}
}

// maxRewakes bounds the second wakes one due makes (one statement each),
// which delay the run it is made in: a fleet starting up with many
// connections' bursts respaced at once spreads them over the next dues.
const maxRewakes = 16

// answered reports whether a's endpoint answered: its deliveries waiting
// for it may go.
func answered(a webhook.Attempt) bool {
	return a.OK() || a.Kind == webhook.KindStatus || a.Kind == webhook.KindRedirect
}

// respace moves, with Places, the jobs waiting for connection id's slots
// to a shorter spacing once its attempts show it takes deliveries faster
// than the slots handed assumed (by a quarter or more): a burst slotted
// before any attempt had ended was spaced by SnoozeFor over the bound, and
// would wake at that pace, under what the endpoint takes. At most once per
// rewakeFor.
func (w *Worker) respace(ctx context.Context, id string, every time.Duration) {
	if w.places == nil {
		return
	}
	w.mu.Lock()
	p, now := w.pacers[id], w.now()
	if p == nil || p.handed == 0 {
		w.mu.Unlock()
		return
	}
	spacing := w.spacing(p, every)
	if spacing*4 > p.handed*3 || now.Sub(p.respaced) < rewakeFor {
		w.mu.Unlock()
		return
	}
	p.handed, p.respaced = spacing, now
	// A job slotted while this runs (its run not yet over, its snooze not
	// yet stored) took the old chain's end and is not moved: a second wake,
	// a second later (Worker.due), brings it along.
	w.woken[id] = now
	w.mu.Unlock()
	n, err := w.places.Wake(context.WithoutCancel(ctx), id, spacing)
	if err != nil {
		w.logger.LogAttrs(ctx, slog.LevelWarn, "riverhook: cannot move the deliveries waiting for the connection to its pace; they wake at their slots",
			slog.String("connection_id", id), slog.String("error", err.Error()))
		return
	}
	w.logger.LogAttrs(ctx, slog.LevelDebug, "riverhook: the connection takes deliveries faster than its slots assumed; its waiting deliveries moved to its pace",
		slog.String("connection_id", id), slog.Int("deliveries", n), slog.Duration("every", spacing))
}

// How long after a backlog's wake an answer wakes its stragglers, and at
// most how often (see Worker.wakeBacklog).
const (
	rewakeFor   = 5 * time.Second
	rewakeEvery = 250 * time.Millisecond
)

// wakeBacklog moves, with Places, the deliveries to connection id that
// waited for its endpoint to run from now at the connection's pace
// (spacing), once its endpoint answers again: without it, each would wake
// at its own slot, one a SnoozeFor over the bound. It runs when this
// process had handed out down slots beyond the next one; it is one UPDATE,
// once per outage, whichever process sees the answer (another's runs find
// their slots moved and reset theirs: see pacer.busySlot).
func (w *Worker) wakeBacklog(ctx context.Context, id string, every time.Duration) {
	if w.places == nil {
		return
	}
	w.mu.Lock()
	p, now := w.pacers[id], w.now()
	if p == nil {
		w.mu.Unlock()
		return
	}
	spacing := w.spacing(p, every)
	backlog := p.downNext.After(now.Add(spacing))
	// For a few seconds after a wake, answers wake again (at most four a
	// second): a delivery whose run found the endpoint down just before
	// was still running then, and its snooze to a down slot landed after.
	stragglers := now.Sub(p.woke) < rewakeFor && now.Sub(p.wokeAgain) >= rewakeEvery
	if spacing <= 0 || !backlog && !stragglers { // no pace to wake them at: their slots spread them
		w.mu.Unlock()
		return
	}
	if backlog {
		p.reset(now)
		p.woke = now
		p.handed = spacing // the woken jobs' spacing, which respace corrects as attempts end
		w.woken[id] = now
	}
	p.wokeAgain = now
	w.mu.Unlock()
	wctx, cancel := detached(ctx)
	defer cancel()
	n, err := w.places.Wake(wctx, id, wakeSpacing(spacing, every))
	if err != nil {
		w.logger.LogAttrs(ctx, slog.LevelWarn, "riverhook: cannot wake the deliveries that waited for the endpoint; they wake at their slots",
			slog.String("connection_id", id), slog.String("error", err.Error()))
		return
	}
	w.logger.LogAttrs(ctx, slog.LevelInfo, "riverhook: the endpoint answers again; the deliveries that waited for it wake at its pace",
		slog.String("connection_id", id), slog.Int("deliveries", n), slog.Duration("every", spacing))
}

// wakeSpacing is the spacing at which a backlog wakes: a tenth under the
// connection's, so that a run holds on for each place as it frees (and is
// handed it at once) rather than the place waiting for the next run, as
// River's fetches bring the woken jobs in batches; never under its time
// between starts (RateLimit).
func wakeSpacing(spacing, every time.Duration) time.Duration {
	return max(spacing-spacing/10, every)
}

// The statements behind Places.Wake and Places.Due.

// maxWoken bounds the jobs one wake moves: a backlog beyond it wakes on its
// own slots, after the ones moved.
const maxWoken = 50_000

// wake moves connectionID's snoozed jobs forward to run from now, every
// apart in the order they were due, never later than due, and returns how
// many it moved. A snoozed job is scheduled, or available with a
// scheduled_at to come, which River's fetch leaves until then, and has run:
// River's fetch wrote its attempted_at, which the snooze keeps
// (TestRiver/SnoozeWakesOnTimeUpToTheSchedulerInterval). A job that never
// ran waits for the time its inserter chose (InsertOpts.ScheduledAt), which
// a wake never cuts short. A moved one is
// made available at its new time, as River does a short snooze, so that it
// runs on time rather than up to River's scheduler interval late. A job
// waiting for its policy's retry (retryable) keeps its time, also once due
// made it available ahead of it (retryAtKey) (TestRiver/Wake).
func wake(ctx context.Context, db DB, schema, connectionID string, every time.Duration, end *time.Time) (int, error) {
	table := jobTable(schema)
	turn := `clock_timestamp() + waiting.k * @riverhook_every * interval '1 microsecond'`
	sql := `WITH waiting AS (
			SELECT id, scheduled_at, row_number() OVER (ORDER BY scheduled_at, id) - 1 AS k FROM (
				SELECT id, scheduled_at FROM ` + table + ` WHERE kind = @riverhook_kind AND ` + connectionWhere + `
				AND (state = 'scheduled' OR (state = 'available' AND scheduled_at > clock_timestamp()
					AND (metadata->>'` + retryAtKey + `')::timestamptz IS DISTINCT FROM scheduled_at)) AND attempted_at IS NOT NULL
				ORDER BY scheduled_at, id LIMIT @riverhook_limit FOR UPDATE SKIP LOCKED) AS w),
		woken AS (
			UPDATE ` + table + ` AS j SET state = 'available', scheduled_at = ` + turn + `
			FROM waiting WHERE j.id = waiting.id AND waiting.scheduled_at > ` + turn + `
			RETURNING 1)
		SELECT (SELECT count(*) FROM woken), (SELECT max(least(waiting.scheduled_at, ` + turn + `)) FROM waiting)`
	var n int
	var last *time.Time
	err := db.QueryRow(ctx, sql, pgx.NamedArgs{"riverhook_kind": Kind, "riverhook_connection_id": connectionID,
		"riverhook_every": every.Microseconds(), "riverhook_limit": maxWoken}).Scan(&n, &last)
	if last != nil {
		*end = *last
	}
	return n, err
}

// retryAtKey is the key of River's job metadata under which due notes the
// retry time of a job it made available early (a retryable job is moved as
// a snoozed one is): wake leaves a job whose time is still that one, so
// that no retry runs before its policy's wait. A snooze after the retry
// changes the job's time, and the note no longer applies.
const retryAtKey = "riverhook_retry_at"

// maxDue bounds the jobs one due moves.
const maxDue = 10_000

// due makes the delivery jobs whose snooze or retry ends within ahead
// (scheduled, retryable) available at their scheduled_at, which River's
// fetch waits for (TestRiver/SnoozeWakesOnTimeUpToTheSchedulerInterval):
// each then runs on time, rather than at River's scheduler's next pass,
// up to its interval late and many at once. The move is the one River's
// scheduler makes, between two of the job's unique states (TestRiver/Due):
// a job whose unique key its state does not hold (the caller's UniqueOpts
// leave out retryable) is left to River's scheduler, which discards it if
// a copy holds the key meanwhile (TestRiver/DueLeavesAUniqueConflictToRiver).
// It runs once a second in every process, so its cost must follow the
// jobs due, not the backlog snoozed for later: its time is the
// statement's (stable, where clock_timestamp() is volatile), which River's
// index on (state, queue, priority, scheduled_at) can bound, so that the
// backlog's rows are skipped in the index, never read from the table
// (TestDue_ReadsTheDeliveriesDueNotTheBacklog).
func due(ctx context.Context, db DB, schema string, ahead time.Duration) (int, error) {
	var n int
	err := db.QueryRow(ctx, dueSQL(schema), Kind, ahead.Microseconds(), maxDue).Scan(&n)
	return n, err
}

// dueSQL is due's statement on schema's job table.
func dueSQL(schema string) string {
	table := jobTable(schema)
	return `WITH due AS (
			SELECT id, state FROM ` + table + ` WHERE state IN ('scheduled', 'retryable') AND kind = $1
			AND scheduled_at <= statement_timestamp() + $2 * interval '1 microsecond'
			AND (unique_key IS NULL OR unique_states IS NULL OR ` + qualifier(schema) + `river_job_state_in_bitmask(unique_states, state))
			ORDER BY scheduled_at LIMIT $3 FOR UPDATE SKIP LOCKED),
		moved AS (UPDATE ` + table + ` AS j SET state = 'available',
			metadata = CASE WHEN due.state = 'retryable' THEN jsonb_set(j.metadata, '{` + retryAtKey + `}', to_jsonb(j.scheduled_at)) ELSE j.metadata END
			FROM due WHERE j.id = due.id RETURNING 1)
		SELECT count(*) FROM moved`
}
