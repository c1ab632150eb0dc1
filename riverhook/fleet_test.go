package riverhook_test

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
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

// placesChild is the worker process of TestFleet_BoundsHoldAcrossProcesses:
// a River client delivering with a Worker whose bound is held by the
// places in PostgreSQL, until the test ends it; or, as "holder", a process
// whose Send Test holds a place while its endpoint never answers (it is
// killed).
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
	if role == "holder" {
		os.Stdout.WriteString("holding\n")
		w.SendTest(ctx, "crm") // its endpoint holds it until the process is killed
		select {}
	}
	client := newClient(t, pool, schema, nil, func(config *river.Config) {
		config.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}}
		require.NoError(t, riverhook.Register(config, w)) // the rescue of a killed process's jobs: a minute, not River's hour
	})
	require.NoError(t, client.Start(ctx))
	os.Stdout.WriteString("working\n")
	select {} // until the test ends it
}

// TestFleet_BoundsHoldAcrossProcesses runs two worker processes on one
// PostgreSQL, each with MaxInFlightPerConnection 2 and the places: a slow
// endpoint never has more than 2 attempts in flight from the fleet (without
// the places, up to 4). A process killed while it holds a place frees it
// at once: its session ends with it.
func TestFleet_BoundsHoldAcrossProcesses(t *testing.T) {
	t.Parallel()
	pool, schema := testDB(t)
	ctx := context.Background()
	require.NoError(t, riverhook.Migrate(ctx, pool, schema))

	var mu sync.Mutex
	inFlight, peak, arrived := 0, 0, 0
	all := make(chan struct{})
	hold, holding := make(chan struct{}), make(chan struct{}, 1)
	const deliveries = 24
	srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hold: // the holder's Send Test, after the deliveries
			holding <- struct{}{}
			<-r.Context().Done()
			return
		default:
		}
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

	// A process killed while it holds a place: its Send Test's endpoint
	// holds the request, and the place with it, until the kill.
	close(hold)
	holder := start("holder")
	<-holding
	var key int64 = riverhook.PlaceKey(schema, "crm")
	held := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
			AND (classid::bigint << 32 | objid::bigint) = $1`, key).Scan(&n))
		return n
	}
	require.Equal(t, 1, held(), "the holder's place")
	require.NoError(t, holder.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	for held() > 0 && time.Since(killed) < 10*time.Second {
		time.Sleep(10 * time.Millisecond) // PostgreSQL ends the session once it reads the closed socket
	}
	assert.Zero(t, held(), "the place is free once the process is gone")
	t.Logf("a killed process's place was free %v after the kill", time.Since(killed).Round(time.Millisecond))
}

// startPlacesChild starts TestPlacesChild as an OS process in role
// ("worker" or "holder") on schema, delivering to srv, with env added; it
// returns once the child is under way, and kills it when the test ends.
func startPlacesChild(t *testing.T, role, schema string, srv *webhooktest.Server, env ...string) *exec.Cmd {
	t.Helper()
	caFile := t.TempDir() + "/ca.pem"
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))
	env = append([]string{fleetRole + "=" + role, fleetSchema + "=" + schema, fleetURL + "=" + srv.URL + "/hooks", fleetURL + "_CA=" + caFile}, env...)
	cmd, _ := startChild(t, "TestPlacesChild", role[:len(role)-2]+"ing", env) // "working", "holding": under way
	return cmd
}

// startChild starts test as an OS process, with env added, and returns
// once it writes the line ready, with the lines it writes after (those
// not read at once are dropped); it kills the process when the test ends.
func startChild(t *testing.T, test, ready string, env []string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^"+test+"$", "-test.count", "1", "-test.v")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	for lines.Scan() && lines.Text() != ready {
	}
	require.NoError(t, lines.Err())
	more := make(chan string, 16)
	go func() {
		for lines.Scan() {
			select {
			case more <- lines.Text():
			default: // nobody reads them
			}
		}
		io.Copy(io.Discard, out) // past a line too long for the scanner
	}()
	return cmd, more
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
	// The fleet's pace hands starts 2% over 1/rate apart. The span is taken from
	// the signed timestamps, not from arrivals: an arrival lags its start by
	// a handshake, the first one most, on a loaded machine. A start is
	// signed a moment after the pace handed it (no statement, no network
	// between), which the 150 ms allow for.
	least := time.Duration(float64(deliveries-1)/rate*float64(time.Second)) - 150*time.Millisecond
	assert.GreaterOrEqual(t, span, least, "%d starts at %v/s across the fleet", deliveries, rate)
}

// TestFleet_ChaosLosesNothing runs worker processes on one PostgreSQL
// through chaos: one SIGKILLed while it holds places (a replacement
// started), then another whose places' session the database ends
// (pg_terminate_backend). Every delivery arrives, the killed process's
// places free at once, and the bound holds: the process whose session
// ended cuts its attempts in flight as it learns it.
func TestFleet_ChaosLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for River's rescue of a killed process's jobs, about a minute and a half")
	}
	t.Parallel()
	pool, schema := testDB(t)
	ctx := context.Background()
	require.NoError(t, riverhook.Migrate(ctx, pool, schema))

	// Enough that the survivors still deliver once the killed process's
	// jobs (as many as it fetched) wait for River's rescue.
	const deliveries = 200
	ep := newSlowEndpoint(t)
	insertFleet(t, pool, schema, deliveries)
	start := func() *exec.Cmd { return startPlacesChild(t, "worker", schema, ep.srv) }
	victim := start()
	start()
	ep.waitFor(t, 10, time.Minute)

	require.NoError(t, victim.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	start()
	ep.waitFor(t, 30, time.Minute)
	peak := ep.peakInFlight(killed)
	t.Logf("30 arrived %v after the SIGKILL, peak %d in flight (bound 2)", time.Since(killed).Round(time.Millisecond), peak)
	assert.LessOrEqual(t, peak, 2, "the bound held through a SIGKILL")

	// A worker whose session of places the database ends.
	// A place is held whenever an attempt is in flight: asked until one
	// is, between an attempt's end and the next's start.
	var pid int
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(30 * time.Second); ; <-tick.C {
		err := pool.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
			AND (classid::bigint << 32 | objid::bigint) BETWEEN $1 AND $1 + 1 LIMIT 1`, riverhook.PlaceKey(schema, "crm")).Scan(&pid)
		if err == nil {
			break
		}
		require.ErrorIs(t, err, pgx.ErrNoRows)
		require.True(t, time.Now().Before(deadline), "no worker held a place for 30 s")
	}
	var ended bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT pg_terminate_backend($1, 10000)`, pid).Scan(&ended))
	require.True(t, ended)
	terminated := time.Now()
	ep.waitFor(t, deliveries, 3*time.Minute) // the killed process's jobs: River's rescue, a minute and a half at most
	t.Logf("all %d arrived, %v after the session ended, %v after the SIGKILL; peak %d in flight", deliveries,
		time.Since(terminated).Round(time.Millisecond), time.Since(killed).Round(time.Millisecond), ep.peakInFlight(killed))
}

// slowEndpoint is a customer's endpoint answering each delivery in 100 ms,
// counting the attempts in flight and when each delivery first arrived.
// An attempt whose sender went away ends then, unanswered.
type slowEndpoint struct {
	srv     *webhooktest.Server
	arrived chan struct{} // a send per answer
	mu      sync.Mutex
	spans   []span               // each attempt's time at the endpoint
	first   map[string]time.Time // user id -> first answer
}

// span is an attempt's time at the endpoint; cut when its sender went
// away before the answer.
type span struct {
	from, to time.Time
	cut      bool
}

func newSlowEndpoint(t *testing.T) *slowEndpoint {
	ep := &slowEndpoint{arrived: make(chan struct{}, 1000), first: map[string]time.Time{}}
	ep.srv = webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		from := time.Now()
		body, _ := io.ReadAll(r.Body)
		p, err := webhook.ParsePayload(body)
		assert.NoError(t, err)
		answer := time.NewTimer(100 * time.Millisecond) // a slow endpoint
		defer answer.Stop()
		select {
		case <-answer.C:
		case <-r.Context().Done(): // its sender went away
			ep.mu.Lock()
			ep.spans = append(ep.spans, span{from: from, to: time.Now(), cut: true})
			ep.mu.Unlock()
			return
		}
		ep.mu.Lock()
		ep.spans = append(ep.spans, span{from: from, to: time.Now()})
		if _, ok := ep.first[p.User.ID]; !ok {
			ep.first[p.User.ID] = time.Now()
		}
		ep.mu.Unlock()
		ep.arrived <- struct{}{}
	})})
	t.Cleanup(ep.srv.Close)
	return ep
}

// peakInFlight returns the most attempts in flight at once at the
// endpoint. An attempt cut after died (a process killed then) ended at
// died: its connection closed with its process, and the endpoint's server
// notices a moment later, which is not the fleet's to count.
func (ep *slowEndpoint) peakInFlight(died time.Time) int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	type edge struct {
		at time.Time
		n  int
	}
	var edges []edge
	for _, s := range ep.spans {
		to := s.to
		if s.cut && s.from.Before(died) && to.After(died) {
			to = died
		}
		edges = append(edges, edge{s.from, 1}, edge{to, -1})
	}
	// An end before a start at the same instant.
	slices.SortFunc(edges, func(a, b edge) int { return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.n, b.n)) })
	peak, n := 0, 0
	for _, e := range edges {
		n += e.n
		peak = max(peak, n)
	}
	return peak
}

func (ep *slowEndpoint) count() int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return len(ep.first)
}

// waitFor waits until n deliveries have arrived, failing t after within.
func (ep *slowEndpoint) waitFor(t *testing.T, n int, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for ep.count() < n {
		select {
		case <-ep.arrived:
		case <-deadline:
			t.Fatalf("%d of %d deliveries arrived within %v", ep.count(), n, within)
		}
	}
}

// firstAfter returns the first arrival after at.
func (ep *slowEndpoint) firstAfter(at time.Time) time.Time {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	var first time.Time
	for _, t := range ep.first {
		if t.After(at) && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	return first
}

// TestFleet_SurvivesARestartOfPostgreSQL restarts the database under two
// worker processes delivering (TEST_PG_RESTART, a command .ci/run gives,
// run alone: every test on the server would see the restart): every
// delivery arrives, delivery resumes once the database is back, and the
// bound holds: the processes cut their attempts in flight as the database
// ends their sessions, and their places with them.
func TestFleet_SurvivesARestartOfPostgreSQL(t *testing.T) {
	restart := os.Getenv("TEST_PG_RESTART")
	if restart == "" || os.Getenv("RIVERHOOK_RESTART_TEST") != "1" {
		t.Skip("set TEST_PG_RESTART (a command restarting the test database) and RIVERHOOK_RESTART_TEST=1, and run this test alone, as .ci/run does")
	}
	pool, schema := testDB(t)
	ctx := context.Background()
	require.NoError(t, riverhook.Migrate(ctx, pool, schema))
	// Enough that the survivors still deliver once the killed process's
	// jobs (as many as it fetched) wait for River's rescue.
	const deliveries = 200
	ep := newSlowEndpoint(t)
	insertFleet(t, pool, schema, deliveries)
	startPlacesChild(t, "worker", schema, ep.srv)
	startPlacesChild(t, "worker", schema, ep.srv)
	ep.waitFor(t, 10, time.Minute)
	out, err := exec.Command(restart).CombinedOutput()
	require.NoError(t, err, "%s", out)
	restarted := time.Now()
	ep.waitFor(t, deliveries, 3*time.Minute)
	first := ep.firstAfter(restarted)
	peak := ep.peakInFlight(time.Time{})
	t.Logf("all %d arrived; delivery resumed %v after the restart, the last %v after it; peak %d in flight", deliveries,
		first.Sub(restarted).Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond), peak)
	assert.LessOrEqual(t, peak, 2, "the bound held through the restart")
}

// TestFleet_AnEndedSessionCutsItsAttempts: the database ends the session
// holding a place (pg_terminate_backend) while the place's attempt waits on
// the endpoint. The process learns it at once, with no statement of its
// own, and cuts the attempt: the place is another process's to take now,
// and the fleet's bound holds. The delivery runs again; the cut attempt is
// logged as interrupted and costs no retry.
func TestFleet_AnEndedSessionCutsItsAttempts(t *testing.T) {
	t.Parallel()
	held, cut := make(chan struct{}, 1), make(chan struct{}, 1)
	var first atomic.Bool
	b := setupReceiver(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if first.CompareAndSwap(false, true) {
			held <- struct{}{}
			<-r.Context().Done() // its sender cut it, or the test ended
			cut <- struct{}{}
		}
	}))
	ctx := context.Background()
	var logs syncBuffer
	w := newWorker(t, b.srv.Sender(nil), b.conns.resolve,
		&riverhook.WorkerOptions{MaxInFlightPerConnection: 1, Places: riverhook.NewConnectionPlaces(b.pool, b.schema),
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	client, final := workerClient(t, b.pool, b.schema, w)
	start(t, client)
	res := insert(t, client, "d1", []string{"crm"}, nil)
	within := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal(what)
		}
	}
	within(held, "the attempt did not reach the endpoint")

	place := riverhook.PlaceKey(b.schema, "crm") // place 0 of 1
	var pid int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND objsubid = 1 AND (classid::bigint << 32 | objid::bigint) = $1`, place).Scan(&pid))
	var ended bool
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT pg_terminate_backend($1, 10000)`, pid).Scan(&ended))
	require.True(t, ended)
	within(cut, "the attempt still waits on the endpoint while its place is free for another process")

	jobs := waitFinal(t, final, 1)
	d, err := riverhook.DeliveryOf(jobs[res[0].Job.ID])
	require.NoError(t, err)
	require.Len(t, d.Attempts, 2, "the process's log: %s", logs.String())
	assert.Equal(t, webhook.KindInterrupted, d.Attempts[0].Kind, "the cut attempt: %v", d.Attempts[0])
	assert.True(t, d.Attempts[1].OK(), "%v", d.Attempts[1])
	assert.Equal(t, 1, d.Attempts[1].N, "the cut attempt cost no retry")
	assert.Contains(t, logs.String(), "terminating connection due to administrator command", "the process's log says why the session ended")
	assert.NotContains(t, fmt.Sprint(d.Attempts[0].Err), "administrator", "the attempt log, which a customer may see, says only that the place was lost")
}
