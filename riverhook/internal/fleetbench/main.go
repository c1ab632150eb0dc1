// Fleetbench measures riverhook's deliveries as a deployment runs them:
// worker processes (this program, run again as its own children) and an
// API process (this one) on one PostgreSQL, delivering to an HTTPS
// endpoint this process serves on 127.0.0.1. It prints one line per
// scenario and run in Go's benchmark format, for benchstat, and a summary
// against the fleet's targets (issues 28 and 43):
//
//   - bound: an endpoint answering in -latency, -n deliveries, bound -bound
//     (MaxInFlightPerConnection with the places in PostgreSQL, endpoint
//     health with shared marks) over K = -k worker processes: the peak of
//     attempts in flight at the endpoint, deliveries per second against
//     bound/latency, River's job runs per delivery;
//   - outage: -backlog deliveries waiting for an endpoint that refuses
//     connections for -down: job runs per second over its last -window,
//     then, once it answers in -drain-latency, the drain rate against
//     bound/latency;
//   - rate: a backlog of -rate-n deliveries to one connection with its
//     own RateLimit, each of -rates, over 1 and 2 worker processes: the
//     rate its attempts began at, and the most within any second;
//   - crash: issue 43's fleet of 2 worker processes, a bound of 4 and an
//     endpoint answering in 300 ms, with a backlog of -crash-n; once a
//     quarter has arrived, the process holding the most places is killed
//     (SIGKILL): the time until a 1 s window after the kill holds 0.9x
//     of bound/latency, the deliveries in each second after it, the peak
//     in flight, how soon the database freed its places, and every
//     delivery arriving, the cut attempts once River's rescuer put their
//     jobs back (a minute to a minute and a half);
//   - cpu: the worker processes' CPU per delivery (their rusage) for
//     -cpu-n deliveries to an endpoint answering at once, beside River's
//     no-op worker plus Sender.Send without River, each on -cpu-k
//     processes sharing the load, in the same run: each
//     implementation's processes make -cpu-warm deliveries not counted,
//     then the -cpu-n in -cpu-rounds rounds, the implementations in turn,
//     each given -cpu-rate deliveries a second (0: as fast as each goes);
//     with -count, the summary gives the median of the runs' ratios;
//   - latency: commit-to-arrival percentiles at -rate deliveries a second
//     inserted by this process, each with InsertTx in its own transaction,
//     over -latency-k worker processes, with the fleet's options for
//     River's default fetch cooldown and the README's 10 ms, and without
//     options at 10 ms.
//
// Each scenario makes a schema of its own (rivermigrate and
// riverhook.Migrate) and drops it. The worker processes die with this one
// (Linux's parent-death signal, and the end of their standard input).
//
// Usage, from the riverhook module:
//
//	go run ./internal/fleetbench [-db URL] [-run bound,outage,rate,crash,cpu,latency] [-count N] [flags] | tee fleet.txt
//	benchstat fleet.txt
//
// FLEETBENCH_FLAGS holds flags read before the command line's, which
// override them: sizes for a command line written without them, such as
// the READMEs' (TestREADME_PipelineRuns runs it with
// FLEETBENCH_FLAGS='-run bound -n 8 -latency 50ms -k 1').
//
// With FLEETBENCH_CPUPROFILE set to a directory, each child process
// writes its CPU profile there (go tool pprof -top dir/worker-*.pprof),
// and at its end what it allocated (go tool pprof
// -sample_index=alloc_space -top dir/worker-*.allocs).
//
// -db defaults to $TEST_DATABASE_URL. The defaults are issues 28 and 43's
// sizes: about 13 minutes on 2 cores; -run and the sizes make it shorter.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// config is what a run measures.
type config struct {
	DB    string
	Run   []string // scenarios, in order
	Count int      // runs of each

	Memory        bool          // bound, outage and rate: one process on the in-memory store too
	RateN         int           // rate: the backlog
	Rates         []float64     // rate: the connection's rates
	Bound         int           // MaxInFlightPerConnection
	Workers       int           // River's MaxWorkers per worker process
	PoolConns     int           // each worker process's pgxpool MaxConns; 0 is pgx's default
	Cooldown      time.Duration // the worker processes' FetchCooldown in bound, outage and cpu
	SnoozeFor     time.Duration // WorkerOptions.SnoozeFor; 0 is its default
	ProbeInterval time.Duration // HealthOptions.ProbeInterval; 0 is its default

	N       int           // bound: deliveries
	Latency time.Duration // bound: the endpoint's
	Ks      []int         // bound: worker processes

	Backlog      int
	OutageK      int
	Down         time.Duration
	Window       time.Duration
	DrainLatency time.Duration
	DrainLimit   time.Duration

	CPUN      int
	CPUK      int
	CPUConns  int
	CPUWarm   int // deliveries each implementation makes before its CPU is counted
	CPURounds int // the rounds the counted deliveries are made in, each implementation in turn
	CPURate   int // deliveries a second each implementation is given; 0 for all at once

	CrashN int // crash: the backlog

	Rate     int
	For      time.Duration
	LatencyK int
}

var scenarios = []string{"bound", "outage", "rate", "crash", "cpu", "latency"}

// flagsEnv holds flags read before the command line's (the package doc).
const flagsEnv = "FLEETBENCH_FLAGS"

func main() {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	cfg, err := parseFlags(append(strings.Fields(os.Getenv(flagsEnv)), os.Args[1:]...), os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetbench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "fleetbench:", err)
		stop()
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("fleetbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: fleetbench [-db URL] [-run "+strings.Join(scenarios, ",")+"] [-count N] [flags]")
		fmt.Fprintln(stderr, "Measures riverhook's deliveries through worker processes on one PostgreSQL (go doc ./internal/fleetbench).")
		fmt.Fprintln(stderr, "$"+flagsEnv+" holds flags read before these, which override them.")
		fs.PrintDefaults()
	}
	var cfg config
	var run, ks, rates string
	fs.StringVar(&cfg.DB, "db", os.Getenv("TEST_DATABASE_URL"), "PostgreSQL `URL` (default $TEST_DATABASE_URL)")
	fs.StringVar(&run, "run", strings.Join(scenarios, ","), "the scenarios to run, comma-separated")
	fs.IntVar(&cfg.Count, "count", 1, "runs of each scenario (interleaved), for benchstat's medians")
	fs.BoolVar(&cfg.Memory, "memory", true, "bound and outage: also one worker process with the in-memory store (no Places) first")
	fs.IntVar(&cfg.Bound, "bound", 8, "MaxInFlightPerConnection, held across processes by the places")
	fs.IntVar(&cfg.Workers, "workers", 32, "River's MaxWorkers in each worker process")
	fs.IntVar(&cfg.PoolConns, "pool", 0, "each worker process's pgxpool MaxConns (0: pgx's default, the greater of 4 and the CPUs)")
	fs.DurationVar(&cfg.Cooldown, "cooldown", 10*time.Millisecond, "the worker processes' River FetchCooldown in bound, outage and cpu (the README's)")
	fs.DurationVar(&cfg.SnoozeFor, "snooze", 0, "WorkerOptions.SnoozeFor (0: its default)")
	fs.DurationVar(&cfg.ProbeInterval, "probe", 0, "HealthOptions.ProbeInterval (0: its default)")
	fs.IntVar(&cfg.N, "n", 1000, "bound: deliveries")
	fs.DurationVar(&cfg.Latency, "latency", 500*time.Millisecond, "bound: how long the endpoint takes to answer")
	fs.StringVar(&ks, "k", "1,2,4", "bound: numbers of worker processes, comma-separated")
	fs.IntVar(&cfg.Backlog, "backlog", 2000, "outage: deliveries waiting")
	fs.IntVar(&cfg.OutageK, "outage-k", 2, "outage: worker processes")
	fs.DurationVar(&cfg.Down, "down", 30*time.Second, "outage: how long the endpoint refuses once the backlog is inserted (longer if its jobs have not all run)")
	fs.DurationVar(&cfg.Window, "window", 10*time.Second, "outage: the end of -down over which job runs are counted")
	fs.DurationVar(&cfg.DrainLatency, "drain-latency", 20*time.Millisecond, "outage: how long the endpoint takes to answer once back")
	fs.DurationVar(&cfg.DrainLimit, "drain-limit", 15*time.Minute, "outage: how long the backlog may take to arrive")
	fs.IntVar(&cfg.CPUN, "cpu-n", 3000, "cpu: deliveries per implementation")
	fs.IntVar(&cfg.CPUK, "cpu-k", 2, "cpu: worker processes, River's and those delivering in process")
	fs.IntVar(&cfg.CPUConns, "cpu-conns", 100, "cpu: connections the deliveries are spread over")
	fs.IntVar(&cfg.CPURounds, "cpu-rounds", 10, "cpu: rounds the -cpu-n deliveries are made in, each implementation its share in turn")
	fs.IntVar(&cfg.CPURate, "cpu-rate", 1000, "cpu: deliveries a second each implementation is given (River's jobs inserted, Sends started), those due every 10 ms: the same load for all; 0: all of a round at once, each as fast as it goes")
	fs.IntVar(&cfg.CPUWarm, "cpu-warm", 1000, "cpu: deliveries each implementation makes first, not counted (a process's start: its first TLS handshake, its heap's growth)")
	fs.IntVar(&cfg.RateN, "rate-n", 300, "rate: deliveries in the backlog")
	fs.StringVar(&rates, "rates", "5,50", "rate: each connection's own RateLimit, comma-separated")
	fs.IntVar(&cfg.CrashN, "crash-n", 400, "crash: deliveries in the backlog (a worker process is killed once a quarter arrived)")
	fs.IntVar(&cfg.Rate, "rate", 300, "latency: deliveries inserted a second")
	fs.DurationVar(&cfg.For, "for", 10*time.Second, "latency: how long they are inserted")
	fs.IntVar(&cfg.LatencyK, "latency-k", 2, "latency: worker processes")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return cfg, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if cfg.DB == "" {
		return cfg, errors.New("no database: set -db or TEST_DATABASE_URL")
	}
	for s := range strings.SplitSeq(run, ",") {
		if !slices.Contains(scenarios, s) {
			return cfg, fmt.Errorf("-run: unknown scenario %q (have %s)", s, strings.Join(scenarios, ", "))
		}
		cfg.Run = append(cfg.Run, s)
	}
	for s := range strings.SplitSeq(rates, ",") {
		r, err := strconv.ParseFloat(s, 64)
		if err != nil || !(r > 0) {
			return cfg, fmt.Errorf("-rates: %q is not a rate", s)
		}
		cfg.Rates = append(cfg.Rates, r)
	}
	for s := range strings.SplitSeq(ks, ",") {
		k, err := strconv.Atoi(s)
		if err != nil || k < 1 {
			return cfg, fmt.Errorf("-k: %q is not a number of processes", s)
		}
		cfg.Ks = append(cfg.Ks, k)
	}
	positive := map[string]int{"count": cfg.Count, "bound": cfg.Bound, "workers": cfg.Workers, "n": cfg.N, "backlog": cfg.Backlog,
		"outage-k": cfg.OutageK, "crash-n": cfg.CrashN, "cpu-n": cfg.CPUN, "cpu-k": cfg.CPUK, "cpu-conns": cfg.CPUConns, "cpu-rounds": cfg.CPURounds, "rate": cfg.Rate, "latency-k": cfg.LatencyK}
	for name, v := range positive {
		if v < 1 {
			return cfg, fmt.Errorf("-%s is %d: it must be at least 1", name, v)
		}
	}
	durations := map[string]time.Duration{"cooldown": cfg.Cooldown, "latency": cfg.Latency, "down": cfg.Down, "window": cfg.Window,
		"drain-latency": cfg.DrainLatency, "drain-limit": cfg.DrainLimit, "for": cfg.For}
	for name, d := range durations {
		if d <= 0 {
			return cfg, fmt.Errorf("-%s is %v: it must be positive", name, d)
		}
	}
	if cfg.Window > cfg.Down {
		return cfg, fmt.Errorf("-window %v is longer than -down %v", cfg.Window, cfg.Down)
	}
	if cfg.SnoozeFor < 0 || cfg.ProbeInterval < 0 || cfg.PoolConns < 0 || cfg.CPUWarm < 0 || cfg.CPURate < 0 {
		return cfg, errors.New("-snooze, -probe, -pool, -cpu-warm and -cpu-rate must not be negative")
	}
	return cfg, nil
}

// result is one scenario's run: a benchmark line, a summary, and what the
// test checks.
type result struct {
	Name    string // after "BenchmarkFleet/", its -K suffix included
	N       int
	Metrics []metric
	Summary string
	sanity
}

type metric struct {
	Value float64
	Unit  string
}

// sanity is what a run must show whatever the code's speed: every delivery
// arrived once, signed, and every job completed.
type sanity struct {
	Want      int // deliveries the endpoint should see
	Arrived   int // distinct deliveries it saw
	Requests  int // requests it saw (Arrived, were each sent once)
	BadSig    int // requests whose signature did not verify
	Jobs      int // River jobs (0 without River)
	Completed int // of them completed
	Runs      int // River's runs of them, as its rows count them (see tallyJobs)
	Counted   int // the runs the worker processes counted
	Resent    int // requests that may come again: the jobs River rescued after a crash, whose attempt may have arrived
}

func (s sanity) check() error {
	var errs []error
	if s.Arrived != s.Want || s.Requests < s.Want || s.Requests > s.Want+s.Resent {
		errs = append(errs, fmt.Errorf("%d deliveries arrived in %d requests, want %d once each (and up to %d sent again)", s.Arrived, s.Requests, s.Want, s.Resent))
	}
	if s.BadSig > 0 {
		errs = append(errs, fmt.Errorf("%d requests not verified", s.BadSig))
	}
	if s.Completed != s.Jobs {
		errs = append(errs, fmt.Errorf("%d of %d jobs completed", s.Completed, s.Jobs))
	}
	if s.Runs != s.Counted {
		errs = append(errs, fmt.Errorf("the worker processes made %d runs, River's rows count %d (attempt + snoozes)", s.Counted, s.Runs))
	}
	return joinErrs(errs...)
}

func (r result) line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "BenchmarkFleet/%s\t%d", r.Name, r.N)
	for _, m := range r.Metrics {
		fmt.Fprintf(&b, "\t%s %s", strconv.FormatFloat(m.Value, 'f', decimals(m.Value), 64), m.Unit)
	}
	return b.String()
}

// decimals returns how many decimals show v to about four digits.
func decimals(v float64) int {
	switch v = max(v, -v); {
	case v == float64(int64(v)), v >= 1000:
		return 0
	case v >= 100:
		return 1
	case v >= 10:
		return 2
	case v >= 1:
		return 3
	}
	return 4
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// run runs cfg's scenarios, writing the benchmark lines and then the
// summary to out, and its progress to progress; the worker processes'
// errors go to standard error. It returns every result, and stops at the
// first scenario that fails.
func run(ctx context.Context, cfg config, out, progress io.Writer) ([]result, error) {
	pool, err := pgxpool.New(ctx, cfg.DB)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return nil, err
	}
	ep, err := newEndpoint(secret)
	if err != nil {
		return nil, err
	}
	defer ep.close()
	self, err := os.Executable()
	if err != nil {
		self = os.Args[0]
	}
	b := &bench{cfg: cfg, pool: pool, ep: ep, self: self, stderr: os.Stderr, progress: progress}

	fmt.Fprintf(out, "goos: %s\ngoarch: %s\npkg: github.com/signedhook/webhook/riverhook/internal/fleetbench\n", runtime.GOOS, runtime.GOARCH)
	if model := cpuModel(); model != "" {
		fmt.Fprintf(out, "cpu: %s\n", model)
	}
	var results []result
	emit := func(rs ...result) {
		for _, r := range rs {
			fmt.Fprintln(out, r.line())
			if err := r.check(); err != nil {
				fmt.Fprintf(out, "# %s: %v\n", r.Name, err)
			}
			results = append(results, r)
		}
	}
	err = func() error {
		for range cfg.Count {
			for _, s := range cfg.Run {
				switch s {
				case "bound":
					if cfg.Memory {
						r, err := b.bound(ctx, 1, true)
						if err != nil {
							return fmt.Errorf("bound, in memory: %w", err)
						}
						emit(r)
					}
					for _, k := range cfg.Ks {
						r, err := b.bound(ctx, k, false)
						if err != nil {
							return fmt.Errorf("bound, K=%d: %w", k, err)
						}
						emit(r)
					}
				case "outage":
					if cfg.Memory {
						r, err := b.outage(ctx, true)
						if err != nil {
							return fmt.Errorf("outage, in memory: %w", err)
						}
						emit(r)
					}
					r, err := b.outage(ctx, false)
					if err != nil {
						return fmt.Errorf("outage: %w", err)
					}
					emit(r)
				case "rate":
					for _, perSecond := range cfg.Rates {
						if cfg.Memory {
							r, err := b.rate(ctx, perSecond, 1, true)
							if err != nil {
								return fmt.Errorf("rate %g, in memory: %w", perSecond, err)
							}
							emit(r)
						}
						for _, k := range []int{1, 2} {
							r, err := b.rate(ctx, perSecond, k, false)
							if err != nil {
								return fmt.Errorf("rate %g, K=%d: %w", perSecond, k, err)
							}
							emit(r)
						}
					}
				case "crash":
					r, err := b.crash(ctx)
					if err != nil {
						return fmt.Errorf("crash: %w", err)
					}
					emit(r)
				case "cpu":
					rs, err := b.cpu(ctx)
					if err != nil {
						return err
					}
					emit(rs...)
				case "latency":
					for _, v := range latencyVariants {
						r, err := b.latency(ctx, v)
						if err != nil {
							return fmt.Errorf("latency, %s: %w", v, err)
						}
						emit(r)
					}
				}
			}
		}
		return nil
	}()
	fmt.Fprintf(out, "\nFleet summary against its targets, bound %d (crash: 4), %d River workers a process:\n", cfg.Bound, cfg.Workers)
	for _, r := range results {
		if r.Summary != "" {
			fmt.Fprintln(out, "  "+r.Summary)
		}
	}
	for _, line := range cpuMedians(results) {
		fmt.Fprintln(out, "  "+line)
	}
	return results, err
}

// cpuModel returns the processor's name (Linux), for benchstat's header.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
