package riverhook_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook/riverhook"
)

// TestEraseBodies_AnErrorLeavesTheCallersTransactionUsable: EraseBodies
// given the caller's transaction works in savepoints, so that an error,
// here its lock_timeout ending the wait for a table another session holds,
// leaves the transaction usable ("the call may be made again"). The
// SELECT of the deliveries' connections ran on the transaction itself, and
// its error aborted the caller's transaction.
func TestEraseBodies_AnErrorLeavesTheCallersTransactionUsable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := testDB(t)
	client := newClient(t, pool, schema, nil, nil)
	p, err := riverhook.InsertParams("d1", []string{"c1"}, payload("d1"), nil)
	require.NoError(t, err)
	_, err = client.InsertMany(ctx, p)
	require.NoError(t, err)

	locker, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer locker.Rollback(ctx)
	_, err = locker.Exec(ctx, `LOCK TABLE `+pgIdent(schema)+`.river_job IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `SET LOCAL lock_timeout = '50ms'`)
	require.NoError(t, err)
	_, err = riverhook.EraseBodies(ctx, client, tx, []string{"d1"})
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "55P03", pgErr.Code, "the transaction's lock_timeout")
	require.NoError(t, tx.QueryRow(ctx, `SELECT 1`).Scan(new(int)), "the caller's transaction is still usable")

	require.NoError(t, locker.Rollback(ctx))
	n, err := riverhook.EraseBodies(ctx, client, tx, []string{"d1"})
	require.NoError(t, err, "the call made again")
	require.Zero(t, n, "the delivery has not ended")
}
