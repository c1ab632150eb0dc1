package riverhook_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
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

// BenchmarkDelivery compares deliveries per second to a loopback TLS
// receiver that answers after 0 and after 20 ms:
//   - impl=inprocess: 32 goroutines calling Sender.Send;
//   - impl=river-nop: River with a worker that does nothing, the same
//     client settings (32 workers, a 1 ms fetch cooldown) and the same jobs:
//     the ceiling of any delivery through River on this machine;
//   - impl=riverhook: River with riverhook's Worker, attempt log included;
//   - impl=riverhook-nolog: the same without the attempt log, to show
//     what the log costs.
//
// machine-cpu-µs/op is the CPU time of the whole machine per delivery,
// PostgreSQL's included: River's throughput here is bound by round trips
// more than by CPU, and varies more from run to run.
//
// For River, the jobs are inserted before the client starts, and the rate
// is timed from the completion of the first tenth of them to that of the
// last tenth: River's steady state.
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
					panic(http.ErrAbortHandler)
				}
			}
		})})
		resolve := newResolver(map[string]webhook.Connection{"crm": srv.Connection()}).resolve
		name := "latency=" + latency.String()
		b.Run(name+"/impl=inprocess", func(b *testing.B) {
			s := srv.Sender(nil)
			// Each Send a delivery of its own, as River's jobs are: one
			// payload sent by two goroutines in one millisecond is one
			// signature twice, a copy, which the Server refuses.
			var n atomic.Int64
			b.SetParallelism(32 / max(1, runtimeProcs()))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					p := payload(strconv.FormatInt(n.Add(1), 10))
					if _, err := s.Send(context.Background(), srv.Connection(), p); err != nil {
						b.Error(err)
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
		})
		b.Run(name+"/impl=river-nop", func(b *testing.B) {
			benchmarkRiver(b, river.WorkFunc(func(context.Context, *river.Job[riverhook.Args]) error { return nil }))
		})
		b.Run(name+"/impl=riverhook", func(b *testing.B) {
			benchmarkRiver(b, newWorker(b, srv.Sender(nil), resolve, nil))
		})
		b.Run(name+"/impl=riverhook-nolog", func(b *testing.B) {
			benchmarkRiver(b, riverhook.WithoutAttemptLog(newWorker(b, srv.Sender(nil), resolve, nil)))
		})
		srv.Close()
	}
}

// benchmarkRiver inserts b.N deliveries, then times a River client working
// them with worker.
func benchmarkRiver(b *testing.B, worker river.Worker[riverhook.Args]) {
	pool, schema := testDB(b)
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client := newClient(b, pool, schema, workers, func(c *river.Config) {
		c.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 32}}
		c.FetchCooldown = time.Millisecond
		c.FetchPollInterval = 10 * time.Millisecond
	})
	insertMany(b, client, "d", b.N, func(int) string { return "crm" })
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: b.N, // none dropped, however fast
		Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled}})
	defer cancel()
	// The rate is timed between the completions of the first and the last
	// tenth of the jobs: River's steady state, without the client's start
	// (leader election, the first fetch) or the last completions' flush.
	from, to := b.N/10, b.N-b.N/10
	failed := 0
	var cpu0, cpu1 float64
	b.StopTimer()
	b.ResetTimer()
	if err := client.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	for i := range b.N {
		if ev := <-events; ev.Job.State != rivertype.JobStateCompleted {
			failed++
		}
		switch i + 1 {
		case from:
			cpu0 = machineCPU()
			b.StartTimer()
		case to:
			b.StopTimer()
			cpu1 = machineCPU()
		}
	}
	ctx, cancelStop := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelStop()
	client.Stop(ctx)
	if failed > 0 {
		b.Errorf("%d jobs did not complete", failed)
	}
	timed := float64(to - from)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/timed, "ns/op")
	b.ReportMetric(timed/b.Elapsed().Seconds(), "deliveries/s")
	b.ReportMetric((cpu1-cpu0)*1e6/timed, "machine-cpu-µs/op")
}

// machineCPU returns the CPU time the whole machine has spent busy, in
// seconds (Linux's /proc/stat; 0 elsewhere): this process, PostgreSQL and
// anything else running, so measure on a quiet machine.
func machineCPU() float64 {
	b, _ := os.ReadFile("/proc/stat")
	var user, nice, system float64
	fmt.Sscanf(string(b), "cpu %g %g %g", &user, &nice, &system)
	return (user + nice + system) / 100
}
