package riverhook_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/webhooktest"
)

// TestWorker_DownEndpointsDeliveriesWaitAndGoOutOnceItIsUp pins endpoint
// health on the durable path, on a real PostgreSQL: a host that hangs (its
// TLS handshake never ends) is marked down; the deliveries enqueued
// meanwhile wait (snoozed, one probe at a time reaching it) without
// spending an attempt; once it answers, every delivery queued for it is
// delivered, and the service heard of the endpoint twice: down, then up.
func TestWorker_DownEndpointsDeliveriesWaitAndGoOutOnceItIsUp(t *testing.T) {
	pool, schema := testDB(t)
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	host := newSwitchHost(t, strings.TrimPrefix(srv.URL, "https://"))
	counter := newAttemptCounter(srv.Client().Transport, host.ln.Addr().String())
	var downSince atomic.Bool
	var peakWhileDown atomic.Int32

	var mu sync.Mutex
	var changes []webhook.EndpointHealth
	down, up := make(chan struct{}), make(chan struct{})
	policy := fastPolicy(6)
	sender, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: counter}, Retry: policy, AttemptTimeout: 150 * time.Millisecond,
		Health: &webhook.HealthOptions{DownAfter: 3, ProbeInterval: 200 * time.Millisecond, MaxProbeInterval: 200 * time.Millisecond,
			OnChange: func(_ context.Context, h webhook.EndpointHealth) {
				mu.Lock()
				defer mu.Unlock()
				changes = append(changes, h)
				if h.Down {
					counter.resetPeak()
					downSince.Store(true)
					close(down)
				} else {
					peakWhileDown.Store(counter.peak())
					close(up)
				}
			}}})
	require.NoError(t, err)
	client, final := workerClient(t, pool, schema, riverhook.NewWorker(sender,
		newResolver(map[string]webhook.Connection{"crm": host.connection(srv.Connection())}).resolve, nil))
	snoozed, cancel := client.Subscribe(river.EventKindJobSnoozed)
	defer cancel()
	start(t, client)

	early := insert(t, client, "early", []string{"crm"}, policy)
	select {
	case <-down:
	case <-time.After(30 * time.Second):
		t.Fatal("not reported down within 30 s")
	}
	var later []*rivertype.JobInsertResult
	for i := range 5 {
		later = append(later, insert(t, client, "later"+strconv.Itoa(i), []string{"crm"}, policy)...)
	}
	// Each delivery enqueued while the endpoint is down waits for it.
	waiting := map[int64]bool{}
	timeout := time.After(30 * time.Second)
	for len(waiting) < len(later) {
		select {
		case ev := <-snoozed:
			for _, r := range later {
				if ev.Job.ID == r.Job.ID {
					waiting[ev.Job.ID] = true
				}
			}
		case <-timeout:
			t.Fatalf("%d of %d deliveries snoozed within 30 s", len(waiting), len(later))
		}
	}
	host.dead.Store(false) // the endpoint answers again: the next probe finds it up
	select {
	case <-up:
	case <-time.After(30 * time.Second):
		t.Fatal("not reported up within 30 s of its coming back")
	}

	jobs := waitFinal(t, final, 1+len(later))
	for _, r := range later {
		job := jobs[r.Job.ID]
		require.Equal(t, rivertype.JobStateCompleted, job.State)
		d, err := riverhook.DeliveryOf(job)
		require.NoError(t, err)
		require.Len(t, d.Attempts, 1, "a delivery that waited spent no attempt")
		assert.Equal(t, 1, d.Attempts[0].N)
		assert.True(t, d.Attempts[0].OK())
	}
	e := jobs[early[0].Job.ID]
	require.Equal(t, rivertype.JobStateCompleted, e.State)
	d, err := riverhook.DeliveryOf(e)
	require.NoError(t, err)
	for i, a := range d.Attempts {
		assert.Equal(t, i+1, a.N, "numbered on, without gaps")
	}
	assert.True(t, d.Attempts[len(d.Attempts)-1].OK())
	assert.LessOrEqual(t, len(d.Attempts), policy.MaxRetries+1)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, changes, 2, "down, then up: once each")
	assert.True(t, changes[0].Down)
	assert.False(t, changes[1].Down)
	assert.LessOrEqual(t, peakWhileDown.Load(), int32(1), "while down, at most one probe in flight")
	assert.NotEmpty(t, srv.Deliveries(), "the deliveries reached the receiver behind the host")
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

// runLog is a Resolver recording, in order, the connection of each run.
type runLog struct {
	*resolver
	mu   sync.Mutex
	runs []string
}

func (r *runLog) resolve(ctx context.Context, id string) (webhook.Connection, error) {
	r.mu.Lock()
	r.runs = append(r.runs, id)
	r.mu.Unlock()
	return r.resolver.resolve(ctx, id)
}

func (r *runLog) count(id string, from int) (n, total int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, run := range r.runs[min(from, len(r.runs)):] {
		if run == id {
			n++
		}
	}
	return n, len(r.runs)
}

// A backlog waiting for a down endpoint never delays a healthy delivery:
// the waiting jobs wake spread out (one per SnoozeFor over the bound, after
// the endpoint's next probe), not all at the probe's instant ahead of the
// deliveries enqueued since, so a healthy delivery enqueued just after a
// probe was due runs after few of them.
func TestWorker_BacklogOfADownEndpointDoesNotDelayHealthyDeliveries(t *testing.T) {
	pool, schema := testDB(t)
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	deadURL := refusingURL(t)

	down := make(chan struct{}, 1)
	sender := srv.Sender(&webhook.SenderOptions{AttemptTimeout: time.Second,
		Health: &webhook.HealthOptions{DownAfter: 1, ProbeInterval: 2 * time.Second, MaxProbeInterval: 2 * time.Second,
			OnChange: func(_ context.Context, h webhook.EndpointHealth) {
				if h.Down {
					down <- struct{}{}
				}
			}}})
	runs := &runLog{resolver: newResolver(map[string]webhook.Connection{
		"dead": {Name: "dead", URL: deadURL, Secret: secret},
		"ok":   srv.Connection(),
	})}
	client, final := workerClient(t, pool, schema, riverhook.NewWorker(sender, runs.resolve, nil))
	snoozed, stopSnoozed := client.Subscribe(river.EventKindJobSnoozed)
	defer stopSnoozed()
	start(t, client)

	policy := fastPolicy(0)
	insert(t, client, "first", []string{"dead"}, policy)
	<-down
	const backlog = 2000
	var params []river.InsertManyParams
	for i := range backlog {
		p, err := riverhook.InsertParams("d"+strconv.Itoa(i), []string{"dead"}, payload("d"+strconv.Itoa(i)), &riverhook.InsertOptions{Retry: policy})
		require.NoError(t, err)
		params = append(params, p...)
	}
	_, err := client.InsertMany(context.Background(), params)
	require.NoError(t, err)
	waiting := map[int64]bool{} // each queued delivery ran once, and waits
	timeout := time.After(30 * time.Second)
	for len(waiting) < backlog {
		select {
		case ev := <-snoozed:
			waiting[ev.Job.ID] = true
		case <-timeout:
			t.Fatalf("%d of %d queued deliveries ran once within 30 s", len(waiting), backlog)
		}
	}
	h := sender.Health()
	require.Len(t, h, 1)
	require.True(t, h[0].Down)
	// Every queued delivery waits for the probe. Just after it is due, a
	// healthy delivery is enqueued (River's clock is the real one).
	time.Sleep(time.Until(h[0].NextProbe) + 50*time.Millisecond)
	_, from := runs.count("", 0)
	enqueued := time.Now()
	healthy := insert(t, client, "healthy", []string{"ok"}, policy)[0].Job.ID
	for done := false; !done; {
		select {
		case ev := <-final:
			done = ev.Job.ID == healthy
		case <-time.After(60 * time.Second):
			t.Fatal("the healthy delivery did not end within 60 s")
		}
	}
	waited := time.Since(enqueued)
	ahead, _ := runs.count("dead", from)
	assert.Less(t, ahead, backlog/4, "runs of the down endpoint's deliveries, each sending nothing, before a healthy delivery enqueued after them (it waited %v)", waited)
}

// A delivery waits for a down endpoint at most WorkerOptions.MaxWait, from
// when it was inserted: then its job is discarded, its log and Reason say
// why, and OnAttempt hears of it; before, it is snoozed, costing nothing.
// refusingURL returns the URL of a loopback port nothing listens on: every
// connection to it is refused.
func refusingURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return "https://" + l.Addr().String() + "/hooks"
}

func TestWorker_GivesUpWaitingForADownEndpointAfterMaxWait(t *testing.T) {
	t.Parallel()
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	deadURL := refusingURL(t)
	sender := srv.Sender(&webhook.SenderOptions{Health: &webhook.HealthOptions{DownAfter: 1}})
	rec := &attemptRecorder{}
	w := riverhook.NewWorker(sender, newResolver(map[string]webhook.Connection{"crm": {Name: "crm", URL: deadURL, Secret: secret}}).resolve,
		&riverhook.WorkerOptions{OnAttempt: rec.onAttempt, MaxWait: 24 * time.Hour})
	tw, tx, schema := testWorker(t, w)
	ctx := context.Background()
	policy := fastPolicy(3)

	res, err := tw.WorkJob(ctx, t, tx, insertTx(t, tx, schema, firstParams(t, "d1", policy)))
	require.Error(t, err)
	require.Equal(t, rivertype.JobStateAvailable, res.Job.State, "refused, and retried")
	require.True(t, sender.Health()[0].Down)

	waiting := insertTx(t, tx, schema, firstParams(t, "d2", policy))
	res, err = tw.WorkJob(ctx, t, tx, waiting)
	require.NoError(t, err)
	assert.Equal(t, river.EventKindJobSnoozed, res.EventKind, "within MaxWait: snoozed")
	assert.Len(t, rec.attempts(), 1, "a snooze is no attempt")

	riverhook.SetClock(w, func() time.Time { return time.Now().Add(25 * time.Hour) })
	res, err = tw.WorkJob(ctx, t, tx, res.Job)
	require.Error(t, err)
	assert.Equal(t, rivertype.JobStateDiscarded, res.Job.State, "past MaxWait: discarded")
	d, err := riverhook.DeliveryOf(res.Job)
	require.NoError(t, err)
	assert.Contains(t, d.Reason, "gave up after waiting 25h0m0s for the endpoint (WorkerOptions.MaxWait)")
	require.Len(t, d.Attempts, 1)
	assert.Equal(t, webhook.KindDown, d.Attempts[0].Kind)
	told := rec.attempts()
	require.Len(t, told, 2)
	assert.ErrorIs(t, told[1].Err, webhook.ErrEndpointDown)
	assert.Contains(t, told[1].Err.Error(), "gave up after waiting")
}
