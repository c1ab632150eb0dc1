package webhook_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/signedhook/webhook"
)

// BenchmarkDeliver delivers a payload to a loopback TLS receiver in a
// process of its own, at concurrency 1 and 32, so that cpu-µs/op is the
// sender's CPU time per delivery alone:
//
//   - impl=raw: a bare net/http client doing the same JSON encoding and
//     signing, on a keep-alive transport sized for the concurrency;
//   - impl=raw-bounded: the same, each attempt bounded by a context with
//     the Sender's 30 s timeout, as the spec requires (the floor);
//   - impl=retryablehttp: go-retryablehttp on that client, doing the same
//     encoding and signing, each attempt unbounded in time;
//   - impl=retryablehttp-bounded: the same with HTTPClient.Timeout set to
//     the Sender's 30 s, go-retryablehttp's way to bound each attempt as the
//     spec requires: the same work as the Sender;
//   - impl=sender: the Sender on that same client;
//   - impl=sender-default: the Sender on its own default transport;
//   - impl=retryablehttp-default: go-retryablehttp as shipped (NewClient),
//     whose pool keeps GOMAXPROCS+1 idle connections per host;
//   - impl=sender-in-turns-with-raw-bounded: the Sender and raw-bounded in
//     turns (deliverInTurns), so that the drift of a shared machine falls
//     on both alike: x-floor and x-floor-cpu are the Sender's ratios to
//     raw-bounded measured side by side;
//   - impl=raw-bounded-in-turns-with-raw-bounded: raw-bounded beside
//     itself, whose ratios show what the method cannot tell apart;
//   - impl=raw-bounded-after-3µs-in-turns-with-raw-bounded: raw-bounded
//     after 3 µs of work on the calling goroutine, beside raw-bounded: what
//     the method makes of a known cost, which on a 2-core machine is more
//     than the work itself (internal/benchcmp's README).
//
// Compare with: benchstat -col /impl bench.txt
func BenchmarkDeliver(b *testing.B) {
	receiverURL, pool := startReceiverProcess(b)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, MaxIdleConnsPerHost: 64}
	client := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()

	conn := webhook.Connection{Name: "bench", URL: receiverURL + "/hooks", Secret: testSecret}
	p := samplePayload()
	ctx := context.Background()

	rawIn := func(ctx context.Context) error {
		req, err := rawRequest(ctx, conn, p)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	raw := func() error { return rawIn(ctx) }
	// rawBounded bounds the attempt by the Sender's attempt timeout, as the
	// spec requires and the Sender does: the floor of the same work.
	rawBounded := func() error {
		ctx, cancel := context.WithTimeout(ctx, webhook.DefaultAttemptTimeout)
		defer cancel()
		return rawIn(ctx)
	}

	newSender := func(opts *webhook.SenderOptions) func() error {
		s, err := webhook.NewSender(opts)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(s.CloseIdleConnections)
		return func() error {
			_, err := s.Send(ctx, conn, p)
			return err
		}
	}
	sender := newSender(&webhook.SenderOptions{Client: client})
	senderDefault := newSender(&webhook.SenderOptions{Client: &http.Client{Transport: newTransport(b,
		&webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: pool}, AllowPrivateNetworks: true})}})

	rc := retryablehttp.NewClient()
	rc.Logger = nil
	rc.HTTPClient.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: pool}
	b.Cleanup(rc.HTTPClient.CloseIdleConnections)
	// viaRetryablehttp delivers through rc doing the same encoding and
	// signing as the raw client.
	viaRetryablehttp := func(rc *retryablehttp.Client) func() error {
		return func() error {
			req, err := rawRequest(ctx, conn, p)
			if err != nil {
				return err
			}
			rreq, err := retryablehttp.FromRequest(req)
			if err != nil {
				return err
			}
			resp, err := rc.Do(rreq)
			if err != nil {
				return err
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return nil
		}
	}
	retryable := viaRetryablehttp(rc)

	// go-retryablehttp on the same keep-alive client, doing the same
	// encoding and signing: what the Sender is built on. On a client with
	// a Timeout, each attempt ends after it, as the spec requires and the
	// Sender does.
	onClient := func(hc *http.Client) func() error {
		return viaRetryablehttp(&retryablehttp.Client{HTTPClient: hc, RetryMax: 3, CheckRetry: retryablehttp.DefaultRetryPolicy,
			Backoff: retryablehttp.DefaultBackoff, RetryWaitMin: time.Second, RetryWaitMax: 4 * time.Second})
	}
	retryableSame := onClient(client)
	retryableBounded := onClient(&http.Client{Transport: tr, Timeout: webhook.DefaultAttemptTimeout})

	impls := []struct {
		name    string
		deliver func() error
	}{
		{"raw", raw},
		{"raw-bounded", rawBounded},
		{"retryablehttp", retryableSame},
		{"retryablehttp-bounded", retryableBounded},
		{"sender", sender},
		{"sender-default", senderDefault},
		{"retryablehttp-default", retryable},
	}
	// The Sender and its floor in turns, in one loop: the drift of a shared
	// machine falls on both alike. The floor beside itself shows what the
	// method cannot tell apart, and the floor after 3 µs of work what it
	// makes of a known cost.
	for _, conc := range []int{1, 32} {
		for _, side := range []struct {
			name    string
			deliver func() error
		}{
			{"raw-bounded", rawBounded},
			{"raw-bounded-after-3µs", busy(3*time.Microsecond, rawBounded)},
			{"sender", sender},
		} {
			b.Run("conc="+strconv.Itoa(conc)+"/impl="+side.name+"-in-turns-with-raw-bounded", func(b *testing.B) {
				deliverInTurns(b, conc, side.deliver, rawBounded)
			})
		}
	}
	for _, conc := range []int{1, 32} {
		for _, impl := range impls {
			b.Run("conc="+strconv.Itoa(conc)+"/impl="+impl.name, func(b *testing.B) {
				b.ReportAllocs()
				cpu := processCPU()
				defer func() { b.ReportMetric(float64(processCPU()-cpu)/float64(b.N)/1e3, "cpu-µs/op") }()
				if conc == 1 {
					for b.Loop() {
						if err := impl.deliver(); err != nil {
							b.Fatal(err)
						}
					}
					return
				}
				procs := runtime.GOMAXPROCS(0)
				b.SetParallelism((conc + procs - 1) / procs)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := impl.deliver(); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// BenchmarkSendInMemory measures the Sender's own cost per delivery, with
// no network in the way: the same delivery as a raw net/http client (JSON
// encoding, signing, one request) to an in-memory transport that answers
// 200, unbounded (impl=raw) and bounded by a timeout (impl=raw-bounded).
func BenchmarkSendInMemory(b *testing.B) {
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		io.Copy(io.Discard, r.Body)
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody}, nil
	})}
	conn := webhook.Connection{Name: "bench", URL: "https://crm.example.com/hooks", Secret: testSecret}
	p := samplePayload()
	ctx := context.Background()
	raw := func(ctx context.Context) {
		req, err := rawRequest(ctx, conn, p)
		if err != nil {
			b.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	b.Run("impl=raw", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			raw(ctx)
		}
	})
	// The same with each request bounded by a timeout, as the Sender bounds
	// each attempt: what a raw client meeting the spec's 30 s costs.
	b.Run("impl=raw-bounded", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, cancel := context.WithTimeout(ctx, webhook.DefaultAttemptTimeout)
			raw(ctx)
			cancel()
		}
	})
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: client})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("impl=sender", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Send(ctx, conn, p); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// rawRequest is what the raw client does for each delivery: encode the
// payload, build the request, sign it.
func rawRequest(ctx context.Context, conn webhook.Connection, p webhook.Payload) (*http.Request, error) {
	body, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, conn.URL, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	ts := time.Now().UnixMilli()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(webhook.HeaderEvent, p.Event)
	req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(webhook.HeaderSignature, webhook.Sign(conn.Secret, ts, body))
	return req, nil
}

// BenchmarkNewConnections delivers to 32 receivers on distinct ports (32
// hosts to the transport), each closing its connection after every answer,
// as most customers' endpoints in effect do for a sender that reaches them
// now and then: every delivery opens a new TLS connection. impl=resume is
// the default transport, which resumes TLS sessions; impl=full is the same
// transport without a session cache.
func BenchmarkNewConnections(b *testing.B) {
	// Distinct addresses, 127.0.0.1 to 127.0.0.32, as 32 customers' hosts.
	var ips []net.IP
	for i := range 32 {
		ips = append(ips, net.IPv4(127, 0, 0, byte(i+1)))
	}
	cert, pool := newCertificate(b, ips)
	var urls []string
	for _, ip := range ips {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
		if err != nil {
			b.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
		}))
		srv.Listener.Close()
		srv.Listener = ln
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		srv.Config.SetKeepAlivesEnabled(false)
		srv.Config.ErrorLog = log.New(io.Discard, "", 0)
		srv.StartTLS()
		b.Cleanup(srv.Close)
		urls = append(urls, srv.URL+"/hooks")
	}
	p := samplePayload()
	for _, conc := range []int{1, 8} {
		for _, impl := range []string{"full", "resume"} {
			b.Run(fmt.Sprintf("conc=%d/impl=%s", conc, impl), func(b *testing.B) {
				tr := newTransport(b, &webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: pool}, AllowPrivateNetworks: true})
				if impl == "full" {
					tr.TLSClientConfig.ClientSessionCache = nil
				}
				b.Cleanup(tr.CloseIdleConnections)
				s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr}})
				if err != nil {
					b.Fatal(err)
				}
				var next atomic.Int64
				deliver := func() {
					url := urls[int(next.Add(1))%len(urls)]
					if _, err := s.Send(context.Background(), webhook.Connection{URL: url, Secret: testSecret}, p); err != nil {
						b.Error(err)
					}
				}
				for _, u := range urls { // one full handshake per host before timing, as a running sender has had
					if _, err := s.Send(context.Background(), webhook.Connection{URL: u, Secret: testSecret}, p); err != nil {
						b.Fatal(err)
					}
				}
				b.ResetTimer()
				if conc == 1 {
					for b.Loop() {
						deliver()
					}
				} else {
					b.SetParallelism(conc / runtime.GOMAXPROCS(0))
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							deliver()
						}
					})
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
			})
		}
	}
}

// newCertificate returns a self-signed RSA 2048 certificate for ips, the
// kind most endpoints present, and a pool that trusts it.
func newCertificate(b *testing.B, ips []net.IP) (tls.Certificate, *x509.CertPool) {
	b.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		b.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "webhook benchmark"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IPAddresses:           ips,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		b.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		b.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// deliverInTurns calls deliver and floor in turns, b.N calls in all, in an
// even number of turns of nearly equal length: about 64 calls a goroutine,
// which conc goroutines share out (the calling goroutine alone when conc
// is 1). Before the timer starts, each side is called conc times, to set
// up what it pools. It reports, per delivery of each side: µs/delivery,
// cpu-µs/delivery (this process's CPU time) and B/delivery (bytes
// allocated) for deliver, the same for floor (floor-…), and deliver's
// ratios to floor, x-floor and x-floor-cpu. ns/op, B/op and allocs/op are
// of both sides together. The collector's work is charged to the turn it
// runs in, whichever side allocated what it collects: B/delivery says
// which allocates more.
func deliverInTurns(b *testing.B, conc int, deliver, floor func() error) {
	const perGoroutine = 64 // calls in a turn, about
	sides := [2]func() error{deliver, floor}
	// turn makes n calls of side, by conc goroutines sharing them out.
	turn := func(side, n int) error {
		if conc == 1 {
			for range n {
				if err := sides[side](); err != nil {
					return err
				}
			}
			return nil
		}
		var left atomic.Int64
		left.Store(int64(n))
		errs := make(chan error, conc)
		var wg sync.WaitGroup
		for range conc {
			wg.Go(func() {
				for left.Add(-1) >= 0 {
					if err := sides[side](); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		return <-errs // nil when none failed
	}
	for side := range sides {
		if err := turn(side, conc); err != nil {
			b.Fatal(err)
		}
	}
	allocs := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	allocated := func() int64 { metrics.Read(allocs); return int64(allocs[0].Value.Uint64()) }
	var (
		wall, cpu, heap [2]int64 // per side, in its turns: nanoseconds, nanoseconds, bytes
		calls           [2]int   // per side: deliveries in its turns
	)
	turns := 2 * max(1, b.N/(2*perGoroutine*conc)) // each side as many
	b.ReportAllocs()
	b.ResetTimer()
	for i := range turns {
		side, n := i%2, b.N/turns
		if i < b.N%turns {
			n++
		}
		if n == 0 {
			continue
		}
		began, cpuBegan, heapBegan := time.Now(), processCPU(), allocated()
		if err := turn(side, n); err != nil {
			b.Fatal(err)
		}
		wall[side] += int64(time.Since(began))
		cpu[side] += processCPU() - cpuBegan
		heap[side] += allocated() - heapBegan
		calls[side] += n
	}
	b.StopTimer()
	if calls[0] == 0 || calls[1] == 0 {
		return // too few iterations for both sides: nothing to compare
	}
	per := func(v [2]int64, side int) float64 { return float64(v[side]) / float64(calls[side]) }
	b.ReportMetric(per(wall, 0)/1e3, "µs/delivery")
	b.ReportMetric(per(wall, 1)/1e3, "floor-µs/delivery")
	b.ReportMetric(per(cpu, 0)/1e3, "cpu-µs/delivery")
	b.ReportMetric(per(cpu, 1)/1e3, "floor-cpu-µs/delivery")
	b.ReportMetric(per(heap, 0), "B/delivery")
	b.ReportMetric(per(heap, 1), "floor-B/delivery")
	b.ReportMetric(per(wall, 0)/per(wall, 1), "x-floor")
	b.ReportMetric(per(cpu, 0)/per(cpu, 1), "x-floor-cpu")
}

// busy returns f preceded by d of work on the calling goroutine: a floor
// with a known extra cost, whose ratio to the floor shows what the
// in-turns method reports for it.
func busy(d time.Duration, f func() error) func() error {
	return func() error {
		for start := time.Now(); time.Since(start) < d; {
		}
		return f()
	}
}

// processCPU returns the CPU time this process has used, user and system,
// in nanoseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// receiverEnv, set in a child process, makes TestBenchmarkReceiver serve.
const receiverEnv = "WEBHOOK_BENCHMARK_RECEIVER"

// startReceiverProcess starts this test binary again as a loopback TLS
// receiver (TestBenchmarkReceiver) and returns its URL and a pool trusting
// its certificate. The receiver stops when the benchmark ends.
func startReceiverProcess(b *testing.B) (string, *x509.CertPool) {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchmarkReceiver$")
	cmd.Env = append(os.Environ(), receiverEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close() // the receiver's signal to stop
		cmd.Wait()
	})
	var hello struct {
		URL  string
		Cert []byte
	}
	if err := json.NewDecoder(stdout).Decode(&hello); err != nil {
		b.Fatalf("receiver process: %v", err)
	}
	cert, err := x509.ParseCertificate(hello.Cert)
	if err != nil {
		b.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return hello.URL, pool
}

// TestBenchmarkReceiver is BenchmarkDeliver's receiver when run by
// startReceiverProcess: it answers 200 after reading each body, writes its
// URL and certificate as JSON to stdout and serves until stdin closes.
func TestBenchmarkReceiver(t *testing.T) {
	if os.Getenv(receiverEnv) == "" {
		t.Skip("the receiver process of BenchmarkDeliver")
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	if err := json.NewEncoder(os.Stdout).Encode(map[string]any{"URL": srv.URL, "Cert": srv.Certificate().Raw}); err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, os.Stdin)
}
