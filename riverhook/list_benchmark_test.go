package riverhook_test

import (
	"context"
	"testing"
	"time"

	"github.com/signedhook/webhook/riverhook"
)

// BenchmarkList measures a dashboard's queries on a table of 50,000
// deliveries, 10,000 of them to the connection listed: the first page of
// 50, a page 7,500 deliveries deep (by cursor), a page filtered by status,
// and the counts per status. A page costs the same however deep it is; the
// counts cost in proportion to the connection's jobs River holds (its
// retention bounds them).
//
// Measured on 2026-11-24 at d1bcab3 (2 cores of a shared Intel Xeon VM,
// PostgreSQL 15 on the same machine; medians of 3 runs, each page's 50
// attempt logs decoded): first page 1.89 ms, 7,500 deep 1.82 ms, filtered
// by status 1.81 ms; counts 30.3 ms, about 3 µs per job of the connection.
//
// Count reads each status apart since 2026-11-25, so that each count is
// bounded on its own: here, where all 10,000 of the connection's jobs wait,
// it reads them twice (waiting, and retrying, which no index tells apart
// from waiting), 1.5 to 2 times the single pass it replaced, which read
// 0 for a rare status past 500,000 jobs (same machine, interleaved runs,
// noisy: 37-56 ms before, 61-128 ms after). Where most jobs have ended, as
// on a connection with a history, the ended statuses stop at MaxCounted.
func BenchmarkList(b *testing.B) {
	if testing.Short() {
		b.Skip("inserts 50,000 jobs")
	}
	pool, schema := testDB(b)
	client := newClient(b, pool, schema, nil, nil)
	const total, mine = 50_000, 10_000
	insertMany(b, client, "d", total, func(i int) string {
		if i%(total/mine) == 0 {
			return "crm"
		}
		return "other-" + string(rune('a'+i%26))
	})
	if _, err := pool.Exec(context.Background(), "ANALYZE "+schema+".river_job"); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	first, err := riverhook.List(ctx, client, "crm", &riverhook.ListParams{Limit: 50})
	if err != nil || len(first.Deliveries) != 50 {
		b.Fatalf("first page: %v, %v", first, err)
	}
	deep := first.Next
	for range 150 { // 7,500 deliveries down
		page, err := riverhook.List(ctx, client, "crm", &riverhook.ListParams{Limit: 50, After: deep})
		if err != nil {
			b.Fatal(err)
		}
		deep = page.Next
	}
	for _, bc := range []struct {
		name string
		run  func() error
	}{
		{"page=first", func() error {
			_, err := riverhook.List(ctx, client, "crm", &riverhook.ListParams{Limit: 50})
			return err
		}},
		{"page=7500-deep", func() error {
			_, err := riverhook.List(ctx, client, "crm", &riverhook.ListParams{Limit: 50, After: deep})
			return err
		}},
		{"page=waiting", func() error {
			_, err := riverhook.List(ctx, client, "crm", &riverhook.ListParams{Limit: 50, Statuses: []riverhook.Status{riverhook.StatusWaiting}})
			return err
		}},
		{"count=24h", func() error {
			_, err := riverhook.Count(ctx, client, pool, "crm", time.Now().Add(-24*time.Hour))
			return err
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if err := bc.run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkOutcomes measures the console's charts of a connection on a
// table of 100,000 ended deliveries, 40,000 of them to the connection
// charted, ended over the last 7 days: as the console counts them (one
// count of the week by the hour), and as it did before (the last 24 hours
// by the hour, then the week by the day). Each reads every delivery of the
// connection that ended in its span, so a page view costs in proportion to
// them.
func BenchmarkOutcomes(b *testing.B) {
	if testing.Short() {
		b.Skip("inserts 100,000 jobs")
	}
	pool, schema := testDB(b)
	client := newClient(b, pool, schema, nil, nil)
	const total, mine = 100_000, 40_000
	insertMany(b, client, "d", total, func(i int) string {
		if i%(total/mine) == 0 {
			return "crm"
		}
		return "other-" + string(rune('a'+i%26))
	})
	ctx := context.Background()
	// Ended over the week, one in 50 given up, as River leaves them.
	if _, err := pool.Exec(ctx, `UPDATE `+schema+`.river_job SET state = CASE WHEN id % 50 = 0 THEN 'discarded' ELSE 'completed' END::`+schema+`.river_job_state,
		attempted_at = now() - (id % 604800) * interval '1 second', finalized_at = now() - (id % 604800) * interval '1 second'`); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+schema+".river_job"); err != nil {
		b.Fatal(err)
	}
	const day = 24 * time.Hour
	now := time.Now()
	week := now.Add(-7 * day).Truncate(day).Add(day)
	last24 := now.Add(-day).Truncate(time.Hour).Add(time.Hour)
	b.Run("charts=one-count", func(b *testing.B) {
		for b.Loop() {
			if _, err := riverhook.Outcomes(ctx, client, pool, "crm", week, time.Hour); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("charts=two-counts", func(b *testing.B) {
		for b.Loop() {
			if _, err := riverhook.Outcomes(ctx, client, pool, "crm", last24, time.Hour); err != nil {
				b.Fatal(err)
			}
			if _, err := riverhook.Outcomes(ctx, client, pool, "crm", week, day); err != nil {
				b.Fatal(err)
			}
		}
	})
}
