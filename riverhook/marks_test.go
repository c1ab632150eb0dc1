package riverhook_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/riverhook/internal/testdb"
)

func TestMigrate(t *testing.T) {
	t.Parallel()
	pool, schema := testDB(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 4 { // several processes starting at once
		wg.Go(func() { assert.NoError(t, riverhook.Migrate(ctx, pool, schema)) })
	}
	wg.Wait()
	require.NoError(t, riverhook.Migrate(ctx, pool, schema), "up to date: nothing to do")
	var versions []int32
	rows, err := pool.Query(ctx, `SELECT version FROM "`+schema+`".riverhook_migration ORDER BY version`)
	require.NoError(t, err)
	for rows.Next() {
		var v int32
		require.NoError(t, rows.Scan(&v))
		versions = append(versions, v)
	}
	require.NoError(t, rows.Err())
	assert.Len(t, versions, riverhook.MigrationVersion)
	assert.EqualValues(t, 1, versions[0])
}

func TestEndpointMarks(t *testing.T) {
	t.Parallel()
	pool, schema := testDB(t)
	ctx := context.Background()
	require.NoError(t, riverhook.Migrate(ctx, pool, schema))
	marks := riverhook.NewEndpointMarks(pool, schema)
	const origin = "https://hooks.example.com:443"
	t0 := time.Now().UTC().Truncate(time.Microsecond)

	down := webhook.EndpointHealth{Endpoint: origin, Down: true, Since: t0.Add(-time.Minute), Changed: t0, NextProbe: t0.Add(5 * time.Second), Failures: 3,
		LastFailure: webhook.Attempt{Kind: webhook.KindRefused}}
	require.NoError(t, marks.Mark(ctx, down))
	isolated := webhook.EndpointHealth{Endpoint: origin + "/…", Down: true, Changed: t0, PerURL: true, URLKey: "0123456789abcdef0123456789abcdef"}
	require.NoError(t, marks.Mark(ctx, isolated)) // kept under its origin

	got, next, err := marks.Since(ctx, time.Time{})
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, origin, got[0].Endpoint)
	assert.True(t, got[0].Down)
	assert.WithinDuration(t, down.NextProbe, got[0].NextProbe, 100*time.Millisecond, "by the reader's reading of the database's clock")
	assert.Equal(t, webhook.KindRefused, got[0].LastFailure.Kind)
	assert.True(t, got[1].PerURL)
	assert.Equal(t, isolated.URLKey, got[1].URLKey)
	assert.Equal(t, origin+"/…", got[1].Endpoint, "as OnChange reports a URL")

	// A report that crossed a later one in flight changes nothing.
	stale := webhook.EndpointHealth{Endpoint: origin, Changed: t0.Add(-time.Second), Confirmed: true}
	require.NoError(t, marks.Mark(ctx, stale))
	up := webhook.EndpointHealth{Endpoint: origin, Changed: t0.Add(time.Second)}
	require.NoError(t, marks.Mark(ctx, up))

	later, _, err := marks.Since(ctx, next)
	require.NoError(t, err)
	require.NotEmpty(t, later)
	last := later[len(later)-1]
	assert.False(t, last.Down, "the later change is what is recorded")
	// Moved to the database's clock and back: a reading of it refined
	// meanwhile moves it by a millisecond or so.
	assert.WithinDuration(t, up.Changed, last.Changed, 100*time.Millisecond)
	for _, h := range later {
		assert.False(t, h.Changed.Equal(stale.Changed), "the stale report was not recorded")
	}

	all, err := marks.Endpoint(ctx, origin)
	require.NoError(t, err)
	require.Len(t, all, 2)
	assert.False(t, all[0].PerURL, "the origin's mark first")
	none, err := marks.Endpoint(ctx, "https://unknown.example.com:443")
	require.NoError(t, err)
	assert.Empty(t, none, "nothing known: the console says unknown")
	assert.Error(t, marks.Mark(ctx, webhook.EndpointHealth{Endpoint: origin}), "a mark without its time")

	// A process starting up reads the marks down and the latest; an old
	// mark up is pruned.
	old := webhook.EndpointHealth{Endpoint: "https://old.example.com:443", Changed: t0}
	require.NoError(t, marks.Mark(ctx, old))
	_, err = pool.Exec(ctx, `UPDATE "`+schema+`".riverhook_endpoint_mark SET recorded_at = now() - interval '2 days' WHERE endpoint = $1`, old.Endpoint)
	require.NoError(t, err)
	start, _, err := marks.Since(ctx, time.Time{})
	require.NoError(t, err)
	for _, h := range start {
		assert.NotEqual(t, old.Endpoint, h.Endpoint, "an old mark up is no news to a process starting up")
	}
	n, err := marks.Prune(ctx, time.Now().Add(-24*time.Hour))
	require.NoError(t, err)
	assert.EqualValues(t, 1, n)
	left, err := marks.Endpoint(ctx, origin)
	require.NoError(t, err)
	assert.Len(t, left, 2, "the recent marks stay")
}

// A Migrate that fails (here: its schema not made yet) leaves no lock
// behind: another process migrating next is not held up for good.
func TestMigrate_AFailedMigrationHoldsNoLock(t *testing.T) {
	t.Parallel()
	pool, schema := testDB(t)
	ctx := context.Background()
	later := schema + "_later"
	t.Cleanup(func() { pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS "`+later+`" CASCADE`) })
	require.Error(t, riverhook.Migrate(ctx, pool, later), "its schema does not exist yet")

	_, err := pool.Exec(ctx, `CREATE SCHEMA "`+later+`"`)
	require.NoError(t, err)
	other, err := pgxpool.New(ctx, testdb.URL(t)) // another process
	require.NoError(t, err)
	defer other.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	assert.NoError(t, riverhook.Migrate(ctx, other, later), "not held up by the failed one's lock")
}

// Migrate in the caller's transaction (as rivermigrate's MigrateTx allows
// for River's tables) leaves the transaction's search_path as it was: the
// caller's later statements there find their own tables.
func TestMigrate_InATransactionKeepsItsSearchPath(t *testing.T) {
	t.Parallel()
	pool, schema := testDB(t)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	var before, after string
	require.NoError(t, tx.QueryRow(ctx, `SELECT current_setting('search_path')`).Scan(&before))
	require.NoError(t, riverhook.Migrate(ctx, tx, schema))
	require.NoError(t, tx.QueryRow(ctx, `SELECT current_setting('search_path')`).Scan(&after))
	assert.Equal(t, before, after)
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, riverhook.NewEndpointMarks(pool, schema).Mark(ctx, webhook.EndpointHealth{Endpoint: "https://a.example.com:443", Changed: time.Now()}))
}
