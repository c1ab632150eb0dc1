package riverhook_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
)

// After a probe that found the endpoint down, a job whose runs then fail
// (the Resolver failing) until River's MaxAttempts is discarded for
// MaxAttempts, and its Reason says so, not the probe's network error (a
// review's finding).
func TestProbe_DiscardedByRiverAfterAProbeSaysSo(t *testing.T) {
	var failing atomic.Bool
	_, bundle := setupWorker(t, &workerOpts{sender: webhook.SenderOptions{Health: probeEveryRun()},
		resolve: func(conns riverhook.Resolver) riverhook.Resolver {
			return func(ctx context.Context, id string) (webhook.Connection, error) {
				if failing.Load() {
					return webhook.Connection{}, errors.New("database unavailable")
				}
				return conns(ctx, id)
			}
		}})
	bundle.conns.set("crm", webhook.Connection{Name: "crm", URL: refusingURL(t), Secret: secret})
	ctx := context.Background()
	policy := fastPolicy(0)
	markDown(t, bundle, policy)
	res, err := bundle.tw.WorkJob(ctx, t, bundle.tx, insertTx(t, bundle.tx, bundle.schema, firstParams(t, "d2", policy)))
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobSnoozed, res.EventKind)

	failing.Store(true)
	job := res.Job
	for job.State != rivertype.JobStateDiscarded {
		res, err = bundle.tw.WorkJob(ctx, t, bundle.tx, job)
		require.Error(t, err)
		job = res.Job
		require.LessOrEqual(t, job.Attempt, job.MaxAttempts)
	}
	d, err := riverhook.DeliveryOf(job)
	require.NoError(t, err)
	t.Logf("attempt %d of %d; reason %q", job.Attempt, job.MaxAttempts, d.Reason)
	assert.Contains(t, d.Reason, "MaxAttempts")
}

// blockingRT refuses connections until blocked is set, then fails as the
// private-network guard does (the host now resolves to a private address).
type blockingRT struct{ blocked atomic.Bool }

func (b *blockingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.blocked.Load() {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: webhook.ErrBlockedDestination}
	}
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
}

// A probe refused by the private-network guard (KindBlocked) cancels the
// job: no retry follows, in what OnAttempt is told and in the log (a
// review's finding: Sender.Attempt called any probe that left its endpoint
// down a wait, with a retry).
func TestProbe_ABlockedProbeIsNoWait(t *testing.T) {
	rt := &blockingRT{}
	_, bundle := setupWorker(t, &workerOpts{guarded: true, record: true, sender: webhook.SenderOptions{Client: &http.Client{Transport: rt},
		Health: probeEveryRun()}})
	bundle.conns.set("crm", webhook.Connection{Name: "crm", URL: "https://crm.example.com/hooks", Secret: secret})
	ctx := context.Background()
	policy := fastPolicy(3)
	markDown(t, bundle, policy)
	rt.blocked.Store(true)
	res, err := bundle.tw.WorkJob(ctx, t, bundle.tx, insertTx(t, bundle.tx, bundle.schema, firstParams(t, "d2", policy)))
	require.NoError(t, err)
	require.Equal(t, rivertype.JobStateCancelled, res.Job.State)
	told := bundle.rec.attempts()
	require.Len(t, told, 2)
	require.Equal(t, webhook.KindBlocked, told[1].Kind)
	assert.False(t, told[1].Probe, "no wait for the endpoint")
	assert.False(t, told[1].Retry, "the delivery is cancelled: no retry follows (RetryIn %v)", told[1].RetryIn)
	d, err := riverhook.DeliveryOf(res.Job)
	require.NoError(t, err)
	assert.False(t, d.Attempts[len(d.Attempts)-1].Retry, "the log says a retry follows a cancelled delivery")
}

// otherRT refuses connections until other is set, then fails before
// connecting with an error of no known kind (KindOther), as a caller's
// RoundTripper (a breaker, a rate limiter) may.
type otherRT struct{ other atomic.Bool }

func (o *otherRT) RoundTrip(r *http.Request) (*http.Response, error) {
	if o.other.Load() {
		return nil, errors.New("breaker open")
	}
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
}

// A probe that fails with a failure of its own (KindOther: a caller's
// RoundTripper, a breaker) is an attempt of the policy, which decides: a
// policy of no retries makes one attempt (a review's finding: River's
// MaxAttempts attempts were made).
func TestProbe_AProbeOfAnotherKindIsAnAttempt(t *testing.T) {
	rt := &otherRT{}
	policy := fastPolicy(0)
	_, bundle := setupWorker(t, &workerOpts{guarded: true, record: true, sender: webhook.SenderOptions{Client: &http.Client{Transport: rt},
		Retry: policy, Health: probeEveryRun()}})
	bundle.conns.set("crm", webhook.Connection{Name: "crm", URL: "https://crm.example.com/hooks", Secret: secret})
	ctx := context.Background()
	res, err := bundle.tw.WorkJob(ctx, t, bundle.tx, insertTx(t, bundle.tx, bundle.schema, firstParams(t, "d1", policy)))
	require.Error(t, err)
	require.Equal(t, rivertype.JobStateDiscarded, res.Job.State, "no retries: the policy gives up")
	rt.other.Store(true)
	job := insertTx(t, bundle.tx, bundle.schema, firstParams(t, "d2", policy))
	for i := 0; i < 10 && job.State != rivertype.JobStateDiscarded; i++ {
		res, err = bundle.tw.WorkJob(ctx, t, bundle.tx, job)
		require.Error(t, err)
		job = res.Job
	}
	d, err := riverhook.DeliveryOf(job)
	require.NoError(t, err)
	for _, a := range d.Attempts {
		t.Logf("n=%d run=%d kind=%s probe=%v retry=%v", a.N, a.Run, a.Kind, a.Probe, a.Retry)
	}
	t.Logf("reason %q", d.Reason)
	assert.Len(t, d.Attempts, 1, "a policy of no retries makes one attempt")
}

// A job cancelled in River (client.JobCancel, River UI, EraseSubject)
// while its probe run is under way: River turns the snooze into the cancel
// and keeps the run's number; no interrupted run is made up for it (a
// review's finding).
func TestProbe_CancelledDuringAProbeRunInventsNoInterruptedRun(t *testing.T) {
	var tx pgx.Tx
	var schema string
	var cancelID atomic.Int64
	_, bundle := setupWorker(t, &workerOpts{sender: webhook.SenderOptions{Health: probeEveryRun()},
		worker: riverhook.WorkerOptions{OnAttempt: func(ctx context.Context, job *river.Job[riverhook.Args], a webhook.Attempt) error {
			if job.ID != cancelID.Load() {
				return nil
			}
			client, err := river.NewClient(riverpgxv5.New(nil), &river.Config{Schema: schema, Logger: quietLogger()})
			if err != nil {
				return err
			}
			_, err = client.JobCancelTx(ctx, tx, job.ID) // someone cancels it in River meanwhile
			return err
		}}})
	tx, schema = bundle.tx, bundle.schema
	bundle.conns.set("crm", webhook.Connection{Name: "crm", URL: refusingURL(t), Secret: secret})
	ctx := context.Background()
	policy := fastPolicy(3)
	markDown(t, bundle, policy)
	job := insertTx(t, bundle.tx, bundle.schema, firstParams(t, "d2", policy))
	cancelID.Store(job.ID)
	res, err := bundle.tw.WorkJob(ctx, t, bundle.tx, job)
	require.NoError(t, err)
	require.Equal(t, rivertype.JobStateCancelled, res.Job.State)
	d, err := riverhook.DeliveryOf(res.Job)
	require.NoError(t, err)
	for _, a := range d.Attempts {
		t.Logf("n=%d run=%d kind=%s probe=%v", a.N, a.Run, a.Kind, a.Probe)
	}
	t.Logf("reason %q", d.Reason)
	require.Len(t, d.Attempts, 1, "the probe, and no interrupted run")
}

// probeEveryRun is endpoint health that marks an endpoint down at its
// first failure, with a probe due at every run after.
func probeEveryRun() *webhook.HealthOptions {
	return &webhook.HealthOptions{DownAfter: 1, ProbeInterval: time.Nanosecond, MaxProbeInterval: time.Nanosecond}
}

// markDown marks the endpoint of connection crm down: its first delivery,
// d1 under policy, fails.
func markDown(t *testing.T, b *workerBundle, policy *webhook.RetryPolicy) {
	t.Helper()
	_, err := b.tw.WorkJob(context.Background(), t, b.tx, insertTx(t, b.tx, b.schema, firstParams(t, "d1", policy)))
	require.Error(t, err)
}

// switchRT refuses connections until next is set, then goes through next.
type switchRT struct{ next atomic.Pointer[http.Client] }

func (s *switchRT) RoundTrip(r *http.Request) (*http.Response, error) {
	if c := s.next.Load(); c != nil {
		return c.Transport.RoundTrip(r)
	}
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
}

// A probe of a down origin that connects, and then gets no answer, finds the
// origin up (it connected): the Sender decides it by the policy (no retry
// here), but the Worker takes it for a wait (stillDown checks the kind
// alone), so that a policy of no retries sends the delivery twice.
// A probe that connected and got no answer brings its origin back up (its
// URL is not down yet): the Sender says so (no Probe, the policy's Retry),
// and the Worker counts it as the attempt it is; a policy of no retries
// makes one (a review's finding: the Worker took it for a wait from its
// kind alone, and the receiver got the delivery twice).
func TestProbe_AProbeThatConnectedIsAnAttempt(t *testing.T) {
	rt := &switchRT{}
	var mu sync.Mutex
	var senderSaw []webhook.Attempt
	policy := fastPolicy(0)
	var hits atomic.Int32
	hang := func(w http.ResponseWriter, r *http.Request) { hits.Add(1); <-r.Context().Done() }
	_, bundle := setupWorker(t, &workerOpts{guarded: true, record: true, handler: http.HandlerFunc(hang),
		sender: webhook.SenderOptions{Client: &http.Client{Transport: rt}, Retry: policy, AttemptTimeout: 300 * time.Millisecond,
			Health: &webhook.HealthOptions{DownAfter: 2, ProbeInterval: time.Nanosecond, MaxProbeInterval: time.Nanosecond},
			OnAttempt: func(_ context.Context, _ webhook.Connection, a webhook.Attempt) {
				mu.Lock()
				senderSaw = append(senderSaw, a)
				mu.Unlock()
			}}})
	ctx := context.Background()
	for _, id := range []string{"d0", "d1"} { // refused twice: the origin is down
		_, err := bundle.tw.WorkJob(ctx, t, bundle.tx, insertTx(t, bundle.tx, bundle.schema, firstParams(t, id, policy)))
		require.Error(t, err)
	}
	require.True(t, bundle.sender.Health()[0].Down)
	rt.next.Store(bundle.srv.Client()) // it now accepts, and hangs

	job := insertTx(t, bundle.tx, bundle.schema, firstParams(t, "d2", policy))
	for i := 0; i < 5 && job.State != rivertype.JobStateDiscarded; i++ {
		res, _ := bundle.tw.WorkJob(ctx, t, bundle.tx, job)
		job = res.Job
	}
	d, err := riverhook.DeliveryOf(job)
	require.NoError(t, err)
	for _, a := range d.Attempts {
		t.Logf("log n=%d run=%d kind=%s probe=%v retry=%v", a.N, a.Run, a.Kind, a.Probe, a.Retry)
	}
	mu.Lock()
	for _, a := range senderSaw[2:] {
		t.Logf("Sender.OnAttempt: n=%d kind=%s probe=%v retry=%v", a.N, a.Kind, a.Probe, a.Retry)
	}
	mu.Unlock()
	for _, a := range bundle.rec.attempts()[2:] {
		t.Logf("Worker OnAttempt: n=%d kind=%s probe=%v retry=%v", a.N, a.Kind, a.Probe, a.Retry)
	}
	t.Logf("health after: %+v", bundle.sender.Health())
	assert.EqualValues(t, 1, hits.Load(), "requests the receiver got for d2 under a policy of no retries")
	assert.Len(t, d.Attempts, 1, "a policy of no retries makes one attempt; the probe connected: the origin is up")
}
