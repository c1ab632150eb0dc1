package webhook_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

// fault is what the load receiver does with one arrival.
type fault int

const (
	faultNone     fault = iota
	fault500            // 500 Internal Server Error
	fault429            // 429 with Retry-After: 3600 (capped by the policy)
	faultRedirect       // 307 to another host
	faultReset          // TCP RST before any answer
	faultHang           // no answer until the attempt times out
	faultSwitch         // 101 Switching Protocols, then held
	faultClose          // connection closed before any answer
	faultClasses  = 7
)

// wantKind is the attempt kind each fault must produce.
var wantKind = map[fault]webhook.FailureKind{
	faultNone:     webhook.KindNone,
	fault500:      webhook.KindStatus,
	fault429:      webhook.KindStatus,
	faultRedirect: webhook.KindRedirect,
	faultReset:    webhook.KindReset,
	faultHang:     webhook.KindTimeout,
	faultSwitch:   webhook.KindStatus,
	faultClose:    webhook.KindReset,
}

// faultFor is the injected schedule: 20% of arrivals fail, over every fault
// class, decided by the delivery id and the attempt number alone so the test
// can predict every attempt's kind. Hangs cost a whole attempt timeout, so
// only a quarter of their share hang; the rest answer 500.
func faultFor(id string, attempt int) fault {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s/%d", id, attempt)
	x := h.Sum32()
	if x%100 >= 20 {
		return faultNone
	}
	f := fault(1 + (x/100)%faultClasses)
	if f == faultHang && (x/1000)%4 != 0 {
		return fault500
	}
	return f
}

// loadReceiver verifies every arrival and answers by the fault schedule,
// recording each delivery's arrivals.
type loadReceiver struct {
	*httptest.Server
	v          *webhook.Verifier
	mu         sync.Mutex
	arrivals   map[string][]int64 // delivery id -> signed timestamps, in order
	unverified atomic.Int64
	release    chan struct{}
}

func newLoadReceiver(t *testing.T) *loadReceiver {
	t.Helper()
	v, err := webhook.NewVerifier([]string{testSecret}, nil)
	require.NoError(t, err)
	lr := &loadReceiver{v: v, arrivals: map[string][]int64{}, release: make(chan struct{})}
	lr.Server = httptest.NewUnstartedServer(http.HandlerFunc(lr.serve))
	lr.Config.ErrorLog = log.New(io.Discard, "", 0)
	lr.StartTLS()
	t.Cleanup(func() { close(lr.release); lr.Close() })
	return lr
}

func (lr *loadReceiver) serve(w http.ResponseWriter, r *http.Request) {
	body, err := lr.v.VerifyRequest(r)
	if err != nil {
		lr.unverified.Add(1)
		http.Error(w, "unverified", http.StatusUnauthorized)
		return
	}
	p, err := webhook.ParsePayload(body)
	if err != nil {
		lr.unverified.Add(1)
		http.Error(w, "not a payload", http.StatusBadRequest)
		return
	}
	id, _ := p.User.Metadata["delivery_id"].(string)
	ts, _ := strconv.ParseInt(r.Header.Get(webhook.HeaderTimestamp), 10, 64)
	lr.mu.Lock()
	lr.arrivals[id] = append(lr.arrivals[id], ts)
	n := len(lr.arrivals[id])
	lr.mu.Unlock()
	if r.URL.Path == "/dead" {
		http.Error(w, "down for good", http.StatusServiceUnavailable)
		return
	}
	switch faultFor(id, n) {
	case faultNone:
		io.WriteString(w, `{"ok":true}`)
	case fault500:
		http.Error(w, "oops", http.StatusInternalServerError)
	case fault429:
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusTooManyRequests)
	case faultRedirect:
		http.Redirect(w, r, "https://169.254.169.254/", http.StatusTemporaryRedirect)
	case faultHang:
		select {
		case <-r.Context().Done():
		case <-lr.release:
		}
		panic(http.ErrAbortHandler) // never answer, not even the 200 of a handler that returns
	case faultReset, faultClose, faultSwitch:
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		switch faultFor(id, n) {
		case faultReset:
			resetConn(conn)
		case faultSwitch:
			buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
			buf.Flush()
			io.Copy(io.Discard, conn) // held until the sender closes it
		}
	}
}

func (lr *loadReceiver) timestamps(id string) []int64 {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return append([]int64(nil), lr.arrivals[id]...)
}

// heapPeak samples the live heap until stop is called, and returns the peak.
func heapPeak() (stop func() uint64) {
	var peak atomic.Uint64
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peak.Load() {
				peak.Store(ms.HeapAlloc)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 { close(done); <-finished; return peak.Load() }
}

func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestSend_Load delivers 10,000 payloads from 64 goroutines through one
// Sender on the library's transport to a verifying receiver that injects
// 20% transient faults of every class, plus 1% of endpoints that always fail.
// Every delivery ends delivered or as a *DeliveryError with every attempt,
// as the fault schedule predicts.
func TestSend_Load(t *testing.T) {
	if testing.Short() {
		t.Skip("load test: skipped under -short")
	}
	const deliveries, workers = 10_000, 64
	// Far longer than a healthy attempt takes, new TLS handshake included,
	// on a slow, loaded 2-core machine under the race detector. Each
	// injected hang costs this much. The schedule has 63, about one per
	// worker, so they add a few seconds to the run.
	const attemptTimeout = 5 * time.Second
	lr := newLoadReceiver(t)
	refused := refusedAddr(t)

	tr := newTransport(t, &webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: certPool(&receiver{Server: lr.Server})}, AllowPrivateNetworks: true})
	s, err := webhook.NewSender(&webhook.SenderOptions{
		Client:         &http.Client{Transport: tr},
		AttemptTimeout: attemptTimeout,
		Retry: &webhook.RetryPolicy{MaxRetries: 3, Backoff: webhook.WithRetryAfter(
			func(int, *http.Response) time.Duration { return 2 * time.Millisecond }, 5*time.Millisecond)},
	})
	require.NoError(t, err)

	runtime.GC()
	baseGoroutines, baseHeap := runtime.NumGoroutine(), liveHeap()
	stopPeak := heapPeak()
	start := time.Now()

	results := make([]*webhook.Result, deliveries)
	conns := make([]webhook.Connection, deliveries)
	ids := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ids {
				results[i], _ = s.Send(context.Background(), conns[i], loadPayload(i))
			}
		}()
	}
	for i := range deliveries {
		conns[i] = webhook.Connection{Name: strconv.Itoa(i), URL: lr.URL + "/hooks", Secret: testSecret}
		switch i % 100 {
		case 37: // 1% of endpoints always fail: half refuse connections, half answer 503
			if i%200 == 37 {
				conns[i].URL = "https://" + refused + "/hooks"
			} else {
				conns[i].URL = lr.URL + "/dead"
			}
		}
		ids <- i
	}
	close(ids)
	wg.Wait()
	elapsed := time.Since(start)
	peak := stopPeak()

	delivered, failed, attempts := 0, 0, 0
	for i, res := range results {
		id := strconv.Itoa(i)
		require.NotNil(t, res, "delivery %d lost", i)
		require.NotEmpty(t, res.Attempts, "delivery %d has no attempt", i)
		attempts += len(res.Attempts)
		if res.Err == nil {
			delivered++
		} else {
			failed++
			var de *webhook.DeliveryError
			require.ErrorAs(t, res.Err, &de, "delivery %d", i)
			require.Equal(t, res.Attempts, de.Attempts, "delivery %d: the error holds every attempt", i)
		}
		want := expectedKinds(i, conns[i].URL, refused)
		require.Equal(t, want, kinds(res.Attempts), "delivery %d: the attempt log must match the injected faults", i)
		ts := lr.timestamps(id)
		if conns[i].URL != "https://"+refused+"/hooks" {
			require.Len(t, ts, len(res.Attempts), "delivery %d: one arrival per attempt", i)
		}
		for j := 1; j < len(ts); j++ {
			require.Greater(t, ts[j], ts[j-1], "delivery %d: timestamps must increase", i)
		}
	}
	assert.Zero(t, lr.unverified.Load(), "every arrival must verify")
	assert.Equal(t, deliveries, delivered+failed)

	tr.CloseIdleConnections()
	afterHeap := liveHeap()
	assert.Less(t, afterHeap, baseHeap+16<<20, "heap back near its baseline: %d -> %d bytes", baseHeap, afterHeap)
	assert.Eventually(t, func() bool { return runtime.NumGoroutine() <= baseGoroutines+2 }, 5*time.Second, 10*time.Millisecond,
		"goroutines back to baseline %d", baseGoroutines)
	t.Logf("%d deliveries (%d delivered, %d failed) in %d attempts in %v: %.0f deliveries/s; peak heap %.1f MiB (baseline %.1f MiB, after %.1f MiB)",
		deliveries, delivered, failed, attempts, elapsed.Round(time.Millisecond), float64(deliveries)/elapsed.Seconds(),
		float64(peak)/(1<<20), float64(baseHeap)/(1<<20), float64(afterHeap)/(1<<20))
}

// expectedKinds is the attempt log the fault schedule predicts for
// delivery i: faults until the first success, at most four attempts.
func expectedKinds(i int, url, refused string) []webhook.FailureKind {
	var out []webhook.FailureKind
	for n := 1; n <= 4; n++ {
		var k webhook.FailureKind
		switch {
		case url == "https://"+refused+"/hooks":
			k = webhook.KindRefused
		case len(url) > 5 && url[len(url)-5:] == "/dead":
			k = webhook.KindStatus
		default:
			k = wantKind[faultFor(strconv.Itoa(i), n)]
		}
		out = append(out, k)
		if k == webhook.KindNone {
			break
		}
	}
	return out
}

func loadPayload(i int) webhook.Payload {
	p := samplePayload()
	p.User.Metadata = webhook.Metadata{"plan": "pro", "delivery_id": strconv.Itoa(i)}
	return p
}

// TestSend_LoadCancelledMidRun cancels 64 busy workers: every call returns
// promptly, with context.Canceled unless it had finished already.
func TestSend_LoadCancelledMidRun(t *testing.T) {
	if testing.Short() {
		t.Skip("load test: skipped under -short")
	}
	lr := newLoadReceiver(t)
	tr := newTransport(t, &webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: certPool(&receiver{Server: lr.Server})}, AllowPrivateNetworks: true})
	defer tr.CloseIdleConnections()
	// Retries wait 1 min, 2 min, 4 min (the default policy's schedule, 60
	// times longer), so cancellation finds most deliveries waiting or in
	// flight, and a call that went on waiting would return a minute late.
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr}, AttemptTimeout: 10 * time.Second,
		Retry: &webhook.RetryPolicy{MaxRetries: 3, Backoff: webhook.ExponentialBackoff(time.Minute, time.Hour)}})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	var started atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, 64*4)
	returned := make([]time.Time, len(errs))
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 4 {
				i := w*4 + k
				started.Add(1)
				_, errs[i] = s.Send(ctx, webhook.Connection{URL: lr.URL + "/dead", Secret: testSecret}, loadPayload(i))
				returned[i] = time.Now()
			}
		}()
	}
	require.Eventually(t, func() bool { return started.Load() >= 64 }, 10*time.Second, time.Millisecond)
	cancelledAt := time.Now()
	cancel()
	wg.Wait()
	for i, err := range errs {
		require.ErrorIs(t, err, context.Canceled, "call %d", i)
		assert.False(t, errors.Is(err, context.DeadlineExceeded))
		// A third of the first wait (1 min), and ample for a slow machine.
		assert.Less(t, returned[i].Sub(cancelledAt), 20*time.Second, "call %d returned promptly", i)
	}
}
