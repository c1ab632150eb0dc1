package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/signedhook/webhook/riverhook"
)

// latencyVariant is what a latency run sets: the worker processes'
// options (fleet: the README's fleet options; otherwise none), and the
// FetchCooldown of their River clients and of the API process's
// insert-only client, zero for River's default (100 ms). FetchPollInterval
// is River's default (1 s) throughout.
//
// Both cooldowns matter: a worker fetches at most once per its cooldown,
// and a client that inserts notifies the queue's workers (LISTEN/NOTIFY)
// at most once per its own cooldown (River's insertNotifyLimiter); a job
// inserted in between, or snoozed for less than River's scheduler interval
// (made available at once, due later), waits for the next notification, a
// fetch that other work triggers, or the poll.
type latencyVariant struct {
	fleet        bool
	workers, api time.Duration
}

// latencyVariants are what the latency scenario measures: with the fleet's
// options, a new user's River defaults, the README's 10 ms on the workers
// only (an API tier whose insert-only client keeps the default), and 10 ms
// on both; and 10 ms on both without options, the floor of the same run.
var latencyVariants = []latencyVariant{
	{true, 0, 0},
	{true, 10 * time.Millisecond, 0},
	{true, 10 * time.Millisecond, 10 * time.Millisecond},
	{false, 10 * time.Millisecond, 10 * time.Millisecond},
}

func (v latencyVariant) String() string {
	show := func(d time.Duration) string {
		if d == 0 {
			return river.FetchCooldownDefault.String()
		}
		return d.String()
	}
	options := "none"
	if v.fleet {
		options = "fleet"
	}
	return "options=" + options + "/workers=" + show(v.workers) + "/api=" + show(v.api)
}

// latency measures commit-to-arrival: this process, as the API tier,
// inserts Rate deliveries a second for For, each with InsertTx in a
// transaction of its own, and LatencyK worker processes deliver them to an endpoint answering at once. A delivery's
// latency is from its transaction's commit returning to its first byte
// reaching the endpoint's handler.
func (b *bench) latency(ctx context.Context, v latencyVariant) (result, error) {
	cfg := b.cfg
	db, err := b.newSchema(ctx, v.api)
	if err != nil {
		return result{}, err
	}
	defer db.drop()
	if err := b.ep.answer(); err != nil {
		return result{}, err
	}
	const warm = 20 // the connections made, the places' rows, the first marks read
	b.ep.reset(0, warm)
	f, err := b.startFleet(ctx, cfg.LatencyK, b.workerConfig(db.schema, v.fleet, v.workers))
	if err != nil {
		return result{}, err
	}
	defer f.kill()
	if err := insertDeliveries(ctx, db.client, "warm", warm, 1); err != nil {
		return result{}, err
	}
	if err := b.ep.waitDone(ctx, time.Minute, "latency warm-up"); err != nil {
		return result{}, err
	}

	total := max(1, int(cfg.For.Seconds()*float64(cfg.Rate)))
	b.logf("latency, %s: %d deliveries at %d/s over %d worker processes", v, total, cfg.Rate, cfg.LatencyK)
	b.ep.reset(0, total)
	commits := make([]time.Time, total)
	errs := make([]error, total)
	interval := time.Second / time.Duration(cfg.Rate)
	sem := make(chan struct{}, 16) // inserts under way at once, should one be slow
	var wg sync.WaitGroup
	start := time.Now()
	for i := range total {
		if err := sleep(ctx, time.Until(start.Add(time.Duration(i)*interval))); err != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			commits[i], errs[i] = insertTx(ctx, b, db.client, "l"+itoa(i))
		})
	}
	wg.Wait()
	inserted := float64(total) / time.Since(start).Seconds()
	if err := joinErrs(errs...); err != nil {
		return result{}, err
	}
	if err := b.ep.waitDone(ctx, time.Minute, "latency"); err != nil {
		return result{}, err
	}
	c := b.ep.counts()
	arrived := b.ep.arrivals()
	lat := make([]time.Duration, 0, total)
	for i := range total {
		lat = append(lat, arrived["l"+itoa(i)].Sub(commits[i]))
	}
	slices.Sort(lat)
	final, t, err := f.finish(ctx, db.client, warm+total)
	if err != nil {
		return result{}, err
	}

	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	p50, p90, p99, most := quantile(lat, 0.50), quantile(lat, 0.90), quantile(lat, 0.99), lat[len(lat)-1]
	r := result{
		Name: fmt.Sprintf("latency/%s-%d", v, cfg.LatencyK), N: total,
		Metrics: []metric{
			{ms(p50), "p50-ms"},
			{ms(p90), "p90-ms"},
			{ms(p99), "p99-ms"},
			{ms(most), "max-ms"},
			{inserted, "inserts/s"},
			{float64(t.Snoozes) / float64(t.Jobs), "snoozes/delivery"},
		},
		// The warm-up's deliveries were counted before the reset.
		sanity: sanity{Want: total, Arrived: c.Distinct, Requests: c.Requests, BadSig: c.BadSig, Jobs: t.Jobs - warm, Completed: t.Completed - warm,
			Runs: t.Runs, Counted: int(final.Runs)},
	}
	r.Summary = fmt.Sprintf("Latency, %s, K=%d: commit to arrival p50 %.1f ms, p90 %.1f ms, p99 %.1f ms (target <= 50 ms: %s), max %.1f ms, at %.0f inserts/s; %.2f snoozes per delivery",
		v, cfg.LatencyK, ms(p50), ms(p90), ms(p99), verdict(p99 <= 50*time.Millisecond), ms(most), inserted, float64(t.Snoozes)/float64(t.Jobs))
	return r, nil
}

// insertTx inserts delivery id as the API tier does, with InsertTx in a
// transaction of its own, and returns when its commit returned.
func insertTx(ctx context.Context, b *bench, client *river.Client[pgx.Tx], id string) (time.Time, error) {
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return time.Time{}, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := riverhook.InsertTx(ctx, client, tx, id, []string{connectionID(0, 1)}, payload(id), nil); err != nil {
		return time.Time{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return time.Time{}, err
	}
	return time.Now(), nil
}

// quantile returns the q-quantile of sorted (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
