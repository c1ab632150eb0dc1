package riverhook

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"

	"github.com/signedhook/webhook"
)

// This file holds a connection's life: its state (active, failing,
// disabled), the policy the Worker decides it by from each attempt, the
// statements on riverhook_connection_state, Enable and Disable.

// State is where a connection is in its life.
type State string

// The states of a connection.
const (
	// StateActive: its deliveries go. A connection never seen failing is
	// active.
	StateActive State = "active"
	// StateFailing: its attempts fail, with no success since
	// [ConnectionState].FailingSince; it is disabled at DisableAt if they go
	// on failing. Its deliveries still go.
	StateFailing State = "failing"
	// StateDisabled: nothing is sent to it; its deliveries are kept until
	// [Enable], or [LifePolicy].KeepFor.
	StateDisabled State = "disabled"
)

// DisableReason says why a connection was disabled: a word a program can
// switch on.
type DisableReason string

// The reasons a connection is disabled.
const (
	// ReasonFailing: its attempts failed for [LifePolicy].DisableAfter with
	// no success between.
	ReasonFailing DisableReason = "failing"
	// ReasonGone: its endpoint answered 410 Gone.
	ReasonGone DisableReason = "gone"
	// ReasonService: the service disabled it ([Disable]).
	ReasonService DisableReason = "service"
)

// ConnectionState is a connection's state, as the fleet shares it in the
// table riverhook_connection_state. Its times are the database's clock. A
// time that does not apply is zero.
type ConnectionState struct {
	ConnectionID string        `json:"connection_id"`
	State        State         `json:"state"`
	Reason       DisableReason `json:"reason,omitempty"` // disabled: why

	FailingSince time.Time `json:"failing_since,omitzero"` // failing, or disabled after failing: the first failure with no success since
	LastFailure  time.Time `json:"last_failure,omitzero"`  // the latest failure, written at most a minute apart (see LifePolicy.Within)
	DisableAt    time.Time `json:"disable_at,omitzero"`    // failing: when it is disabled if its attempts go on failing
	WarnedAt     time.Time `json:"warned_at,omitzero"`     // failing: when the warning was given ([ChangeWarning])
	DisabledAt   time.Time `json:"disabled_at,omitzero"`   // disabled: since when
	EnabledAt    time.Time `json:"enabled_at,omitzero"`    // when Enable last made it active
	Changed      time.Time `json:"changed,omitzero"`       // the last change of state
}

// disabled returns s disabled at now for reason.
func (s ConnectionState) disabled(reason DisableReason, now time.Time) ConnectionState {
	s.State, s.Reason, s.DisabledAt, s.DisableAt, s.Changed = StateDisabled, reason, now, time.Time{}, now
	return s
}

// LifePolicy says when the Worker disables a connection whose attempts
// fail, when it warns first, and how long a disabled connection keeps its
// deliveries. Each zero field means its default; a negative one is
// refused. The package doc's numbers list gives the defaults' reasons.
type LifePolicy struct {
	// DisableAfter: failures with no success between that span at least
	// this long disable the connection (reason [ReasonFailing]). A single
	// failed attempt never does. Zero means [DefaultDisableAfter], 12
	// hours.
	DisableAfter time.Duration

	// Within: a failure this long or more after the one before starts a new
	// span, as if the connection had been active: failures days apart are
	// not one outage. Zero means [DefaultFailingWithin], three days.
	Within time.Duration

	// WarnBefore: the warning ([ChangeWarning]) is given at the first
	// failure this long or less before DisableAt. With the defaults (a day
	// before, 12 hours' span) it comes with the first failure. Zero means
	// [DefaultWarnBefore], a day.
	WarnBefore time.Duration

	// KeepFor: how long a disabled connection keeps its deliveries,
	// counted from when it was disabled. Past it, a kept delivery is given
	// up when it next runs, saying so. Zero means [DefaultKeepFor], 30
	// days.
	KeepFor time.Duration
}

// The defaults of [LifePolicy].
const (
	DefaultDisableAfter  = 12 * time.Hour
	DefaultFailingWithin = 72 * time.Hour
	DefaultWarnBefore    = 24 * time.Hour
	DefaultKeepFor       = 30 * 24 * time.Hour
)

// withDefaults returns p with its zero fields set to their defaults (nil:
// every default), or an error for a negative field.
func (p *LifePolicy) withDefaults() (LifePolicy, error) {
	var q LifePolicy
	if p != nil {
		q = *p
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"DisableAfter", q.DisableAfter}, {"Within", q.Within}, {"WarnBefore", q.WarnBefore}, {"KeepFor", q.KeepFor}} {
		if f.d < 0 {
			return q, fmt.Errorf("riverhook: WorkerOptions.Life.%s is %v: it must not be negative (zero means its default)", f.name, f.d)
		}
	}
	q.DisableAfter = cmp.Or(q.DisableAfter, DefaultDisableAfter)
	q.Within = cmp.Or(q.Within, DefaultFailingWithin)
	q.WarnBefore = cmp.Or(q.WarnBefore, DefaultWarnBefore)
	q.KeepFor = cmp.Or(q.KeepFor, DefaultKeepFor)
	return q, nil
}

// outcome is what an attempt says of a connection's life.
type outcome int

const (
	outcomeNone    outcome = iota // nothing: not sent, cut, refused before sending
	outcomeSuccess                // a 2xx answer
	outcomeFailure                // any other outcome of an attempt sent, a probe of a down endpoint's included
	outcomeGone                   // 410 Gone
)

// outcomeOf returns what attempt a says of its connection's life. A probe
// that found its endpoint still down is a failure: it was sent. An attempt
// the Sender held back as its endpoint is down (KindDown) says nothing:
// the probes that do go carry the outage.
func outcomeOf(a webhook.Attempt) outcome {
	switch {
	case a.OK():
		return outcomeSuccess
	case a.Kind == webhook.KindStatus && a.StatusCode == http.StatusGone:
		return outcomeGone
	}
	switch a.Kind {
	case webhook.KindCanceled, webhook.KindInterrupted, webhook.KindDown, webhook.KindInvalid,
		webhook.KindBlocked, webhook.KindSkipped:
		return outcomeNone
	}
	return outcomeFailure
}

// lastFailureEvery bounds how often a failing connection's last failure
// is written: a span is hours and a window days, so a minute is precise
// enough, and a failing connection costs one write a minute, not one per
// attempt.
const lastFailureEvery = time.Minute

// writeFailureEvery is how often p's last failure is written: a minute
// apart, or a sixtieth of Within when that is shorter. The written last
// failure lags the real one by up to this much, and a failure Within after
// it starts a new span: with a Within of a minute or less, failures
// seconds apart would start one at every Within, never disabling.
func (p LifePolicy) writeFailureEvery() time.Duration { return min(lastFailureEvery, p.Within/60) }

// next returns the state s moves to on outcome o at now, and the changes
// the service is told of, in order.
func (p LifePolicy) next(s ConnectionState, o outcome, now time.Time) (ConnectionState, []Change) {
	switch {
	case s.State == StateDisabled || o == outcomeNone:
		return s, nil
	case o == outcomeSuccess:
		if s.State != StateFailing {
			return s, nil
		}
		return ConnectionState{ConnectionID: s.ConnectionID, State: StateActive, EnabledAt: s.EnabledAt, Changed: now}, []Change{ChangeActive}
	case o == outcomeGone:
		return s.disabled(ReasonGone, now), []Change{ChangeDisabled}
	}
	var changes []Change
	if s.State != StateFailing || now.Sub(s.LastFailure) >= p.Within {
		s = ConnectionState{ConnectionID: s.ConnectionID, State: StateFailing, FailingSince: now, DisableAt: now.Add(p.DisableAfter),
			EnabledAt: s.EnabledAt, Changed: now}
		changes = append(changes, ChangeFailing)
	}
	s.LastFailure = later(s.LastFailure, now)
	switch {
	case !now.Before(s.DisableAt):
		s = s.disabled(ReasonFailing, now)
		changes = append(changes, ChangeDisabled)
	case s.WarnedAt.IsZero() && !now.Before(s.DisableAt.Add(-p.WarnBefore)):
		s.WarnedAt, s.Changed = now, now
		changes = append(changes, ChangeWarning)
	}
	return s, changes
}

// worth reports whether outcome o at now moves s enough to be written: a
// change of state, or a last failure writeFailureEvery later.
func (p LifePolicy) worth(s ConnectionState, o outcome, now time.Time) bool {
	next, changes := p.next(s, o, now)
	if len(changes) > 0 {
		return true
	}
	moved := next.LastFailure.Sub(s.LastFailure) >= p.writeFailureEvery()
	next.LastFailure = s.LastFailure
	return moved || next != s
}

// ErrNoStateTable matches the error of a run, or of a call, that finds no
// riverhook_connection_state table: run [Migrate] (README, step 1). Every
// set-up needs riverhook's tables, one process alone too: a connection's
// state outlives the process.
var ErrNoStateTable = errors.New("riverhook: the table riverhook_connection_state is missing: run riverhook.Migrate beside River's migration")

// stateColumns are the columns read as a ConnectionState, by scanState.
const stateColumns = `coalesce(s.state, 'active'), coalesce(s.reason, ''), s.failing_since, s.last_failure, s.disable_at,
	s.warned_at, s.disabled_at, s.enabled_at, s.changed`

// stateTable is riverhook_connection_state in schema, qualified.
func stateTable(schema string) string { return qualifier(schema) + "riverhook_connection_state" }

// scanState scans a row of stateColumns, then dest.
func scanState(row pgx.Row, id string, dest ...any) (ConnectionState, error) {
	s := ConnectionState{ConnectionID: id}
	var times [7]*time.Time
	all := []any{&s.State, &s.Reason}
	for i := range times {
		all = append(all, &times[i])
	}
	if err := row.Scan(append(all, dest...)...); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
			return s, fmt.Errorf("%w (%w)", ErrNoStateTable, err)
		}
		return s, fmt.Errorf("riverhook: reading the state of connection %q: %w", id, err)
	}
	for i, t := range []*time.Time{&s.FailingSince, &s.LastFailure, &s.DisableAt, &s.WarnedAt, &s.DisabledAt, &s.EnabledAt, &s.Changed} {
		if times[i] != nil {
			*t = *times[i]
		}
	}
	return s, nil
}

// readState reads connection id's state through query: active when it has
// no row.
func readState(ctx context.Context, query func(ctx context.Context, sql string, args ...any) interface{ Scan(...any) error }, schema, id string) (ConnectionState, error) {
	return scanState(query(ctx, `SELECT `+stateColumns+` FROM (SELECT 1) AS one
		LEFT JOIN `+stateTable(schema)+` AS s ON s.connection_id = $1`, id), id)
}

// lockState locks connection id's state row in tx, made active when it has
// none, and returns it with the database's now.
func lockState(ctx context.Context, tx pgx.Tx, schema, id string) (s ConnectionState, now time.Time, err error) {
	if _, err := tx.Exec(ctx, `INSERT INTO `+stateTable(schema)+` (connection_id) VALUES ($1) ON CONFLICT DO NOTHING`, id); err != nil {
		_, err = scanState(errRow{err}, id)
		return s, now, err
	}
	s, err = scanState(tx.QueryRow(ctx, `SELECT `+stateColumns+`, clock_timestamp() FROM `+stateTable(schema)+` AS s
		WHERE s.connection_id = $1 FOR UPDATE`, id), id, &now)
	return s, now, err
}

// errRow is a row whose Scan returns err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// writeState writes s in tx.
func writeState(ctx context.Context, tx pgx.Tx, schema string, s ConnectionState) error {
	_, err := tx.Exec(ctx, `UPDATE `+stateTable(schema)+` SET state = $2, reason = $3, failing_since = $4, last_failure = $5,
		disable_at = $6, warned_at = $7, disabled_at = $8, enabled_at = $9, changed = coalesce($10, clock_timestamp())
		WHERE connection_id = $1`, s.ConnectionID, string(s.State), string(s.Reason), nullTime(s.FailingSince), nullTime(s.LastFailure),
		nullTime(s.DisableAt), nullTime(s.WarnedAt), nullTime(s.DisabledAt), nullTime(s.EnabledAt), nullTime(s.Changed))
	if err != nil {
		return fmt.Errorf("riverhook: writing the state of connection %q: %w", s.ConnectionID, err)
	}
	return nil
}

// beginner begins a transaction: a DB, or a River client's driver.
type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// decider returns the state cur moves to at now, and the changes told.
type decider func(cur ConnectionState, now time.Time) (ConnectionState, []Change)

// transitionTx moves connection id's state in tx, as decide says on the
// state as it is under its row's lock, and inserts the notice of each
// change with client in tx: a crash loses or doubles none. ending is the
// job whose run moves it and whose delivery ends with that run (a 2xx, a
// 410, its last try), which its notices do not count as waiting; 0 for
// none.
func transitionTx(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, id string, ending int64, decide decider) (ConnectionState, []Change, error) {
	schema := client.Schema()
	cur, now, err := lockState(ctx, tx, schema, id)
	if err != nil {
		return cur, nil, err
	}
	row := cur
	var broke bool
	if cur.State == StateFailing && (now.Sub(cur.FailingSince) < unseenSuccessFor || cur.LastFailure.Sub(cur.FailingSince) < unseenSuccessFor) {
		// A process whose view of the states predates the failing write
		// takes a success then for no change: the span broke all the same.
		// It is looked for while the span is young, and at the first write
		// after, whenever that comes: a failure is written a minute on at
		// the earliest (lastFailureEvery), so the span's first minute may
		// see no write but the one that began it.
		broke, err = succeededSince(ctx, tx, schema, id, cur.FailingSince, cur.FailingSince.Add(unseenSuccessFor))
		if err != nil {
			return cur, nil, fmt.Errorf("riverhook: reading the deliveries of connection %q completed since it began failing: %w", id, err)
		}
		if broke {
			cur = ConnectionState{ConnectionID: id, State: StateActive, EnabledAt: cur.EnabledAt, Changed: now}
		}
	}
	next, changes := decide(cur, now)
	if next == row {
		return row, nil, nil
	}
	states := make([]ConnectionState, len(changes)) // the state each change's notice tells
	for i := range states {
		states[i] = next
	}
	if broke && (len(changes) == 0 || next.State != StateActive) {
		// The span broke: told as a success would be, before what follows
		// (a failure's new span, a Disable), with the state it broke to.
		changes, states = append([]Change{ChangeActive}, changes...), append([]ConnectionState{cur}, states...)
	}
	if err := writeState(ctx, tx, schema, next); err != nil {
		return cur, nil, err
	}
	if len(changes) == 0 {
		return next, nil, nil
	}
	waiting, _, err := kept(ctx, tx, schema, id, ending)
	if err != nil {
		return cur, nil, fmt.Errorf("riverhook: counting the deliveries waiting for connection %q: %w", id, err)
	}
	params := make([]river.InsertManyParams, len(changes))
	for i, c := range changes {
		params[i] = river.InsertManyParams{Args: noticeOf(states[i], c, now, waiting)}
	}
	// An insert-only client on client's database: River refuses, from a
	// client with workers, a job of a kind it has none for, and a notice's
	// worker is the service's, in the clients that work NoticeQueue.
	inserter, err := river.NewClient(client.Driver(), &river.Config{Schema: schema, Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		_, err = inserter.InsertManyTx(ctx, tx, params)
	}
	if err == nil {
		notices := make([]any, len(params))
		for i, p := range params {
			notices[i] = p.Args
		}
		var body []byte
		if body, err = json.Marshal(notices); err == nil {
			_, err = tx.Exec(ctx, `INSERT INTO `+qualifier(schema)+`riverhook_connection_change (connection_id, at, notice)
				SELECT $1, $2, n FROM jsonb_array_elements($3::jsonb) WITH ORDINALITY AS t(n, i) ORDER BY i`, id, now, body)
		}
	}
	if err != nil {
		return cur, nil, fmt.Errorf("riverhook: inserting the notices of connection %q: %w", id, err)
	}
	return next, changes, nil
}

// HistoryFor is how long the changes of a connection's life are kept for
// [History]: riverhook's maintenance ([PruneKind]) deletes older ones.
const HistoryFor = DefaultKeepFor

// History returns the latest changes of the connection with the given id,
// newest first, at most limit of them (at least one), each as its notice
// told the service: the console's history of a connection. A change is
// written in the transaction of the state it changes, with its notice, and
// kept for [HistoryFor].
func History(ctx context.Context, client *river.Client[pgx.Tx], db DB, connectionID string, limit int) ([]NoticeArgs, error) {
	if err := checkConnectionID(connectionID); err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `SELECT notice FROM `+qualifier(client.Schema())+`riverhook_connection_change
		WHERE connection_id = $1 ORDER BY id DESC LIMIT $2`, connectionID, max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("riverhook: reading the history of connection %q: %w", connectionID, err)
	}
	notices, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (n NoticeArgs, err error) {
		var body []byte
		if err = row.Scan(&body); err == nil {
			err = json.Unmarshal(body, &n)
		}
		return n, err
	})
	if err != nil {
		return nil, fmt.Errorf("riverhook: reading the history of connection %q: %w", connectionID, err)
	}
	return notices, nil
}

// transition is transitionTx in a transaction of its own begun on db.
func transition(ctx context.Context, client *river.Client[pgx.Tx], db beginner, id string, ending int64, decide decider) (s ConnectionState, changes []Change, err error) {
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		s, changes, err = transitionTx(ctx, client, tx, id, ending, decide)
		return err
	})
	return s, changes, err
}

// StateOf returns the state of the connection with the given id, as the
// fleet shares it, read through db on the database of client: active for a
// connection never seen failing. It matches [ErrNoStateTable] where
// [Migrate] never ran. It blocks for one query.
func StateOf(ctx context.Context, client *river.Client[pgx.Tx], db DB, connectionID string) (*ConnectionState, error) {
	s, err := readState(ctx, func(ctx context.Context, sql string, args ...any) interface{ Scan(...any) error } {
		return db.QueryRow(ctx, sql, args...)
	}, client.Schema(), connectionID)
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// Disable disables the connection with the given id for the service's
// reason ([ReasonService]): nothing is sent to it from then, within about
// a second in every process, and its deliveries, and those inserted later,
// are kept until [Enable]. An attempt in flight ends. A connection disabled
// already stays as it is, its reason too. The state changes, and its notice
// ([NoticeArgs], [ChangeDisabled]) is inserted with client, in one
// transaction begun on db, a pool on client's database (or the caller's
// transaction). It returns the state after.
func Disable(ctx context.Context, client *river.Client[pgx.Tx], db DB, connectionID string) (*ConnectionState, error) {
	if err := checkConnectionID(connectionID); err != nil {
		return nil, err
	}
	s, _, err := transition(ctx, client, db, connectionID, 0, func(cur ConnectionState, now time.Time) (ConnectionState, []Change) {
		if cur.State == StateDisabled {
			return cur, nil
		}
		return cur.disabled(ReasonService, now), []Change{ChangeDisabled}
	})
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// EnableParams says what [Enable] does.
type EnableParams struct {
	// DryRun counts what would be sent, and changes nothing.
	DryRun bool

	// IncludeGivenUp also sends again the deliveries given up since the
	// connection began failing (or since it was disabled, for one
	// disabled at once), as [Recover] does, up to [MaxRecovered].
	IncludeGivenUp bool

	// Reason is recorded in each resend of IncludeGivenUp, as for
	// [Resend]: who enabled it, and why. Required with IncludeGivenUp.
	Reason string
}

// EnableResult says what [Enable] found and did.
type EnableResult struct {
	State   State     `json:"state"`          // the connection's state before
	Waiting int       `json:"waiting"`        // the deliveries kept, which go (or would go)
	Since   time.Time `json:"since,omitzero"` // when the oldest of them was inserted
	GivenUp int       `json:"given_up"`       // with IncludeGivenUp: those sent again (or that would be)
	More    bool      `json:"more,omitempty"` // more gave up than MaxRecovered: call Recover for the rest
	Enabled bool      `json:"enabled"`        // the connection was made active (never in a dry run)
	Jobs    []int64   `json:"jobs,omitempty"` // the resends inserted
}

// givenUpMargin is how much before the failing period's start Enable's
// IncludeGivenUp looks: River stamps a job's end with the process's reading
// of the database's clock, off by up to the reading's precision (see
// clock), and the delivery whose attempt disabled the connection (a 410)
// ends after the state changed, but may be stamped a little before.
const givenUpMargin = time.Minute

// enableSettle is how long Enable waits, after its commit, before moving
// forward the deliveries whose run read the connection disabled just
// before and whose far snooze River stored after its move: River stores a
// run's end within milliseconds.
const enableSettle = time.Second

// keepAtMost is the longest a kept delivery snoozes: it runs again an
// hour on, finds its connection still disabled and snoozes again, so that
// a run whose snooze River stored after Enable's moves (its process died,
// Enable's caller went, River stored it late) waits an hour at most, not
// KeepFor. 2,000 kept deliveries cost 0.56 runs a second.
const keepAtMost = time.Hour

// keptFar is how far ahead a delivery of an enabled connection must be
// snoozed for Enable's second move to bring it forward: a kept one is
// about keepAtMost ahead, while a slot of the connection's chain is rarely
// half an hour ahead (and one moved costs a run, not a send).
const keptFar = keepAtMost / 2

// Enable makes the connection with the given id active again, disabled or
// failing, and sends what it kept: every delivery to it that has not
// ended is made ready, oldest first, and the Worker's admission spaces them
// at the connection's pace (its bound and rate). With p.IncludeGivenUp the
// deliveries given up since it began failing are sent again too (see
// [Recover]). With p.DryRun it only counts: Waiting and GivenUp are what
// would be sent. The state changes, its notice ([ChangeEnabled]) and the
// resends are one transaction begun on db, a pool on client's database;
// opts is the resends' (use [Worker.InsertOptions]). An active connection
// stays as it is, and its deliveries where they are.
//
// Enable blocks for its transaction, then for about a second
// (enableSettle), to move forward a delivery whose run read the connection
// disabled as it committed.
func Enable(ctx context.Context, client *river.Client[pgx.Tx], db DB, connectionID string, p EnableParams, opts *InsertOptions) (*EnableResult, error) {
	if err := checkConnectionID(connectionID); err != nil {
		return nil, err
	}
	if p.IncludeGivenUp {
		if err := checkReason(p.Reason); err != nil {
			return nil, err
		}
	}
	schema := client.Schema()
	res := &EnableResult{}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var cur ConnectionState
		var err error
		if p.DryRun { // a page's count: no write, no lock
			cur, err = readState(ctx, func(ctx context.Context, sql string, args ...any) interface{ Scan(...any) error } {
				return tx.QueryRow(ctx, sql, args...)
			}, schema, connectionID)
		} else {
			cur, _, err = lockState(ctx, tx, schema, connectionID)
		}
		if err != nil {
			return err
		}
		res.State = cur.State
		if res.Waiting, res.Since, err = kept(ctx, tx, schema, connectionID, 0); err != nil {
			return fmt.Errorf("riverhook: counting the deliveries kept for connection %q: %w", connectionID, err)
		}
		if cur.State == StateActive {
			return nil
		}
		if from := cmp.Or(cur.FailingSince, cur.DisabledAt); p.IncludeGivenUp && !from.IsZero() {
			from = from.Add(-givenUpMargin)
			rec, err := RecoverTx(ctx, client, tx, connectionID, RecoverParams{Since: from, Reason: p.Reason, DryRun: p.DryRun}, opts)
			if err != nil {
				return err
			}
			res.GivenUp, res.More, res.Jobs = rec.Resent, rec.More, rec.Jobs
			if rec.Resent > 0 && (res.Since.IsZero() || from.Before(res.Since)) {
				res.Since = from
			}
		}
		if p.DryRun {
			return nil
		}
		_, _, err = transitionTx(ctx, client, tx, connectionID, 0, func(cur ConnectionState, now time.Time) (ConnectionState, []Change) {
			return ConnectionState{ConnectionID: cur.ConnectionID, State: StateActive, EnabledAt: now, Changed: now}, []Change{ChangeEnabled}
		})
		if err != nil {
			return err
		}
		res.Enabled = true
		_, err = moveKept(ctx, tx, schema, connectionID, 0)
		return err
	})
	if err != nil || !res.Enabled || res.Waiting == 0 {
		return res, err
	}
	// The second move goes whether or not ctx ends (a page's request), for
	// as long as a write that must outlive its caller may (detached).
	ctx, cancel := detached(ctx)
	defer cancel()
	timer := time.NewTimer(enableSettle)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return res, nil // enabled; a straggler comes at its snooze's end, within keepAtMost
	case <-timer.C:
	}
	_, err = moveKept(ctx, db, schema, connectionID, keptFar)
	return res, err
}

// unseenSuccessFor is how long after a connection began failing a success
// may have been taken for no change, and its job completed: the process's
// view was read before the failing write, at most stateCacheFor before
// the success, and River completes a job within seconds. transitionTx looks
// for one completed that long into the span, until a write after it, not
// for the whole span, whose read would cost every delivery completed since.
const unseenSuccessFor = time.Minute

// stateCacheFor is how long a process serves the connections' states
// from memory: every process sees a change within it and a read (the
// package doc's numbers: 2 s in all). A disabled state is read through at
// each run.
const stateCacheFor = time.Second

// stateCache is what a process knows of its connections' states: those
// not active, read together in one statement at most once per
// stateCacheFor, so that a process pays one read a second however many
// connections it delivers to; a connection not among them is active. It
// is safe for concurrent use.
type stateCache struct {
	mu      sync.Mutex
	m       map[string]ConnectionState // the connections not active, as last read or written
	read    time.Time                  // when m's read began, by the process's clock; zero before the first
	loading chan struct{}              // closed when the read under way ends; nil when none is
	written map[string]ConnectionState // written while a read was under way, which may not have seen it
}

// get returns connection id's state as the process knows it, and whether
// what it knows was read within stateCacheFor.
func (c *stateCache) get(id string) (s ConnectionState, fresh bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.m[id]
	if !ok {
		s = ConnectionState{ConnectionID: id, State: StateActive}
	}
	return s, !c.read.IsZero() && time.Since(c.read) < stateCacheFor
}

// put keeps s, connection id's state as read or written now: also over a
// read under way when it ends, which began before.
func (c *stateCache) put(id string, s ConnectionState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]ConnectionState{}
	}
	keep(c.m, id, s)
	if c.loading != nil {
		if c.written == nil {
			c.written = map[string]ConnectionState{}
		}
		c.written[id] = s
	}
}

// keep sets id's state s in m, which holds those not active.
func keep(m map[string]ConnectionState, id string, s ConnectionState) {
	if s.State == StateActive {
		delete(m, id)
	} else {
		m[id] = s
	}
}

// refresh reads the states not active with load; when a read is under
// way, it waits for that one instead: one statement for every run.
func (c *stateCache) refresh(ctx context.Context, load func(ctx context.Context) (map[string]ConnectionState, error)) error {
	c.mu.Lock()
	if ch := c.loading; ch != nil {
		c.mu.Unlock()
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	ch := make(chan struct{})
	c.loading = ch
	c.mu.Unlock()
	began := time.Now()
	m, err := load(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		for id, s := range c.written {
			keep(m, id, s)
		}
		c.m, c.read = m, began
	}
	c.loading, c.written = nil, nil
	close(ch)
	return err
}

// readStates reads the states of the connections not active, in one
// statement through query.
func readStates(ctx context.Context, query func(ctx context.Context, sql string, args ...any) interface{ Scan(...any) error }, schema string) (map[string]ConnectionState, error) {
	var rows []ConnectionState
	err := query(ctx, `SELECT coalesce(json_agg(json_build_object('connection_id', connection_id, 'state', state, 'reason', reason,
		'failing_since', failing_since, 'last_failure', last_failure, 'disable_at', disable_at, 'warned_at', warned_at,
		'disabled_at', disabled_at, 'enabled_at', enabled_at, 'changed', changed)), '[]')
		FROM `+stateTable(schema)+` WHERE state <> 'active'`).Scan(&rows)
	if err != nil {
		_, err = scanState(errRow{err}, "")
		return nil, err
	}
	m := make(map[string]ConnectionState, len(rows))
	for _, s := range rows {
		m[s.ConnectionID] = s
	}
	return m, nil
}
