package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
)

// This file is the other side of a worker process: the program re-run with
// childEnv set. It reads one command a line on its standard input and
// answers each with one JSON line (childStats) on its standard output; the
// first line, unasked, says it is ready. End of input, as when the parent
// dies, stops it.

// childEnv holds a child process's childConfig, as JSON.
const childEnv = "FLEETBENCH_CHILD"

// The roles of a child process.
const (
	roleWorker    = "worker"    // a River client working deliveries with riverhook's Worker
	roleNop       = "nop"       // a River client working nopArgs jobs with a worker doing nothing
	roleInProcess = "inprocess" // no River: Sender.Send on command ("send prefix n concurrency conns")
)

// childConfig is what a child process runs.
type childConfig struct {
	Role   string `json:"role"`
	DB     string `json:"db"`
	Schema string `json:"schema"`
	Addr   string `json:"addr"` // the endpoint's 127.0.0.1:port
	CA     []byte `json:"ca"`   // the endpoint's certificate, PEM
	Secret string `json:"secret"`

	// Fleet sets the README's fleet options: MaxInFlightPerConnection
	// Bound with the places in PostgreSQL, endpoint health with the marks
	// shared there (ConfirmUpEvery a minute). Otherwise the Worker's and
	// the Sender's defaults (no bound, no health).
	Fleet  bool    `json:"fleet"`
	Memory bool    `json:"memory"` // with Fleet, the admission's facts in the process's memory: no Places
	Rate   float64 `json:"rate"`   // each connection's own RateLimit; 0 for none

	Bound         int           `json:"bound"`
	SnoozeFor     time.Duration `json:"snooze_for"`     // WorkerOptions.SnoozeFor; 0 is its default
	ProbeInterval time.Duration `json:"probe_interval"` // HealthOptions.ProbeInterval; 0 is its default

	// PoolConns is the pgxpool's MaxConns; zero is pgx's default (the
	// greater of 4 and the CPUs).
	PoolConns int `json:"pool_conns"`

	// River's settings; zero is River's default.
	MaxWorkers        int           `json:"max_workers"`
	FetchCooldown     time.Duration `json:"fetch_cooldown"`
	FetchPollInterval time.Duration `json:"fetch_poll_interval"`
}

// childStats is a child's answer to every command.
type childStats struct {
	Runs      int64         `json:"runs"`      // job runs (Work calls, snoozes included), any kind
	Completed int64         `json:"completed"` // jobs completed
	Ended     int64         `json:"ended"`     // jobs discarded or cancelled
	CPU       time.Duration `json:"cpu"`       // user and system CPU time of the process so far
	Allocs    uint64        `json:"allocs"`    // bytes allocated on the heap so far
	GCs       uint64        `json:"gcs"`       // garbage collections completed so far
	Failed    int64         `json:"failed"`    // Sends that failed (roleInProcess)
	Err       string        `json:"err,omitempty"`
}

// childMain runs a child process from childEnv, and returns its exit code.
func childMain() int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "fleetbench child:", err)
		return 2
	}
	// The parent handles the terminal's interrupt: it stops its children
	// and drops its schemas.
	signal.Ignore(os.Interrupt)
	if dir := os.Getenv("FLEETBENCH_CPUPROFILE"); dir != "" {
		// A profile of each child, for a look at what a delivery costs:
		// go tool pprof -top dir/*.pprof
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", cfg.Role, os.Getpid())))
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer f.Close()
			defer pprof.StopCPUProfile()
		}
		// And of what it allocated, at its end: go tool pprof
		// -sample_index=alloc_space -top dir/*.allocs.
		runtime.MemProfileRate = 16 << 10
		defer func() {
			if f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.allocs", cfg.Role, os.Getpid()))); err == nil {
				pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	if err := runChild(context.Background(), cfg, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "fleetbench %s process %d: %v\n", cfg.Role, os.Getpid(), err)
		return 1
	}
	return 0
}

// child is a child process's state.
type child struct {
	cfg       childConfig
	runs      atomic.Int64
	completed atomic.Int64
	ended     atomic.Int64
	failed    atomic.Int64
	client    *river.Client[pgx.Tx] // nil for roleInProcess
	sender    *webhook.Sender
}

func runChild(ctx context.Context, cfg childConfig, in io.Reader, out io.Writer) error {
	poolConfig, err := pgxpool.ParseConfig(cfg.DB)
	if err != nil {
		return err
	}
	if cfg.PoolConns > 0 {
		poolConfig.MaxConns = int32(cfg.PoolConns)
	}
	// Its sessions name the process, so that the parent can see the places
	// it holds (pg_locks; see appName).
	poolConfig.ConnConfig.RuntimeParams["application_name"] = appName(os.Getpid())
	pool, err := pgxpool.NewWithConfig(ctx, poolConfig)
	if err != nil {
		return err
	}
	defer pool.Close()
	c := &child{cfg: cfg}
	if c.sender, err = newSender(cfg, pool); err != nil {
		return err
	}
	defer c.sender.CloseIdleConnections()
	if cfg.Role != roleInProcess {
		if err := c.startClient(ctx, pool); err != nil {
			return err
		}
	}
	enc := json.NewEncoder(out)
	reply := func(err error) error {
		s := c.stats()
		if err != nil {
			s.Err = err.Error()
		}
		return enc.Encode(s)
	}
	if err := reply(nil); err != nil { // ready
		c.stop(ctx, time.Second)
		return err
	}
	lines := bufio.NewScanner(in)
	for lines.Scan() {
		cmd := strings.Fields(lines.Text())
		if len(cmd) == 0 {
			continue
		}
		switch cmd[0] {
		case "stats":
			err = reply(nil)
		case "send":
			err = reply(c.send(ctx, cmd[1:]))
		case "stop":
			stopErr := c.stop(ctx, 20*time.Second)
			flushCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			c.sender.Flush(flushCtx) // marks under way are written
			cancel()
			return reply(stopErr)
		default:
			err = reply(fmt.Errorf("unknown command %q", cmd[0]))
		}
		if err != nil {
			break
		}
	}
	// The parent is gone, or closed our input: stop without waiting long.
	c.stop(ctx, time.Second)
	return errors.Join(err, lines.Err())
}

// newSender returns the Sender of a child: the endpoint's certificate
// trusted, 127.0.0.1 allowed, and with Fleet endpoint health whose marks
// are shared in PostgreSQL.
func newSender(cfg childConfig, pool *pgxpool.Pool) (*webhook.Sender, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(cfg.CA) {
		return nil, errors.New("no certificate in the endpoint's PEM")
	}
	tr, err := webhook.NewTransport(&webhook.TransportOptions{AllowPrivateNetworks: true, TLSClientConfig: &tls.Config{RootCAs: roots}})
	if err != nil {
		return nil, err
	}
	opts := &webhook.SenderOptions{Client: &http.Client{Transport: tr}}
	if cfg.Fleet {
		opts.Health = &webhook.HealthOptions{
			Marks:          riverhook.NewEndpointMarks(pool, cfg.Schema),
			ConfirmUpEvery: time.Minute,
			ProbeInterval:  cfg.ProbeInterval,
		}
	}
	return webhook.NewSender(opts)
}

// startClient starts the River client of a worker or no-op process,
// counting the runs of its jobs and their ends.
func (c *child) startClient(ctx context.Context, pool *pgxpool.Pool) error {
	cfg := c.cfg
	config := &river.Config{
		Schema:            cfg.Schema,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cmp.Or(cfg.MaxWorkers, 32)}},
		FetchCooldown:     cfg.FetchCooldown,
		FetchPollInterval: cfg.FetchPollInterval,
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
		Middleware: []rivertype.Middleware{river.WorkerMiddlewareFunc(func(ctx context.Context, row *rivertype.JobRow, work func(context.Context) error) error {
			if row.Kind != riverhook.PruneKind { // riverhook's maintenance, once at the leader's start
				c.runs.Add(1)
			}
			return work(ctx)
		})},
	}
	switch cfg.Role {
	case roleWorker:
		opts := &riverhook.WorkerOptions{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
		if cfg.Fleet {
			opts.MaxInFlightPerConnection = cfg.Bound
			if !cfg.Memory {
				opts.Places = riverhook.NewConnectionPlaces(pool, cfg.Schema)
			}
			opts.SnoozeFor = cfg.SnoozeFor
		}
		w, err := riverhook.NewWorker(c.sender, c.resolve, opts)
		if err != nil {
			return err
		}
		if err := riverhook.Register(config, w); err != nil {
			return err
		}
	case roleNop:
		config.Workers = river.NewWorkers()
		river.AddWorker(config.Workers, river.WorkFunc(func(context.Context, *river.Job[nopArgs]) error { return nil }))
	default:
		return fmt.Errorf("unknown role %q", cfg.Role)
	}
	client, err := river.NewClient(riverpgxv5.New(pool), config)
	if err != nil {
		return err
	}
	// The buffer is scanned whole by every garbage collection (an
	// element is a pointer), so it is kept small: 1<<20 held 8 MiB that
	// each of the process's collections read through, a cost of the
	// measurement charged to River's jobs, not the in-process delivery's.
	// 1<<16 is 20 s of events at this machine's fastest (3,000 a second
	// a process); River drops an event that finds it full.
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: 1 << 16,
		Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobCancelled, river.EventKindJobFailed}})
	var tally sync.WaitGroup
	tally.Go(func() {
		for ev := range events {
			switch ev.Job.State {
			case rivertype.JobStateCompleted:
				c.completed.Add(1)
			case rivertype.JobStateCancelled, rivertype.JobStateDiscarded:
				c.ended.Add(1)
			}
		}
	})
	if err := client.Start(ctx); err != nil {
		cancel()
		tally.Wait()
		return err
	}
	c.client = client
	go func() { // the subscription ends when the client has stopped
		<-client.Stopped()
		cancel()
	}()
	return nil
}

// stop stops the River client: the jobs under way end within limit, or
// are cancelled.
func (c *child) stop(ctx context.Context, limit time.Duration) error {
	if c.client == nil {
		return nil
	}
	stopCtx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if err := c.client.Stop(stopCtx); err == nil {
		return nil
	}
	hardCtx, cancelHard := context.WithTimeout(ctx, 5*time.Second)
	defer cancelHard()
	return c.client.StopAndCancel(hardCtx)
}

// resolve returns connection id at the endpoint: every id is a connection.
func (c *child) resolve(_ context.Context, id string) (webhook.Connection, error) {
	conn := connection(c.cfg.Addr, c.cfg.Secret, id)
	conn.RateLimit = c.cfg.Rate // the connection's own throttle
	return conn, nil
}

// send makes n deliveries with Sender.Send from concurrency goroutines, to
// connections c0 to c<conns-1> in turn, their delivery ids prefix and a
// number: "send prefix n concurrency conns [rate]". With a rate (a
// second), the deliveries due are released every 10 ms, as the cpu
// scenario inserts River's jobs (paced); without, at once.
func (c *child) send(ctx context.Context, args []string) error {
	if len(args) != 4 && len(args) != 5 {
		return errors.New("send wants prefix, n, concurrency, conns and an optional rate")
	}
	var nums [4]int
	for i, a := range args[1:] {
		v, err := strconv.Atoi(a)
		if err != nil || v < 1 {
			return fmt.Errorf("send: %q is not a positive number", a)
		}
		nums[i] = v
	}
	prefix, n, concurrency, conns, rate := args[0], nums[0], nums[1], nums[2], nums[3]
	next := make(chan int, n)
	go func() {
		defer close(next)
		paced(ctx, n, rate, func(from, n int) error {
			for i := from; i < from+n; i++ {
				next <- i
			}
			return nil
		})
	}()
	var wg sync.WaitGroup
	for range concurrency {
		wg.Go(func() {
			for i := range next {
				id := prefix + strconv.Itoa(i)
				if _, err := c.sender.Send(ctx, connection(c.cfg.Addr, c.cfg.Secret, connectionID(i, conns)), payload(id)); err != nil {
					c.failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return nil
}

func (c *child) stats() childStats {
	m := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(m)
	return childStats{Runs: c.runs.Load(), Completed: c.completed.Load(), Ended: c.ended.Load(), Failed: c.failed.Load(), CPU: processCPU(),
		Allocs: m[0].Value.Uint64(), GCs: m[1].Value.Uint64()}
}

// connection returns connection id, at the endpoint on addr.
func connection(addr, secret, id string) webhook.Connection {
	return webhook.Connection{Name: id, URL: "https://" + addr + "/hooks/" + id, Secret: secret}
}

// connectionID returns the connection of the i-th delivery of a scenario
// spread over conns connections.
func connectionID(i, conns int) string { return "c" + strconv.Itoa(i%max(conns, 1)) }

// payload returns the payload of delivery id: webhook's sample, its user id
// "usr_" and the delivery id, which the endpoint counts.
func payload(id string) webhook.Payload {
	p := webhook.SamplePayload(time.Now())
	p.User.ID = "usr_" + id
	return p
}

// nopArgs is the job of River's no-op worker: a trivial kind carrying the
// same body as a delivery.
type nopArgs struct {
	DeliveryID string `json:"delivery_id"`
	Body       []byte `json:"payload_base64"`
}

func (nopArgs) Kind() string { return "fleetbench_nop" }

func itoa(n int) string { return strconv.Itoa(n) }
