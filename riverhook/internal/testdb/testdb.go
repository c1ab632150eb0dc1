// Package testdb gives riverhook's tests a real PostgreSQL: a fresh schema
// per test on TEST_DATABASE_URL, migrated with rivermigrate and dropped when
// the test ends.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// URL returns TEST_DATABASE_URL. Without it the test is skipped, or fails
// under CI=true, where .ci/run always provides a database.
func URL(t testing.TB) string {
	t.Helper()
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("TEST_DATABASE_URL is not set: .ci/run starts a PostgreSQL and sets it")
		}
		t.Skip("TEST_DATABASE_URL is not set; run .ci/run, or point it at a PostgreSQL")
	}
	return url
}

// Schema returns a pool on TEST_DATABASE_URL and the name of a new schema
// whose name starts with prefix. With migrate, River's tables are created
// in it. Both are released when the test ends.
func Schema(t testing.TB, prefix string, migrate bool) (*pgxpool.Pool, string) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, URL(t))
	if err != nil {
		t.Fatal(err)
	}
	var b [6]byte
	rand.Read(b[:])
	schema := prefix + "_" + hex.EncodeToString(b[:])
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		pool.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		pool.Close()
	})
	if migrate {
		migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema, Logger: Quiet()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
			t.Fatal(err)
		}
	}
	return pool, schema
}

// Quiet returns a logger that discards everything.
func Quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
