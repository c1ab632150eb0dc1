package riverhook_test

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
)

// TestDownEndpoint pins endpoint health on the durable path. Its cases
// that start River clients run one at a time, not in parallel with other
// tests: they time River's real waits.
func TestDownEndpoint(t *testing.T) {
	// On a real PostgreSQL, a host that hangs (its TLS handshake never ends)
	// is marked down; the deliveries enqueued meanwhile wait (snoozed, one
	// probe at a time reaching it) without spending an attempt; once it
	// answers, every delivery queued for it is delivered, and the service
	// heard of the endpoint twice: down, then up.
	t.Run("DownEndpointsDeliveriesWaitAndGoOutOnceItIsUp", func(t *testing.T) {
		bundle := setupReceiver(t, nil)
		host := newSwitchHost(t, strings.TrimPrefix(bundle.srv.URL, "https://"))
		counter := newAttemptCounter(bundle.srv.Client().Transport, host.ln.Addr().String())
		var downSince atomic.Bool
		var peakWhileDown atomic.Int32

		var mu sync.Mutex
		var changes []webhook.EndpointHealth
		down, up := make(chan struct{}), make(chan struct{})
		policy := fastPolicy(6)
		// The dead host hangs however long an attempt may take. The attempt
		// timeout leaves room for the handshakes once it is back, several at
		// once through the proxy on a loaded machine: a later delivery must
		// not time out there.
		sender, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: counter}, Retry: policy, AttemptTimeout: 2 * time.Second,
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
		bundle.conns.set("crm", host.connection(bundle.srv.Connection()))
		client, final := workerClient(t, bundle.pool, bundle.schema, newWorker(t, sender, bundle.conns.resolve, nil))
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
		// The policy's attempts are numbered on, without gaps. A probe that
		// found the endpoint still down (early's run may be the probe) is no
		// attempt of the policy: it carries the number of the attempt that
		// follows it.
		n := 1
		for _, a := range d.Attempts {
			assert.Equal(t, n, a.N, "numbered on, without gaps")
			if !a.Probe {
				n++
			}
		}
		assert.True(t, d.Attempts[len(d.Attempts)-1].OK())
		assert.LessOrEqual(t, len(d.Attempts), policy.MaxRetries+1)

		mu.Lock()
		defer mu.Unlock()
		require.Len(t, changes, 2, "down, then up: once each")
		assert.True(t, changes[0].Down)
		assert.False(t, changes[1].Down)
		assert.LessOrEqual(t, peakWhileDown.Load(), int32(1), "while down, at most one probe in flight")
		assert.NotEmpty(t, bundle.srv.Deliveries(), "the deliveries reached the receiver behind the host")
	})

	// In one process and in a fleet, the deliveries that waited for a down
	// endpoint wake at the connection's pace once it answers again, not
	// each at its slot: here the slots are 15 s apart (SnoozeFor 30 s over a
	// bound of 2), so 30 of them would take minutes; woken, they take about
	// as many attempts' times over the bound (a few seconds here, as the
	// probes' 2 s timeouts count in the pace at first).
	for _, fleet := range []bool{false, true} {
		name := "ABacklogWakesAtTheConnectionsPaceOnceItsEndpointAnswers/OneProcess"
		if fleet {
			name = "ABacklogWakesAtTheConnectionsPaceOnceItsEndpointAnswers/Fleet"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bundle := setupReceiver(t, nil)
			require.NoError(t, riverhook.Migrate(context.Background(), bundle.pool, bundle.schema))
			host := newSwitchHost(t, strings.TrimPrefix(bundle.srv.URL, "https://"))
			down, up := make(chan struct{}), make(chan struct{})
			policy := fastPolicy(6)
			// As above: the attempt timeout leaves room for the handshakes once
			// the host is back, so that two of them timing out on a loaded
			// machine never mark it down again.
			sender := bundle.srv.Sender(&webhook.SenderOptions{Retry: policy, AttemptTimeout: 2 * time.Second,
				Health: &webhook.HealthOptions{DownAfter: 2, ProbeInterval: 300 * time.Millisecond, MaxProbeInterval: 300 * time.Millisecond,
					OnChange: func(_ context.Context, h webhook.EndpointHealth) {
						if h.Down {
							close(down)
						} else {
							close(up)
						}
					}}})
			bundle.conns.set("crm", host.connection(bundle.srv.Connection()))
			opts := &riverhook.WorkerOptions{MaxInFlightPerConnection: 2, SnoozeFor: 30 * time.Second}
			if fleet {
				opts.Places = riverhook.NewConnectionPlaces(bundle.pool, bundle.schema)
			}
			w := newWorker(t, sender, bundle.conns.resolve, opts)
			client, final := workerClient(t, bundle.pool, bundle.schema, w)
			snoozed, cancel := client.Subscribe(river.EventKindJobSnoozed)
			defer cancel()
			start(t, client)

			insert(t, client, "first", []string{"crm"}, policy)
			<-down
			const backlog = 30
			later := map[int64]bool{}
			for i := range backlog {
				later[insert(t, client, "d"+strconv.Itoa(i), []string{"crm"}, policy)[0].Job.ID] = true
			}
			waiting := map[int64]bool{}
			timeout := time.After(30 * time.Second)
			for len(waiting) < backlog {
				select {
				case ev := <-snoozed:
					if later[ev.Job.ID] {
						waiting[ev.Job.ID] = true
					}
				case <-timeout:
					t.Fatalf("%d of %d deliveries waited within 30 s", len(waiting), backlog)
				}
			}
			host.dead.Store(false)
			<-up
			woke := time.Now()
			jobs := waitFinal(t, final, 1+backlog) // fails after 60 s: without the wake-up they take minutes
			t.Logf("%d deliveries that waited arrived %v after the endpoint answered again", backlog, time.Since(woke).Round(time.Millisecond))
			for id := range later {
				require.Equal(t, rivertype.JobStateCompleted, jobs[id].State)
				d, err := riverhook.DeliveryOf(jobs[id])
				require.NoError(t, err)
				for _, a := range d.Attempts[:len(d.Attempts)-1] {
					assert.Equal(t, webhook.KindTimeout, a.Kind, "a delivery that waited spent no attempt but the endpoint's probes")
				}
			}
		})
	}

	// A backlog waiting for a down endpoint never delays a healthy delivery:
	// the waiting jobs wake spread out (one per SnoozeFor over the bound, after
	// the endpoint's next probe), not all at the probe's instant ahead of the
	// deliveries enqueued since, so a healthy delivery enqueued just after a
	// probe was due runs after few of them.
	t.Run("BacklogOfADownEndpointDoesNotDelayHealthyDeliveries", func(t *testing.T) {
		bundle := setupReceiver(t, nil)
		deadURL := refusingURL(t)

		down := make(chan struct{}, 1)
		// The dead URL refuses at once; the timeout is the healthy
		// deliveries', long for a slow machine (DownAfter is 1).
		sender := bundle.srv.Sender(&webhook.SenderOptions{AttemptTimeout: 5 * time.Second,
			Health: &webhook.HealthOptions{DownAfter: 1, ProbeInterval: 2 * time.Second, MaxProbeInterval: 2 * time.Second,
				OnChange: func(_ context.Context, h webhook.EndpointHealth) {
					if h.Down {
						down <- struct{}{}
					}
				}}})
		runs := &runLog{resolver: newResolver(map[string]webhook.Connection{
			"dead": {Name: "dead", URL: deadURL, Secret: secret},
			"ok":   bundle.srv.Connection(),
		})}
		client, final := workerClient(t, bundle.pool, bundle.schema, newWorker(t, sender, runs.resolve, nil))
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
		// Each queued delivery ran once, and waits. The deadline is not what
		// is tested: 2000 runs take a while under the race detector on a
		// slow machine.
		waiting := map[int64]bool{}
		timeout := time.After(120 * time.Second)
		for len(waiting) < backlog {
			select {
			case ev := <-snoozed:
				waiting[ev.Job.ID] = true
			case <-timeout:
				t.Fatalf("%d of %d queued deliveries ran once within 120 s", len(waiting), backlog)
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
	})

	// A delivery waits for a down endpoint at most WorkerOptions.MaxWait, from
	// when it was inserted: then its job is discarded, its log and Reason say
	// why, and OnAttempt hears of it; before, it is snoozed, costing nothing.
	// The probe of a down endpoint is a real delivery's attempt: when it
	// finds the endpoint still down, it is logged but costs the delivery no
	// attempt of its policy, as the README and the console's banner say of a
	// delivery waiting for its endpoint. (Before, a delivery picked as the
	// probe again and again was given up while the endpoint was down.)
	t.Run("AProbeThatFindsItStillDownCostsNoAttempt", func(t *testing.T) {
		t.Parallel()
		// Every run is the probe: one is due at once.
		_, bundle := setupWorker(t, &workerOpts{sender: webhook.SenderOptions{Health: probeEveryRun()}, record: true})
		working := bundle.srv.Connection()
		bundle.conns.set("crm", webhook.Connection{Name: "crm", URL: refusingURL(t), Secret: secret})
		ctx := context.Background()
		policy := fastPolicy(1) // two attempts

		markDown(t, bundle, policy)
		require.True(t, bundle.sender.Health()[0].Down, "refused once: down")

		job := insertTx(t, bundle.tx, bundle.schema, firstParams(t, "d2", policy))
		for i := range 3 {
			res, err := bundle.tw.WorkJob(ctx, t, bundle.tx, job)
			require.NoError(t, err, "probe %d", i+1)
			require.Equal(t, river.EventKindJobSnoozed, res.EventKind, "probe %d found it down: the delivery waits", i+1)
			job = res.Job
		}
		told := bundle.rec.attempts()
		require.Len(t, told, 4, "d1's attempt, then d2's three probes")
		for _, a := range told[1:] {
			assert.True(t, a.Probe)
			assert.Equal(t, webhook.KindRefused, a.Kind)
			assert.Equal(t, 1, a.N, "the probes cost no attempt: each is the first's")
		}

		bundle.conns.set("crm", working) // its endpoint answers
		res, err := bundle.tw.WorkJob(ctx, t, bundle.tx, job)
		require.NoError(t, err)
		require.Equal(t, rivertype.JobStateCompleted, res.Job.State)
		d, err := riverhook.DeliveryOf(res.Job)
		require.NoError(t, err)
		require.Len(t, d.Attempts, 2, "the last of the probes in a row is in the log")
		assert.True(t, d.Attempts[0].Probe)
		last := d.Attempts[1]
		assert.True(t, last.OK())
		assert.Equal(t, 1, last.N, "delivered at the policy's first attempt")
		assert.False(t, last.Probe)
	})

	// A delivery that has waited MaxWait when its run is the probe, and the
	// probe finds the endpoint still down, is given up for the wait: its
	// Reason says so, not that its policy gave up.
	t.Run("AProbePastMaxWaitGivesUpForTheWait", func(t *testing.T) {
		t.Parallel()
		w, bundle := setupWorker(t, &workerOpts{sender: webhook.SenderOptions{Health: probeEveryRun()},
			worker: riverhook.WorkerOptions{MaxWait: 24 * time.Hour}, record: true})
		bundle.conns.set("crm", webhook.Connection{Name: "crm", URL: refusingURL(t), Secret: secret})
		ctx := context.Background()
		policy := fastPolicy(3)
		markDown(t, bundle, policy)
		require.True(t, bundle.sender.Health()[0].Down)
		riverhook.SetClock(w, func() time.Time { return time.Now().Add(25 * time.Hour) })
		res, err := bundle.tw.WorkJob(ctx, t, bundle.tx, insertTx(t, bundle.tx, bundle.schema, firstParams(t, "d2", policy)))
		require.Error(t, err)
		require.Equal(t, rivertype.JobStateDiscarded, res.Job.State)
		d, err := riverhook.DeliveryOf(res.Job)
		require.NoError(t, err)
		assert.Contains(t, d.Reason, "gave up after waiting 25h0m0s for the endpoint")
		told := bundle.rec.attempts()
		require.Len(t, told, 2)
		assert.False(t, told[1].Retry, "the delivery ends")

		// The give-up is an entry of kind down, whose words an erasure
		// keeps: the Reason stays (a review's finding: the probe's own
		// entry held them, and the erasure replaced them).
		client, err := river.NewClient(riverpgxv5.New(nil), &river.Config{Schema: bundle.schema, Logger: quietLogger()})
		require.NoError(t, err)
		n, err := riverhook.EraseBodies(ctx, client, bundle.tx, []string{"d2"})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		job, err := client.JobGetTx(ctx, bundle.tx, res.Job.ID)
		require.NoError(t, err)
		d, err = riverhook.DeliveryOf(job)
		require.NoError(t, err)
		assert.Contains(t, d.Reason, "gave up after waiting", "Reason is kept by an erasure")
	})

	// The run after a probe that found the endpoint down has the probe's
	// run number (River gives a snoozed run's back): when its process dies,
	// the log shows it interrupted, and OnAttempt is told.
	t.Run("ARunCutAfterAProbeIsInTheLog", func(t *testing.T) {
		t.Parallel()
		_, bundle := setupWorker(t, &workerOpts{sender: webhook.SenderOptions{Health: probeEveryRun()}, record: true})
		working := bundle.srv.Connection()
		bundle.conns.set("crm", webhook.Connection{Name: "crm", URL: refusingURL(t), Secret: secret})
		ctx := context.Background()
		policy := fastPolicy(3)
		markDown(t, bundle, policy)
		res, err := bundle.tw.WorkJob(ctx, t, bundle.tx, insertTx(t, bundle.tx, bundle.schema, firstParams(t, "d2", policy)))
		require.NoError(t, err)
		require.Equal(t, river.EventKindJobSnoozed, res.EventKind)
		told := bundle.rec.attempts()
		require.Len(t, told, 2)
		assert.True(t, told[1].Probe)
		assert.True(t, told[1].Retry, "the delivery goes on")
		assert.Positive(t, told[1].RetryIn, "after its snooze")

		job := crash(t, bundle.tx, bundle.schema, res.Job) // the next run's process dies mid-attempt
		d, err := riverhook.DeliveryOf(job)
		require.NoError(t, err)
		require.Len(t, d.Attempts, 2)
		assert.True(t, d.Attempts[0].Probe)
		assert.Equal(t, webhook.KindInterrupted, d.Attempts[1].Kind)

		bundle.conns.set("crm", working)
		res, err = bundle.tw.WorkJob(ctx, t, bundle.tx, job)
		require.NoError(t, err)
		require.Equal(t, rivertype.JobStateCompleted, res.Job.State)
		told = bundle.rec.attempts()
		require.Len(t, told, 4)
		assert.Equal(t, webhook.KindInterrupted, told[2].Kind, "OnAttempt is told of the cut run")
		assert.True(t, told[3].OK())
	})

	t.Run("GivesUpWaitingForADownEndpointAfterMaxWait", func(t *testing.T) {
		t.Parallel()
		w, bundle := setupWorker(t, &workerOpts{sender: webhook.SenderOptions{Health: &webhook.HealthOptions{DownAfter: 1}},
			worker: riverhook.WorkerOptions{MaxWait: 24 * time.Hour}, record: true})
		bundle.conns.set("crm", webhook.Connection{Name: "crm", URL: refusingURL(t), Secret: secret})
		ctx := context.Background()
		policy := fastPolicy(3)

		res, err := bundle.tw.WorkJob(ctx, t, bundle.tx, insertTx(t, bundle.tx, bundle.schema, firstParams(t, "d1", policy)))
		require.Error(t, err)
		require.Equal(t, rivertype.JobStateAvailable, res.Job.State, "refused, and retried")
		require.True(t, bundle.sender.Health()[0].Down)

		waiting := insertTx(t, bundle.tx, bundle.schema, firstParams(t, "d2", policy))
		res, err = bundle.tw.WorkJob(ctx, t, bundle.tx, waiting)
		require.NoError(t, err)
		assert.Equal(t, river.EventKindJobSnoozed, res.EventKind, "within MaxWait: snoozed")
		assert.Len(t, bundle.rec.attempts(), 1, "a snooze is no attempt")

		riverhook.SetClock(w, func() time.Time { return time.Now().Add(25 * time.Hour) })
		res, err = bundle.tw.WorkJob(ctx, t, bundle.tx, res.Job)
		require.Error(t, err)
		assert.Equal(t, rivertype.JobStateDiscarded, res.Job.State, "past MaxWait: discarded")
		d, err := riverhook.DeliveryOf(res.Job)
		require.NoError(t, err)
		assert.Contains(t, d.Reason, "gave up after waiting 25h0m0s for the endpoint (WorkerOptions.MaxWait)")
		require.Len(t, d.Attempts, 1)
		assert.Equal(t, webhook.KindDown, d.Attempts[0].Kind)
		told := bundle.rec.attempts()
		require.Len(t, told, 2)
		assert.ErrorIs(t, told[1].Err, webhook.ErrEndpointDown)
		assert.Contains(t, told[1].Err.Error(), "gave up after waiting")
	})
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

// refusingURL returns the URL of a loopback port nothing listens on: every
// connection to it is refused.
func refusingURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return "https://" + l.Addr().String() + "/hooks"
}
