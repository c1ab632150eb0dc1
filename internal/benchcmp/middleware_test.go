package benchcmp

import (
	"bytes"
	"crypto/hmac"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	signedhook "github.com/signedhook/webhook"
)

// BenchmarkMiddlewareTLS posts signed 1 KiB deliveries, each new, one after
// another over loopback TLS (HTTP/2), to two servers in turns, 64 to one
// and then 64 to the other: one runs the handler measured, the other the
// floor, a handler that reads the body into a pooled buffer and checks it
// with the floor's pooled keyed HMAC, as a hand-written receiver would.
// Both share the process, so the drift of a shared machine falls on both
// alike, and their ratio is measured within one run. The handlers measured:
//
//   - impl=floor: the floor beside itself, whose ratio shows what the
//     method cannot tell apart;
//   - impl=floor-after-1µs: the floor after 1 µs of work: what the method
//     makes of a known cost;
//   - impl=verify: the floor's handler, checking with the package-level
//     Verify instead: what Verify costs a request;
//   - impl=middleware: Verifier.Middleware with AllowReplays (no replay
//     memory);
//   - impl=once: Verifier.Middleware as it is by default, its replay memory
//     holding 1,000 deliveries a second over the 5 minutes before.
//
// Every handler answers 200. Deliveries are signed in batches with the timer
// stopped. It reports, per request of each server: x-floor, the wall-time
// ratio to the floor; x-floor-cpu, the ratio of the process's CPU time (the
// client's and the server's); µs/req and floor-µs/req, wall time; B/req
// and floor-B/req, bytes allocated. ns/op, B/op and allocs/op are of both
// servers together. The collector's work is charged to the turn it runs
// in, whichever side allocated what it collects: B/req says which
// allocates more.
//
//	go test -run '^$' -bench MiddlewareTLS -count 6 > tls.txt
//	go tool benchstat -col /impl tls.txt
func BenchmarkMiddlewareTLS(b *testing.B) {
	fl := newFloor(secret)
	floor := pooledHandler(func(h http.Header, body []byte) bool {
		sig := h.Get(signedhook.HeaderSignature)
		var got, want [32]byte
		if len(sig) != len(signedhook.SignaturePrefix)+64 {
			return false
		}
		if _, err := hex.Decode(got[:], []byte(sig[len(signedhook.SignaturePrefix):])); err != nil {
			return false
		}
		fl.sum(h.Get(signedhook.HeaderTimestamp), body, &want)
		return hmac.Equal(got[:], want[:])
	})
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	middleware := func(b *testing.B, allowReplays bool) http.Handler {
		v, err := signedhook.NewVerifier([]string{secret}, &signedhook.VerifierOptions{AllowReplays: allowReplays})
		if err != nil {
			b.Fatal(err)
		}
		if !allowReplays {
			fillReplayMemory(b, v)
			runtime.GC() // the filling's garbage is not the middleware's
		}
		return v.Middleware(ok)
	}
	for _, impl := range []struct {
		name    string
		handler func(b *testing.B) http.Handler
	}{
		{"floor", func(*testing.B) http.Handler { return floor }},
		{"floor-after-1µs", func(*testing.B) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for start := time.Now(); time.Since(start) < time.Microsecond; {
				}
				floor.ServeHTTP(w, r)
			})
		}},
		{"verify", func(*testing.B) http.Handler {
			return pooledHandler(func(h http.Header, body []byte) bool { return signedhook.Verify(secret, h, body) == nil })
		}},
		{"middleware", func(b *testing.B) http.Handler { return middleware(b, true) }},
		{"once", func(b *testing.B) http.Handler { return middleware(b, false) }},
	} {
		b.Run("impl="+impl.name, func(b *testing.B) {
			postInTurns(b, impl.handler(b), floor)
		})
	}
}

// pooledHandler reads each request's body into a pooled buffer, as a
// hand-written receiver would, and answers 200 when check accepts it, 401
// otherwise.
func pooledHandler(check func(h http.Header, body []byte) bool) http.Handler {
	buffers := sync.Pool{New: func() any { return new(bytes.Buffer) }}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := buffers.Get().(*bytes.Buffer)
		defer buffers.Put(buf)
		buf.Reset()
		buf.ReadFrom(r.Body)
		if !check(r.Header, buf.Bytes()) {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
}

// postInTurns posts new deliveries, one per b.Loop iteration, to a server
// running handler and to one running floor, turn by turn, and fails b
// unless each is answered 200. It reports each side's time per request and
// their ratios.
func postInTurns(b *testing.B, handler, floor http.Handler) {
	const (
		turn  = 64   // requests to one server before the other's turn
		batch = 4096 // deliveries signed at once: whole turns of both
	)
	var servers [2]*httptest.Server
	for i, h := range []http.Handler{handler, floor} {
		servers[i] = httptest.NewUnstartedServer(h)
		servers[i].EnableHTTP2 = true
		servers[i].StartTLS()
		defer servers[i].Close()
	}
	payload := body(1 << 10)
	bodies := make([][]byte, batch)
	headers := make([]http.Header, batch)
	for i := range bodies {
		bodies[i] = bytes.Clone(payload)
		headers[i] = http.Header{
			"Content-Type":             {"application/json"},
			signedhook.HeaderEvent:     {signedhook.EventUserIdentified},
			signedhook.HeaderTimestamp: {""},
			signedhook.HeaderSignature: {""},
		}
	}
	// sign makes bodies[i] delivery from+i: a body of its own, signed now.
	sign := func(from int) {
		ts := time.Now().UnixMilli()
		for i, p := range bodies {
			copy(p[len(p)-12:], strconv.AppendInt(make([]byte, 0, 10), int64(1_000_000_000+from+i), 10))
			headers[i][signedhook.HeaderTimestamp][0] = strconv.FormatInt(ts, 10)
			headers[i][signedhook.HeaderSignature][0] = signedhook.Sign(secret, ts, p)
		}
	}
	post := func(srv *httptest.Server, i, n int) {
		req, err := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(bodies[i]))
		if err != nil {
			b.Fatal(err)
		}
		req.Header = headers[i]
		resp, err := srv.Client().Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("delivery %d: status %d", n, resp.StatusCode)
		}
	}
	// Each server's connection is set up before the timer starts; those
	// deliveries are signed again before they are sent in the loop.
	sign(-batch)
	post(servers[0], 0, -batch)
	post(servers[1], 1, -batch+1)

	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	allocs := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	allocated := func() int64 { metrics.Read(allocs); return int64(allocs[0].Value.Uint64()) }
	var (
		wall, cpu, heap [2]int64 // per side, in its turns: nanoseconds, nanoseconds, bytes
		reqs            [2]int   // per side: requests in its turns
		began           time.Time
		cpuBegan        int64
		heapBegan       int64
	)
	end := func(side, n int) { // ends the turn of side, n requests long
		wall[side] += int64(time.Since(began))
		cpu[side] += processCPU() - cpuBegan
		heap[side] += allocated() - heapBegan
		reqs[side] += n
	}
	// The side whose turn comes first after a signing, whose caches the
	// signing left cold, changes from batch to batch.
	sideOf := func(n int) int { return (n/turn + n/batch) % 2 }
	n := 0
	for b.Loop() {
		i, side := n%batch, sideOf(n)
		if n%turn == 0 {
			if n > 0 {
				end(sideOf(n-1), turn)
			}
			if i == 0 {
				b.StopTimer()
				sign(n)
				b.StartTimer()
			}
			began, cpuBegan, heapBegan = time.Now(), processCPU(), allocated()
		}
		post(servers[side], i, n)
		n++
	}
	end(sideOf(n-1), (n-1)%turn+1)
	if reqs[0] == 0 || reqs[1] == 0 {
		return // too few iterations for both sides: nothing to compare
	}
	per := func(v [2]int64, side int) float64 { return float64(v[side]) / float64(reqs[side]) }
	b.ReportMetric(per(wall, 0)/1e3, "µs/req")
	b.ReportMetric(per(wall, 1)/1e3, "floor-µs/req")
	b.ReportMetric(per(heap, 0), "B/req")
	b.ReportMetric(per(heap, 1), "floor-B/req")
	b.ReportMetric(per(wall, 0)/per(wall, 1), "x-floor")
	b.ReportMetric(per(cpu, 0)/per(cpu, 1), "x-floor-cpu")
}

// processCPU returns the CPU time this process has used, user and system,
// in nanoseconds: the client's and the server's, which share it.
func processCPU() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// fillReplayMemory has v accept 300,000 deliveries with timestamps spread
// over the last 290 seconds: what its replay memory holds at 1,000
// deliveries a second, once it has run for a while.
func fillReplayMemory(b *testing.B, v *signedhook.Verifier) {
	b.Helper()
	const n, span = 300_000, 290_000 // deliveries, ms
	now := time.Now().UnixMilli()
	p := []byte(`{"n":000000}`)
	h := http.Header{
		signedhook.HeaderEvent:     {signedhook.EventUserIdentified},
		signedhook.HeaderTimestamp: {""},
		signedhook.HeaderSignature: {""},
	}
	for i := range n {
		copy(p[5:], strconv.AppendInt(nil, int64(1_000_000+i), 10)[1:]) // six digits
		ts := now - span + int64(i)*span/n
		h[signedhook.HeaderTimestamp][0] = strconv.FormatInt(ts, 10)
		h[signedhook.HeaderSignature][0] = signedhook.Sign(secret, ts, p)
		if err := v.Verify(h, p); err != nil {
			b.Fatal(err)
		}
	}
}
