package benchcmp

import (
	"bytes"
	"crypto/hmac"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	signedhook "github.com/signedhook/webhook"
)

// BenchmarkMiddlewareTLS posts signed 1 KiB deliveries, each new, one after
// another to a loopback TLS server (HTTP/2), and times each request from
// the client's side:
//
//   - impl=floor: a handler that reads the body into a pooled buffer and
//     checks it with the floor's pooled keyed HMAC, as a hand-written
//     receiver would;
//   - impl=middleware: Verifier.Middleware with AllowReplays (no replay
//     memory);
//   - impl=once: Verifier.Middleware as it is by default, its replay memory
//     holding 1,000 deliveries a second over the 5 minutes before.
//
// Every handler answers 200. Deliveries are signed in batches with the timer
// stopped. cpu-µs/op is the process's CPU time a request, the client's and
// the server's.
//
//	go test -run '^$' -bench MiddlewareTLS -count 6 > tls.txt
//	go tool benchstat -col /impl tls.txt
func BenchmarkMiddlewareTLS(b *testing.B) {
	fl := newFloor(secret)
	buffers := sync.Pool{New: func() any { return new(bytes.Buffer) }}
	floorHandler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := buffers.Get().(*bytes.Buffer)
		defer buffers.Put(buf)
		buf.Reset()
		buf.ReadFrom(r.Body)
		sig := r.Header.Get(signedhook.HeaderSignature)
		var got, want [32]byte
		if len(sig) != len(signedhook.SignaturePrefix)+64 {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if _, err := hex.Decode(got[:], []byte(sig[len(signedhook.SignaturePrefix):])); err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		fl.sum(r.Header.Get(signedhook.HeaderTimestamp), buf.Bytes(), &want)
		if !hmac.Equal(got[:], want[:]) {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	middleware := func(b *testing.B, allowReplays bool) http.Handler {
		v, err := signedhook.NewVerifier([]string{secret}, &signedhook.VerifierOptions{AllowReplays: allowReplays})
		if err != nil {
			b.Fatal(err)
		}
		if !allowReplays {
			fillReplayMemory(b, v)
		}
		return v.Middleware(ok)
	}
	for _, impl := range []struct {
		name    string
		handler func(b *testing.B) http.Handler
	}{
		{"floor", func(*testing.B) http.Handler { return floorHandler }},
		{"middleware", func(b *testing.B) http.Handler { return middleware(b, true) }},
		{"once", func(b *testing.B) http.Handler { return middleware(b, false) }},
	} {
		b.Run("impl="+impl.name, func(b *testing.B) {
			srv := httptest.NewUnstartedServer(impl.handler(b))
			srv.EnableHTTP2 = true
			srv.StartTLS()
			defer srv.Close()
			postDeliveries(b, srv.Client(), srv.URL)
		})
	}
}

// postDeliveries posts new deliveries to url, one per b.Loop iteration,
// and fails b unless each is answered 200.
func postDeliveries(b *testing.B, client *http.Client, url string) {
	const batch = 4096
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
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	var cpu int64 // the process's CPU time in the loop, signing left out
	n := 0
	for b.Loop() {
		i := n % batch
		if i == 0 {
			b.StopTimer()
			if n > 0 {
				cpu += processCPU()
			}
			sign(n)
			cpu -= processCPU()
			b.StartTimer()
		}
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(bodies[i]))
		if err != nil {
			b.Fatal(err)
		}
		req.Header = headers[i]
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("delivery %d: status %d", n, resp.StatusCode)
		}
		n++
	}
	cpu += processCPU()
	b.ReportMetric(float64(cpu)/float64(n)/1e3, "cpu-µs/op")
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
