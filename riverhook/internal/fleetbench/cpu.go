package main

import (
	"context"
	"fmt"
	"time"

	"github.com/signedhook/webhook/riverhook"
)

// The implementations the cpu scenario measures, in the order it runs them.
const (
	implNop       = "nop"             // River's no-op worker: a trivial kind's job, doing nothing
	implInProcess = "inprocess"       // Sender.Send, 32 at once, in one process without River
	implPlain     = "riverhook"       // riverhook's Worker with no options, the Sender without health
	implFleet     = "riverhook-fleet" // the README's fleet options: the bound with places, health with marks
)

// cpuPhase is what one implementation cost.
type cpuPhase struct {
	procs   int
	n       int
	cpu     time.Duration // the processes' user and system CPU
	machine time.Duration // the machine's, PostgreSQL's and this process's included
	took    time.Duration
	sanity  sanity
	runs    float64 // job runs per job, through River
}

// cpu measures the CPU time per delivery of the worker processes (their
// rusage) delivering CPUN deliveries to an endpoint answering at once,
// beside what River costs with a worker doing nothing plus what the
// delivery costs in process, measured in the same run: the ratio is
// riverhook / (nop + inprocess).
func (b *bench) cpu(ctx context.Context) ([]result, error) {
	cfg := b.cfg
	phases := map[string]cpuPhase{}
	for _, impl := range []string{implNop, implInProcess, implPlain, implFleet} {
		b.logf("cpu, %s: %d deliveries", impl, cfg.CPUN)
		p, err := b.cpuPhase(ctx, impl)
		if err != nil {
			return nil, fmt.Errorf("cpu, %s: %w", impl, err)
		}
		phases[impl] = p
	}
	per := func(d time.Duration, n int) float64 { return float64(d.Microseconds()) / float64(n) }
	floor := per(phases[implNop].cpu, cfg.CPUN) + per(phases[implInProcess].cpu, cfg.CPUN)
	machineFloor := per(phases[implNop].machine, cfg.CPUN) + per(phases[implInProcess].machine, cfg.CPUN)
	var results []result
	for _, impl := range []string{implNop, implInProcess, implPlain, implFleet} {
		p := phases[impl]
		cpu, machine := per(p.cpu, p.n), per(p.machine, p.n)
		r := result{
			Name: fmt.Sprintf("cpu/impl=%s-%d", impl, p.procs), N: p.n,
			Metrics: []metric{
				{cpu, "cpu-µs/delivery"},
				{machine, "machine-cpu-µs/delivery"},
				{float64(p.n) / p.took.Seconds(), "deliveries/s"},
			},
			sanity: p.sanity,
		}
		if impl == implPlain || impl == implFleet {
			r.Metrics = append(r.Metrics, metric{cpu / floor, "x-nop+inprocess"}, metric{machine / machineFloor, "x-nop+inprocess-machine"},
				metric{p.runs, "runs/delivery"})
			r.Summary = fmt.Sprintf("CPU, %s, K=%d: %.0f µs of the worker processes' CPU per delivery, %.2fx of River's no-op worker (%.0f µs) plus the delivery in process (%.0f µs) (target <= 1.1x: %s); the machine's, PostgreSQL's included: %.0f µs, %.2fx of %.0f µs",
				impl, p.procs, cpu, cpu/floor, per(phases[implNop].cpu, cfg.CPUN), per(phases[implInProcess].cpu, cfg.CPUN), verdict(cpu/floor <= 1.1),
				machine, machine/machineFloor, machineFloor)
		}
		results = append(results, r)
	}
	return results, nil
}

func (b *bench) cpuPhase(ctx context.Context, impl string) (cpuPhase, error) {
	cfg := b.cfg
	n := cfg.CPUN
	db, err := b.newSchema(ctx, 0)
	if err != nil {
		return cpuPhase{}, err
	}
	defer db.drop()
	if err := b.ep.answer(); err != nil {
		return cpuPhase{}, err
	}
	p := cpuPhase{procs: cfg.CPUK, n: n}

	if impl == implInProcess {
		p.procs = 1
		b.ep.reset(0, n)
		c, err := b.start(ctx, childConfig{Role: roleInProcess})
		if err != nil {
			return p, err
		}
		defer c.kill()
		s0, err := c.ask(ctx, "stats", 30*time.Second)
		if err != nil {
			return p, err
		}
		m0, t0 := machineCPU(), time.Now()
		s1, err := c.ask(ctx, fmt.Sprintf("send ip %d 32 %d", n, cfg.CPUConns), 10*time.Minute)
		if err != nil {
			return p, err
		}
		p.machine, p.took, p.cpu = machineCPU()-m0, time.Since(t0), s1.CPU-s0.CPU
		if _, err := c.stop(ctx); err != nil {
			return p, err
		}
		e := b.ep.counts()
		p.sanity = sanity{Want: n, Arrived: e.Distinct, Requests: e.Requests, BadSig: e.BadSig}
		if s1.Failed > 0 {
			return p, fmt.Errorf("%d of %d Sends failed", s1.Failed, n)
		}
		return p, nil
	}

	child := b.workerConfig(db.schema, impl == implFleet, cfg.Cooldown)
	want, kind := n, riverhook.Kind
	if impl == implNop {
		child.Role, want, kind = roleNop, 0, nopArgs{}.Kind()
	}
	b.ep.reset(0, want)
	f, err := b.startFleet(ctx, cfg.CPUK, child)
	if err != nil {
		return p, err
	}
	defer f.kill()
	s0, err := f.stats(ctx)
	if err != nil {
		return p, err
	}
	m0, t0 := machineCPU(), time.Now()
	if impl == implNop {
		err = insertNops(ctx, db.client, n)
	} else {
		err = insertDeliveries(ctx, db.client, "cpu", n, cfg.CPUConns)
	}
	if err != nil {
		return p, err
	}
	if err := b.ep.waitDone(ctx, 10*time.Minute, "cpu"); err != nil {
		return p, err
	}
	s1, err := f.waitCompleted(ctx, n, 10*time.Minute)
	if err != nil {
		return p, err
	}
	p.machine, p.took, p.cpu = machineCPU()-m0, time.Since(t0), s1.CPU-s0.CPU
	final, err := f.stop(ctx)
	if err != nil {
		return p, err
	}
	t, err := tallyJobs(ctx, db.client, kind)
	if err != nil {
		return p, err
	}
	e := b.ep.counts()
	p.sanity = sanity{Want: want, Arrived: e.Distinct, Requests: e.Requests, BadSig: e.BadSig, Jobs: t.Jobs, Completed: t.Completed,
		Runs: t.Runs, Counted: int(final.Runs)}
	p.runs = float64(t.Runs) / float64(n)
	return p, nil
}
