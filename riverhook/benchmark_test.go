package riverhook_test

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/webhooktest"
)

// BenchmarkDelivery compares deliveries per second in process (32
// goroutines calling Sender.Send) with deliveries through River (32
// workers, a 1 ms fetch cooldown) to a loopback TLS receiver that answers
// after 0 and after 20 ms. For River the time runs from the client's start
// to the last job's completion; the jobs are inserted before.
//
//	go test -run '^$' -bench Delivery -benchtime 2000x -count 6 . | benchstat -col /impl -
func BenchmarkDelivery(b *testing.B) {
	for _, latency := range []time.Duration{0, 20 * time.Millisecond} {
		srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if latency > 0 {
				t := time.NewTimer(latency)
				defer t.Stop()
				select {
				case <-t.C:
				case <-r.Context().Done():
				}
			}
		})})
		name := "latency=" + latency.String()
		b.Run(name+"/impl=inprocess", func(b *testing.B) {
			s := srv.Sender(nil)
			p := payload("bench")
			b.SetParallelism(32 / max(1, runtimeProcs()))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := s.Send(context.Background(), srv.Connection(), p); err != nil {
						b.Error(err)
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
		})
		b.Run(name+"/impl=river", func(b *testing.B) {
			pool, schema := testDB(b)
			workers := river.NewWorkers()
			river.AddWorker(workers, riverhook.NewWorker(srv.Sender(nil),
				newResolver(map[string]webhook.Connection{"crm": srv.Connection()}).resolve, nil))
			client := newClient(b, pool, schema, workers, func(c *river.Config) {
				c.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 32}}
				c.FetchCooldown = time.Millisecond
				c.FetchPollInterval = 10 * time.Millisecond
			})
			var params []river.InsertManyParams
			for i := range b.N {
				id := "d" + strconv.Itoa(i)
				ps, err := riverhook.InsertParams(id, []string{"crm"}, payload(id), nil)
				if err != nil {
					b.Fatal(err)
				}
				params = append(params, ps...)
			}
			for start := 0; start < len(params); start += 1000 {
				if _, err := client.InsertMany(context.Background(), params[start:min(start+1000, len(params))]); err != nil {
					b.Fatal(err)
				}
			}
			events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled)
			defer cancel()
			var failed atomic.Int32
			b.ResetTimer()
			if err := client.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			for range b.N {
				if ev := <-events; ev.Job.State != rivertype.JobStateCompleted {
					failed.Add(1)
				}
			}
			b.StopTimer()
			ctx, cancelStop := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancelStop()
			client.Stop(ctx)
			if failed.Load() > 0 {
				b.Errorf("%d jobs did not complete", failed.Load())
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
		})
		srv.Close()
	}
}
