package riverhook

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTakeLocks pins what the wait for riverhook's locks leaves to the
// transaction and to other processes: its lock_timeout as it was, honoured
// when set, the transaction usable after a wait that ended, and the keys
// of the earlier versions, whose processes take the same locks during a
// rolling deploy.
func TestTakeLocks(t *testing.T) {
	_, pool := pinClient(t)
	ctx := context.Background()
	begin := func(setting string) pgx.Tx {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { tx.Rollback(ctx) })
		if setting != "" {
			_, err = tx.Exec(ctx, `SET LOCAL lock_timeout = '`+setting+`'`)
			require.NoError(t, err)
		}
		return tx
	}
	timeout := func(tx pgx.Tx) string {
		var s string
		require.NoError(t, tx.QueryRow(ctx, `SELECT current_setting('lock_timeout')`).Scan(&s))
		return s
	}

	// The pool has 4 connections: each transaction ends once read.
	tx := begin("")
	require.NoError(t, lockDelivery(ctx, tx, "s", "crm", "d1"))
	require.NoError(t, lockConnections(ctx, tx, "s", `SELECT unnest($2::text[]) AS id`, []string{"erp", "crm2"}))
	assert.Equal(t, "0", timeout(tx), "the transaction's lock_timeout, unset")
	other := begin("7s")
	require.NoError(t, lockConnection(ctx, other, "s", "erp2"))
	assert.Equal(t, "7s", timeout(other), "the transaction's own")
	require.NoError(t, other.Rollback(ctx))

	waiter := begin("50ms")
	err := lockConnection(ctx, waiter, "s", "crm")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "the transaction's lock_timeout ends the wait for a holder idle since less than lockIdleWait")
	assert.Equal(t, "55P03", pgErr.Code)
	assert.Equal(t, "50ms", timeout(waiter), "the transaction goes on")
	require.NoError(t, waiter.Rollback(ctx))

	// The statements of the earlier versions wait for these locks, and
	// these for theirs.
	earlierResend := `SELECT pg_advisory_xact_lock(` + lockKey + `, $3::text)::text, 0))
		FROM (SELECT pg_advisory_xact_lock_shared(` + lockKey + `)::text, 0)) OFFSET 0) AS connection`
	earlierRecover := `SELECT pg_advisory_xact_lock(` + lockKey + `)::text, 0))`
	old := begin("50ms")
	_, err = old.Exec(ctx, earlierResend, "s", "crm", "d1")
	require.ErrorAs(t, err, &pgErr, "an earlier version's Resend of the delivery")
	assert.Equal(t, "55P03", pgErr.Code)
	require.NoError(t, old.Rollback(ctx))
	old = begin("50ms")
	_, err = old.Exec(ctx, earlierRecover, "s", "erp")
	require.ErrorAs(t, err, &pgErr, "an earlier version's Recover of a connection an erasure holds")
	assert.Equal(t, "55P03", pgErr.Code)
	require.NoError(t, old.Rollback(ctx))
	require.NoError(t, tx.Rollback(ctx))

	old = begin("")
	_, err = old.Exec(ctx, earlierRecover, "s", "crm")
	require.NoError(t, err)
	waiter = begin("50ms")
	require.ErrorAs(t, lockDelivery(ctx, waiter, "s", "crm", "d2"), &pgErr, "a Resend waits for an earlier version's Recover")
	assert.Equal(t, "55P03", pgErr.Code)
}
