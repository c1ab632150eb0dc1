package main

import (
	"context"
	"fmt"
	"time"
)

// rate measures a backlog of -rate-n deliveries to one connection whose own
// RateLimit is perSecond, through k worker processes (memory: one, on the
// in-memory store): the rate its attempts begin at, by their signed
// timestamps, against perSecond, and the most that began within any
// second, which must never pass perSecond.
func (b *bench) rate(ctx context.Context, perSecond float64, k int, memory bool) (result, error) {
	cfg := b.cfg
	db, err := b.newSchema(ctx, 0)
	if err != nil {
		return result{}, err
	}
	defer db.drop()
	if err := b.ep.answer(); err != nil {
		return result{}, err
	}
	b.ep.reset(0, cfg.RateN)
	wc := b.workerConfig(db.schema, true, cfg.Cooldown)
	wc.Memory, wc.Rate = memory, perSecond
	f, err := b.startFleet(ctx, k, wc)
	if err != nil {
		return result{}, err
	}
	defer f.kill()

	b.logf("rate, %d worker processes%s: %d deliveries to one connection at %v a second", k, map[bool]string{true: " (in memory)"}[memory], cfg.RateN, perSecond)
	if err := insertDeliveries(ctx, db.client, "r", cfg.RateN, 1); err != nil {
		return result{}, err
	}
	limit := 2*time.Duration(float64(cfg.RateN)/perSecond*float64(time.Second)) + time.Minute
	if err := b.ep.waitDone(ctx, limit, "rate"); err != nil {
		return result{}, err
	}
	c := b.ep.counts()
	final, t, err := f.finish(ctx, db.client, cfg.RateN)
	if err != nil {
		return result{}, err
	}
	starts := b.ep.startTimes()
	span := starts[len(starts)-1].Sub(starts[0])
	got := float64(len(starts)-1) / span.Seconds()
	most := mostWithin(starts, time.Second)
	r := result{
		Name: fmt.Sprintf("rate-%g/%s%d", perSecond, storeName(memory), k), N: cfg.RateN,
		Metrics: []metric{
			{got, "deliveries/s"},
			{got / perSecond, "x-rate"},
			{float64(most), "most-in-a-second"},
			{float64(t.Runs) / float64(cfg.RateN), "runs/delivery"},
		},
		sanity: sanity{Want: cfg.RateN, Arrived: c.Distinct, Requests: c.Requests, BadSig: c.BadSig, Jobs: t.Jobs, Completed: t.Completed,
			Runs: t.Runs, Counted: int(final.Runs)},
	}
	r.Summary = fmt.Sprintf("Rate %g/s, K=%d%s: a backlog of %d began at %.2f a second, %.3fx (target 0.95-1.0x: %s); at most %d within a second (target <= %g: %s); %.2f runs per delivery",
		perSecond, k, map[bool]string{true: " in memory"}[memory], cfg.RateN, got, got/perSecond, verdict(got/perSecond >= 0.95 && got/perSecond <= 1.0+1e-9),
		most, perSecond, verdict(float64(most) <= perSecond), float64(t.Runs)/float64(cfg.RateN))
	return r, nil
}

// mostWithin returns the most of the sorted times that fall within any
// window of the given width, [t, t+width).
func mostWithin(times []time.Time, width time.Duration) int {
	most, j := 0, 0
	for i := range times {
		for times[i].Sub(times[j]) >= width {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}
