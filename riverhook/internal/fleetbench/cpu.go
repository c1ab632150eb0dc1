package main

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/signedhook/webhook/riverhook"
)

// The implementations the cpu scenario measures, in the order it runs them.
const (
	implNop       = "nop"             // River's no-op worker: a trivial kind's job, doing nothing
	implInProcess = "inprocess"       // Sender.Send without River, 32 at once in each of as many processes as River's
	implPlain     = "riverhook"       // riverhook's Worker with no options, the Sender without health
	implFleet     = "riverhook-fleet" // the README's fleet options: the bound with places, health with marks
)

// cpuPhase is what one implementation cost.
type cpuPhase struct {
	procs   int
	n       int
	cpu     time.Duration // the processes' user and system CPU
	allocs  uint64        // the processes' heap allocations, bytes
	gcs     uint64        // the processes' garbage collections
	machine time.Duration // the machine's, PostgreSQL's and this process's included
	took    time.Duration
	sanity  sanity
	runs    float64 // job runs per job, through River
}

// cpu measures the CPU time per delivery of the worker processes (their
// rusage) delivering CPUN deliveries to an endpoint answering at once,
// beside what River costs with a worker doing nothing plus what the
// delivery costs in process, measured in the same run: the ratio is
// riverhook / (nop + inprocess). Each runs on CPUK processes, each
// process its share of the deliveries and of the rate, as River's workers
// share them.
//
// Every implementation's processes start first and each makes CPUWarm
// deliveries not counted. Then the CPUN deliveries are made in CPURounds
// rounds, each implementation a share of them in turn: what the machine
// does meanwhile (its other tenants, its clock's speed) falls on all of
// them alike, where implementations measured one after the other, for
// seconds each, differed by 30% between runs of the same build.
func (b *bench) cpu(ctx context.Context) ([]result, error) {
	cfg := b.cfg
	impls := []string{implNop, implInProcess, implPlain, implFleet}
	meters := make([]*cpuMeter, 0, len(impls))
	defer func() {
		for _, m := range meters {
			m.close()
		}
	}()
	for _, impl := range impls {
		b.logf("cpu, %s: starting, %d deliveries to warm up", impl, cfg.CPUWarm)
		m, err := b.startCPU(ctx, impl)
		if err != nil {
			return nil, fmt.Errorf("cpu, %s: %w", impl, err)
		}
		meters = append(meters, m)
		if cfg.CPUWarm > 0 {
			if err := m.deliver(ctx, "warm", cfg.CPUWarm, false); err != nil {
				return nil, fmt.Errorf("cpu, %s, warming up: %w", impl, err)
			}
		}
	}
	rounds := min(cfg.CPURounds, cfg.CPUN)
	b.logf("cpu: %d deliveries each, in %d rounds", cfg.CPUN, rounds)
	for r := range rounds {
		count := cfg.CPUN/rounds + btoi(r < cfg.CPUN%rounds)
		for _, m := range meters {
			if err := m.deliver(ctx, fmt.Sprintf("cpu%d-", r), count, true); err != nil {
				return nil, fmt.Errorf("cpu, %s, round %d: %w", m.impl, r+1, err)
			}
		}
	}
	phases := map[string]cpuPhase{}
	for _, m := range meters {
		if err := m.finish(ctx); err != nil {
			return nil, fmt.Errorf("cpu, %s: %w", m.impl, err)
		}
		phases[m.impl] = m.p
	}
	per := func(d time.Duration, n int) float64 { return float64(d.Microseconds()) / float64(n) }
	floor := per(phases[implNop].cpu, cfg.CPUN) + per(phases[implInProcess].cpu, cfg.CPUN)
	machineFloor := per(phases[implNop].machine, cfg.CPUN) + per(phases[implInProcess].machine, cfg.CPUN)
	var results []result
	for _, impl := range impls {
		p := phases[impl]
		cpu, machine := per(p.cpu, p.n), per(p.machine, p.n)
		r := result{
			Name: fmt.Sprintf("cpu/impl=%s-%d", impl, p.procs), N: p.n,
			Metrics: []metric{
				{cpu, "cpu-µs/delivery"},
				{machine, "machine-cpu-µs/delivery"},
				{float64(p.n) / p.took.Seconds(), "deliveries/s"},
				{float64(p.allocs) / float64(p.n), "B/delivery"},
				{1000 * float64(p.gcs) / float64(p.n), "GCs/1000-deliveries"},
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

// paced calls do for n items: at once without a rate; with one (a
// second), every 10 ms for those due by then, so that a call that took
// longer is caught up on by the next.
func paced(ctx context.Context, n, rate int, do func(from, n int) error) error {
	if rate == 0 {
		return do(0, n)
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	for done := 0; done < n; {
		due := min(n, dueBy(time.Since(start), rate))
		if due > done {
			if err := do(done, due-done); err != nil {
				return err
			}
			done = due
		}
		if done == n {
			return nil // not a tick more
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// dueBy returns how many items at rate a second are due after elapsed:
// the first at once. It counts in integers (a float product rounded down
// came one short, 0.29*100 is 28.999…) and saturates where the product
// would not fit.
func dueBy(elapsed time.Duration, rate int) int {
	hi, lo := bits.Mul64(uint64(max(elapsed, 0)), uint64(rate))
	if hi >= uint64(time.Second) {
		return math.MaxInt
	}
	due, _ := bits.Div64(hi, lo, uint64(time.Second))
	return int(min(due, math.MaxInt-1)) + 1
}

// roundLimit is how long a round of count deliveries at rate a second
// (0: at once) may take: its pacing's time, then ten minutes.
func roundLimit(count, rate int) time.Duration {
	limit := 10 * time.Minute
	if rate > 0 && count > 1 {
		limit += time.Duration(float64(count-1) / float64(rate) * float64(time.Second))
	}
	return limit
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// cpuMeter is one implementation's processes in the cpu scenario, and what
// its counted deliveries cost so far.
type cpuMeter struct {
	b      *bench
	impl   string
	db     *scenarioDB // nil in process
	f      fleet       // River's processes, or those delivering in process
	inproc bool
	jobs   int // jobs inserted so far, warm-up included
	p      cpuPhase
}

// startCPU starts impl's processes, on a schema of their own for River.
func (b *bench) startCPU(ctx context.Context, impl string) (*cpuMeter, error) {
	m := &cpuMeter{b: b, impl: impl, p: cpuPhase{procs: b.cfg.CPUK}}
	if impl == implInProcess {
		// As many processes as River's, each its share: one process at
		// the whole rate writes more streams per system call on its HTTP/2
		// connection (at 2,000 a second riverhook measured 1.15x against
		// a floor in one process, 1.00x against one on two).
		f, err := b.startFleet(ctx, b.cfg.CPUK, childConfig{Role: roleInProcess})
		if err != nil {
			return nil, err
		}
		m.inproc, m.f = true, f
		return m, nil
	}
	db, err := b.newSchema(ctx, 0)
	if err != nil {
		return nil, err
	}
	child := b.workerConfig(db.schema, impl == implFleet, b.cfg.Cooldown)
	if impl == implNop {
		child.Role = roleNop
	}
	f, err := b.startFleet(ctx, b.cfg.CPUK, child)
	if err != nil {
		db.drop()
		return nil, err
	}
	m.db, m.f = db, f
	return m, nil
}

// deliver makes count deliveries, ids prefix and a number, and waits until
// they have arrived (none for River's no-op worker) and, through River,
// their jobs have completed. Counted, their cost is added to the meter's.
func (m *cpuMeter) deliver(ctx context.Context, prefix string, count int, counted bool) error {
	b, cfg := m.b, m.b.cfg
	arrive := count
	if m.impl == implNop {
		arrive = 0
	}
	b.ep.reset(0, arrive)
	s0, err := m.f.stats(ctx)
	if err != nil {
		return err
	}
	m0, t0 := machineCPU(), time.Now()
	var s1 childStats
	rate := 0
	if counted {
		rate = cfg.CPURate
	}
	if m.inproc {
		if s1, err = m.send(ctx, prefix, count, rate); err != nil {
			return err
		}
		if failed := s1.Failed - s0.Failed; failed > 0 {
			return fmt.Errorf("%d of %d Sends failed", failed, count)
		}
	} else {
		insert := func(from, n int) error {
			if m.impl == implNop {
				return insertNops(ctx, m.db.client, prefix, from, n)
			}
			return insertDeliveriesFrom(ctx, m.db.client, prefix, from, n, cfg.CPUConns)
		}
		if err := paced(ctx, count, rate, insert); err != nil {
			return err
		}
		m.jobs += count
		if err := b.ep.waitDone(ctx, 10*time.Minute, "cpu"); err != nil {
			return err
		}
		if s1, err = m.f.waitCompleted(ctx, m.jobs, 10*time.Minute); err != nil {
			return err
		}
	}
	if !counted {
		return nil
	}
	m.p.machine += machineCPU() - m0
	m.p.took += time.Since(t0)
	m.p.cpu += s1.CPU - s0.CPU
	m.p.allocs += s1.Allocs - s0.Allocs
	m.p.gcs += s1.GCs - s0.GCs
	m.p.n += count
	e := b.ep.counts()
	m.p.sanity.Want += arrive
	m.p.sanity.Arrived += e.Distinct
	m.p.sanity.Requests += e.Requests
	m.p.sanity.BadSig += e.BadSig
	return nil
}

// send makes count deliveries in process, at rate a second (0: at once),
// shared by the processes (splitRound), and returns the sum of their
// stats: a process given none answers its stats.
func (m *cpuMeter) send(ctx context.Context, prefix string, count, rate int) (childStats, error) {
	counts, rates := splitRound(count, rate, len(m.f))
	return m.f.eachIndex(func(j int, p *proc) (childStats, error) {
		n, r := counts[j], rates[j]
		if n == 0 {
			return p.ask(ctx, "stats", 30*time.Second)
		}
		cmd := fmt.Sprintf("send %s%d- %d 32 %d", prefix, j, n, m.b.cfg.CPUConns)
		if r > 0 {
			cmd += fmt.Sprintf(" %d", r)
		}
		return p.ask(ctx, cmd, roundLimit(n, r))
	})
}

// splitRound shares a round of count deliveries at rate a second (0: at
// once) among k processes, so that together they go at rate and end when
// River's pacing of the round does: process j is given share(rate, k, j)
// a second (under k a second, the first rate processes 1 each, the others
// none) and the deliveries in proportion to its rate. Shares of both with
// each process at least 1 a second made k a second of a rate under k, and
// of a rate k does not divide (3 over 2) gave the process at the lesser
// rate as many deliveries, and the round half as long again.
func splitRound(count, rate, k int) (counts, rates []int) {
	counts, rates = make([]int, k), make([]int, k)
	if rate == 0 {
		for j := range k {
			counts[j] = share(count, k, j)
		}
		return counts, rates
	}
	given, before := 0, 0
	for j := range k {
		rates[j] = share(rate, k, j)
		given += rates[j]
		upTo := mulDiv(count, given, rate)
		counts[j], before = upTo-before, upTo
	}
	return counts, rates
}

// mulDiv is a*b/c rounded down, for b <= c: the product in 128 bits.
func mulDiv(a, b, c int) int {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int(q)
}

// share is the j-th of k shares of n, the first n%k one more.
func share(n, k, j int) int {
	return n/k + btoi(j < n%k)
}

// finish stops the processes and, for River, tallies the jobs.
func (m *cpuMeter) finish(ctx context.Context) error {
	final, err := m.f.stop(ctx)
	if err != nil || m.inproc {
		return err
	}
	kind := riverhook.Kind
	if m.impl == implNop {
		kind = nopArgs{}.Kind()
	}
	t, err := tallyJobs(ctx, m.db.client, kind)
	if err != nil {
		return err
	}
	m.p.sanity.Jobs, m.p.sanity.Completed, m.p.sanity.Runs, m.p.sanity.Counted = t.Jobs, t.Completed, t.Runs, int(final.Runs)
	m.p.runs = float64(t.Runs) / float64(max(t.Jobs, 1))
	return nil
}

// close kills what is still running and drops the schema.
func (m *cpuMeter) close() {
	m.f.kill()
	if m.db != nil {
		m.db.drop()
	}
}

// cpuMedians returns a summary line per riverhook implementation measured
// more than once: the median of its runs' ratios to the floors, each run's
// to its own, and the runs' ratios in order. One run's ratio moves with
// what the machine does meanwhile; the median of runs in turns less.
func cpuMedians(results []result) []string {
	ratios := map[string][]float64{}
	var names []string
	for _, r := range results {
		for _, m := range r.Metrics {
			if m.Unit != "x-nop+inprocess" {
				continue
			}
			if _, ok := ratios[r.Name]; !ok {
				names = append(names, r.Name)
			}
			ratios[r.Name] = append(ratios[r.Name], m.Value)
		}
	}
	var lines []string
	for _, name := range names {
		rs := ratios[name]
		if len(rs) < 2 {
			continue
		}
		texts := make([]string, len(rs))
		for i, v := range rs {
			texts[i] = fmt.Sprintf("%.2fx", v)
		}
		m := median(rs)
		lines = append(lines, fmt.Sprintf("CPU, %s, the median of %d runs: %.2fx of River's no-op worker plus the delivery in process (target <= 1.1x: %s); the runs: %s",
			strings.TrimPrefix(name, "cpu/impl="), len(rs), m, verdict(m <= 1.1), strings.Join(texts, ", ")))
	}
	return lines
}

// median returns the median of vs, which it sorts.
func median(vs []float64) float64 {
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}
