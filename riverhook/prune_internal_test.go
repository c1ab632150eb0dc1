package riverhook

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook/internal/testdb"
)

// TestPruneTables_KeepsWhatIsAhead: the maintenance deletes the marks of
// endpoints up for a day, the paces with nothing ahead and the changes
// older than HistoryFor, and keeps a down mark, a chain to come and a rate's recent start; in a schema
// without riverhook's tables it does nothing.
func TestPruneTables_KeepsWhatIsAhead(t *testing.T) {
	t.Parallel()
	pool, schema := testdb.Schema(t, "prune", true)
	ctx := context.Background()
	query := poolQuery(pool)
	n, err := pruneTables(ctx, query, schema)
	require.NoError(t, err)
	assert.Zero(t, n, "not migrated: nothing to prune")

	require.NoError(t, Migrate(ctx, pool, schema))
	q := qualifier(schema)
	_, err = pool.Exec(ctx, `INSERT INTO `+q+`riverhook_endpoint_mark (endpoint, down, changed, recorded_at) VALUES
			('https://up.example:443', false, now(), now() - interval '2 days'),
			('https://down.example:443', true, now(), now() - interval '2 days'),
			('https://fresh.example:443', false, now(), now());
		INSERT INTO `+q+`riverhook_pace (connection_id, last_start, chain) VALUES
			('idle', '-infinity', now() - interval '2 days'),
			('slotted', '-infinity', now() + interval '1 hour'),
			('weekly', now() - interval '2 days', now() - interval '2 days');
		INSERT INTO `+q+`riverhook_console_turn (connection_id, action, taken) VALUES ('old', 'test', now() - interval '2 days'), ('new', 'test', now());
		INSERT INTO `+q+`riverhook_connection_change (connection_id, at, notice) VALUES
			('changed long ago', now() - interval '31 days', '{}'), ('changed lately', now() - interval '29 days', '{}')`)
	require.NoError(t, err)
	n, err = pruneTables(ctx, query, schema)
	require.NoError(t, err)
	assert.EqualValues(t, 4, n)
	rows, err := pool.Query(ctx, `SELECT endpoint FROM `+q+`riverhook_endpoint_mark UNION ALL SELECT connection_id FROM `+q+`riverhook_pace
		UNION ALL SELECT connection_id FROM `+q+`riverhook_console_turn UNION ALL SELECT connection_id FROM `+q+`riverhook_connection_change ORDER BY 1`)
	require.NoError(t, err)
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	assert.Equal(t, []string{"changed lately", "https://down.example:443", "https://fresh.example:443", "new", "slotted", "weekly"}, left)
}

// TestRegister_SchedulesTheMaintenance: Register adds the maintenance's
// worker and its periodic job, which River's leader runs; not the job to a
// client that elects no leader, which River would refuse.
func TestRegister_SchedulesTheMaintenance(t *testing.T) {
	sender, err := webhook.NewSender(nil)
	require.NoError(t, err)
	w, err := NewWorker(sender, func(context.Context, string) (webhook.Connection, error) { return webhook.Connection{}, nil }, nil)
	require.NoError(t, err)
	config := &river.Config{}
	require.NoError(t, Register(config, w))
	assert.Len(t, config.PeriodicJobs, 1)
	noLeader := &river.Config{LeaderElectionDisabled: true}
	require.NoError(t, Register(noLeader, w))
	assert.Empty(t, noLeader.PeriodicJobs)
}
