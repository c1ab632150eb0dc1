package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/signedhook/webhook/riverhook"
)

// This file is the parent's side of the fleet: the worker processes it
// starts, and the schema each scenario makes and drops.

// bench is what every scenario shares: the configuration, a pool on the
// database, the endpoint, and where the processes' errors go.
type bench struct {
	cfg      config
	pool     *pgxpool.Pool
	ep       *endpoint
	self     string    // this program, which the children run
	stderr   io.Writer // the children's standard error
	progress io.Writer
}

// secret is the connections' signing secret.
const secret = "whsec_fleetbench"

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.progress, "fleetbench: "+format+"\n", args...)
}

// proc is a child process, seen from the parent.
type proc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // its answers; closed when its output ends
	once  sync.Once
}

// start starts a child process running cfg, and waits until it is ready.
func (b *bench) start(ctx context.Context, cfg childConfig) (*proc, error) {
	cfg.DB, cfg.Addr, cfg.CA, cfg.Secret = b.cfg.DB, b.ep.addr, b.ep.caPEM, secret
	env, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(b.self)
	cmd.Env = append(os.Environ(), childEnv+"="+string(env))
	cmd.Stderr = b.stderr
	dieWithParent(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, w, err := os.Pipe()
	if err != nil {
		stdin.Close()
		return nil, err
	}
	cmd.Stdout = w
	err = cmd.Start()
	w.Close() // the child's now: its output ends when it exits
	if err != nil {
		stdin.Close()
		out.Close()
		return nil, err
	}
	p := &proc{cmd: cmd, stdin: stdin, lines: make(chan string, 4)}
	go func() {
		defer close(p.lines)
		defer out.Close()
		s := bufio.NewScanner(out)
		for s.Scan() {
			p.lines <- s.Text()
		}
	}()
	if _, err := p.answer(ctx, time.Minute); err != nil {
		p.kill()
		return nil, fmt.Errorf("starting a %s process: %w", cfg.Role, err)
	}
	return p, nil
}

// ask sends the child a command and returns its answer, waiting at most
// limit.
func (p *proc) ask(ctx context.Context, cmd string, limit time.Duration) (childStats, error) {
	if _, err := io.WriteString(p.stdin, cmd+"\n"); err != nil {
		return childStats{}, fmt.Errorf("process %d: %w", p.cmd.Process.Pid, err)
	}
	return p.answer(ctx, limit)
}

func (p *proc) answer(ctx context.Context, limit time.Duration) (childStats, error) {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case line, ok := <-p.lines:
		if !ok {
			return childStats{}, fmt.Errorf("process %d ended", p.cmd.Process.Pid)
		}
		var s childStats
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			return childStats{}, fmt.Errorf("process %d answered %q: %w", p.cmd.Process.Pid, line, err)
		}
		if s.Err != "" {
			return s, fmt.Errorf("process %d: %s", p.cmd.Process.Pid, s.Err)
		}
		return s, nil
	case <-t.C:
		return childStats{}, fmt.Errorf("process %d did not answer within %v", p.cmd.Process.Pid, limit)
	case <-ctx.Done():
		return childStats{}, context.Cause(ctx)
	}
}

// stop asks the child to stop its River client (the jobs under way end)
// and waits for it to exit, killing it if it does not.
func (p *proc) stop(ctx context.Context) (childStats, error) {
	s, err := p.ask(ctx, "stop", time.Minute)
	p.end(10 * time.Second)
	return s, err
}

// kill kills the child, if it still runs, and waits for it.
func (p *proc) kill() { p.end(0) }

// end closes the child's input, gives it grace to exit, kills it then,
// and waits for it: once.
func (p *proc) end(grace time.Duration) {
	p.once.Do(func() {
		p.stdin.Close()
		t := time.NewTimer(grace)
		defer t.Stop()
		for exited := false; !exited; {
			select {
			case _, ok := <-p.lines:
				exited = !ok
			case <-t.C:
				p.cmd.Process.Kill()
				for range p.lines {
				}
				exited = true
			}
		}
		p.cmd.Wait()
	})
}

// fleet is the worker processes of a scenario.
type fleet []*proc

// startFleet starts k processes running cfg, at once.
func (b *bench) startFleet(ctx context.Context, k int, cfg childConfig) (fleet, error) {
	f := make(fleet, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Go(func() { f[i], errs[i] = b.start(ctx, cfg) })
	}
	wg.Wait()
	if err := joinErrs(errs...); err != nil {
		f.kill()
		return nil, err
	}
	return f, nil
}

// stats returns the sum of the processes' answers.
func (f fleet) stats(ctx context.Context) (childStats, error) {
	return f.each(func(p *proc) (childStats, error) { return p.ask(ctx, "stats", 30*time.Second) })
}

// stop stops every process, at once, and returns the sum of their last
// answers.
func (f fleet) stop(ctx context.Context) (childStats, error) {
	return f.each(func(p *proc) (childStats, error) { return p.stop(ctx) })
}

func (f fleet) each(do func(*proc) (childStats, error)) (childStats, error) {
	return f.eachIndex(func(_ int, p *proc) (childStats, error) { return do(p) })
}

// eachIndex calls do for every process, at once, with its index, and
// returns the sum of their answers.
func (f fleet) eachIndex(do func(int, *proc) (childStats, error)) (childStats, error) {
	stats := make([]childStats, len(f))
	errs := make([]error, len(f))
	var wg sync.WaitGroup
	for i, p := range f {
		wg.Go(func() { stats[i], errs[i] = do(i, p) })
	}
	wg.Wait()
	var sum childStats
	for _, s := range stats {
		sum.Runs += s.Runs
		sum.Completed += s.Completed
		sum.Ended += s.Ended
		sum.Failed += s.Failed
		sum.CPU += s.CPU
		sum.Allocs += s.Allocs
		sum.GCs += s.GCs
	}
	return sum, joinErrs(errs...)
}

// kill kills every process still running.
func (f fleet) kill() {
	for _, p := range f {
		if p != nil {
			p.kill()
		}
	}
}

// waitFor polls the processes every 20 ms until cond holds of their
// stats, for at most limit.
func (f fleet) waitFor(ctx context.Context, limit time.Duration, what string, cond func(childStats) bool) (childStats, error) {
	deadline := time.Now().Add(limit)
	for {
		s, err := f.stats(ctx)
		if err != nil || cond(s) {
			return s, err
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("%s: not within %v (runs %d, completed %d, discarded or cancelled %d)", what, limit, s.Runs, s.Completed, s.Ended)
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return s, err
		}
	}
}

// finish waits, for a minute at most, until the worker processes have
// completed n jobs, stops them, and tallies River's rows of the deliveries.
func (f fleet) finish(ctx context.Context, client *river.Client[pgx.Tx], n int) (childStats, jobTally, error) {
	if _, err := f.waitCompleted(ctx, n, time.Minute); err != nil {
		return childStats{}, jobTally{}, err
	}
	final, err := f.stop(ctx)
	if err != nil {
		return childStats{}, jobTally{}, err
	}
	t, err := tallyJobs(ctx, client, riverhook.Kind)
	return final, t, err
}

// waitCompleted waits until n jobs have completed.
func (f fleet) waitCompleted(ctx context.Context, n int, limit time.Duration) (childStats, error) {
	return f.waitFor(ctx, limit, fmt.Sprintf("%d jobs completed", n), func(s childStats) bool { return s.Completed >= int64(n) })
}

// sleep waits for d, or ctx's end.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// workerConfig is the configuration of a worker process in schema: with
// fleet, the README's fleet options (the bound with the places, endpoint
// health with the marks); its River client's FetchCooldown cooldown (zero:
// River's default).
func (b *bench) workerConfig(schema string, fleet bool, cooldown time.Duration) childConfig {
	return childConfig{
		Role:          roleWorker,
		Schema:        schema,
		Fleet:         fleet,
		Bound:         b.cfg.Bound,
		SnoozeFor:     b.cfg.SnoozeFor,
		ProbeInterval: b.cfg.ProbeInterval,
		MaxWorkers:    b.cfg.Workers,
		PoolConns:     b.cfg.PoolConns,
		FetchCooldown: cooldown,
	}
}

// scenarioDB is a scenario's schema, and the API process's River client on
// it (insert-only).
type scenarioDB struct {
	schema string
	client *river.Client[pgx.Tx]
	drop   func()
}

// newSchema makes a schema with River's tables (rivermigrate) and
// riverhook's (Migrate), and an insert-only River client on it whose
// FetchCooldown is apiCooldown (zero: River's default), which also spaces
// its insert notifications.
func (b *bench) newSchema(ctx context.Context, apiCooldown time.Duration) (*scenarioDB, error) {
	var r [6]byte
	rand.Read(r[:])
	schema := "fleetbench_" + hex.EncodeToString(r[:])
	if _, err := b.pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return nil, err
	}
	drop := func() {
		dropCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if _, err := b.pool.Exec(dropCtx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			b.logf("dropping schema %s: %v", schema, err)
		}
	}
	quiet := slog.New(slog.DiscardHandler)
	migrator, err := rivermigrate.New(riverpgxv5.New(b.pool), &rivermigrate.Config{Schema: schema, Logger: quiet})
	if err == nil {
		_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	}
	if err == nil {
		err = riverhook.Migrate(ctx, b.pool, schema)
	}
	var client *river.Client[pgx.Tx]
	if err == nil {
		client, err = river.NewClient(riverpgxv5.New(b.pool), &river.Config{Schema: schema, FetchCooldown: apiCooldown, Logger: quiet})
	}
	if err != nil {
		drop()
		return nil, err
	}
	return &scenarioDB{schema: schema, client: client, drop: drop}, nil
}

// insertDeliveries inserts n deliveries, ids prefix and a number, spread
// over conns connections, in batches of 1,000 (River's InsertMany, outside
// a transaction).
func insertDeliveries(ctx context.Context, client *river.Client[pgx.Tx], prefix string, n, conns int) error {
	return insertDeliveriesFrom(ctx, client, prefix, 0, n, conns)
}

// insertDeliveriesFrom is insertDeliveries of the deliveries numbered from
// to from+n-1.
func insertDeliveriesFrom(ctx context.Context, client *river.Client[pgx.Tx], prefix string, from, n, conns int) error {
	var params []river.InsertManyParams
	for i := from; i < from+n; i++ {
		id := prefix + itoa(i)
		ps, err := riverhook.InsertParams(id, []string{connectionID(i, conns)}, payload(id), nil)
		if err != nil {
			return err
		}
		params = append(params, ps...)
	}
	return insertBatches(ctx, client, params)
}

// insertNops inserts n jobs of River's no-op worker, each with a delivery's
// body, their delivery ids prefix and a number from from.
func insertNops(ctx context.Context, client *river.Client[pgx.Tx], prefix string, from, n int) error {
	var params []river.InsertManyParams
	for i := from; i < from+n; i++ {
		id := prefix + itoa(i)
		body, err := json.Marshal(payload(id))
		if err != nil {
			return err
		}
		params = append(params, river.InsertManyParams{Args: nopArgs{DeliveryID: id, Body: body}})
	}
	return insertBatches(ctx, client, params)
}

func insertBatches(ctx context.Context, client *river.Client[pgx.Tx], params []river.InsertManyParams) error {
	for at := 0; at < len(params); at += 1000 {
		if _, err := client.InsertMany(ctx, params[at:min(at+1000, len(params))]); err != nil {
			return err
		}
	}
	return nil
}

// jobTally is what River's rows say of a scenario's jobs once they ended.
type jobTally struct {
	Jobs      int
	Attempted int // run at least once
	Completed int
	Runs      int // attempt + snoozes: every run River made of them
	Errors    int // runs that failed (an error kept), rescues included
	Snoozes   int // runs that snoozed
}

// tallyJobs reads every job of kind through River's JobList.
//
// River (since 0.16, PR 730; v0.51.1's jobexecutor.reportResult) counts a
// run in a job's attempt when it is fetched; a run that snoozes sets
// attempt back by one (JobSetStateSnoozed's attempt-1) and adds one to
// the metadata's "snoozes", MaxAttempts unchanged. So the runs of a job
// are attempt + snoozes, its failed runs (a rescue included) its errors,
// and a completed job's runs minus errors minus snoozes is one.
func tallyJobs(ctx context.Context, client *river.Client[pgx.Tx], kind string) (jobTally, error) {
	const page = 10_000
	var t jobTally
	params := river.NewJobListParams().Kinds(kind).First(page)
	for {
		res, err := client.JobList(ctx, params)
		if err != nil {
			return t, err
		}
		for _, j := range res.Jobs {
			var md struct {
				Snoozes int `json:"snoozes"`
			}
			if len(j.Metadata) > 0 {
				if err := json.Unmarshal(j.Metadata, &md); err != nil {
					return t, fmt.Errorf("job %d's metadata: %w", j.ID, err)
				}
			}
			t.Jobs++
			if j.AttemptedAt != nil {
				t.Attempted++
			}
			if j.State == rivertype.JobStateCompleted {
				t.Completed++
			}
			t.Runs += j.Attempt + md.Snoozes
			t.Errors += len(j.Errors)
			t.Snoozes += md.Snoozes
		}
		if len(res.Jobs) < page {
			return t, nil
		}
		params = params.After(res.LastCursor)
	}
}

// joinErrs is errors.Join, readable on one line.
func joinErrs(errs ...error) error {
	err := errors.Join(errs...)
	if err == nil {
		return nil
	}
	return errors.New(strings.ReplaceAll(err.Error(), "\n", "; "))
}
