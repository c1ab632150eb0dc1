package riverhook_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook/riverhook"
)

// TestEraseBodies_HoldsTheLocksOfAFewConnectionsAtOnce: an EraseBodies of
// deliveries of 200 connections holds the Recover locks of at most 64 of
// them at a time. Advisory locks share PostgreSQL's lock table, 64 per
// connection allowed to the server by default (6,400 with 100 connections),
// with every other lock of every session: an erasure that held one for each
// connection of a retention sweep's batch exhausted it, and the server then
// refused locks to everyone ("out of shared memory"). A third transaction
// holding a row of the last connection's job stops the erasure there, where
// the locks it holds are counted.
func TestEraseBodies_HoldsTheLocksOfAFewConnectionsAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := testDB(t)
	client := newClient(t, pool, schema, nil, nil)
	table := pgIdent(schema) + ".river_job"
	const conns = 200
	var ids []string
	var last int64
	for i := range conns {
		id := fmt.Sprintf("d%03d", i)
		p, err := riverhook.InsertParams(id, []string{fmt.Sprintf("c%03d", i)}, payload(id), nil)
		require.NoError(t, err)
		res, err := client.InsertMany(ctx, p)
		require.NoError(t, err)
		ids, last = append(ids, id), res[0].Job.ID
	}
	_, err := pool.Exec(ctx, `UPDATE `+table+` SET state = 'completed', attempt = 1, attempted_at = now(), finalized_at = now()`)
	require.NoError(t, err)

	blocker, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer blocker.Rollback(ctx)
	_, err = blocker.Exec(ctx, `SELECT 1 FROM `+table+` WHERE id = $1 FOR UPDATE`, last)
	require.NoError(t, err)
	blockerPID := blocker.Conn().PgConn().PID()
	type erased struct {
		n   int
		err error
	}
	done := make(chan erased, 1)
	go func() {
		n, err := riverhook.EraseBodies(ctx, client, pool, ids)
		done <- erased{n, err}
	}()
	var eraser int32
	require.Eventually(t, func() bool {
		return pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND $1::int = ANY(pg_blocking_pids(pid))`,
			blockerPID).Scan(&eraser) == nil
	}, 10*time.Second, 5*time.Millisecond, "the erasure waits for the blocker's row")
	var held int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE pid = $1 AND locktype = 'advisory' AND granted`, eraser).Scan(&held))
	assert.Positive(t, held, "the erasure holds the locks of the connections it writes")
	assert.LessOrEqual(t, held, 64, "the erasure holds the locks of at most 64 connections at a time")

	require.NoError(t, blocker.Rollback(ctx))
	got := <-done
	require.NoError(t, got.err)
	assert.Equal(t, conns, got.n, "every delivery erased")
	n, err := riverhook.EraseBodies(ctx, client, pool, ids)
	require.NoError(t, err)
	assert.Zero(t, n, "nothing left to erase")
}
