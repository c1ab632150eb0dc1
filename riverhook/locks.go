package riverhook

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// This file holds the locks under which Resend and Recover decide and the
// erasures write, and the wait for them.

// ErrLockHeld is returned by [Resend], [Recover], [EraseSubject] and
// [EraseBodies] (and [ResendTx], [RecoverTx]) when the lock they wait for
// is held by a transaction that has been idle, running no statement while
// it waits for its client, for the last 5 seconds of the wait. That is most
// likely the caller's own: a transaction given to one of them as db holds
// their locks until it ends, and a call made on the pool meanwhile by the
// same goroutine waits for that transaction, which waits for the call; for
// ever, as PostgreSQL cannot see the cycle. While such a transaction is
// open, give it to the calls that follow as db, or end it first. A holder
// at work is waited for as long as ctx allows, or the lock_timeout the
// transaction sets, when it sets one.
var ErrLockHeld = errors.New("riverhook: the lock is held by a transaction idle in its client")

// lockIdleWait is how long a wait for a lock lasts, with its holder idle
// in its transaction all along, before it ends with ErrLockHeld.
const lockIdleWait = 5 * time.Second

// Resend and Recover decide under PostgreSQL advisory locks held until
// their transaction ends, keyed by a hash of what they decide on: a
// connection, and one delivery of it, in River's schema (the search path's
// first for ""), each as a JSON array so that no two keys differ only in
// where an id ends. A Resend holds its connection's lock shared and its
// delivery's exclusively, in that order; a Recover holds its connection's
// exclusively: deciders on one delivery take turns, Resends of different
// deliveries do not wait for each other, and a Recover of any number of
// deliveries holds one lock of PostgreSQL's shared lock table, not one per
// delivery (TestRiver/Locks). Another use of advisory locks whose key
// collides with one of these only waits. The keys are riverhook's across
// versions: a process of an earlier one takes the same.
const lockKey = `hashtextextended(jsonb_build_array('riverhook resend', coalesce(nullif($1::text, ''), current_schema()), $2::text`

// lockDelivery takes the locks of a Resend of a delivery in the
// transaction tx: its connection's shared, then its own.
func lockDelivery(ctx context.Context, tx pgx.Tx, schema, connectionID, deliveryID string) error {
	return takeLocks(ctx, tx, `SELECT key, shared FROM (VALUES (1, `+lockKey+`)::text, 0), true),
		(2, `+lockKey+`, $3::text)::text, 0), false)) AS k(i, key, shared) ORDER BY i`, schema, connectionID, deliveryID)
}

// lockConnection takes the lock of a Recover of a connection in the
// transaction tx.
func lockConnection(ctx context.Context, tx pgx.Tx, schema, connectionID string) error {
	return takeLocks(ctx, tx, `SELECT `+lockKey+`)::text, 0) AS key, false AS shared`, schema, connectionID)
}

// lockConnections takes in tx the lock of a Recover (lockConnection's) of
// each connection that conns lists (its column id), a query of job rows
// whose arguments are $2 on, in the order of their ids: the erasures hold
// them while they write a connection's jobs, so that they take turns with
// Resend, Recover and each other rather than lock the same rows in another
// order. Every taker of several takes them in that order.
func lockConnections(ctx context.Context, tx pgx.Tx, schema, conns string, args ...any) error {
	return takeLocks(ctx, tx, `SELECT `+strings.Replace(lockKey, "$2::text", "conns.id", 1)+`)::text, 0) AS key, false AS shared
		FROM (`+conns+` ORDER BY 1 OFFSET 0) AS conns`, append([]any{schema}, args...)...)
}

// takeLocks takes in tx the advisory locks that keys lists, a query of
// their keys (key) and whether each is taken shared (shared), in the order
// to take them, given args. It waits for them as long as ctx allows, but
// for a holder idle in its transaction: a wait that lasted lockIdleWait,
// its holder idle all along, ends with ErrLockHeld (TestLocks_*). Each
// wait is one of that long at most (PostgreSQL's lock_timeout, unless the
// transaction sets its own), in a savepoint, so that the transaction
// survives its end; a holder found at work, or idle since less long, is
// waited for again. The transaction's lock_timeout is as it was after.
func takeLocks(ctx context.Context, tx pgx.Tx, keys string, args ...any) error {
	args = append(args[:len(args):len(args)], lockIdleWait.Milliseconds())
	wait := "$" + strconv.Itoa(len(args)) + "::bigint"
	take := `SELECT set_config('lock_timeout', t.old, true), t.taken FROM (
		SELECT s.old, (SELECT count(l.taken) FROM (SELECT CASE WHEN k.shared THEN pg_advisory_xact_lock_shared(k.key)::text
				ELSE pg_advisory_xact_lock(k.key)::text END AS taken FROM (` + keys + ` OFFSET 0) AS k) AS l WHERE s.old IS NOT NULL) AS taken
		FROM (SELECT o.old, set_config('lock_timeout', CASE o.old WHEN '0' THEN ` + wait + ` || 'ms' ELSE o.old END, true) AS bound
			FROM (SELECT current_setting('lock_timeout') AS old OFFSET 0) AS o OFFSET 0) AS s
		WHERE s.bound IS NOT NULL OFFSET 0) AS t`
	// The holder idle for as long, of a key it holds in a mode that
	// excludes the one wanted, and the transaction's own lock_timeout.
	idle := `SELECT current_setting('lock_timeout'), h.pid, h.idle FROM (SELECT 1) AS one LEFT JOIN LATERAL (
		SELECT a.pid, extract(epoch FROM clock_timestamp() - a.state_change)::float8 AS idle FROM (` + keys + `) AS k
		JOIN pg_locks AS l ON l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.pid <> pg_backend_pid()
			AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND ((l.classid::int8 << 32) | l.objid::int8) = k.key AND (NOT k.shared OR l.mode = 'ExclusiveLock')
		JOIN pg_stat_activity AS a ON a.pid = l.pid
		WHERE a.state IN ('idle in transaction', 'idle in transaction (aborted)')
			AND a.state_change <= clock_timestamp() - make_interval(secs => ` + wait + ` / 1000.0)
		ORDER BY a.state_change LIMIT 1) AS h ON true`
	for {
		b := &pgx.Batch{}
		b.Queue(`SAVEPOINT riverhook_lock`)
		b.Queue(take, args...)
		b.Queue(`RELEASE SAVEPOINT riverhook_lock`)
		err := tx.SendBatch(ctx, b).Close()
		if err == nil {
			return nil
		}
		if _, rerr := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT riverhook_lock`); rerr != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `RELEASE SAVEPOINT riverhook_lock`); err != nil {
			return err
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "55P03" { // lock_not_available
			return err
		}
		// pg_stat_activity is read once per transaction unless cleared.
		if _, err := tx.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
			return err
		}
		var own string
		var pid *int32
		var since *float64
		if err := tx.QueryRow(ctx, idle, args...).Scan(&own, &pid, &since); err != nil {
			return err
		}
		switch {
		case pid != nil:
			return fmt.Errorf("%w: PostgreSQL backend %d holds it, idle in its transaction for %s while this call waited: "+
				"if that transaction is the caller's own, give it to this call as db, or end it first",
				ErrLockHeld, *pid, time.Duration(*since*float64(time.Second)).Round(time.Millisecond))
		case own != "0":
			return err // the transaction's own lock_timeout
		}
	}
}
