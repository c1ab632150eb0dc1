package riverhook_test

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook/internal/testdb"
	"github.com/signedhook/webhook/webhooktest"
)

// pgVersions is the README's PostgreSQL recipe for webhook.LastWriterWins:
// a VersionStore in a table, shared by every instance of a receiver.
type pgVersions struct {
	pool  *pgxpool.Pool
	table string
}

func (s pgVersions) Last(ctx context.Context, key string) (time.Time, bool, error) {
	var last time.Time
	err := s.pool.QueryRow(ctx, `SELECT version FROM `+s.table+` WHERE key = $1`, key).Scan(&last)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, nil
	}
	return last, err == nil, err
}

func (s pgVersions) Record(ctx context.Context, key string, version time.Time) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO `+s.table+` (key, version) VALUES ($1, $2)
		ON CONFLICT (key) DO UPDATE SET version = EXCLUDED.version WHERE `+s.table+`.version < EXCLUDED.version`, key, version)
	return err
}

// TestLastWriterWins_PostgreSQL runs two receiver instances on one
// PostgreSQL, each with LastWriterWins over the shared version table and the
// README's conditional upsert, and delivers a user's updates to them in a
// shuffled order, concurrently: the row ends at the newest update, and no
// update older than one applied before it was applied.
func TestLastWriterWins_PostgreSQL(t *testing.T) {
	pool, schema := testdb.Schema(t, "lww", false)
	ctx := context.Background()
	users, versions := schema+".users", schema+".webhook_versions"
	_, err := pool.Exec(ctx, `CREATE TABLE `+users+` (id text PRIMARY KEY, email text NOT NULL, updated_at timestamptz NOT NULL);
		CREATE TABLE `+versions+` (key text PRIMARY KEY, version timestamptz NOT NULL)`)
	require.NoError(t, err)

	_, err = pool.Exec(ctx, `CREATE SEQUENCE `+schema+`.applied`)
	require.NoError(t, err)
	var mu sync.Mutex
	applied := map[int64]time.Time{} // by the order the upsert changed the row
	saveUser := func(ctx context.Context, p webhook.Payload) error {
		// The sequence is read while the upsert holds the row's lock, so its
		// numbers are the order the row changed in; the order the calls
		// return in is not (two may return in the other order).
		var n int64
		err := pool.QueryRow(ctx, `INSERT INTO `+users+` (id, email, updated_at) VALUES ($1, $2, $3)
			ON CONFLICT (id) DO UPDATE SET email = EXCLUDED.email, updated_at = EXCLUDED.updated_at
			WHERE `+users+`.updated_at < EXCLUDED.updated_at
			RETURNING nextval('`+schema+`.applied')`, p.User.ID, p.User.Email, p.User.UpdatedAt.Time).Scan(&n)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // not newer: the row is left as it is
		}
		if err == nil {
			mu.Lock()
			applied[n] = p.User.UpdatedAt.Time
			mu.Unlock()
		}
		return err
	}
	const secret = "whsec_lww"
	instance := func() http.Handler {
		v, err := webhook.NewVerifier([]string{secret}, nil)
		require.NoError(t, err)
		on := webhook.LastWriterWins(saveUser, &webhook.LastWriterWinsOptions[webhook.Payload]{Store: pgVersions{pool, versions}})
		return webhook.NewHandler(v, on, nil)
	}
	receivers := []http.Handler{instance(), instance()}

	base := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	const updates = 60
	order := rand.Perm(updates)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < updates; i += 4 {
				p := webhook.SamplePayload(time.Now())
				p.User.ID, p.User.Email = "usr_lww", "ada+"+time.Duration(order[i]).String()+"@example.com"
				p.User.UpdatedAt = webhook.NewTime(base.Add(time.Duration(order[i]) * time.Second))
				rec := httptest.NewRecorder()
				receivers[i%2].ServeHTTP(rec, webhooktest.NewRequest(secret, p, time.Now()))
				assert.Equal(t, http.StatusOK, rec.Code)
			}
		})
	}
	wg.Wait()

	newest := base.Add((updates - 1) * time.Second)
	var email string
	var updated, recorded time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT email, updated_at FROM `+users+` WHERE id = 'usr_lww'`).Scan(&email, &updated))
	require.NoError(t, pool.QueryRow(ctx, `SELECT version FROM `+versions+` WHERE key = 'usr_lww'`).Scan(&recorded))
	assert.True(t, updated.Equal(newest), "the row holds the newest update, got %v", updated)
	assert.True(t, recorded.Equal(newest), "the version table holds the newest, got %v", recorded)
	assert.Equal(t, "ada+"+time.Duration(updates-1).String()+"@example.com", email)
	seq := slices.Sorted(maps.Keys(applied))
	require.NotEmpty(t, seq)
	for i := 1; i < len(seq); i++ {
		assert.True(t, applied[seq[i]].After(applied[seq[i-1]]), "update %v applied after a newer one, %v", applied[seq[i]], applied[seq[i-1]])
	}
}
