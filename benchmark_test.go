package webhook_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/signedhook/webhook"
)

// The benchmarks put the library beside the floor, a hand-written
// HMAC-SHA256 of the same scheme that keeps keyed state per secret, in one
// run, so that a ratio is one benchstat away:
//
//	go test -run '^$' -bench . -count 10 > bench.txt
//	benchstat -col /impl bench.txt

var benchSizes = []struct {
	name string
	n    int
}{{"1KiB", 1 << 10}, {"16KiB", 16 << 10}}

// floorSigner is the floor: a sync.Pool of keyed HMACs, Reset between uses.
type floorSigner struct{ pool sync.Pool }

type floorState struct {
	mac hash.Hash
	buf [64]byte
}

func newFloorSigner(secret string) *floorSigner {
	f := &floorSigner{}
	f.pool.New = func() any { return &floorState{mac: hmac.New(sha256.New, []byte(secret))} }
	return f
}

// sum computes the raw HMAC of "<ts>.<body>" into out.
func (f *floorSigner) sum(ts int64, body []byte, out *[32]byte) {
	st := f.pool.Get().(*floorState)
	st.mac.Reset()
	st.mac.Write(strconv.AppendInt(st.buf[:0], ts, 10))
	st.mac.Write(floorDot)
	st.mac.Write(body)
	copy(out[:], st.mac.Sum(st.buf[:0]))
	f.pool.Put(st)
}

func (f *floorSigner) sign(ts int64, body []byte) string {
	var sum [32]byte
	f.sum(ts, body, &sum)
	var out [7 + 64]byte
	copy(out[:], "sha256=")
	hex.Encode(out[7:], sum[:])
	return string(out[:])
}

func (f *floorSigner) verify(ts int64, body []byte, sig string) bool {
	var got, want [32]byte
	if len(sig) != 71 {
		return false
	}
	if _, err := hex.Decode(got[:], []byte(sig[7:])); err != nil {
		return false
	}
	f.sum(ts, body, &want)
	return hmac.Equal(got[:], want[:])
}

var (
	sinkString string
	floorDot   = []byte{'.'}
)

func BenchmarkSign(b *testing.B) {
	const ts = 1763719200000
	for _, size := range benchSizes {
		body := bytes.Repeat([]byte("a"), size.n)
		floor := newFloorSigner(testSecret)
		b.Run("impl=floor/size="+size.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size.n))
			for b.Loop() {
				sinkString = floor.sign(ts, body)
			}
		})
		b.Run("impl=webhook/size="+size.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size.n))
			for b.Loop() {
				sinkString = webhook.Sign(testSecret, ts, body)
			}
		})
	}
}

func BenchmarkVerify(b *testing.B) {
	ts := testNow.UnixMilli()
	for _, size := range benchSizes {
		body := bytes.Repeat([]byte("a"), size.n)
		h := signedHeader(testSecret, ts, body)
		sig := h.Get(webhook.HeaderSignature)
		floor := newFloorSigner(testSecret)
		v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{
			Now:          func() time.Time { return testNow },
			MaxBodyBytes: 1 << 20,
			AllowReplays: true, // one delivery, verified again and again: see BenchmarkVerifyReplay
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Run("impl=floor/size="+size.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size.n))
			for b.Loop() {
				if !floor.verify(ts, body, sig) {
					b.Fatal("floor refused")
				}
			}
		})
		b.Run("impl=webhook/size="+size.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size.n))
			for b.Loop() {
				if err := v.Verify(h, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkVerifyReplay puts Verify with replay refusal (impl=replay, the
// default: an in-memory store) beside Verify without it (impl=webhook,
// AllowReplays), on the same deliveries: every iteration verifies a delivery
// of its own, one per millisecond of a clock that advances with them, into
// a store that holds, from the start, the 300,000 entries of 1,000
// deliveries per second over the 5-minute window before (fullStore): a
// receiver running for a while. The deliveries are signed in batches, with
// the timer stopped.
//
//	go test -run '^$' -bench VerifyReplay -count 6 > replay.txt
//	benchstat -col /impl replay.txt
func BenchmarkVerifyReplay(b *testing.B) {
	const batch = 4096
	for _, size := range benchSizes {
		body := bytes.Repeat([]byte("a"), size.n)
		for _, impl := range []string{"webhook", "replay"} {
			b.Run("impl="+impl+"/size="+size.name, func(b *testing.B) {
				base := testNow.UnixMilli()
				var now time.Time
				store := fullStore(b, &now, base)
				v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{
					Now:          func() time.Time { return now },
					AllowReplays: impl == "webhook",
					ReplayStore:  store,
				})
				if err != nil {
					b.Fatal(err)
				}
				headers := make([]http.Header, batch)
				for i := range headers {
					headers[i] = signedHeader(testSecret, base, body)
				}
				sign := func(from int64) {
					for i, h := range headers {
						ts := base + from + int64(i)
						h[webhook.HeaderTimestamp][0] = strconv.FormatInt(ts, 10)
						h[webhook.HeaderSignature][0] = webhook.Sign(testSecret, ts, body)
					}
				}
				b.ReportAllocs()
				b.SetBytes(int64(size.n))
				var n int64
				for b.Loop() {
					i := n % batch
					if i == 0 {
						b.StopTimer()
						sign(n)
						b.StartTimer()
					}
					now = time.UnixMilli(base + n)
					if err := v.Verify(headers[i], body); err != nil {
						b.Fatal(err)
					}
					n++
				}
			})
		}
	}
}

// fullStore returns a MemoryReplayStore on the clock *now, set to base,
// holding the entries of 1,000 deliveries per second over the 5 minutes
// before base, as a receiver's store does once it has run for a while:
// they are verified into it, each at its time (small bodies: the store
// keeps only signatures).
func fullStore(b *testing.B, now *time.Time, base int64) *webhook.MemoryReplayStore {
	b.Helper()
	clock := func() time.Time { return *now }
	store, err := webhook.NewMemoryReplayStore(&webhook.MemoryReplayStoreOptions{Now: clock})
	if err != nil {
		b.Fatal(err)
	}
	v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{Now: clock, ReplayStore: store})
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{}`)
	h := signedHeader(testSecret, base, body)
	window := webhook.DefaultTolerance.Milliseconds()
	for i := range window {
		ts := base - window + i
		*now = time.UnixMilli(ts)
		h[webhook.HeaderTimestamp][0] = strconv.FormatInt(ts, 10)
		h[webhook.HeaderSignature][0] = webhook.Sign(testSecret, ts, body)
		if err := v.Verify(h, body); err != nil {
			b.Fatal(err)
		}
	}
	*now = time.UnixMilli(base)
	return store
}

// BenchmarkMiddleware serves signed 1 KiB requests, each a delivery of its
// own (one per millisecond of a clock that advances with them, signed in
// batches with the timer stopped), through the floor: a handler that reads
// the body into a pooled buffer and verifies it with the pooled HMAC, as a
// hand-written receiver would; the middleware without replay refusal
// (impl=middleware, AllowReplays); and the middleware as it is by default,
// handing each delivery to the handler once (impl=once: a claim before the
// handler, its outcome recorded after, in a store as full as fullStore's).
// All answer 200. It is for diagnosis: speed is judged end to end, over
// loopback TLS, by internal/benchcmp's BenchmarkMiddlewareTLS.
//
//	go test -run '^$' -bench Middleware -count 8 > mw.txt
//	benchstat -col /impl mw.txt
func BenchmarkMiddleware(b *testing.B) {
	const batch = 4096
	body := bytes.Repeat([]byte("a"), 1<<10)
	floor := newFloorSigner(testSecret)
	buffers := sync.Pool{New: func() any { return new(bytes.Buffer) }}
	handWritten := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := buffers.Get().(*bytes.Buffer)
		defer buffers.Put(buf)
		buf.Reset()
		buf.ReadFrom(r.Body)
		ts, err := strconv.ParseInt(r.Header.Get(webhook.HeaderTimestamp), 10, 64)
		if err != nil || !floor.verify(ts, buf.Bytes(), r.Header.Get(webhook.HeaderSignature)) {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	run := func(b *testing.B, handler func(now *time.Time) http.Handler) {
		base := testNow.UnixMilli()
		var now time.Time
		h := handler(&now)
		headers := make([]http.Header, batch)
		for i := range headers {
			headers[i] = signedHeader(testSecret, base, body)
		}
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		rd := bytes.NewReader(body)
		req := httptest.NewRequest(http.MethodPost, "/", rd)
		w := &statusWriter{header: http.Header{}}
		var n int64
		for b.Loop() {
			i := n % batch
			if i == 0 {
				b.StopTimer()
				for j, hd := range headers {
					ts := base + n + int64(j)
					hd[webhook.HeaderTimestamp][0] = strconv.FormatInt(ts, 10)
					hd[webhook.HeaderSignature][0] = webhook.Sign(testSecret, ts, body)
				}
				b.StartTimer()
			}
			now = time.UnixMilli(base + n)
			rd.Reset(body)
			req.Body, req.Header = readCloser{rd}, headers[i]
			w.code = 0
			h.ServeHTTP(w, req)
			if w.code != http.StatusOK {
				b.Fatalf("status %d", w.code)
			}
			n++
		}
	}
	middleware := func(allowReplays bool) func(*time.Time) http.Handler {
		return func(now *time.Time) http.Handler {
			v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{
				Now:          func() time.Time { return *now },
				AllowReplays: allowReplays,
				ReplayStore:  fullStore(b, now, testNow.UnixMilli()),
			})
			if err != nil {
				b.Fatal(err)
			}
			return v.Middleware(ok)
		}
	}
	b.Run("impl=floor", func(b *testing.B) { run(b, func(*time.Time) http.Handler { return handWritten }) })
	b.Run("impl=middleware", func(b *testing.B) { run(b, middleware(true)) })
	b.Run("impl=once", func(b *testing.B) { run(b, middleware(false)) })
}

type readCloser struct{ *bytes.Reader }

// statusWriter is the cheapest ResponseWriter: it keeps only the status.
type statusWriter struct {
	header http.Header
	code   int
}

func (w *statusWriter) Header() http.Header         { return w.header }
func (w *statusWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *statusWriter) WriteHeader(code int)        { w.code = code }

func (readCloser) Close() error { return nil }
