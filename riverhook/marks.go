package riverhook

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/signedhook/webhook"
)

// This file holds riverhook's own tables, beside River's: their versioned
// migration, and the endpoint health marks the processes of a deployment
// share through them.

// migrations are riverhook's own tables, in order: Migrate runs each once
// per schema, recording its version in riverhook_migration. Until the
// first release they are one migration that makes the tables as they are.
var migrations = []string{
	// Endpoint health marks, one per origin (url_key '') or isolated URL,
	// written by every process, read since a time; and a connection's
	// last start (its rate) and chain of slots, shared by the fleet
	// (ConnectionPlaces). A place in flight is an advisory lock, not a row.
	// A connection's state in its life (active, failing, disabled), the
	// same for every process, and surviving them (state.go), and the
	// history of its changes, each as its notice told it. And the
	// console's last turn of each rate-limited action per connection,
	// shared by its API replicas (console.NewSharedLimits).
	`CREATE TABLE riverhook_endpoint_mark (
		endpoint text NOT NULL,
		url_key text NOT NULL DEFAULT '',
		down boolean NOT NULL,
		confirmed boolean NOT NULL DEFAULT false,
		since timestamptz,
		changed timestamptz NOT NULL,
		next_probe timestamptz,
		failures integer NOT NULL DEFAULT 0,
		failure_kind text NOT NULL DEFAULT '',
		recorded_at timestamptz NOT NULL DEFAULT clock_timestamp(),
		PRIMARY KEY (endpoint, url_key)
	);
	CREATE INDEX riverhook_endpoint_mark_recorded_at ON riverhook_endpoint_mark (recorded_at);
	CREATE TABLE riverhook_pace (
		connection_id text PRIMARY KEY,
		last_start timestamptz NOT NULL DEFAULT '-infinity',
		chain timestamptz NOT NULL DEFAULT '-infinity',
		spacing bigint NOT NULL DEFAULT 0
	);
	CREATE TABLE riverhook_connection_state (
		connection_id text PRIMARY KEY,
		state text NOT NULL DEFAULT 'active',
		reason text NOT NULL DEFAULT '',
		failing_since timestamptz,
		last_failure timestamptz,
		disable_at timestamptz,
		warned_at timestamptz,
		disabled_at timestamptz,
		enabled_at timestamptz,
		changed timestamptz NOT NULL DEFAULT clock_timestamp()
	);
	CREATE TABLE riverhook_connection_change (
		id bigserial PRIMARY KEY,
		connection_id text NOT NULL,
		at timestamptz NOT NULL,
		notice jsonb NOT NULL
	);
	CREATE INDEX riverhook_connection_change_connection ON riverhook_connection_change (connection_id, id);
	CREATE INDEX riverhook_connection_change_at ON riverhook_connection_change (at);
	CREATE TABLE riverhook_console_turn (
		connection_id text NOT NULL,
		action text NOT NULL,
		taken timestamptz NOT NULL,
		subject text NOT NULL DEFAULT '',
		PRIMARY KEY (connection_id, action)
	);`,
}

// MigrationVersion is the version of riverhook's own tables this package
// needs: Migrate brings a schema to it.
var MigrationVersion = len(migrations)

// Migrate creates or updates riverhook's own tables in schema ("" for the
// search path), as rivermigrate does River's: run it beside River's
// migration, once per deployment or at every start (it does nothing when
// the schema is up to date). Each step runs once, in one transaction with
// its record in riverhook_migration, under a lock that serialises
// concurrent callers. db is a pool or a connection, each step then a
// transaction of its own; or a transaction, as rivermigrate's MigrateTx
// takes, whose search_path it leaves as it was: the steps commit with it.
func Migrate(ctx context.Context, db DB, schema string) error {
	q := qualifier(schema)
	lock := migrationLock(schema)
	// A transaction's lock, as the steps': a session's lock would stay
	// with the pool's connection when the statement fails (a schema not
	// made yet), and every later Migrate elsewhere would wait for it.
	if _, err := db.Exec(ctx, fmt.Sprintf(`SELECT pg_advisory_xact_lock(%d);
		CREATE TABLE IF NOT EXISTS %sriverhook_migration (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`, lock, q)); err != nil {
		return fmt.Errorf("riverhook: migrating: %w", err)
	}
	for i, step := range migrations {
		version := i + 1
		// One statement string, run as one implicit transaction: the lock
		// is held to its end, and a step and its record commit together.
		// The step's names are the schema's through search_path, set for
		// the step alone and set back after: in a caller's transaction,
		// its later statements find their own tables.
		sql := fmt.Sprintf(`SELECT pg_advisory_xact_lock(%d);
			DO $riverhook$ DECLARE old text := current_setting('search_path'); BEGIN
				PERFORM set_config('search_path', %s, true);
				IF NOT EXISTS (SELECT 1 FROM riverhook_migration WHERE version = %d) THEN
					EXECUTE %s;
					INSERT INTO riverhook_migration (version) VALUES (%d);
				END IF;
				PERFORM set_config('search_path', old, true);
			END $riverhook$`, lock, searchPath(schema), version, quoteLiteral(step), version)
		if _, err := db.Exec(ctx, sql); err != nil {
			return fmt.Errorf("riverhook: migrating to version %d: %w", version, err)
		}
	}
	return nil
}

// migrationLock is the advisory lock of schema's migration.
func migrationLock(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("riverhook migrate " + schema))
	return int64(h.Sum64() >> 1)
}

// qualifier returns schema quoted with a final dot, or "" for the search
// path.
func qualifier(schema string) string {
	if schema == "" {
		return ""
	}
	return quoteIdent(schema) + "."
}

// searchPath returns the search_path of schema's migration, as the
// migration's PL/pgSQL reads it: the session's own (old) for "", as the
// first statement's.
func searchPath(schema string) string {
	if schema == "" {
		return "old"
	}
	return quoteLiteral(quoteIdent(schema))
}

func quoteIdent(s string) string   { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
func quoteLiteral(s string) string { return `'` + strings.ReplaceAll(s, `'`, `''`) + `'` }

// EndpointMarks is the [webhook.HealthMarks] of a deployment in its
// PostgreSQL: the table riverhook_endpoint_mark, made by [Migrate]. Give it
// to every Sender (HealthOptions.Marks): each writes the changes it sees,
// and follows the others'; the console reads it for the endpoint's state.
// One row per origin or isolated URL, so its size follows the endpoints
// that failed, not the deliveries. Its times are the database's: a mark's
// times are moved from the writer's clock to the database's, and back to
// the reader's, so that marks are ordered by the database's clock whatever
// each process's. It is safe for concurrent use.
type EndpointMarks struct {
	db    DB
	table string
	clock *clock // the database's, as the process (time.Now, the Sender's health's) reads it
}

// NewEndpointMarks returns the marks in schema ("" for the search path)
// through db, a pool.
func NewEndpointMarks(db DB, schema string) *EndpointMarks {
	return &EndpointMarks{db: db, table: qualifier(schema) + "riverhook_endpoint_mark", clock: databaseClock(nil)}
}

// Mark records h unless the table holds a mark of its endpoint (its origin,
// or for a PerURL mark its URLKey) that changed later, by the database's
// clock.
func (m *EndpointMarks) Mark(ctx context.Context, h webhook.EndpointHealth) error {
	if h.Endpoint == "" || h.Changed.IsZero() {
		return errors.New("riverhook: a mark needs an endpoint and the time it changed")
	}
	if err := m.readClock(ctx); err != nil {
		return fmt.Errorf("riverhook: marking %s: reading the database's clock: %w", h.Endpoint, err)
	}
	c := m.clock
	urlKey, origin := "", h.Endpoint
	if h.PerURL { // reported as the origin and "/…": kept under the origin
		urlKey, origin = h.URLKey, strings.TrimSuffix(h.Endpoint, "/…")
	}
	_, err := m.db.Exec(ctx, `INSERT INTO `+m.table+` AS m
		(endpoint, url_key, down, confirmed, since, changed, next_probe, failures, failure_kind)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (endpoint, url_key) DO UPDATE SET
			down = EXCLUDED.down, confirmed = EXCLUDED.confirmed, since = EXCLUDED.since,
			changed = EXCLUDED.changed, next_probe = EXCLUDED.next_probe, failures = EXCLUDED.failures,
			failure_kind = EXCLUDED.failure_kind, recorded_at = clock_timestamp()
		WHERE m.changed <= EXCLUDED.changed`,
		origin, urlKey, h.Down, h.Confirmed, nullTime(c.toDB(h.Since)), c.toDB(h.Changed), nullTime(c.toDB(h.NextProbe)), h.Failures, string(h.LastFailure.Kind))
	if err != nil {
		return fmt.Errorf("riverhook: marking %s: %w", h.Endpoint, err)
	}
	return nil
}

// Since returns the marks recorded at or after after, and the latest
// recording time among them. For the zero time, a Sender starting up, it
// returns the marks down and those of the last minute: what a Sender
// starting up needs, however many endpoints once failed.
func (m *EndpointMarks) Since(ctx context.Context, after time.Time) ([]webhook.EndpointHealth, time.Time, error) {
	where := `recorded_at >= $1`
	if after.IsZero() {
		where = `(down OR recorded_at >= clock_timestamp() - interval '1 minute') AND recorded_at >= $1`
	}
	marks, next, err := m.query(ctx, where, after)
	if next.IsZero() {
		next = after
	}
	return marks, next, err
}

// query returns the marks where where holds for arg, in the order they were
// recorded, and the latest recording time among them. Its rows read the
// database's clock too.
func (m *EndpointMarks) query(ctx context.Context, where string, arg any) ([]webhook.EndpointHealth, time.Time, error) {
	var last time.Time
	c := m.clock
	sent := c.local.Now()
	rows, err := m.db.Query(ctx, `SELECT endpoint, url_key, down, confirmed, coalesce(since, changed), changed,
		coalesce(next_probe, changed), failures, failure_kind, recorded_at, statement_timestamp(), clock_timestamp()
		FROM `+m.table+` WHERE `+where+` ORDER BY recorded_at, url_key`, arg)
	if err != nil {
		return nil, last, fmt.Errorf("riverhook: reading endpoint marks: %w", err)
	}
	defer rows.Close()
	var marks []webhook.EndpointHealth
	for rows.Next() {
		var h webhook.EndpointHealth
		var urlKey, kind string
		var start, end time.Time
		if err := rows.Scan(&h.Endpoint, &urlKey, &h.Down, &h.Confirmed, &h.Since, &h.Changed, &h.NextProbe, &h.Failures, &kind, &last, &start, &end); err != nil {
			return nil, time.Time{}, fmt.Errorf("riverhook: reading endpoint marks: %w", err)
		}
		if marks == nil {
			c.read(sent, c.local.Now(), start, end)
		}
		h.Since, h.Changed, h.NextProbe = c.fromDB(h.Since), c.fromDB(h.Changed), c.fromDB(h.NextProbe)
		h.PerURL, h.URLKey, h.LastFailure.Kind = urlKey != "", urlKey, webhook.FailureKind(kind)
		if h.PerURL {
			h.Endpoint += "/…" // as OnChange reports a URL
		}
		if !h.Down {
			h.NextProbe = time.Time{}
		}
		marks = append(marks, h)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("riverhook: reading endpoint marks: %w", err)
	}
	return marks, last, nil
}

// Endpoint returns the marks of endpoint (an origin, as
// [webhook.Connection.Endpoint] gives): its own and its isolated URLs',
// the origin's first. None means nothing is known: the console shows
// "unknown", never a false "up".
func (m *EndpointMarks) Endpoint(ctx context.Context, endpoint string) ([]webhook.EndpointHealth, error) {
	marks, _, err := m.query(ctx, `endpoint = $1`, endpoint)
	slices.SortStableFunc(marks, func(a, b webhook.EndpointHealth) int { return cmp.Compare(a.URLKey, b.URLKey) })
	return marks, err
}

// Prune deletes the marks that are not down and were recorded before
// before, and returns how many: an endpoint that came back up, or that was
// confirmed up, needs no mark once every process has read it (FollowEvery
// apart). Run it now and then, such as daily with a before of a day ago,
// so that the table follows the endpoints failing, not every endpoint that
// ever failed.
func (m *EndpointMarks) Prune(ctx context.Context, before time.Time) (int64, error) {
	tag, err := m.db.Exec(ctx, `DELETE FROM `+m.table+` WHERE NOT down AND recorded_at < $1`, before)
	if err != nil {
		return 0, fmt.Errorf("riverhook: pruning endpoint marks: %w", err)
	}
	return tag.RowsAffected(), nil
}

// readClock reads the database's clock when the marks have no recent
// reading: the reads of the marks (Since, every FollowEvery while a Sender
// makes attempts) read it with their rows.
func (m *EndpointMarks) readClock(ctx context.Context) error {
	c := m.clock
	sent := c.local.Now()
	if !c.stale(sent) {
		return nil
	}
	var start, end time.Time
	if err := m.db.QueryRow(ctx, `SELECT statement_timestamp(), clock_timestamp()`).Scan(&start, &end); err != nil {
		return err
	}
	c.read(sent, c.local.Now(), start, end)
	return nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

var _ webhook.HealthMarks = (*EndpointMarks)(nil)

// pruneTables deletes, in schema, the endpoint marks not down and
// recorded a day ago or more, the console's turns taken a day ago or more,
// and the paces whose chain ended a day ago and whose last start was a
// year ago or more (a rate's start must be kept
// for as long as its 1/rate, at most maxPaceEvery); it returns how many
// rows went. A schema without riverhook's tables has nothing to prune.
func pruneTables(ctx context.Context, query func(ctx context.Context, sql string, args ...any) interface{ Scan(...any) error }, schema string) (int64, error) {
	q := qualifier(schema)
	var exists bool
	if err := query(ctx, `SELECT to_regclass($1) IS NOT NULL`, q+"riverhook_pace").Scan(&exists); err != nil || !exists {
		return 0, err
	}
	var n int64
	err := query(ctx, `WITH marks AS (DELETE FROM `+q+`riverhook_endpoint_mark WHERE NOT down AND recorded_at < now() - interval '1 day' RETURNING 1),
		paces AS (DELETE FROM `+q+`riverhook_pace WHERE chain < now() - interval '1 day' AND last_start < now() - $1 * interval '1 microsecond' RETURNING 1),
		turns AS (DELETE FROM `+q+`riverhook_console_turn WHERE taken < now() - interval '1 day' RETURNING 1),
		changes AS (DELETE FROM `+q+`riverhook_connection_change WHERE at < now() - $2 * interval '1 microsecond' RETURNING 1)
		SELECT (SELECT count(*) FROM marks) + (SELECT count(*) FROM paces) + (SELECT count(*) FROM turns) + (SELECT count(*) FROM changes)`,
		maxPaceEvery.Microseconds(), HistoryFor.Microseconds()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("riverhook: pruning riverhook's tables: %w", err)
	}
	return n, nil
}
