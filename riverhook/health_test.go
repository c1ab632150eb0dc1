package riverhook_test

import (
	"net/http"
	"strconv"
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
// health on the durable path, on a real PostgreSQL: an endpoint that hangs
// is marked down; the deliveries enqueued meanwhile wait (snoozed, one probe
// at a time reaching it) without spending an attempt; once it answers, every
// delivery queued for it is delivered, and the service heard of the
// endpoint twice: down, then up.
func TestWorker_DownEndpointsDeliveriesWaitAndGoOutOnceItIsUp(t *testing.T) {
	pool, schema := testDB(t)
	var dead atomic.Bool
	dead.Store(true)
	var inFlight, peakWhileDown atomic.Int32
	var downSince atomic.Bool
	srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		if downSince.Load() {
			for p := peakWhileDown.Load(); n > p && !peakWhileDown.CompareAndSwap(p, n); p = peakWhileDown.Load() {
			}
		}
		if dead.Load() {
			<-r.Context().Done() // a host that hangs until the attempt times out
			panic(http.ErrAbortHandler)
		}
	})})
	defer srv.Close()

	var mu sync.Mutex
	var changes []webhook.EndpointHealth
	down, up := make(chan struct{}), make(chan struct{})
	policy := fastPolicy(6)
	sender := srv.Sender(&webhook.SenderOptions{Retry: policy, AttemptTimeout: 150 * time.Millisecond,
		Health: &webhook.HealthOptions{DownAfter: 3, ProbeInterval: 200 * time.Millisecond, MaxProbeInterval: 200 * time.Millisecond,
			OnChange: func(h webhook.EndpointHealth) {
				mu.Lock()
				defer mu.Unlock()
				changes = append(changes, h)
				if h.Down {
					downSince.Store(true)
					close(down)
				} else {
					close(up)
				}
			}}})
	client, final := workerClient(t, pool, schema, riverhook.NewWorker(sender,
		newResolver(map[string]webhook.Connection{"crm": srv.Connection()}).resolve, nil))
	snoozed, cancel := client.Subscribe(river.EventKindJobSnoozed)
	defer cancel()
	start(t, client)

	early := insert(t, client, "early", []string{"crm"}, policy)
	<-down
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
	dead.Store(false) // the endpoint answers again: the next probe finds it up
	<-up

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
}
