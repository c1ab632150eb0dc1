package webhook_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signedhook/webhook"
)

// deadEndpointsBench is the benchmark's world: 200 connections, 198 of them
// to a loopback TLS receiver that answers at once and 2 (1%) to receivers
// that hang until the attempt times out; each of those counts the most
// requests it held at once.
type deadEndpointsBench struct {
	conns  []webhook.Connection
	dead   map[int]bool // indexes of the dead connections
	pool   *x509.CertPool
	peak   []*atomic.Int32
	closed chan struct{}
}

func newDeadEndpointsBench(b *testing.B, dead int) *deadEndpointsBench {
	b.Helper()
	w := &deadEndpointsBench{dead: map[int]bool{}, closed: make(chan struct{})}
	newServer := func(h http.HandlerFunc) *httptest.Server {
		srv := httptest.NewUnstartedServer(h)
		srv.Config.ErrorLog = log.New(io.Discard, "", 0)
		srv.StartTLS()
		b.Cleanup(srv.Close)
		if w.pool == nil {
			w.pool = x509.NewCertPool()
			w.pool.AddCert(srv.Certificate()) // httptest's servers share one certificate
		}
		return srv
	}
	healthy := newServer(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) })
	var hanging []*httptest.Server
	for range dead {
		var inFlight, peak atomic.Int32
		w.peak = append(w.peak, &peak)
		hanging = append(hanging, newServer(func(_ http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body) // net/http notices the client leaving once the body is read
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			select {
			case <-r.Context().Done():
			case <-w.closed:
			}
			panic(http.ErrAbortHandler)
		}))
	}
	b.Cleanup(func() { close(w.closed) }) // before the servers close: their handlers end
	for i := range 200 {
		url := healthy.URL + "/hooks/" + strconv.Itoa(i)
		if i >= 200-dead { // spread: the dead ones are every 100th pick
			url = hanging[i-(200-dead)].URL + "/hooks"
			w.dead[i] = true
		}
		w.conns = append(w.conns, webhook.Connection{Name: strconv.Itoa(i), URL: url, Secret: testSecret})
	}
	return w
}

// BenchmarkDeadEndpoints measures healthy deliveries per second made by 32
// workers, each sending to the next of the 200 connections in turn, 1% of
// them to endpoints that hang until the 200 ms attempt timeout (up to 4
// attempts, 10 ms apart): with endpoint health on, with it off, and with no
// dead connection. A b.N is healthy deliveries; healthy/s is timed to the
// b.N-th of them (ns/op also waits for the dead deliveries in flight then).
// With health on, the dead endpoints are marked down before the timer
// starts, and probed every 250 ms to 1 s meanwhile; dead-peak reports the
// most requests a dead endpoint held at once.
//
//	go test -run '^$' -bench DeadEndpoints -benchtime 20000x -count 6 . | benchstat -col /impl -
func BenchmarkDeadEndpoints(b *testing.B) {
	for _, impl := range []string{"nodead", "health", "nohealth"} {
		b.Run("impl="+impl, func(b *testing.B) {
			dead := 2
			if impl == "nodead" {
				dead = 0
			}
			w := newDeadEndpointsBench(b, dead)
			opts := &webhook.SenderOptions{
				Client: &http.Client{Transport: webhook.NewTransport(&webhook.TransportOptions{
					TLSClientConfig: &tls.Config{RootCAs: w.pool}, AllowPrivateNetworks: true})},
				AttemptTimeout: 200 * time.Millisecond,
				Retry:          &webhook.RetryPolicy{MaxRetries: 3, Backoff: func(int, *http.Response) time.Duration { return 10 * time.Millisecond }},
			}
			if impl == "health" {
				opts.Health = &webhook.HealthOptions{ProbeInterval: 250 * time.Millisecond, MaxProbeInterval: time.Second}
			}
			s, err := webhook.NewSender(opts)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(s.CloseIdleConnections)
			p := samplePayload()
			if impl == "health" { // learn that they are down
				for i := range w.conns {
					for n := 0; w.dead[i] && n < 10; n++ {
						if _, err := s.Send(context.Background(), w.conns[i], p); errors.Is(err, webhook.ErrEndpointDown) {
							break
						}
					}
				}
				if h := s.Health(); len(h) != dead || !h[0].Down || !h[1].Down {
					b.Fatalf("the dead endpoints are not down: %v", h)
				}
			}
			var next, healthy atomic.Int64
			var took atomic.Int64 // until the b.N-th healthy delivery, not the end of a dead one
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for range 32 {
				wg.Go(func() {
					for healthy.Load() < int64(b.N) {
						i := int(next.Add(1)) % len(w.conns)
						_, err := s.Send(context.Background(), w.conns[i], p)
						switch {
						case !w.dead[i] && err == nil:
							if healthy.Add(1) == int64(b.N) {
								took.Store(int64(time.Since(start)))
							}
						case !w.dead[i]:
							b.Error(err)
						case err == nil:
							b.Error("a dead endpoint answered")
						case impl == "health" && !errors.Is(err, webhook.ErrEndpointDown) && !errors.Is(err, context.DeadlineExceeded):
							var de *webhook.DeliveryError
							if !errors.As(err, &de) || de.Attempts[len(de.Attempts)-1].Kind != webhook.KindTimeout {
								b.Error(err) // a probe times out; anything else is wrong
							}
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Duration(took.Load()).Seconds(), "healthy/s")
			var peak int32
			for _, p := range w.peak {
				peak = max(peak, p.Load())
			}
			if dead > 0 {
				b.ReportMetric(float64(peak), "dead-peak")
			}
			if impl == "health" && peak > 1 {
				b.Errorf("a dead endpoint held %d requests at once: one probe at a time", peak)
			}
		})
	}
}
