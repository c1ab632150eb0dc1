package riverhook_test

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/riverhook/internal/testdb"
	"github.com/signedhook/webhook/webhooktest"
)

func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv("TEST_DATABASE_URL") == "" && os.Getenv("CI") == "" {
		// Tests skip themselves (testdb.URL); Examples cannot, so they are
		// left out here. Under CI=true they run, and fail without one.
		fmt.Fprintln(os.Stderr, "riverhook: TEST_DATABASE_URL is not set: skipping the tests and Examples that need PostgreSQL (run .ci/run, or point it at one)")
		skip := databaseExamples
		if s := flag.Lookup("test.skip").Value.String(); s != "" {
			skip = s + "|" + skip
		}
		flag.Set("test.skip", skip)
	}
	goleak.VerifyTestMain(m)
}

// testDB returns a pool and a fresh schema migrated with rivermigrate and
// riverhook.Migrate, as README's step 1 says.
func testDB(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	pool, schema := testdb.Schema(t, "riverhook", true)
	require.NoError(t, riverhook.Migrate(context.Background(), pool, schema))
	return pool, schema
}

func quietLogger() *slog.Logger { return testdb.Quiet() }

// newClient returns a River client on schema working with the given
// workers, not started.
func newClient(t testing.TB, pool *pgxpool.Pool, schema string, workers *river.Workers, tweak func(*river.Config)) *river.Client[pgx.Tx] {
	t.Helper()
	cfg := &river.Config{
		Schema:            schema,
		Workers:           workers,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}},
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            quietLogger(),
	}
	if workers == nil {
		cfg.Queues = nil // an insert-only client
	}
	if tweak != nil {
		tweak(cfg)
	}
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	require.NoError(t, err)
	return client
}

// workerClient returns a client working with worker alone, not started, and
// its events of jobs reaching a final state.
func workerClient(t testing.TB, pool *pgxpool.Pool, schema string, worker *riverhook.Worker) (*river.Client[pgx.Tx], <-chan *river.Event) {
	t.Helper()
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client := newClient(t, pool, schema, workers, nil)
	return client, finalEvents(t, client)
}

// start starts client and stops it at the end of the test.
func start(t testing.TB, client *river.Client[pgx.Tx]) {
	t.Helper()
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		client.StopAndCancel(ctx)
	})
}

// waitFinal waits for n jobs to reach a final state (completed, cancelled or
// discarded) and returns their rows by id. It counts no job of riverhook's
// maintenance, which a client set up by Register runs at its start.
func waitFinal(t testing.TB, events <-chan *river.Event, n int) map[int64]*rivertype.JobRow {
	t.Helper()
	got := map[int64]*rivertype.JobRow{}
	timeout := time.NewTimer(60 * time.Second)
	defer timeout.Stop()
	for len(got) < n {
		select {
		case ev := <-events:
			if ev.Job.Kind == riverhook.PruneKind {
				continue
			}
			switch ev.Job.State {
			case rivertype.JobStateCompleted, rivertype.JobStateCancelled, rivertype.JobStateDiscarded:
				got[ev.Job.ID] = ev.Job
			}
		case <-timeout.C:
			t.Fatalf("%d of %d jobs ended within 60 s", len(got), n)
		}
	}
	return got
}

func finalEvents(t testing.TB, client *river.Client[pgx.Tx]) <-chan *river.Event {
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobCancelled, river.EventKindJobFailed)
	t.Cleanup(cancel)
	return events
}

type pgxTx = pgx.Tx

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

func itoa(n int) string { return strconv.Itoa(n) }

const secret = "whsec_riverhook"

// resolver serves connections from a map; a missing id is gone.
type resolver struct {
	mu    sync.Mutex
	conns map[string]webhook.Connection
}

func newResolver(conns map[string]webhook.Connection) *resolver { return &resolver{conns: conns} }

func (r *resolver) resolve(_ context.Context, id string) (webhook.Connection, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.conns[id]
	if !ok {
		return webhook.Connection{}, riverhook.ErrConnectionGone
	}
	return c, nil
}

func payload(deliveryID string) webhook.Payload {
	p := webhook.SamplePayload(time.Now())
	p.User.ID = "usr_" + deliveryID
	p.User.Metadata = webhook.Metadata{"plan": "pro", "delivery_id": deliveryID}
	return p
}

// fastPolicy waits 50 ms, then 100 ms, ...: real waits River must honour.
func fastPolicy(retries int) *webhook.RetryPolicy {
	return &webhook.RetryPolicy{MaxRetries: retries, Backoff: webhook.ExponentialBackoff(50*time.Millisecond, time.Second)}
}

// insert inserts the delivery's jobs outside a transaction.
func insert(t *testing.T, client *river.Client[pgxTx], deliveryID string, conns []string, policy *webhook.RetryPolicy) []*rivertype.JobInsertResult {
	t.Helper()
	params, err := riverhook.InsertParams(deliveryID, conns, payload(deliveryID), &riverhook.InsertOptions{Retry: policy})
	require.NoError(t, err)
	res, err := client.InsertMany(context.Background(), params)
	require.NoError(t, err)
	return res
}

// workerOpts is what a case changes of the Worker setupWorker builds. The
// zero value: a receiver answering as webhooktest's does, a Sender on its
// client with the default policy, connection "crm" at the receiver, no
// OnAttempt.
type workerOpts struct {
	secret  string                // the receiver's; "" is secret
	handler http.Handler          // the receiver's; nil is webhooktest's own
	sender  webhook.SenderOptions // the Sender's, on the receiver's client
	guarded bool                  // the Sender on webhook.NewSender's own transport, which refuses loopback
	worker  riverhook.WorkerOptions
	record  bool // OnAttempt records into the bundle's rec

	// resolve, if not nil, returns the case's own Resolver, given the
	// bundle's connections to fall back on.
	resolve func(conns riverhook.Resolver) riverhook.Resolver
}

// workerBundle is what setupWorker builds around a Worker.
type workerBundle struct {
	srv    *webhooktest.Server // closed when the test ends
	sender *webhook.Sender
	conns  *resolver        // "crm" is the receiver
	rec    *attemptRecorder // OnAttempt's, with workerOpts.record
	pool   *pgxpool.Pool
	schema string // fresh, migrated
	tx     pgx.Tx // on schema, rolled back when the test ends
	tw     *rivertest.Worker[riverhook.Args, pgx.Tx]
}

// setupWorker returns a Worker delivering to a webhooktest receiver, as
// opts says (nil: the zero workerOpts), and what a case needs to work its
// jobs with rivertest on a fresh schema.
func setupWorker(t *testing.T, opts *workerOpts) (*riverhook.Worker, *workerBundle) {
	t.Helper()
	if opts == nil {
		opts = &workerOpts{}
	}
	b := &workerBundle{rec: &attemptRecorder{}}
	b.srv = webhooktest.NewServer(cmp.Or(opts.secret, secret), &webhooktest.ServerOptions{Handler: opts.handler})
	t.Cleanup(b.srv.Close)
	if opts.guarded {
		var err error
		b.sender, err = webhook.NewSender(&opts.sender)
		require.NoError(t, err)
	} else {
		b.sender = b.srv.Sender(&opts.sender)
	}
	b.conns = newResolver(map[string]webhook.Connection{"crm": b.srv.Connection()})
	resolve := riverhook.Resolver(b.conns.resolve)
	if opts.resolve != nil {
		resolve = opts.resolve(resolve)
	}
	wopts := opts.worker
	if opts.record {
		wopts.OnAttempt = b.rec.onAttempt
	}
	w := newWorker(t, b.sender, resolve, &wopts)
	b.pool, b.schema = testDB(t)
	b.tx = testTx(t, b.pool)
	b.tw = rivertest.NewWorker(t, riverpgxv5.New(nil), &river.Config{Schema: b.schema, Logger: quietLogger()}, w)
	return w, b
}

// receiverBundle is what setupReceiver builds for cases that work
// deliveries with started River clients.
type receiverBundle struct {
	conns  *resolver // "crm" is the receiver; set others with conns.set
	pool   *pgxpool.Pool
	schema string              // fresh, migrated
	srv    *webhooktest.Server // closed when the test ends
}

// setupReceiver returns a receiver answering with handler (nil: as
// webhooktest's does), and a fresh schema for River clients.
func setupReceiver(t *testing.T, handler http.Handler) *receiverBundle {
	t.Helper()
	pool, schema := testDB(t)
	srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: handler})
	t.Cleanup(srv.Close)
	return &receiverBundle{conns: newResolver(map[string]webhook.Connection{"crm": srv.Connection()}), pool: pool, schema: schema, srv: srv}
}

// testTx begins a transaction on pool, rolled back when the test ends.
func testTx(t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	tx, err := pool.Begin(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	return tx
}

// set makes id resolve to conn.
func (r *resolver) set(id string, conn webhook.Connection) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.conns[id] = conn
}

// attemptRecorder is an OnAttempt that keeps the attempts it sees.
type attemptRecorder struct {
	mu sync.Mutex
	as []webhook.Attempt
}

func (r *attemptRecorder) onAttempt(_ context.Context, _ *river.Job[riverhook.Args], a webhook.Attempt) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.as = append(r.as, a)
	return nil
}

func (r *attemptRecorder) attempts() []webhook.Attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]webhook.Attempt(nil), r.as...)
}

func firstParams(t *testing.T, deliveryID string, policy *webhook.RetryPolicy) river.InsertManyParams {
	t.Helper()
	params, err := riverhook.InsertParams(deliveryID, []string{"crm"}, payload(deliveryID), &riverhook.InsertOptions{Retry: policy})
	require.NoError(t, err)
	return params[0]
}

// insertTx inserts the job of p in tx without working it.
func insertTx(t *testing.T, tx pgx.Tx, schema string, p river.InsertManyParams) *rivertype.JobRow {
	t.Helper()
	client, err := river.NewClient(riverpgxv5.New(nil), &river.Config{Schema: schema, Logger: quietLogger()})
	require.NoError(t, err)
	res, err := client.InsertTx(context.Background(), tx, p.Args, p.InsertOpts)
	require.NoError(t, err)
	return res.Job
}

// crash makes the job look as River's rescuer leaves a job whose process
// died during its next run: one more run counted, the rescuer's error, and
// the job available again.
func crash(t *testing.T, tx pgx.Tx, schema string, job *rivertype.JobRow) *rivertype.JobRow {
	t.Helper()
	ctx := context.Background()
	rescue, err := json.Marshal(rivertype.AttemptError{At: time.Now().UTC(), Attempt: job.Attempt + 1, Error: "Stuck job rescued by JobRescuer"})
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "UPDATE "+schema+".river_job SET attempt = attempt + 1, attempted_at = now(), errors = array_append(errors, $2::jsonb), state = 'available' WHERE id = $1",
		job.ID, string(rescue))
	require.NoError(t, err)
	client, err := river.NewClient(riverpgxv5.New(nil), &river.Config{Schema: schema, Logger: quietLogger()})
	require.NoError(t, err)
	got, err := client.JobGetTx(ctx, tx, job.ID)
	require.NoError(t, err)
	return got
}

// logged is what the attempt log keeps of a: all but the exact duration and
// response bytes, and the error's type.
func logged(a webhook.Attempt) string {
	err := ""
	if a.Err != nil {
		err = a.Err.Error()
	}
	return fmt.Sprintf("n=%d start=%s status=%d kind=%q retry=%v in %v ts=%d err=%q response=%q", a.N, a.Start.UTC().Round(time.Microsecond).Format(time.RFC3339Nano),
		a.StatusCode, a.Kind, a.Retry, a.RetryIn, a.Timestamp, err, a.ResponseText())
}

// newTestWorker returns a Worker delivering to srv as connection "crm" with
// the policy, and OnAttempt recording into rec when rec is not nil.
func newTestWorker(t testing.TB, srv *webhooktest.Server, policy *webhook.RetryPolicy, rec *attemptRecorder) *riverhook.Worker {
	opts := &riverhook.WorkerOptions{}
	if rec != nil {
		opts.OnAttempt = rec.onAttempt
	}
	return newWorker(t, srv.Sender(&webhook.SenderOptions{Retry: policy}),
		newResolver(map[string]webhook.Connection{"crm": srv.Connection()}).resolve, opts)
}

// brief is an attempt in a few words, for comparisons.
func brief(a webhook.Attempt) string {
	switch {
	case a.OK():
		return "n=" + itoa(a.N) + " delivered"
	case a.Retry:
		return "n=" + itoa(a.N) + " " + string(a.Kind) + " " + itoa(a.StatusCode) + " retry " + a.RetryIn.String()
	}
	return "n=" + itoa(a.N) + " " + string(a.Kind)
}

// jobRowsText returns every job row of the schema as PostgreSQL prints it.
func jobRowsText(t *testing.T, tx pgx.Tx, schema string) string {
	t.Helper()
	rows, err := tx.Query(context.Background(), "SELECT j::text FROM "+schema+".river_job j")
	require.NoError(t, err)
	defer rows.Close()
	var all strings.Builder
	for rows.Next() {
		var row string
		require.NoError(t, rows.Scan(&row))
		all.WriteString(row + "\n")
	}
	require.NoError(t, rows.Err())
	return all.String()
}

// assertNoToken fails when text holds token, quoting where.
func assertNoToken(t *testing.T, text, token string) {
	t.Helper()
	if i := strings.Index(text, token); i >= 0 {
		t.Errorf("a job row holds %q: ...%s...", token, text[max(i-80, 0):min(i+len(token)+20, len(text))])
	}
}

// switchHost is a host at one address that is dead or back. Dead, it
// accepts TCP connections and holds them without a word, so that an
// attempt times out in its TLS handshake, having no connection; back, it
// forwards each new connection to target, a receiver that answers through
// it, TLS included.
type switchHost struct {
	ln     net.Listener
	target string
	dead   atomic.Bool
	closed chan struct{}
	wg     sync.WaitGroup
}

func newSwitchHost(tb testing.TB, target string) *switchHost {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	h := &switchHost{ln: ln, target: target, closed: make(chan struct{})}
	h.dead.Store(true)
	h.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.wg.Go(func() { h.serve(c) })
		}
	})
	tb.Cleanup(func() { close(h.closed); ln.Close(); h.wg.Wait() })
	return h
}

func (h *switchHost) serve(c net.Conn) {
	var up net.Conn
	if !h.dead.Load() {
		var err error
		if up, err = net.Dial("tcp", h.target); err != nil {
			c.Close()
			return
		}
	}
	done := make(chan struct{}, 2)
	copiers := 1
	if up != nil {
		copiers = 2
		go func() { io.Copy(up, c); up.Close(); done <- struct{}{} }()
		go func() { io.Copy(c, up); c.Close(); done <- struct{}{} }()
	} else {
		go func() { io.Copy(io.Discard, c); done <- struct{}{} }() // until the client leaves
	}
	ended := 0
	select {
	case <-done:
		ended++
	case <-h.closed:
	}
	c.Close()
	if up != nil {
		up.Close()
	}
	for ; ended < copiers; ended++ {
		<-done
	}
}

// connection returns conn, a connection to the receiver behind h, with the
// URL of h.
func (h *switchHost) connection(conn webhook.Connection) webhook.Connection {
	u, _ := url.Parse(conn.URL)
	u.Host = h.ln.Addr().String()
	conn.URL = u.String()
	return conn
}

// attemptCounter is a RoundTripper that counts the attempts in flight to
// each of its hosts (host:port), and the most at once.
type attemptCounter struct {
	next  http.RoundTripper
	hosts map[string]*[2]atomic.Int32 // in flight, peak; set before use
}

func newAttemptCounter(next http.RoundTripper, hostPorts ...string) *attemptCounter {
	c := &attemptCounter{next: next, hosts: map[string]*[2]atomic.Int32{}}
	for _, hp := range hostPorts {
		c.hosts[hp] = new([2]atomic.Int32)
	}
	return c
}

func (c *attemptCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if n := c.hosts[r.URL.Host]; n != nil {
		now := n[0].Add(1)
		defer n[0].Add(-1)
		for p := n[1].Load(); now > p && !n[1].CompareAndSwap(p, now); p = n[1].Load() {
		}
	}
	return c.next.RoundTrip(r)
}

// resetPeak starts counting the peak again from the attempts in flight.
func (c *attemptCounter) resetPeak() {
	for _, n := range c.hosts {
		n[1].Store(n[0].Load())
	}
}

func (c *attemptCounter) peak() int32 {
	var most int32
	for _, n := range c.hosts {
		most = max(most, n[1].Load())
	}
	return most
}

// newWorker returns riverhook.NewWorker's Worker, failing the test on its
// error.
func newWorker(t testing.TB, sender *webhook.Sender, resolve riverhook.Resolver, opts *riverhook.WorkerOptions) *riverhook.Worker {
	t.Helper()
	w, err := riverhook.NewWorker(sender, resolve, opts)
	require.NoError(t, err)
	return w
}
