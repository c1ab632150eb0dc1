package riverhook_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/webhooktest"
)

// BenchmarkDeadEndpoints measures healthy deliveries per second through
// River, 32 workers, to 200 connections of which 1% (2) are to hosts that
// hang (their TLS handshake never ends) until a 1 s attempt timeout (up to 4 attempts, 10 ms apart; the spec's is 30 s, and a
// shorter one would not fill the workers): with endpoint
// health on, with it off, and with no dead connection. A b.N is healthy
// deliveries (198 at least), enqueued with the dead ones (1 in 100) before
// the client starts; healthy/s is timed to the last of them. With health on, the dead
// endpoints are marked down first; once the healthy ones are done, they
// come back, and every delivery queued for them must be delivered, with
// OnChange reporting each endpoint down and up: once each.
//
//	go test -run '^$' -bench DeadEndpoints -benchtime 3000x -count 6 . | benchstat -col /impl -
func BenchmarkDeadEndpoints(b *testing.B) {
	for _, impl := range []string{"nodead", "health", "nohealth"} {
		b.Run("impl="+impl, func(b *testing.B) {
			deadN := 2
			if impl == "nodead" {
				deadN = 0
			}
			healthy := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})})
			defer healthy.Close()
			var hosts []*switchHost
			conns := map[string]webhook.Connection{}
			deadIDs := map[string]bool{}
			var hostPorts []string
			for i := range 200 {
				c := healthy.Connection()
				if i >= 200-deadN { // a host that hangs, until it comes back
					h := newSwitchHost(b, strings.TrimPrefix(healthy.URL, "https://"))
					hosts = append(hosts, h)
					hostPorts = append(hostPorts, h.ln.Addr().String())
					c = h.connection(c)
					deadIDs["c"+strconv.Itoa(i)] = true
				}
				conns["c"+strconv.Itoa(i)] = c
			}
			counter := newAttemptCounter(healthy.Client().Transport, hostPorts...)

			var mu sync.Mutex
			changes := map[string][]bool{} // endpoint -> Down of each change
			opts := &webhook.SenderOptions{AttemptTimeout: time.Second,
				Retry: &webhook.RetryPolicy{MaxRetries: 3, Backoff: func(int, *http.Response) time.Duration { return 10 * time.Millisecond }}}
			if impl == "health" {
				opts.Health = &webhook.HealthOptions{DownAfter: 3, ProbeInterval: 250 * time.Millisecond, MaxProbeInterval: time.Second,
					OnChange: func(_ context.Context, h webhook.EndpointHealth) {
						mu.Lock()
						defer mu.Unlock()
						changes[h.Endpoint] = append(changes[h.Endpoint], h.Down)
					}}
			}
			opts.Client = &http.Client{Transport: counter}
			sender, err := webhook.NewSender(opts)
			if err != nil {
				b.Fatal(err)
			}
			if impl == "health" { // learn that they are down
				var wg sync.WaitGroup
				for id := range deadIDs {
					wg.Go(func() {
						for range 10 {
							if a := sender.Attempt(context.Background(), conns[id], webhook.EventUserIdentified, []byte(`{}`), 1); a.Kind == webhook.KindDown {
								return
							}
						}
					})
				}
				wg.Wait()
			}

			pool, schema := testDB(b)
			workers := river.NewWorkers()
			river.AddWorker(workers, newWorker(b, sender, newResolver(conns).resolve, nil))
			client := newClient(b, pool, schema, workers, func(c *river.Config) {
				c.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 32}}
				c.FetchCooldown = time.Millisecond
				c.FetchPollInterval = 10 * time.Millisecond
			})
			var params []river.InsertManyParams
			healthyJobs, deadJobs := 0, 0
			for i := 0; healthyJobs < b.N || i < 200; i++ { // every connection, the dead ones too
				id := "c" + strconv.Itoa(i%200)
				ps, err := riverhook.InsertParams("d"+strconv.Itoa(i), []string{id}, payload("d"+strconv.Itoa(i)), &riverhook.InsertOptions{Retry: opts.Retry})
				if err != nil {
					b.Fatal(err)
				}
				params = append(params, ps...)
				if deadIDs[id] {
					deadJobs++
				} else {
					healthyJobs++
				}
			}
			for start := 0; start < len(params); start += 1000 {
				if _, err := client.InsertMany(context.Background(), params[start:min(start+1000, len(params))]); err != nil {
					b.Fatal(err)
				}
			}
			events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled)
			defer cancel()
			b.ResetTimer()
			t0 := time.Now()
			if err := client.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			var took time.Duration
			delivered := map[bool]int{} // by dead
			for delivered[false] < healthyJobs {
				ev := <-events
				d, err := riverhook.DeliveryOf(ev.Job)
				if err != nil {
					b.Fatal(err)
				}
				switch ev.Job.State {
				case rivertype.JobStateCompleted:
					delivered[deadIDs[d.ConnectionID]]++
				case rivertype.JobStateCancelled, rivertype.JobStateDiscarded:
					if !deadIDs[d.ConnectionID] {
						b.Errorf("a healthy delivery ended %s: %s", ev.Job.State, d.Reason)
					}
				}
			}
			took = time.Since(t0)
			b.StopTimer()
			b.ReportMetric(float64(healthyJobs)/took.Seconds(), "healthy/s")
			most := counter.peak()
			if deadN > 0 {
				b.ReportMetric(float64(most), "dead-attempts-peak")
			}

			if impl == "health" { // the dead endpoints come back: what waited for them goes out
				if most > 1 {
					b.Errorf("%d attempts at once to a dead endpoint: one probe at a time", most)
				}
				for _, h := range hosts {
					h.dead.Store(false)
				}
				timeout := time.After(60 * time.Second)
				for delivered[true] < deadJobs {
					select {
					case ev := <-events:
						d, err := riverhook.DeliveryOf(ev.Job)
						if err != nil {
							b.Fatal(err)
						}
						switch ev.Job.State {
						case rivertype.JobStateCompleted:
							delivered[deadIDs[d.ConnectionID]]++
						case rivertype.JobStateCancelled, rivertype.JobStateDiscarded:
							b.Fatalf("a delivery to a dead endpoint ended %s: %s", ev.Job.State, d.Reason)
						}
					case <-timeout:
						b.Fatalf("%d of %d deliveries to the dead endpoints delivered within 60 s of their coming back", delivered[true], deadJobs)
					}
				}
				mu.Lock()
				for endpoint, downs := range changes {
					if len(downs) != 2 || !downs[0] || downs[1] {
						b.Errorf("%s: OnChange reported %v, want down then up", endpoint, downs)
					}
				}
				if len(changes) != deadN {
					b.Errorf("OnChange reported %d endpoints, want %d", len(changes), deadN)
				}
				mu.Unlock()
			}
			ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
			defer stop()
			client.StopAndCancel(ctx)
		})
	}
}
