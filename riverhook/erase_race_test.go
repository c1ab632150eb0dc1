package riverhook_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook/riverhook"
)

// TestEraseBodies_AtOnceWithARecover: an EraseBodies of two given-up
// deliveries and a Recover of their connection, at the same moment, both
// succeed, in either order: the Recover resends both, and the erasure erases
// both originals, keeping their marks. Each writes the two job rows in one
// statement, and they took the rows' locks in opposite orders (the
// Recover's mark by job id, on the primary key; the erasure in the table's
// physical order, on a sequential scan, where an UPDATE moved the first
// job after the second): each held one row and waited for the other, and
// PostgreSQL ended one of them with "deadlock detected". A third
// transaction holding the first row makes the interleaving certain: the
// Recover waits for that row, the erasure takes the second and waits too.
func TestEraseBodies_AtOnceWithARecover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := testDB(t)
	client := newClient(t, pool, schema, nil, nil)
	table := pgIdent(schema) + ".river_job"
	var params []river.InsertManyParams
	for _, d := range []string{"g1", "g2"} {
		p, err := riverhook.InsertParams(d, []string{"crm"}, payload(d), nil)
		require.NoError(t, err)
		params = append(params, p...)
	}
	for i := range 200 { // the statistics of a table in use: the Recover's mark reads the primary key
		p, err := riverhook.InsertParams(fmt.Sprintf("other-%d", i), []string{"erp"}, payload("other"), nil)
		require.NoError(t, err)
		params = append(params, p...)
	}
	inserted, err := client.InsertMany(ctx, params)
	require.NoError(t, err)
	g1, g2 := inserted[0].Job.ID, inserted[1].Job.ID
	_, err = pool.Exec(ctx, `UPDATE `+table+` SET state = 'discarded', attempt = 1, attempted_at = now(), finalized_at = now()`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE `+table+` SET finalized_at = now() WHERE id = $1`, g1) // now after g2 in the table
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `ANALYZE `+table)
	require.NoError(t, err)
	var after bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT ctid FROM `+table+` WHERE id = $1) > (SELECT ctid FROM `+table+` WHERE id = $2)`,
		g1, g2).Scan(&after))
	require.True(t, after, "the first job's row is after the second's in the table")

	holder, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx)
	_, err = holder.Exec(ctx, `SELECT 1 FROM `+table+` WHERE id = $1 FOR UPDATE`, g1)
	require.NoError(t, err)

	recovered := make(chan error, 1)
	var res *riverhook.RecoverResult
	go func() {
		var err error
		res, err = riverhook.Recover(ctx, client, pool, "crm", riverhook.RecoverParams{Since: time.Now().Add(-time.Hour), Reason: "the endpoint is fixed"}, nil)
		recovered <- err
	}()
	holderPID := holder.Conn().PgConn().PID()
	waitBlocked(t, pool, holderPID, 1) // the Recover, marking g1
	erased := make(chan error, 1)
	var n int
	go func() {
		var err error
		n, err = riverhook.EraseBodies(ctx, client, pool, []string{"g1", "g2"})
		erased <- err
	}()
	waitBlocked(t, pool, holderPID, 2) // and the erasure, behind the Recover
	require.NoError(t, holder.Commit(ctx))

	require.NoError(t, <-recovered, "the Recover")
	require.NoError(t, <-erased, "the erasure")
	assert.Equal(t, 2, res.Resent)
	assert.Equal(t, 2, n, "both originals erased")
	for _, id := range []int64{g1, g2} {
		job, err := client.JobGet(ctx, id)
		require.NoError(t, err)
		d, err := riverhook.DeliveryOf(job)
		require.NoError(t, err)
		assert.True(t, d.Erased, "job %d is erased", id)
		assert.NotZero(t, d.ResentAs, "job %d keeps its mark", id)
	}
}

// waitBlocked waits until n statements wait for a lock behind the
// session holder, at most one other between them, as pg_locks shows them.
func waitBlocked(t *testing.T, pool *pgxpool.Pool, holder uint32, n int) {
	t.Helper()
	ctx := context.Background()
	require.Eventually(t, func() bool {
		var waiting int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity AS a WHERE a.wait_event_type = 'Lock'
			AND ($1::int = ANY(pg_blocking_pids(a.pid)) OR EXISTS (SELECT 1 FROM pg_stat_activity AS b
				WHERE b.pid = ANY(pg_blocking_pids(a.pid)) AND $1::int = ANY(pg_blocking_pids(b.pid))))`, int64(holder)).Scan(&waiting)
		return err == nil && waiting >= n
	}, 10*time.Second, 5*time.Millisecond, "%d statements wait for a lock behind session %d", n, holder)
}
