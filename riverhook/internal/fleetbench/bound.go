package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
)

// bound measures a slow endpoint's deliveries through k worker processes
// with the fleet's options: the peak of attempts in flight at the endpoint
// (the bound across processes holds when it is at most the bound), the
// deliveries per second against what the bound allows (bound over
// latency), and River's job runs per delivery.
func (b *bench) bound(ctx context.Context, k int, memory bool) (result, error) {
	cfg := b.cfg
	db, err := b.newSchema(ctx, 0)
	if err != nil {
		return result{}, err
	}
	defer db.drop()
	if err := b.ep.answer(); err != nil {
		return result{}, err
	}
	b.ep.reset(cfg.Latency, cfg.N)
	wc := b.workerConfig(db.schema, true, cfg.Cooldown)
	wc.Memory = memory
	f, err := b.startFleet(ctx, k, wc)
	if err != nil {
		return result{}, err
	}
	defer f.kill()

	b.logf("bound, %d worker processes: %d deliveries to an endpoint answering in %v, bound %d", k, cfg.N, cfg.Latency, cfg.Bound)
	allows := float64(cfg.Bound) / cfg.Latency.Seconds() // deliveries/s
	start := time.Now()
	if err := insertDeliveries(ctx, db.client, "b", cfg.N, 1); err != nil {
		return result{}, err
	}
	limit := 5*time.Duration(float64(cfg.N)/allows*float64(time.Second)) + time.Minute
	if err := b.ep.waitDone(ctx, limit, "bound"); err != nil {
		return result{}, err
	}
	c := b.ep.counts()
	took := c.LastDone.Sub(start)
	final, t, err := f.finish(ctx, db.client, cfg.N)
	if err != nil {
		return result{}, err
	}

	rate := float64(cfg.N) / took.Seconds()
	runs := float64(t.Runs) / float64(cfg.N)
	r := result{
		Name: fmt.Sprintf("bound-%s%d", storeName(memory), k), N: cfg.N,
		Metrics: []metric{
			{rate, "deliveries/s"},
			{rate / allows, "x-bound/latency"},
			{float64(c.Peak), "peak-in-flight"},
			{runs, "runs/delivery"},
			{float64(t.Snoozes) / float64(cfg.N), "snoozes/delivery"},
		},
		sanity: sanity{Want: cfg.N, Arrived: c.Distinct, Requests: c.Requests, BadSig: c.BadSig, Jobs: t.Jobs, Completed: t.Completed,
			Runs: t.Runs, Counted: int(final.Runs)},
	}
	r.Summary = fmt.Sprintf("Bound, K=%d: peak %d in flight (target <= %d: %s); %.1f deliveries/s, %.2fx of the %.0f/s that %d at %v allow (target >= 0.9x: %s); %.2f job runs per delivery, %.2f of them snoozes (target <= 2: %s)",
		k, c.Peak, cfg.Bound, verdict(c.Peak <= cfg.Bound), rate, rate/allows, allows, cfg.Bound, cfg.Latency, verdict(rate/allows >= 0.9),
		runs, float64(t.Snoozes)/float64(cfg.N), verdict(runs <= 2))
	return r, nil
}

// outage measures a backlog waiting for an endpoint that refuses
// connections, with endpoint health on and its marks shared: River's job
// runs per second while it is down, then, once it answers (in
// DrainLatency), how fast the backlog drains against what the endpoint
// takes (bound over latency).
func (b *bench) outage(ctx context.Context, memory bool) (result, error) {
	cfg := b.cfg
	k := cfg.OutageK
	if memory {
		k = 1 // the in-memory store is one process's
	}
	db, err := b.newSchema(ctx, 0)
	if err != nil {
		return result{}, err
	}
	defer db.drop()
	b.ep.refuse()
	// The deliveries that find the endpoint down: endpoint health marks it
	// down after DownAfter refusals in a row, each a delivery's attempt
	// (which it retries).
	const learn = webhook.DefaultDownAfter + 3
	want := cfg.Backlog + learn
	b.ep.reset(cfg.DrainLatency, want)
	wc := b.workerConfig(db.schema, true, cfg.Cooldown)
	wc.Memory = memory
	f, err := b.startFleet(ctx, k, wc)
	if err != nil {
		return result{}, err
	}
	defer f.kill()

	b.logf("outage, %d worker processes: %d deliveries find the endpoint down", k, learn)
	if err := insertDeliveries(ctx, db.client, "first", learn, 1); err != nil {
		return result{}, err
	}
	endpoint := connection(b.ep.addr, secret, connectionID(0, 1)).Endpoint()
	if err := waitMarkedDown(ctx, riverhook.NewEndpointMarks(b.pool, db.schema), endpoint); err != nil {
		return result{}, err
	}
	s0, err := f.stats(ctx)
	if err != nil {
		return result{}, err
	}
	b.logf("outage: %d deliveries wait, %v, the last %v counted", cfg.Backlog, cfg.Down, cfg.Window)
	inserted := time.Now()
	if err := insertDeliveries(ctx, db.client, "o", cfg.Backlog, 1); err != nil {
		return result{}, err
	}
	// The window starts once every job has learned the endpoint is down:
	// River's rows say each was attempted.
	if err := waitAttempted(ctx, db.client, want); err != nil {
		return result{}, err
	}
	if err := sleep(ctx, time.Until(inserted.Add(cfg.Down-cfg.Window))); err != nil {
		return result{}, err
	}
	s1, err := f.stats(ctx)
	if err != nil {
		return result{}, err
	}
	t1 := time.Now()
	if err := sleep(ctx, cfg.Window); err != nil {
		return result{}, err
	}
	s2, err := f.stats(ctx)
	if err != nil {
		return result{}, err
	}
	waiting := float64(s2.Runs-s1.Runs) / time.Since(t1).Seconds()
	down := time.Since(inserted)
	downRuns := float64(s2.Runs-s0.Runs) / float64(cfg.Backlog)

	b.logf("outage: the endpoint answers again, in %v", cfg.DrainLatency)
	b.ep.resetPeak()
	if err := b.ep.answer(); err != nil {
		return result{}, err
	}
	back := time.Now()
	if err := b.ep.waitDone(ctx, cfg.DrainLimit, "outage"); err != nil {
		return result{}, err
	}
	c := b.ep.counts()
	s3, err := f.stats(ctx)
	if err != nil {
		return result{}, err
	}
	final, t, err := f.finish(ctx, db.client, want)
	if err != nil {
		return result{}, err
	}

	takes := float64(cfg.Bound) / cfg.DrainLatency.Seconds()
	fromBack := float64(want) / c.LastDone.Sub(back).Seconds()
	drain := fromBack
	if c.LastDone.After(c.First) {
		drain = float64(want-1) / c.LastDone.Sub(c.First).Seconds()
	}
	firstAfter := c.First.Sub(back)
	r := result{
		Name: fmt.Sprintf("outage-%s%d", storeName(memory), k), N: cfg.Backlog,
		Metrics: []metric{
			{waiting, "waiting-runs/s"},
			{downRuns, "down-runs/delivery"},
			{drain, "drain-deliveries/s"},
			{drain / takes, "x-bound/latency"},
			{fromBack / takes, "x-bound/latency-from-return"},
			{firstAfter.Seconds(), "s-to-first-arrival"},
			{float64(c.Peak), "peak-in-flight"},
			{float64(s3.Runs-s2.Runs) / float64(want), "drain-runs/delivery"},
			{float64(t.Runs) / float64(want), "runs/delivery"},
		},
		sanity: sanity{Want: want, Arrived: c.Distinct, Requests: c.Requests, BadSig: c.BadSig, Jobs: t.Jobs, Completed: t.Completed,
			Runs: t.Runs, Counted: int(final.Runs)},
	}
	r.Summary = fmt.Sprintf("Outage, K=%d: %d waiting cost %.1f job runs/s over the last %v of %.0f s refused (target <= 50: %s), %.1f runs each over the whole %.0f s; back, answering in %v, the first arrived after %.1f s, then %.1f deliveries/s, %.3fx of the %.0f/s that %d at %v take (target >= 0.8x: %s; %.3fx counted from its return); peak %d in flight; %.2f runs per delivery while draining, %.2f in all",
		k, cfg.Backlog, waiting, cfg.Window, down.Seconds(), verdict(waiting <= 50), downRuns, down.Seconds(), cfg.DrainLatency, firstAfter.Seconds(), drain, drain/takes, takes, cfg.Bound, cfg.DrainLatency,
		verdict(drain/takes >= 0.8), fromBack/takes, c.Peak, float64(s3.Runs-s2.Runs)/float64(want), float64(t.Runs)/float64(want))
	return r, nil
}

// waitMarkedDown returns once endpoint's origin is marked down in marks,
// or an error after a minute.
func waitMarkedDown(ctx context.Context, marks *riverhook.EndpointMarks, endpoint string) error {
	for deadline := time.Now().Add(time.Minute); ; {
		hs, err := marks.Endpoint(ctx, endpoint)
		if err != nil {
			return err
		}
		if len(hs) > 0 && !hs[0].PerURL && hs[0].Down { // the origin's mark, first
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("outage: the endpoint was not marked down within a minute")
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// waitAttempted returns once want delivery jobs have run, or an error
// after 5 minutes.
func waitAttempted(ctx context.Context, client *river.Client[pgx.Tx], want int) error {
	for deadline := time.Now().Add(5 * time.Minute); ; {
		t, err := tallyJobs(ctx, client, riverhook.Kind)
		if err != nil {
			return err
		}
		if t.Attempted == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("outage: %d of %d jobs ran within 5 minutes", t.Attempted, want)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// storeName is the prefix of a result's name for the in-memory store.
func storeName(memory bool) string {
	if memory {
		return "mem-"
	}
	return ""
}
