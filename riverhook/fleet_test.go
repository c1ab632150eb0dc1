package riverhook_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/webhooktest"
)

// The environment of a fleet test's child process.
const (
	fleetRole   = "RIVERHOOK_FLEET_ROLE"
	fleetSchema = "RIVERHOOK_FLEET_SCHEMA"
	fleetURL    = "RIVERHOOK_FLEET_URL"
	fleetRate   = "RIVERHOOK_FLEET_RATE"
)

// fleetSender returns a Sender on 127.0.0.1 (private addresses allowed)
// sharing the marks in schema, down after downAfter refusals.
func fleetSender(t *testing.T, pool *pgxpool.Pool, schema string, downAfter int) *webhook.Sender {
	t.Helper()
	tr, err := webhook.NewTransport(&webhook.TransportOptions{AllowPrivateNetworks: true, TLSClientConfig: &tls.Config{}})
	require.NoError(t, err)
	s, err := webhook.NewSender(&webhook.SenderOptions{
		Client: &http.Client{Transport: tr},
		Retry:  &webhook.RetryPolicy{},
		Health: &webhook.HealthOptions{DownAfter: downAfter, Marks: riverhook.NewEndpointMarks(pool, schema)},
	})
	require.NoError(t, err)
	t.Cleanup(s.CloseIdleConnections)
	return s
}

// TestFleetChild is the other process of TestFleet_AMarkReachesEveryProcess:
// it runs only as that test's child.
func TestFleetChild(t *testing.T) {
	if os.Getenv(fleetRole) != "marker" {
		t.Skip("the child process of TestFleet_AMarkReachesEveryProcess")
	}
	pool, err := pgxpool.New(context.Background(), os.Getenv("TEST_DATABASE_URL"))
	require.NoError(t, err)
	defer pool.Close()
	s := fleetSender(t, pool, os.Getenv(fleetSchema), 1)
	conn := webhook.Connection{Name: "dead", URL: os.Getenv(fleetURL), Secret: secret}
	_, err = s.Send(context.Background(), conn, payload("d1"))
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.NoError(t, s.Flush(context.Background())) // the mark is written before the process exits
}

// TestFleet_AMarkReachesEveryProcess runs a worker as an OS process of its
// own that finds an endpoint refused and marks it down in PostgreSQL: a
// Sender of this process that was running stops dialling it within a
// second or so, and one made afterwards starts from the mark.
func TestFleet_AMarkReachesEveryProcess(t *testing.T) {
	t.Parallel()
	pool, schema := testDB(t)
	ctx := context.Background()
	require.NoError(t, riverhook.Migrate(ctx, pool, schema))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadURL := "https://" + ln.Addr().String() + "/hooks/T0ken"
	require.NoError(t, ln.Close()) // refused from now on
	dead := webhook.Connection{Name: "dead", URL: deadURL, Secret: secret}
	running := fleetSender(t, pool, schema, 1000) // its own refusals never take it down

	child := exec.Command(os.Args[0], "-test.run", "^TestFleetChild$", "-test.count", "1")
	child.Env = append(os.Environ(), fleetRole+"=marker", fleetSchema+"="+schema, fleetURL+"="+deadURL)
	out, err := child.CombinedOutput()
	require.NoError(t, err, "the child process: %s", out)
	marked := time.Now()

	// The running Sender reads the marks at most a second apart: until it
	// follows, its attempts are dialled, and refused. The deadline is not
	// what is tested; the bound below is.
	deadline := marked.Add(15 * time.Second)
	var followed time.Duration
	for time.Now().Before(deadline) {
		_, err := running.Send(ctx, dead, payload("d2"))
		if errors.Is(err, webhook.ErrEndpointDown) {
			followed = time.Since(marked)
			break
		}
		require.ErrorIs(t, err, syscall.ECONNREFUSED)
	}
	require.NotZero(t, followed, "the running Sender never followed the mark")
	t.Logf("followed the other process's mark %v after it exited", followed.Round(time.Millisecond))
	// A read every second follows within one or two; the 5 s more are room
	// for a loaded machine's reads and Sends. A Sender that followed only
	// when it starts fails at NotZero above; this bound fails one that read
	// the marks every 7 s or more.
	assert.Less(t, followed, 2*webhook.DefaultFollowEvery+5*time.Second, "within a second or so, give or take a loaded machine")

	started := fleetSender(t, pool, schema, 1000)
	require.NoError(t, started.Flush(ctx)) // its first read of the marks
	_, err = started.Send(ctx, dead, payload("d3"))
	assert.ErrorIs(t, err, webhook.ErrEndpointDown, "a process starting up starts from the marks")
}

func TestConnectionPlaces(t *testing.T) {
	t.Parallel()
	pool, schema := testDB(t)
	ctx := context.Background()
	require.NoError(t, riverhook.Migrate(ctx, pool, schema))
	places := riverhook.NewConnectionPlaces(pool, schema)
	take := func(job int64, hold time.Duration) (int, bool) {
		place, ok, err := places.Take(ctx, "crm", 2, job, hold)
		require.NoError(t, err)
		return place, ok
	}
	p1, ok := take(1, time.Minute)
	require.True(t, ok)
	p2, ok := take(2, time.Minute)
	require.True(t, ok)
	assert.NotEqual(t, p1, p2)
	_, ok = take(3, time.Minute)
	assert.False(t, ok, "both places are held")
	require.NoError(t, places.Give(ctx, "crm", p1, 99))
	_, ok = take(3, time.Minute)
	assert.False(t, ok, "only the job holding a place gives it back")
	require.NoError(t, places.Give(ctx, "crm", p1, 1))
	_, ok = take(3, time.Minute)
	assert.True(t, ok, "given back: taken again")
	_, ok, err := places.Take(ctx, "erp", 1, 4, time.Minute)
	require.NoError(t, err)
	assert.True(t, ok, "each connection has its own")

	// Kept: passed from job 2 to job 5, still held, given back by job 5.
	kept, err := places.Keep(ctx, "crm", p2, 99, 5, time.Minute)
	require.NoError(t, err)
	assert.False(t, kept, "only the job holding a place passes it on")
	kept, err = places.Keep(ctx, "crm", p2, 2, 5, time.Minute)
	require.NoError(t, err)
	require.True(t, kept)
	_, ok = take(6, time.Minute)
	assert.False(t, ok, "a place kept is held")
	require.NoError(t, places.Give(ctx, "crm", p2, 2))
	_, ok = take(6, time.Minute)
	assert.False(t, ok, "by the job it was passed to")
	require.NoError(t, places.Give(ctx, "crm", p2, 5))
	_, ok = take(6, time.Minute)
	assert.True(t, ok, "given back by it: taken again")

	// A hold that ended cannot be kept: the place may be another's now.
	p7, ok, err := places.Take(ctx, "hr", 1, 7, time.Microsecond)
	require.NoError(t, err)
	require.True(t, ok)
	// The hold ends a microsecond on; the wait is not what is tested, and a
	// loaded machine's statements take their time.
	require.Eventually(t, func() bool {
		_, ok, err := places.Take(ctx, "hr", 1, 8, time.Minute)
		return assert.NoError(t, err) && ok // assert, not require: this runs in another goroutine
	}, 10*time.Second, time.Millisecond)
	kept, err = places.Keep(ctx, "hr", p7, 7, 9, time.Minute)
	require.NoError(t, err)
	assert.False(t, kept, "its hold ended, and job 8 holds it")
}

func TestConnectionPlaces_Pace(t *testing.T) {
	t.Parallel()
	pool, schema := testDB(t)
	ctx := context.Background()
	require.NoError(t, riverhook.Migrate(ctx, pool, schema))
	places := riverhook.NewConnectionPlaces(pool, schema)
	// Rates of one a minute or slower, so that no assertion depends on how
	// fast a loaded machine runs the statements.
	wait, err := places.Pace(ctx, "crm", 1.0/60)
	require.NoError(t, err)
	assert.Zero(t, wait, "the first start")
	wait, err = places.Pace(ctx, "crm", 1.0/60)
	require.NoError(t, err)
	assert.Greater(t, wait, time.Duration(0))
	assert.LessOrEqual(t, wait, time.Minute, "until the next start, 1/rate after the first")
	wait, err = places.Pace(ctx, "erp", 1.0/60)
	require.NoError(t, err)
	assert.Zero(t, wait, "each connection has its own")
	wait, err = places.Pace(ctx, "crm", 0)
	require.NoError(t, err)
	assert.Zero(t, wait, "no rate")

	// Many processes' workers at once: one start each 1/rate.
	var started atomic.Int32
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			wait, err := places.Pace(ctx, "hr", 1.0/3600)
			if assert.NoError(t, err) && wait == 0 {
				started.Add(1)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int32(1), started.Load(), "one start in an hour at 1 an hour")
}

func TestConnectionPlaces_Slot(t *testing.T) {
	t.Parallel()
	pool, schema := testDB(t)
	ctx := context.Background()
	require.NoError(t, riverhook.Migrate(ctx, pool, schema))
	a, b := riverhook.NewConnectionPlaces(pool, schema), riverhook.NewConnectionPlaces(pool, schema) // two processes
	var waits []time.Duration
	for i := range 6 {
		p := a
		if i%2 == 1 {
			p = b
		}
		wait, err := p.Slot(ctx, "crm", time.Minute)
		require.NoError(t, err)
		waits = append(waits, wait)
	}
	// A wait is counted from its own statement: a minute apart, less the
	// time between the statements, which a loaded machine can stretch to
	// seconds but never to the 20 s allowed.
	for i := 1; i < len(waits); i++ {
		assert.InDelta(t, time.Minute, waits[i]-waits[i-1], float64(20*time.Second), "one chain for the fleet: slot %d is a minute after slot %d", i, i-1)
	}
	wait, err := a.Slot(ctx, "erp", time.Minute)
	require.NoError(t, err)
	assert.LessOrEqual(t, wait, time.Minute, "each connection has its own")
}

// TestConnectionPlaces_Prune: the pace rows whose next start and last slot
// are both past go; a row with a start or a slot to come stays, and a
// pruned connection's next delivery paces as before.
func TestConnectionPlaces_Prune(t *testing.T) {
	t.Parallel()
	pool, schema := testDB(t)
	ctx := context.Background()
	require.NoError(t, riverhook.Migrate(ctx, pool, schema))
	places := riverhook.NewConnectionPlaces(pool, schema)
	_, err := places.Pace(ctx, "crm", 1000) // next start 1 ms on
	require.NoError(t, err)
	_, err = places.Slot(ctx, "erp", time.Millisecond) // a slot 1 ms on
	require.NoError(t, err)
	_, err = places.Pace(ctx, "hr", 1.0/3600) // next start an hour on
	require.NoError(t, err)
	_, err = places.Slot(ctx, "ops", time.Hour) // a slot an hour on
	require.NoError(t, err)

	pruned, err := places.Prune(ctx, time.Now().Add(time.Minute))
	require.NoError(t, err)
	assert.Equal(t, int64(2), pruned, "crm's and erp's, all past a minute on")
	rows, err := pool.Query(ctx, `SELECT connection_id FROM "`+schema+`".riverhook_pace ORDER BY connection_id`)
	require.NoError(t, err)
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	assert.Equal(t, []string{"hr", "ops"}, left, "a start or a slot to come")

	// One an hour from here on: the start after is an hour away however
	// slowly the machine runs the two statements (CI once took more than
	// the millisecond of a rate of 1,000).
	wait, err := places.Pace(ctx, "crm", 1.0/3600)
	require.NoError(t, err)
	assert.Zero(t, wait, "pruned: its next delivery begins at once, the row made again")
	wait, err = places.Pace(ctx, "crm", 1.0/3600)
	require.NoError(t, err)
	assert.Greater(t, wait, time.Duration(0), "and paces the one after")
}

// TestConnectionPlaces_PaceOutlivesItsRow: a connection's pace row lost
// while the process runs (a failover to a replica that had not received
// it, rows pruned by hand) is made again by the next start or slot, rather
// than failing them all until the process restarts.
func TestConnectionPlaces_PaceOutlivesItsRow(t *testing.T) {
	t.Parallel()
	pool, schema := testDB(t)
	ctx := context.Background()
	require.NoError(t, riverhook.Migrate(ctx, pool, schema))
	places := riverhook.NewConnectionPlaces(pool, schema)
	_, err := places.Pace(ctx, "crm", 1.0/3600)
	require.NoError(t, err)
	_, err = places.Slot(ctx, "crm", time.Hour)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `DELETE FROM "`+schema+`".riverhook_pace`)
	require.NoError(t, err)
	wait, err := places.Pace(ctx, "crm", 1.0/3600)
	require.NoError(t, err)
	assert.Zero(t, wait, "the first start of the row made again")
	wait, err = places.Pace(ctx, "crm", 1.0/3600)
	require.NoError(t, err)
	assert.Greater(t, wait, time.Duration(0), "the rate holds from it")
	_, err = pool.Exec(ctx, `DELETE FROM "`+schema+`".riverhook_pace`)
	require.NoError(t, err)
	wait, err = places.Slot(ctx, "crm", time.Hour)
	require.NoError(t, err)
	assert.LessOrEqual(t, wait, time.Hour, "the first slot of the row made again")
	assert.Greater(t, wait, time.Duration(0))
}

// placesChild is the worker process of TestFleet_BoundsHoldAcrossProcesses:
// a River client delivering with a Worker whose bound is held by the
// places in PostgreSQL, until the test ends it; or, as "holder", a process
// that takes a place and never gives it back (it is killed).
func TestPlacesChild(t *testing.T) {
	role := os.Getenv(fleetRole)
	if role != "worker" && role != "holder" {
		t.Skip("a child process of TestFleet_BoundsHoldAcrossProcesses")
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("TEST_DATABASE_URL"))
	require.NoError(t, err)
	defer pool.Close()
	schema := os.Getenv(fleetSchema)
	places := riverhook.NewConnectionPlaces(pool, schema)
	if role == "holder" {
		_, ok, err := places.Take(ctx, "crm", 1, 1, holderHold)
		require.NoError(t, err)
		require.True(t, ok)
		os.Stdout.WriteString("holding\n")
		select {} // until killed
	}
	pem, err := os.ReadFile(os.Getenv(fleetURL + "_CA"))
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(pem))
	tr, err := webhook.NewTransport(&webhook.TransportOptions{AllowPrivateNetworks: true, TLSClientConfig: &tls.Config{RootCAs: roots}})
	require.NoError(t, err)
	sender, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr}})
	require.NoError(t, err)
	conn := webhook.Connection{Name: "crm", URL: os.Getenv(fleetURL), Secret: secret}
	rate, _ := strconv.ParseFloat(os.Getenv(fleetRate), 64) // none when unset
	w, err := riverhook.NewWorker(sender, func(context.Context, string) (webhook.Connection, error) { return conn, nil },
		&riverhook.WorkerOptions{MaxInFlightPerConnection: 2, Places: places, SnoozeFor: 200 * time.Millisecond,
			RateLimit: func(string) float64 { return rate }})
	require.NoError(t, err)
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	client := newClient(t, pool, schema, workers, nil)
	require.NoError(t, client.Start(ctx))
	os.Stdout.WriteString("working\n")
	select {} // until the test ends it
}

// holderHold is how long the holder (TestPlacesChild) holds its place:
// long enough that the test's Take, right after, finds it held on a
// loaded machine; the test waits it out after killing the holder.
const holderHold = 10 * time.Second

// TestFleet_BoundsHoldAcrossProcesses runs two worker processes on one
// PostgreSQL, each with MaxInFlightPerConnection 2 and the places: a slow
// endpoint never has more than 2 attempts in flight from the fleet (without
// the places, up to 4). A process killed while it holds a place gives it
// back when its hold ends.
func TestFleet_BoundsHoldAcrossProcesses(t *testing.T) {
	t.Parallel()
	pool, schema := testDB(t)
	ctx := context.Background()
	require.NoError(t, riverhook.Migrate(ctx, pool, schema))

	var mu sync.Mutex
	inFlight, peak, arrived := 0, 0, 0
	all := make(chan struct{})
	const deliveries = 24
	srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inFlight++
		peak = max(peak, inFlight)
		mu.Unlock()
		time.Sleep(100 * time.Millisecond) // a slow endpoint
		mu.Lock()
		inFlight--
		if arrived++; arrived == deliveries {
			close(all)
		}
		mu.Unlock()
	})})
	defer srv.Close()
	insertFleet(t, pool, schema, deliveries)

	start := func(role string) *exec.Cmd { return startPlacesChild(t, role, schema, srv) }
	started := time.Now()
	start("worker")
	start("worker")
	select {
	case <-all:
	case <-time.After(60 * time.Second):
		t.Fatalf("%d of %d deliveries arrived in 60 s", arrived, deliveries)
	}
	took := time.Since(started)
	mu.Lock()
	t.Logf("%d deliveries through 2 processes in %v, peak %d in flight (bound 2): %.1f/s, the bound over the latency allows 20/s",
		deliveries, took.Round(time.Millisecond), peak, float64(deliveries)/took.Seconds())
	assert.LessOrEqual(t, peak, 2, "the bound holds across the fleet")
	mu.Unlock()

	// A process killed while it holds a place. The holder takes it after
	// it is launched, for holderHold: a Take ending within holderHold of
	// the launch must find it held. One ending later (a machine that slow)
	// cannot tell a free place from a hold that ended.
	launched := time.Now()
	holder := start("holder")
	places := riverhook.NewConnectionPlaces(pool, schema)
	_, ok, err := places.Take(ctx, "crm", 1, 2, time.Minute)
	require.NoError(t, err)
	if elapsed := time.Since(launched); ok && elapsed >= holderHold {
		t.Skipf("the Take came %v after the holder's launch, past its hold of %v: it cannot tell whether the place was held", elapsed.Round(time.Millisecond), holderHold)
	}
	require.False(t, ok, "the holder's place")
	require.NoError(t, holder.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	for !ok && time.Since(killed) < holderHold+10*time.Second { // the hold ends within holderHold of the kill
		time.Sleep(10 * time.Millisecond)
		_, ok, err = places.Take(ctx, "crm", 1, 2, time.Minute)
		require.NoError(t, err)
	}
	assert.True(t, ok, "the place is free once its hold has ended")
	t.Logf("a killed process's place was free %v after the kill (its hold: %v)", time.Since(killed).Round(time.Millisecond), holderHold)
}

// startPlacesChild starts TestPlacesChild as an OS process in role
// ("worker" or "holder") on schema, delivering to srv, with env added; it
// returns once the child is under way, and kills it when the test ends.
func startPlacesChild(t *testing.T, role, schema string, srv *webhooktest.Server, env ...string) *exec.Cmd {
	t.Helper()
	caFile := t.TempDir() + "/ca.pem"
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))
	cmd := exec.Command(os.Args[0], "-test.run", "^TestPlacesChild$", "-test.count", "1", "-test.v")
	cmd.Env = append(os.Environ(), fleetRole+"="+role, fleetSchema+"="+schema, fleetURL+"="+srv.URL+"/hooks", fleetURL+"_CA="+caFile)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	for lines.Scan() && lines.Text() != role[:len(role)-2]+"ing" { // "working", "holding": under way
	}
	require.NoError(t, lines.Err())
	go io.Copy(io.Discard, out)
	return cmd
}

// insertFleet inserts n deliveries to connection "crm" in schema.
func insertFleet(t *testing.T, pool *pgxpool.Pool, schema string, n int) {
	t.Helper()
	client := newClient(t, pool, schema, nil, nil)
	params := make([]river.InsertManyParams, 0, n)
	for i := range n {
		p, err := riverhook.InsertParams(fmt.Sprint("d", i), []string{"crm"}, payload(fmt.Sprint("d", i)), nil)
		require.NoError(t, err)
		params = append(params, p...)
	}
	_, err := client.InsertMany(context.Background(), params)
	require.NoError(t, err)
}

// TestFleet_RateHoldsAcrossProcesses runs two worker processes on one
// PostgreSQL with RateLimit 10 a second and the places: the deliveries
// begin at most 10 a second from the fleet, not 10 from each (20 without
// the shared pace).
func TestFleet_RateHoldsAcrossProcesses(t *testing.T) {
	t.Parallel()
	pool, schema := testDB(t)
	require.NoError(t, riverhook.Migrate(context.Background(), pool, schema))
	const deliveries, rate = 16, 10.0
	var mu sync.Mutex
	var starts []time.Time // each attempt's start, as signed in its timestamp
	all := make(chan struct{})
	srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ms, err := strconv.ParseInt(r.Header.Get(webhook.HeaderTimestamp), 10, 64)
		assert.NoError(t, err, "the signed timestamp, in Unix milliseconds")
		mu.Lock()
		defer mu.Unlock()
		if starts = append(starts, time.UnixMilli(ms)); len(starts) == deliveries {
			close(all)
		}
	})})
	defer srv.Close()
	insertFleet(t, pool, schema, deliveries)
	for range 2 {
		startPlacesChild(t, "worker", schema, srv, fleetRate+"="+strconv.FormatFloat(rate, 'f', -1, 64))
	}
	select {
	case <-all:
	case <-time.After(60 * time.Second):
		t.Fatalf("%d of %d deliveries arrived in 60 s", len(starts), deliveries)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	span := starts[len(starts)-1].Sub(starts[0])
	t.Logf("%d deliveries through 2 processes at a rate of %v/s: %v from the first start to the last (%.1f/s)",
		deliveries, rate, span.Round(time.Millisecond), float64(deliveries-1)/span.Seconds())
	// The fleet's pace hands starts 1/rate apart. The span is taken from
	// the signed timestamps, not from arrivals: an arrival lags its start by
	// a handshake, the first one most, on a loaded machine. A start is
	// signed a moment after the pace handed it (no statement, no network
	// between), which the 150 ms allow for.
	least := time.Duration(float64(deliveries-1)/rate*float64(time.Second)) - 150*time.Millisecond
	assert.GreaterOrEqual(t, span, least, "%d starts at %v/s across the fleet", deliveries, rate)
}

// countingDB counts the statements sent through it, and can hold the
// next ones until a gate opens.
type countingDB struct {
	riverhook.DB
	n    atomic.Int64
	mu   sync.Mutex
	gate chan struct{} // the next held statements wait until it is closed
	held int           // how many more statements wait at gate
}

func (db *countingDB) count() {
	db.n.Add(1)
	db.mu.Lock()
	var gate chan struct{}
	if db.held > 0 {
		db.held--
		gate = db.gate
	}
	db.mu.Unlock()
	if gate != nil {
		<-gate
	}
}

// holdNext makes the next n statements wait until open is called.
func (db *countingDB) holdNext(n int) (open func()) {
	gate := make(chan struct{})
	db.mu.Lock()
	db.gate, db.held = gate, n
	db.mu.Unlock()
	return func() {
		db.mu.Lock()
		db.held = 0
		db.mu.Unlock()
		close(gate)
	}
}

func (db *countingDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	db.count()
	return db.DB.Exec(ctx, sql, args...)
}

func (db *countingDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	db.count()
	return db.DB.Query(ctx, sql, args...)
}

func (db *countingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	db.count()
	return db.DB.QueryRow(ctx, sql, args...)
}

// TestConnectionPlaces_TakesAndGivesAtOnceShareStatements takes, from 96
// goroutines at once, places of 4 connections of bound 8 (two of them
// asked with a second bound, as two Workers of one process might), then
// gives back those taken: each connection's places are held by one holder
// each, never more than its bound, every place is free again after, and
// the calls shared statements (the first statements, as many as run at
// once, are held until every goroutine has made its call, so that the
// others queue behind them).
func TestConnectionPlaces_TakesAndGivesAtOnceShareStatements(t *testing.T) {
	t.Parallel()
	pool, schema := testDB(t)
	ctx := context.Background()
	require.NoError(t, riverhook.Migrate(ctx, pool, schema))
	db := &countingDB{DB: pool}
	places := riverhook.NewConnectionPlaces(db, schema)
	connections := []string{"crm", "erp", "hr", "ops"}
	for _, id := range connections { // its rows made: a statement each, not counted below
		place, ok, err := places.Take(ctx, id, 8, -1, time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, places.Give(ctx, id, place, -1))
	}
	db.n.Store(0)

	const calls = 96
	type taken struct {
		id     string
		place  int
		holder int64
	}
	got := make(chan taken, calls)
	var wg, ready sync.WaitGroup
	open := db.holdNext(4) // as many as a process runs at once
	ready.Add(calls)
	for i := range calls {
		wg.Go(func() {
			ready.Done()
			id, bound := connections[i%4], 8
			if i%8 == 0 {
				bound = 6
			}
			place, ok, err := places.Take(ctx, id, bound, int64(i+1), time.Minute)
			assert.NoError(t, err)
			if ok {
				assert.Less(t, place, bound)
				got <- taken{id, place, int64(i + 1)}
			}
		})
	}
	ready.Wait()
	open()
	wg.Wait()
	close(got)
	held := map[string]map[int]int64{}
	var all []taken
	for tk := range got {
		if held[tk.id] == nil {
			held[tk.id] = map[int]int64{}
		}
		_, twice := held[tk.id][tk.place]
		assert.False(t, twice, "place %d of %s taken twice", tk.place, tk.id)
		held[tk.id][tk.place] = tk.holder
		all = append(all, tk)
	}
	for _, id := range connections {
		assert.LessOrEqual(t, len(held[id]), 8, "connection %s", id)
		assert.GreaterOrEqual(t, len(held[id]), 6, "connection %s: its places were free", id)
	}
	takes := db.n.Load()
	t.Logf("%d Takes at once: %d statements, %d places taken", calls, takes, len(all))
	assert.Less(t, takes, int64(calls), "Takes made at once share statements")

	open = db.holdNext(4)
	ready.Add(len(all))
	for _, tk := range all {
		wg.Go(func() {
			ready.Done()
			assert.NoError(t, places.Give(ctx, tk.id, tk.place, tk.holder))
		})
	}
	ready.Wait()
	open()
	wg.Wait()
	t.Logf("%d Gives at once: %d statements", len(all), db.n.Load()-takes)
	assert.Less(t, db.n.Load()-takes, int64(len(all)), "Gives made at once share statements")
	for _, id := range connections {
		for place := range 8 {
			_, ok, err := places.Take(ctx, id, 8, 1000+int64(place), time.Minute)
			require.NoError(t, err)
			assert.True(t, ok, "%s: every place is free again", id)
		}
	}
}
