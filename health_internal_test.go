package webhook

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// roundTripFunc is an in-memory transport.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A panic in the caller's clock (SenderOptions.Now) as the attempt is
// signed, after endpoint health admitted it, leaves nothing in flight: the
// URL, found silent later, would otherwise hold a place among what waits on
// endpoints not answering for ever (a review's finding: waiting stayed 1).
func TestAbandon_APanicSigningLeavesNothingInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			httptrace.ContextClientTrace(r.Context()).GotConn(httptrace.GotConnInfo{})
			return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
		})
		var mu sync.Mutex
		armed := false
		s, err := NewSender(&SenderOptions{Client: &http.Client{Transport: rt}, Health: &HealthOptions{},
			Now: func() time.Time {
				mu.Lock()
				defer mu.Unlock()
				if armed {
					armed = false
					panic("clock")
				}
				return time.Now()
			}})
		if err != nil {
			t.Fatal(err)
		}
		c := Connection{Name: "c", URL: "https://h.example.com/x", Secret: "whsec_test_secret"}
		mu.Lock()
		armed = true
		mu.Unlock()
		func() {
			defer func() { recover() }()
			s.Attempt(context.Background(), c, EventUserIdentified, []byte(`{}`), 1)
		}()
		time.Sleep(time.Second)
		s.Attempt(context.Background(), c, EventUserIdentified, []byte(`{}`), 1) // would find it silent
		h := s.health
		h.mu.Lock()
		defer h.mu.Unlock()
		if u := h.urls[c.URL]; u != nil && u.inFlight != 0 || h.waiting != 0 {
			t.Errorf("waiting %d, entry %+v", h.waiting, u.stall)
		}
	})
}

// panicDone is a caller's context whose Done panics once armed.
type panicDone struct {
	context.Context
	armed *atomic.Bool
}

func (c panicDone) Done() <-chan struct{} {
	if c.armed.Load() {
		panic("Done")
	}
	return c.Context.Done()
}

// A caller's context that panics while its attempt waits for a URL's first
// answer, past the short while that gives the wait a place among what
// waits on endpoints not answering, gives the place back: it was lost for
// good, and the URL's entry was never forgotten (a review's finding:
// waiting stayed 1).
func TestHealth_APanicWhileWaitingForAFirstAnswerGivesItsPlaceBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			httptrace.ContextClientTrace(r.Context()).GotConn(httptrace.GotConnInfo{})
			if r.URL.Path == "/dead" {
				<-r.Context().Done()
				return nil, r.Context().Err()
			}
			return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
		})
		s, err := NewSender(&SenderOptions{Client: &http.Client{Transport: rt}, AttemptTimeout: 10 * time.Second,
			Retry: &RetryPolicy{}, Health: &HealthOptions{}})
		if err != nil {
			t.Fatal(err)
		}
		c := func(path string) Connection {
			return Connection{Name: "c", URL: "https://h.example.com" + path, Secret: "whsec_test_secret"}
		}
		s.Attempt(context.Background(), c("/ok"), EventUserIdentified, []byte(`{}`), 1)
		time.Sleep(time.Millisecond)
		go s.Attempt(context.Background(), c("/dead"), EventUserIdentified, []byte(`{}`), 1) // its first attempt
		synctest.Wait()
		time.Sleep(time.Second) // past the short while
		var armed atomic.Bool
		armed.Store(true)
		func() {
			defer func() { recover() }()
			s.Attempt(panicDone{context.Background(), &armed}, c("/dead"), EventUserIdentified, []byte(`{}`), 2)
		}()
		time.Sleep(time.Minute) // the first attempt has ended
		synctest.Wait()
		h := s.health
		h.mu.Lock()
		defer h.mu.Unlock()
		waiters := 0
		if u := h.urls[c("/dead").URL]; u != nil {
			waiters = u.waiters
		}
		if h.waiting != 0 || waiters != 0 {
			t.Errorf("after every attempt ended: waiting %d, the URL's waiters %d", h.waiting, waiters)
		}
	})
}

// Under a storm of Sends, Attempts and Send Tests to dead, slow, fast and
// panicking URLs, with cancellations, endpoint health's count of what
// waits on endpoints not answering comes back to zero once all have ended.
func TestHealth_WaitingComesBackToZero(t *testing.T) {
	for seed := range 20 {
		t.Run(strconv.Itoa(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
					httptrace.ContextClientTrace(r.Context()).GotConn(httptrace.GotConnInfo{})
					p := r.URL.Path
					switch {
					case strings.HasPrefix(p, "/dead"):
						<-r.Context().Done()
						return nil, r.Context().Err()
					case strings.HasPrefix(p, "/panic"):
						time.Sleep(30 * time.Millisecond)
						panic("bug")
					case strings.HasPrefix(p, "/slow"):
						time.Sleep(300 * time.Millisecond)
					default:
						time.Sleep(5 * time.Millisecond)
					}
					return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("{}")), Request: r}, nil
				})
				s, err := NewSender(&SenderOptions{Client: &http.Client{Transport: rt}, AttemptTimeout: time.Second,
					Retry:  &RetryPolicy{MaxRetries: 2, Backoff: func(int, *http.Response) time.Duration { return 200 * time.Millisecond }},
					Health: &HealthOptions{DownAfter: 3, MaxUnansweredTotal: 4, MaxUnanswered: 2, Marks: &flipMarks{}, FollowEvery: 30 * time.Millisecond}})
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(uint64(seed), 1))
				paths := []string{"/dead/1", "/dead/2", "/panic/1", "/slow/1", "/ok/1", "/ok/2"}
				var wg sync.WaitGroup
				for i := range 300 {
					path, op := paths[rng.IntN(len(paths))], rng.IntN(4)
					cancelAfter := time.Duration(rng.IntN(400)) * time.Millisecond
					c := Connection{Name: "c", URL: "https://h.example.com" + path, Secret: "whsec_test_secret"}
					wg.Go(func() {
						defer func() { recover() }()
						ctx, cancel := context.WithTimeout(context.Background(), cancelAfter+50*time.Millisecond)
						defer cancel()
						switch op {
						case 0, 1:
							s.Send(ctx, c, Payload{Event: EventUserIdentified, Timestamp: NewTime(time.Now()), User: User{ID: UserID("u" + strconv.Itoa(i))}, Application: Application{ID: ApplicationID("42c0de"), Name: "A"}})
						case 2:
							s.Attempt(ctx, c, EventUserIdentified, []byte(`{"n":`+strconv.Itoa(i)+`}`), 1)
						case 3:
							s.SendTest(ctx, c)
						}
					})
					time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
				}
				wg.Wait()
				synctest.Wait()
				h := s.health
				h.mu.Lock()
				defer h.mu.Unlock()
				if h.waiting != 0 {
					t.Errorf("waiting = %d after all ended", h.waiting)
				}
				for k, u := range h.urls {
					if u.inFlight != 0 || u.waiters != 0 || u.uncounted != 0 || u.late != 0 || u.answer != nil {
						t.Errorf("%s: inFlight %d waiters %d uncounted %d late %d answer %v", k, u.inFlight, u.waiters, u.uncounted, u.late, u.answer != nil)
					}
				}
			})
		})
	}
}

// flipMarks says, at each read, that another process found /dead/1 and
// /slow/1 down, then up, in turn.
type flipMarks struct {
	mu sync.Mutex
	n  int
}

func (f *flipMarks) Mark(context.Context, EndpointHealth) error { return nil }

func (f *flipMarks) Since(_ context.Context, after time.Time) ([]EndpointHealth, time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	now := time.Now()
	var out []EndpointHealth
	for _, p := range []string{"/dead/1", "/slow/1"} {
		out = append(out, EndpointHealth{Endpoint: "https://h.example.com:443", PerURL: true, URLKey: urlKey("https://h.example.com" + p),
			Down: f.n%2 == 1, Since: now, Changed: now, Failures: 3, LastFailure: Attempt{Kind: KindTimeout}, NextProbe: now.Add(100 * time.Millisecond)})
	}
	return out, now, nil
}

// Two attempts wait for a new URL's first answer; it answers, and both
// wake. delivery.admit calls unwait, then admit again, under two separate
// locks: when both unwaits come before either admit (two goroutines woken
// at once by the same close), the last unwait finds the entry settled and
// forgets it, heard and all. The second to ask again then finds a URL not
// heard from, with the first's new attempt in flight, and waits for a
// second first answer (a review's finding: unwait forgot the entry).
func TestHealth_WaitersWokenByTheFirstAnswerAllGo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := newHealth(&HealthOptions{}, 10*time.Second, time.Now, slog.Default())
		if err != nil {
			t.Fatal(err)
		}
		const origin, url = "https://h.example.com:443", "https://h.example.com/x"
		first, _, err := h.admit(origin, url, false, time.Time{})
		if err != nil || first.await != nil {
			t.Fatalf("first: await %v err %v", first.await != nil, err)
		}
		w1, _, _ := h.admit(origin, url, false, time.Time{})
		w2, _, _ := h.admit(origin, url, false, time.Time{})
		if w1.await == nil || w2.await == nil {
			t.Fatal("the next two should await the first answer")
		}
		time.Sleep(10 * time.Millisecond)
		h.record(first, &Attempt{StatusCode: 200, Duration: 10 * time.Millisecond}, true, []byte(`{}`))
		<-w1.await
		<-w2.await
		h.unwait(w1) // w1 woke
		h.unwait(w2) // w2 woke
		t1, _, err1 := h.admit(origin, url, false, time.Time{})
		t2, _, err2 := h.admit(origin, url, false, time.Time{})
		if err1 != nil || err2 != nil || t1.await != nil || t2.await != nil {
			t.Errorf("the URL answered: both should go; w1 await %v err %v, w2 await %v err %v",
				t1.await != nil, err1, t2.await != nil, err2)
		}
	})
}

// manyMarks says once that another process found n origins and n URLs
// down, each a different endpoint (customers' endpoints that later went
// away), and nothing after.
type manyMarks struct {
	mu   sync.Mutex
	n    int
	read bool
}

func (m *manyMarks) Mark(context.Context, EndpointHealth) error { return nil }

func (m *manyMarks) Since(context.Context, time.Time) ([]EndpointHealth, time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if m.read {
		return nil, now, nil
	}
	m.read = true
	var out []EndpointHealth
	for i := range m.n {
		host := "https://gone" + strconv.Itoa(i) + ".example.com"
		out = append(out,
			EndpointHealth{Endpoint: host + ":443", Down: true, Since: now, Changed: now, Failures: 5, LastFailure: Attempt{Kind: KindRefused}, NextProbe: now.Add(time.Minute)},
			EndpointHealth{Endpoint: host + ":443/…", PerURL: true, URLKey: urlKey(host + "/hook"), Down: true, Since: now, Changed: now, Failures: 5, LastFailure: Attempt{Kind: KindTimeout}, NextProbe: now.Add(time.Minute)})
	}
	return out, now, nil
}

// deliverElsewhereForDays makes, in h's synctest bubble, a delivery a day
// for two days and more to an endpoint that answers, none to the others,
// and sweeps.
func deliverElsewhereForDays(t *testing.T, h *health) {
	t.Helper()
	const origin, url = "https://live.example.com:443", "https://live.example.com/x"
	for range 3 {
		time.Sleep(25 * time.Hour)
		tk, _, err := h.admit(origin, url, false, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		h.record(tk, &Attempt{StatusCode: 200, Duration: time.Millisecond}, true, []byte(`{}`))
		synctest.Wait()
	}
	h.snapshot() // sweeps
}

// What a Sender keeps of the fleet's marks (HealthOptions.Marks) is
// forgotten as its own endpoints are: the README bounds endpoint health by
// "an endpoint no attempt goes to is forgotten after an hour, or a day when
// down". The down marks another process wrote of endpoints this one never
// sends to again were kept for the life of the process (fleet.applied and
// fleet.urlMarks), one entry per endpoint ever marked down in the fleet.
func TestHealth_TheFleetsMarksOfEndpointsNoLongerSentToAreForgotten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		marks := &manyMarks{n: 1000}
		h, err := newHealth(&HealthOptions{Marks: marks}, 10*time.Second, time.Now, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the first read: every mark applied
		deliverElsewhereForDays(t, h)
		h.mu.Lock()
		defer h.mu.Unlock()
		if len(h.endpoints) != 0 || len(h.urls) != 0 {
			t.Errorf("the endpoints themselves: %d origins, %d URLs kept", len(h.endpoints), len(h.urls))
		}
		if n, m := len(h.fleet.applied), len(h.fleet.urlMarks); n != 0 || m != 0 {
			t.Errorf("after two idle days, the fleet's marks of %d gone endpoints are still kept: %d applied, %d URL marks", 2*marks.n, n, m)
		}
	})
}

// panicOnDown is a slog.Handler that panics on endpoint health's line for
// an endpoint going down: a caller's handler with a bug.
type panicOnDown struct{}

func (panicOnDown) Enabled(context.Context, slog.Level) bool { return true }
func (panicOnDown) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "webhook: endpoint down" {
		panic("handler bug")
	}
	return nil
}
func (h panicOnDown) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h panicOnDown) WithGroup(string) slog.Handler      { return h }

// A Logger that panics (SenderOptions.Logger: the caller's handler) on the
// line endpoint health writes as an endpoint goes down reaches the caller
// as any panic of the attempt's does (TestSend_APanicInOnAttemptGivesBackItsPlaceToRetry),
// and leaves endpoint health usable: its lock was held for ever (record
// logs under it, with no deferred unlock), so every later delivery of the
// Sender, to any endpoint, blocked for good.
func TestHealth_ALoggerThatPanicsLeavesEndpointHealthUnlocked(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // refused from now on
	s, err := NewSender(&SenderOptions{AllowPrivateNetworks: true, Retry: &RetryPolicy{},
		Logger: slog.New(panicOnDown{}), Health: &HealthOptions{DownAfter: 1}})
	if err != nil {
		t.Fatal(err)
	}
	c := Connection{Name: "c", URL: "https://" + addr + "/hook", Secret: "whsec_test_secret"}
	var got any
	func() {
		defer func() { got = recover() }()
		s.Send(context.Background(), c, SamplePayload(time.Now()))
	}()
	if got != "handler bug" {
		t.Fatalf("the Logger's panic: got %v", got)
	}
	if !s.health.mu.TryLock() { // nothing else runs: no OnChange, no Marks
		t.Fatal("endpoint health's lock is still held after the Logger's panic: every later delivery blocks for good")
	}
	s.health.mu.Unlock()
}

// failingMarks is a HealthMarks store that cannot be reached.
type failingMarks struct{}

func (failingMarks) Mark(context.Context, EndpointHealth) error { return errors.New("unreachable") }
func (failingMarks) Since(context.Context, time.Time) ([]EndpointHealth, time.Time, error) {
	return nil, time.Time{}, errors.New("unreachable")
}

// panicOnWarn is a slog.Handler that panics on any line at level Warn or
// above: a caller's handler with a bug.
type panicOnWarn struct{}

func (panicOnWarn) Enabled(context.Context, slog.Level) bool { return true }
func (panicOnWarn) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		panic("handler bug")
	}
	return nil
}
func (h panicOnWarn) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h panicOnWarn) WithGroup(string) slog.Handler      { return h }

// A Logger that panics (SenderOptions.Logger), off the attempt path where
// no caller can recover it, does not take the process down: endpoint
// health logs, on goroutines of its own, a marks store it cannot read and
// an OnChange that panicked, and a panic of the Logger there was raised on
// that goroutine, killing the service with every delivery in flight, as
// soon as the store was unreachable. OnChange's own panic is recovered and
// logged; the Logger's is dropped there the same way. The test runs the
// Sender in a child process and expects it to exit cleanly.
func TestHealth_ALoggerThatPanicsOffTheAttemptPathDoesNotCrashTheProcess(t *testing.T) {
	if os.Getenv("WEBHOOK_TEST_LOGGER_PANIC_CHILD") == "1" {
		s, err := NewSender(&SenderOptions{Logger: slog.New(panicOnWarn{}), Health: &HealthOptions{Marks: failingMarks{},
			OnChange: func(context.Context, EndpointHealth) { panic("OnChange bug") }}})
		if err != nil {
			t.Fatal(err)
		}
		s.Flush(context.Background()) // the first read of the marks has ended
		s.health.reports.Add(1)
		go func() { // a change reported: its OnChange panics, and the Logger with it
			defer s.health.reports.Done()
			s.health.tell(EndpointHealth{Endpoint: "https://h.example.com:443", Down: true})
		}()
		s.Flush(context.Background())
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHealth_ALoggerThatPanicsOffTheAttemptPathDoesNotCrashTheProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "WEBHOOK_TEST_LOGGER_PANIC_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		first, _, _ := strings.Cut(string(out), "\n")
		t.Fatalf("the process crashed (%v): %s", err, first)
	}
}

// recordedMarks is a HealthMarks store as its doc has one: Since returns
// the marks recorded at or after after, and as the next cursor the latest
// recording time among them, or after when there are none.
type recordedMarks struct {
	mu    sync.Mutex
	marks []EndpointHealth
	at    []time.Time
}

func (m *recordedMarks) Mark(context.Context, EndpointHealth) error { return nil }

func (m *recordedMarks) record(h EndpointHealth, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.marks, m.at = append(m.marks, h), append(m.at, at)
}

func (m *recordedMarks) Since(_ context.Context, after time.Time) ([]EndpointHealth, time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []EndpointHealth
	next := after
	for i, at := range m.at {
		if !at.Before(after) {
			out = append(out, m.marks[i])
			next = later(next, at)
		}
	}
	return out, next, nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// The test above, with a store that moves its cursor as HealthMarks says:
// to the latest recording time, and not at all when nothing was recorded.
// Other processes marked 1,000 endpoints down, then one more ten seconds
// later, and nothing since: no read returns the 1,000 again, but the
// cursor never moves more than marksOverlap past where it was when they
// were read, so they are kept for the life of the process.
func TestHealth_TheFleetsMarksAreForgottenWhenTheFleetGoesQuiet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		marks := &recordedMarks{}
		start := time.Now()
		for i := range 1000 {
			host := "https://gone" + strconv.Itoa(i) + ".example.com"
			marks.record(EndpointHealth{Endpoint: host + ":443", Down: true, Since: start, Changed: start, Failures: 5,
				LastFailure: Attempt{Kind: KindRefused}, NextProbe: start.Add(time.Minute)}, start)
		}
		last := start.Add(10 * time.Second)
		marks.record(EndpointHealth{Endpoint: "https://last.example.com:443", Down: true, Since: last, Changed: last, Failures: 5,
			LastFailure: Attempt{Kind: KindRefused}, NextProbe: last.Add(time.Minute)}, last)
		h, err := newHealth(&HealthOptions{Marks: marks}, 10*time.Second, time.Now, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the first read: every mark applied
		deliverElsewhereForDays(t, h)
		h.mu.Lock()
		defer h.mu.Unlock()
		if n := len(h.fleet.applied); n > 1 {
			t.Errorf("after two days, the marks of 1,000 endpoints no read returns again are still kept: %d applied", n)
		}
	})
}
