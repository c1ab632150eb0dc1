package riverhook_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook/riverhook"
)

// A connection list with a repeated id (a join that returns a row twice, a
// customer's connection listed under two events) is one delivery to that
// connection: the doc says a repeated insert of the same delivery to the
// same connection is skipped. InsertTx must not fail the caller's
// transaction, which holds the user's change (the outbox).
func TestAdvisory_InsertTxRepeatedConnectionIDKeepsTheOutbox(t *testing.T) {
	t.Parallel()
	pool, schema := testDB(t)
	client := newClient(t, pool, schema, nil, nil)
	ctx := context.Background()
	_, err := pool.Exec(ctx, "CREATE TABLE "+schema+".users (id text PRIMARY KEY)")
	require.NoError(t, err)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "INSERT INTO "+schema+".users VALUES ('usr_1')")
	require.NoError(t, err)

	_, err = riverhook.InsertTx(ctx, client, tx, "evt_1", []string{"crm", "erp", "crm"}, payload("evt_1"), nil)
	require.NoError(t, err, "one delivery to crm, the repeat skipped")
	require.NoError(t, tx.Commit(ctx), "the user's change commits")
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".river_job").Scan(&n))
	assert.Equal(t, 2, n, "one job per distinct connection")
}
