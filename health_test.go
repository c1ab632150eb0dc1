package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/webhooktest"
)

// flakyEndpoint is an in-memory endpoint whose answer a test sets: refused,
// hanging until the attempt ends, or a status. It counts the requests that
// reached it.
type flakyEndpoint struct {
	mu       sync.Mutex
	status   int  // 0: the connection is refused
	hang     bool // no answer: the attempt times out
	held     chan struct{}
	requests atomic.Int32
}

func (e *flakyEndpoint) RoundTrip(r *http.Request) (*http.Response, error) {
	e.requests.Add(1)
	e.mu.Lock()
	status, hang, held := e.status, e.hang, e.held
	e.mu.Unlock()
	if held != nil {
		<-held
	}
	switch {
	case hang:
		<-r.Context().Done()
		return nil, r.Context().Err()
	case status == 0:
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	return answer(status), nil
}

func (e *flakyEndpoint) set(status int, hang bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.status, e.hang = status, hang
}

// changes records what OnChange reports.
type changes struct {
	mu    sync.Mutex
	got   []webhook.EndpointHealth
	added chan struct{} // a token after each add, for wait
}

func (c *changes) add(_ context.Context, h webhook.EndpointHealth) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, h)
	if c.added != nil {
		select {
		case c.added <- struct{}{}:
		default:
		}
	}
}

// wait returns what OnChange reported once it has reported n changes, out
// of a synctest bubble; it fails the test after 10 s.
func (c *changes) wait(t *testing.T, n int) []webhook.EndpointHealth {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		if c.added == nil {
			c.added = make(chan struct{}, 1)
		}
		got, added := len(c.got), c.added
		c.mu.Unlock()
		if got >= n {
			return c.list()
		}
		select {
		case <-added:
		case <-deadline:
			t.Fatalf("OnChange reported %d change(s) in 10 s, want %d", got, n)
		}
	}
}

// settled returns what OnChange reported once every goroutine of the
// synctest bubble is blocked: OnChange runs on a goroutine of its own.
func (c *changes) settled() []webhook.EndpointHealth {
	synctest.Wait()
	return c.list()
}

func (c *changes) list() []webhook.EndpointHealth {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]webhook.EndpointHealth(nil), c.got...)
}

// healthSender returns a Sender with endpoint health on (down after 3
// failures, probes after 10 s, doubling up to 40 s) and no retries, on ep.
func healthSender(t *testing.T, ep http.RoundTripper, ch *changes, retry *webhook.RetryPolicy) *webhook.Sender {
	t.Helper()
	if retry == nil {
		retry = &webhook.RetryPolicy{}
	}
	s, err := webhook.NewSender(&webhook.SenderOptions{
		Client:         &http.Client{Transport: ep},
		Retry:          retry,
		AttemptTimeout: 5 * time.Second,
		Health: &webhook.HealthOptions{DownAfter: 3, ProbeInterval: 10 * time.Second, MaxProbeInterval: 40 * time.Second,
			OnChange: ch.add},
	})
	require.NoError(t, err)
	return s
}

func TestHealth_DownAfterARunOfFailuresThenProbedUntilItAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ep := &flakyEndpoint{}
		var ch changes
		s := healthSender(t, ep, &ch, nil)
		send := func() error {
			_, err := s.Send(context.Background(), fakeConn, samplePayload())
			return err
		}
		t0 := time.Now()
		for range 3 {
			res, err := s.Send(context.Background(), fakeConn, samplePayload())
			require.ErrorIs(t, err, syscall.ECONNREFUSED)
			assert.False(t, res.Attempts[0].Probe, "failing is not down yet")
		}
		require.EqualValues(t, 3, ep.requests.Load())
		require.Len(t, ch.settled(), 1, "reported down once")
		down := ch.settled()[0]
		assert.True(t, down.Down)
		assert.Equal(t, "https://crm.example.com:443", down.Endpoint)
		assert.Equal(t, 3, down.Failures)
		assert.Equal(t, webhook.KindRefused, down.LastFailure.Kind)
		assert.Equal(t, t0, down.Since)
		assert.Equal(t, t0.Add(10*time.Second), down.NextProbe)

		// Down: nothing is sent until the probe is due.
		res, err := s.Send(context.Background(), fakeConn, samplePayload())
		require.ErrorIs(t, err, webhook.ErrEndpointDown)
		assert.Empty(t, res.Attempts, "nothing was sent")
		assert.EqualValues(t, 3, ep.requests.Load())
		assert.Equal(t, []webhook.EndpointHealth{down}, s.Health())

		// Probes at 10 s, then 20 s and 40 s apart, 40 s at the most.
		probes := []time.Duration{10 * time.Second, 30 * time.Second, 70 * time.Second, 110 * time.Second}
		for i, at := range probes {
			time.Sleep(time.Until(t0.Add(at)) - time.Millisecond)
			require.ErrorIs(t, send(), webhook.ErrEndpointDown, "probe %d is not due yet", i+1)
			time.Sleep(time.Millisecond)
			res, err := s.Send(context.Background(), fakeConn, samplePayload())
			require.ErrorIs(t, err, syscall.ECONNREFUSED, "probe %d is sent", i+1)
			require.Len(t, res.Attempts, 1)
			assert.True(t, res.Attempts[0].Probe, "probe %d says so", i+1)
			require.EqualValues(t, 4+i, ep.requests.Load())
			require.ErrorIs(t, send(), webhook.ErrEndpointDown, "one probe, then waiting again")
		}
		assert.Len(t, ch.settled(), 1, "probes that fail change nothing")

		// The endpoint answers again, with a 500: it is up, and the
		// deliveries go out, failing or not.
		ep.set(http.StatusInternalServerError, false)
		time.Sleep(40 * time.Second)
		res, err = s.Send(context.Background(), fakeConn, samplePayload())
		require.Error(t, err)
		assert.Equal(t, webhook.KindStatus, res.Attempts[0].Kind, "the probe got an answer")
		assert.False(t, res.Attempts[0].Probe, "a probe that finds the endpoint up is an attempt as any")
		ep.set(http.StatusOK, false)
		res, err = s.Send(context.Background(), fakeConn, samplePayload())
		require.NoError(t, err)
		assert.False(t, res.Attempts[0].Probe, "up: no attempt is a probe")
		got := ch.settled()
		require.Len(t, got, 2, "reported down, then up: once each")
		up := got[1]
		assert.False(t, up.Down)
		assert.Equal(t, t0, up.Since, "down since")
		assert.Equal(t, t0.Add(150*time.Second), up.Changed)
		assert.Equal(t, 7, up.Failures, "3 attempts and 4 probes failed")
		assert.Empty(t, s.Health(), "nothing is kept of an endpoint that answers")
	})
}

func TestHealth_AnswersAreNeverDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ep := &flakyEndpoint{status: http.StatusNotFound}
		var ch changes
		s := healthSender(t, ep, &ch, nil)
		for range 10 { // a live server's 4xx, however many
			_, err := s.Send(context.Background(), fakeConn, samplePayload())
			require.NotErrorIs(t, err, webhook.ErrEndpointDown)
		}
		// Two failures, an answer, two failures: never three in a row.
		for _, status := range []int{0, 0, http.StatusServiceUnavailable, 0, 0} {
			ep.set(status, false)
			_, err := s.Send(context.Background(), fakeConn, samplePayload())
			require.NotErrorIs(t, err, webhook.ErrEndpointDown)
		}
		assert.EqualValues(t, 15, ep.requests.Load(), "every delivery was sent")
		assert.Empty(t, ch.settled())
		require.Len(t, s.Health(), 1, "failing, not down")
		assert.False(t, s.Health()[0].Down)
		assert.Equal(t, 2, s.Health()[0].Failures)
	})
}

func TestHealth_TimeoutsMarkDownAndOneProbeAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ep := &flakyEndpoint{hang: true}
		var ch changes
		s := healthSender(t, ep, &ch, nil)
		for range 3 {
			res, _ := s.Send(context.Background(), fakeConn, samplePayload())
			require.Equal(t, webhook.KindTimeout, res.Attempts[0].Kind)
		}
		require.Len(t, ch.settled(), 1)

		// The probe is due: many deliveries at once, one of them probes,
		// held in flight; the others send nothing.
		time.Sleep(10 * time.Second)
		held := make(chan struct{})
		ep.mu.Lock()
		ep.held = held
		ep.mu.Unlock()
		ep.set(http.StatusOK, false)
		var wg sync.WaitGroup
		var down, sent atomic.Int32
		for range 20 {
			wg.Go(func() {
				_, err := s.Send(context.Background(), fakeConn, samplePayload())
				switch {
				case errors.Is(err, webhook.ErrEndpointDown):
					down.Add(1)
				case err == nil:
					sent.Add(1)
				}
			})
		}
		synctest.Wait()
		assert.EqualValues(t, 4, ep.requests.Load(), "one probe in flight")
		assert.EqualValues(t, 19, down.Load())
		close(held)
		wg.Wait()
		assert.EqualValues(t, 1, sent.Load(), "the probe was delivered")
		assert.Len(t, ch.settled(), 2, "and the endpoint is up")
	})
}

func TestHealth_AnEndpointIsAnOrigin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ep := &flakyEndpoint{}
		var ch changes
		s := healthSender(t, ep, &ch, nil)
		for _, path := range []string{"/a", "/b", "/c"} { // three connections to one dead host
			c := fakeConn
			c.URL = "https://CRM.example.com" + path
			s.Send(context.Background(), c, samplePayload())
		}
		require.Len(t, ch.settled(), 1, "they share its fate")
		other := fakeConn
		other.URL = "https://crm.example.com:8443/a" // another port: another endpoint
		_, err := s.Send(context.Background(), other, samplePayload())
		require.ErrorIs(t, err, syscall.ECONNREFUSED, "sent")
		_, err = s.Send(context.Background(), fakeConn, samplePayload())
		require.ErrorIs(t, err, webhook.ErrEndpointDown, "https://crm.example.com/hooks is the dead one, port 443")
	})
}

func TestHealth_AttemptTellsTheQueueWhenToTryAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ep := &flakyEndpoint{}
		var ch changes
		s := healthSender(t, ep, &ch, nil)
		for n := 1; n <= 3; n++ {
			s.Attempt(context.Background(), fakeConn, webhook.EventUserIdentified, []byte(`{}`), n)
		}
		time.Sleep(4 * time.Second)
		a := s.Attempt(context.Background(), fakeConn, webhook.EventUserIdentified, []byte(`{}`), 4)
		assert.Equal(t, webhook.KindDown, a.Kind)
		assert.ErrorIs(t, a.Err, webhook.ErrEndpointDown)
		assert.Equal(t, 4, a.N, "the attempt it would have been")
		assert.True(t, a.Retry)
		assert.GreaterOrEqual(t, a.RetryIn, 6*time.Second, "not before the probe is due")
		assert.LessOrEqual(t, a.RetryIn, 16*time.Second, "spread over one probe interval after it")
		assert.Contains(t, a.Diagnosis(), "endpoint is down")
		assert.EqualValues(t, 3, ep.requests.Load())
	})
}

func TestHealth_ARetryIsNotSentOnceTheEndpointIsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ep := &flakyEndpoint{}
		var ch changes
		s := healthSender(t, ep, &ch, &webhook.RetryPolicy{MaxRetries: 5})
		res, err := s.Send(context.Background(), fakeConn, samplePayload())
		require.ErrorIs(t, err, webhook.ErrEndpointDown)
		var de *webhook.DeliveryError
		require.ErrorAs(t, err, &de)
		assert.Equal(t, []webhook.FailureKind{webhook.KindRefused, webhook.KindRefused, webhook.KindRefused}, kinds(res.Attempts),
			"three attempts, then the endpoint is down and the fourth is not sent")
		assert.EqualValues(t, 3, ep.requests.Load())
	})
}

func TestHealth_Options(t *testing.T) {
	for _, o := range []webhook.HealthOptions{{DownAfter: -1}, {ProbeInterval: -time.Second}, {MaxProbeInterval: -1}, {MaxUnanswered: -1}, {MaxUnansweredTotal: -1}} {
		_, err := webhook.NewSender(&webhook.SenderOptions{Health: &o})
		assert.Error(t, err, "%+v", o)
	}
	s, err := webhook.NewSender(nil)
	require.NoError(t, err)
	assert.Nil(t, s.Health(), "off by default")
}

// TestHealth_OneHangingPathNeverTakesDownItsOrigin pins that a
// receiver controlling one path of a shared host (a multi-tenant webhook
// platform, an integration hub) cannot take the whole origin down for every
// other tenant: a timeout is what one path's handler does, not what the host
// is. On a real TLS receiver, one tenant's path hangs past the attempt
// timeout, 20 times, 4 at once, while another tenant's deliveries go on:
// none of them may be refused with ErrEndpointDown. (In review, the first
// version of endpoint health counted those timeouts against the host.)
func TestHealth_OneHangingPathNeverTakesDownItsOrigin(t *testing.T) {
	rv := newReceiver(t)
	rv.handle = func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/evil" {
			<-r.Context().Done() // this tenant's handler never answers
			panic(http.ErrAbortHandler)
		}
		return false
	}
	// The attempt timeout leaves room for the TLS handshake on a slow,
	// loaded machine (the race detector, 2 cores, the other path's
	// deliveries sent in a loop): an attempt that times out before it
	// connects counts against the host, as it should, which is not what
	// this test is about. 5 rounds of 2 s: 10 s.
	s := newTestSender(t, rv, &webhook.SenderOptions{Retry: &webhook.RetryPolicy{}, AttemptTimeout: 2 * time.Second,
		Health: &webhook.HealthOptions{DownAfter: 3}})
	var wg sync.WaitGroup
	var timedOut atomic.Int32
	for range 4 {
		wg.Go(func() {
			for range 5 {
				res, _ := s.Send(context.Background(), rv.conn("/evil"), samplePayload())
				if len(res.Attempts) == 1 && res.Attempts[0].Kind == webhook.KindTimeout {
					timedOut.Add(1)
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var tried, refused int
	for sending := true; sending; {
		select {
		case <-done:
			sending = false
		default:
			tried++
			if _, err := s.Send(context.Background(), rv.conn("/tenant-42"), samplePayload()); errors.Is(err, webhook.ErrEndpointDown) {
				refused++
			}
		}
	}
	require.EqualValues(t, 20, timedOut.Load(), "the hanging path's deliveries all went and timed out")
	assert.Zero(t, refused, "got %d of %d deliveries to a path that answers refused with ErrEndpointDown", refused, tried)
	for _, h := range s.Health() {
		assert.True(t, h.PerURL, "a host that answers TLS is up: %v", h)
		assert.False(t, h.Down, "one delivery hanging its handler, again and again, counts once: %v", h)
	}
}

// TestHealth_FailuresSentBeforeItCameBackDoNotMarkItDownAgain
// pins that an endpoint a probe just proved up is not marked down again by
// attempts that were sent while it was dead and only now time out. With the
// defaults (down after 5, first probe after 10 s, 30 s attempts), and room
// in flight for both bursts (MaxUnanswered, MaxUnansweredTotal), a host
// that hangs gets 5 deliveries at 0 s and a burst of 5 more at 15 s; it is
// down at 30 s, comes back at 35 s, and the probe at 40 s is answered: up.
// At 45 s the burst sent at 15 s times out, and the endpoint is down again
// though every attempt sent since it came back was answered: the service
// hears down, up, down, and the next delivery is refused for 10 s more.
func TestHealth_FailuresSentBeforeItCameBackDoNotMarkItDownAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		var back atomic.Bool
		rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.URL.Host != "crm.example.com" {
				return answer(http.StatusOK), nil
			}
			if !back.Load() { // sent while the host is dead: no answer ever comes
				<-r.Context().Done()
				return nil, r.Context().Err()
			}
			return answer(http.StatusOK), nil
		})
		var ch changes
		s, err := webhook.NewSender(&webhook.SenderOptions{
			Client: &http.Client{Transport: rt},
			Retry:  &webhook.RetryPolicy{},
			Health: &webhook.HealthOptions{OnChange: ch.add, MaxUnanswered: 10, MaxUnansweredTotal: 10},
		})
		require.NoError(t, err)
		var wg sync.WaitGroup
		burst := func() {
			for range 5 {
				wg.Go(func() { s.Send(context.Background(), fakeConn, samplePayload()) })
			}
		}
		burst()
		time.Sleep(30 * time.Millisecond)
		// Another host answers meanwhile: the Sender is not stalled, so the
		// burst's others go once its first has been silent 50 ms.
		_, err = s.Send(context.Background(), webhook.Connection{Name: "other", URL: "https://other.example.com/hooks", Secret: testSecret}, samplePayload())
		require.NoError(t, err)
		time.Sleep(15*time.Second - 30*time.Millisecond)
		burst()
		time.Sleep(20 * time.Second) // 35 s: down since 30 s; the host comes back
		back.Store(true)
		// 40.1 s: the probe is due (the first burst's others went once its
		// first had been silent 50 ms: down at 30.05 s).
		time.Sleep(5*time.Second + 100*time.Millisecond)
		_, err = s.Send(context.Background(), fakeConn, samplePayload())
		require.NoError(t, err, "the probe is answered")
		time.Sleep(5 * time.Second) // 45.1 s: the burst sent at 15 s timed out
		wg.Wait()
		_, err = s.Send(context.Background(), fakeConn, samplePayload())
		assert.NoError(t, err, "at %v, the endpoint answering since 35 s", time.Since(t0))
		var seq []bool
		for _, c := range ch.settled() {
			seq = append(seq, c.Down)
		}
		assert.Equal(t, []bool{true, false}, seq, "OnChange: down, then up, once")
	})
}

// TestHealth_SinceIsWhenTheRunOfFailuresBegan pins Since, "when
// its run of failures began": a failure recorded while OnChange is still
// reporting that the endpoint came back starts a new run, whose Since is
// that failure's time. The entry is kept while it is reported, with the
// Since of the run before, and the next run inherits it: the service is
// told that the endpoint has been failing since before it came back.
func TestHealth_SinceIsWhenTheRunOfFailuresBegan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		ep := &flakyEndpoint{}
		var ch changes
		inUp, release := make(chan struct{}), make(chan struct{})
		s, err := webhook.NewSender(&webhook.SenderOptions{
			Client:         &http.Client{Transport: ep},
			Retry:          &webhook.RetryPolicy{},
			AttemptTimeout: 5 * time.Second,
			Health: &webhook.HealthOptions{DownAfter: 3, ProbeInterval: 10 * time.Second, OnChange: func(_ context.Context, h webhook.EndpointHealth) {
				ch.add(context.Background(), h)
				if !h.Down {
					close(inUp)
					<-release // the service writes it down, slowly
				}
			}},
		})
		require.NoError(t, err)
		send := func() error {
			_, err := s.Send(context.Background(), fakeConn, samplePayload())
			return err
		}
		for range 3 {
			send()
		}
		time.Sleep(10 * time.Second)
		ep.set(http.StatusOK, false)
		done := make(chan error)
		go func() { done <- send() }() // the probe: up, reported slowly
		<-inUp
		ep.set(0, false)
		time.Sleep(10 * time.Second)
		rerun := time.Now() // a new run of failures begins
		require.ErrorIs(t, send(), syscall.ECONNREFUSED)
		close(release)
		require.NoError(t, <-done)
		time.Sleep(time.Second)
		send()
		send()
		got := ch.settled()
		require.Len(t, got, 3, "down, up, down")
		require.True(t, got[2].Down)
		assert.Equal(t, rerun.Sub(t0), got[2].Since.Sub(t0), "down again: Since, from t0; it was up from 10 s to 20 s")
	})
}

// TestHealth_EveryChangeIsReportedOnceInOrder pins OnChange's "once per
// change": a change queued while another goroutine is reporting the
// endpoint's changes must be reported, by that goroutine or by its own.
// The reporting goroutine finds nothing left, unlocks, and only then, in a
// deferred function that locks again, clears its reporting mark: a change
// recorded in between is queued behind a reporter that has already left,
// and is reported late (with the next change) or never (the entry of an
// endpoint that is up is dropped with it). Here an endpoint flips between
// refused and answered under 8 goroutines; the Sender logs each change as
// it queues it, and OnChange must see as many.
func TestHealth_EveryChangeIsReportedOnceInOrder(t *testing.T) {
	var flip atomic.Int64
	rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if flip.Add(1)%2 == 0 {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		}
		return answer(http.StatusOK), nil
	})
	var logged atomic.Int64
	var mu sync.Mutex
	var reported, repeated int // changes reported; of them, the same state twice in a row
	last := false
	more := make(chan struct{}, 1) // a token after each report
	s, err := webhook.NewSender(&webhook.SenderOptions{
		Client: &http.Client{Transport: rt},
		Retry:  &webhook.RetryPolicy{},
		Logger: slog.New(changeCounter{&logged}),
		Health: &webhook.HealthOptions{DownAfter: 1, ProbeInterval: time.Nanosecond, MaxProbeInterval: time.Nanosecond,
			OnChange: func(_ context.Context, h webhook.EndpointHealth) {
				mu.Lock()
				defer mu.Unlock()
				reported++
				if h.Down == last {
					repeated++
				}
				last = h.Down
				select {
				case more <- struct{}{}:
				default:
				}
			}},
	})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 5000 {
				s.Send(context.Background(), fakeConn, samplePayload())
			}
		})
	}
	wg.Wait()
	// OnChange runs off the attempt path: wait for it to catch up with the
	// changes logged, which are final now.
	deadline := time.After(10 * time.Second)
	for caughtUp := false; !caughtUp; {
		mu.Lock()
		caughtUp = int64(reported) >= logged.Load()
		mu.Unlock()
		if !caughtUp {
			select {
			case <-more:
			case <-deadline:
				caughtUp = true
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	assert.EqualValues(t, logged.Load(), reported, "changes logged, and reported through OnChange")
	assert.Zero(t, repeated, "reports of the state already reported (a change between them was lost)")
}

// changeCounter is a slog.Handler counting the changes the Sender logs.
type changeCounter struct{ n *atomic.Int64 }

func (h changeCounter) Enabled(context.Context, slog.Level) bool { return true }

func (h changeCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "webhook: endpoint down" || r.Message == "webhook: endpoint up" {
		h.n.Add(1)
	}
	return nil
}

func (h changeCounter) WithAttrs([]slog.Attr) slog.Handler { return h }

func (h changeCounter) WithGroup(string) slog.Handler { return h }

// TestHealth_PanickingOnChangeStillReportsLaterChanges pins
// what a panic in OnChange costs: that report, not the ones queued behind
// it. OnChange reporting that the endpoint went down panics (a nil map, a
// closed channel in the service's code) while the probe has already found
// it up and queued that change behind it; the reporter's deferred clean-up
// clears its mark and drops the endpoint, which is well, with the up change
// still queued: the service never hears that it came back, and shows it
// down for good.
func TestHealth_PanickingOnChangeStillReportsLaterChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ep := &flakyEndpoint{}
		var ch changes
		inDown, release := make(chan struct{}), make(chan struct{})
		s, err := webhook.NewSender(&webhook.SenderOptions{
			Client:         &http.Client{Transport: ep},
			Retry:          &webhook.RetryPolicy{},
			AttemptTimeout: 5 * time.Second,
			Health: &webhook.HealthOptions{DownAfter: 1, ProbeInterval: 10 * time.Second, OnChange: func(_ context.Context, h webhook.EndpointHealth) {
				ch.add(context.Background(), h)
				if h.Down {
					close(inDown)
					<-release
					panic("the service's bug")
				}
			}},
		})
		require.NoError(t, err)
		panicked := make(chan any, 1)
		go func() {
			defer func() { panicked <- recover() }()
			s.Send(context.Background(), fakeConn, samplePayload()) // refused: down, reported, panics
		}()
		<-inDown
		time.Sleep(10 * time.Second)
		ep.set(http.StatusOK, false)
		_, err = s.Send(context.Background(), fakeConn, samplePayload()) // the probe: up
		require.NoError(t, err)
		close(release)
		<-panicked
		synctest.Wait()
		got := ch.settled()
		require.NotEmpty(t, got)
		assert.False(t, got[len(got)-1].Down, "the last change OnChange saw: the endpoint is up (got %d change(s))", len(got))
		assert.Empty(t, s.Health())
	})
}

// TestHealth_ALateProbeNeverEndsTheNextProbesLease pins "one probe in
// flight" once a probe has outlived its lease. A probe whose attempt does
// not return within the lease (the attempt timeout and a second: here a
// client whose RoundTripper does not watch the request's context) is taken
// for lost, and the next probe goes: so far as designed. But when the lost
// probe's outcome does come, it is recorded as the probe's, clearing the
// lease of the probe now in flight; the next probe goes when the doubled
// interval has passed, while that one is still in flight: two probes at
// once from one Sender, by the book.
func TestHealth_ALateProbeNeverEndsTheNextProbesLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stuck := make(chan struct{})
		var requests, inFlight, peak atomic.Int32
		rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			switch requests.Add(1) {
			case 1: // refused: down
			case 2: // the first probe, in a RoundTripper that ignores the context
				<-stuck
			default: // a host that hangs until the attempt times out
				n := inFlight.Add(1)
				defer inFlight.Add(-1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				<-r.Context().Done()
				return nil, r.Context().Err()
			}
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		})
		s, err := webhook.NewSender(&webhook.SenderOptions{
			Client: &http.Client{Transport: rt},
			Retry:  &webhook.RetryPolicy{},
			Health: &webhook.HealthOptions{DownAfter: 1}, // 30 s attempts, probes after 10 s, 20 s, ...
		})
		require.NoError(t, err)
		send := func() { s.Send(context.Background(), fakeConn, samplePayload()) }
		send() // 0 s: down
		var wg sync.WaitGroup
		time.Sleep(10 * time.Second)
		wg.Go(send) // 10 s: the first probe, stuck
		synctest.Wait()
		// Deliveries keep coming, one a second, for two minutes: each is
		// refused at once unless it is let through as a probe.
		for range 120 {
			time.Sleep(time.Second)
			if requests.Load() == 3 && inFlight.Load() == 1 && stuck != nil {
				close(stuck) // the second probe is in flight: the first one's outcome comes
				stuck = nil
			}
			wg.Go(send)
		}
		wg.Wait()
		require.Nil(t, stuck, "the second probe went")
		assert.EqualValues(t, 1, peak.Load(), "probes in flight at once (the lost one aside)")
	})
}

// TestHealth_ForgetsEndpointsNoLongerSentTo pins the bound on what
// endpoint health keeps: it keeps every origin that failed without an
// answer since, forever, however long ago, whether or not anything is sent
// to it again. The origins are customers' input: a customer who changes a
// connection's URL to a fresh host name that does not resolve, again and
// again (or a service whose customers mistype, then fix, their URLs), grows
// the Sender's memory and its Health() by one endpoint each, for the life
// of the process; a dashboard or a metric of the endpoints failing or down
// counts them all, a week later. Here 20,000 hosts fail once each and are
// never sent to again; a day later all of them are still kept.
func TestHealth_ForgetsEndpointsNoLongerSentTo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return nil, &net.DNSError{Err: "no such host", Name: r.URL.Hostname(), IsNotFound: true}
		})
		s, err := webhook.NewSender(&webhook.SenderOptions{
			Client: &http.Client{Transport: rt},
			Retry:  &webhook.RetryPolicy{},
			Health: &webhook.HealthOptions{}, // the defaults: down after 5
		})
		require.NoError(t, err)
		const hosts = 20000
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		c := fakeConn
		for i := range hosts {
			c.URL = "https://h" + strconv.Itoa(i) + ".customer.example/hooks"
			_, err := s.Send(context.Background(), c, samplePayload())
			require.Error(t, err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		time.Sleep(24 * time.Hour) // nothing is sent to any of them since
		kept := len(s.Health())
		assert.Zero(t, kept, "endpoints kept a day after their one failure, none down, nothing sent to them since (%d bytes of heap each)",
			int64(after.HeapAlloc-before.HeapAlloc)/hosts)
	})
}

// TestHealth_SpellingsOfOneOriginShareItsFate pins "an endpoint is
// the URL's origin" for the spellings that name one host and port: the
// absolute form of a host name (a final dot: the same DNS name, the same
// TLS name, as Go's client strips it), an IPv6 address written in full or
// with another zero run, an IPv4 address written as an IPv4-mapped IPv6
// one (which net dials as that IPv4 address). Each is another endpoint to
// endpoint health: while the origin is down, the other spelling dials it.
func TestHealth_SpellingsOfOneOriginShareItsFate(t *testing.T) {
	for _, tc := range []struct{ name, url, alias string }{
		{"default port", "https://crm.example.com/hooks", "https://crm.example.com:443/other"}, // holds
		{"case", "https://[2001:db8::1]/hooks", "https://[2001:DB8::1]/other"},                 // holds
		{"final dot", "https://crm.example.com/hooks", "https://crm.example.com./other"},
		{"IPv6 in full", "https://[2001:db8::1]/hooks", "https://[2001:db8:0:0:0:0:0:1]/other"},
		{"IPv4-mapped", "https://203.0.113.7/hooks", "https://[::ffff:203.0.113.7]/other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ep := &flakyEndpoint{} // refuses every connection
				var ch changes
				s := healthSender(t, ep, &ch, nil)
				c, alias := fakeConn, fakeConn
				c.URL, alias.URL = tc.url, tc.alias
				for range 3 {
					s.Send(context.Background(), c, samplePayload())
				}
				require.Len(t, ch.settled(), 1, "down")
				_, err := s.Send(context.Background(), alias, samplePayload())
				assert.ErrorIs(t, err, webhook.ErrEndpointDown, "%s while %s is down", tc.alias, tc.url)
				assert.EqualValues(t, 3, ep.requests.Load(), "requests to the dead host")
			})
		})
	}
}

// TestHealth_SendTestReachesAnEndpointThatIsDown pins the dashboard's
// "Send Test" with endpoint health on. The customer whose endpoint is down
// fixes it and presses Send Test: SendTest is documented as "one attempt
// whose Diagnosis() says what to fix", and ExampleSender_SendTest reads
// res.Attempts[0]. With the endpoint down it sends nothing and returns no
// attempt at all (a dashboard written after the example panics with an
// index out of range), tells the customer nothing of the fix, and the
// endpoint stays down until a probe, up to MaxProbeInterval away.
func TestHealth_SendTestReachesAnEndpointThatIsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ep := &flakyEndpoint{}
		var ch changes
		s := healthSender(t, ep, &ch, nil)
		for range 3 {
			s.Send(context.Background(), fakeConn, samplePayload())
		}
		require.Len(t, ch.settled(), 1, "down")
		ep.set(http.StatusOK, false) // the customer fixes the endpoint, and presses Send Test
		res, err := s.SendTest(context.Background(), fakeConn)
		require.Len(t, res.Attempts, 1, "SendTest's one attempt (err: %v)", err)
		assert.True(t, res.Attempts[0].OK(), res.Attempts[0].Diagnosis())
		assert.Empty(t, s.Health(), "the endpoint answered: up")
	})
}

// TestHealth_OnePoisonDeliveryNeverTakesDownTheOrigin is the same flaw
// without a hostile receiver, on the wire: a receiver whose handler panics
// on one payload (net/http aborts the connection: kind reset) and answers
// every other. With the defaults (down after 5) and a policy of 5
// attempts, that one delivery, retried, marks the origin down by itself:
// every other delivery to the customer fails with ErrEndpointDown, sending
// nothing, though the server is up and answers them.
func TestHealth_OnePoisonDeliveryNeverTakesDownTheOrigin(t *testing.T) {
	rv := newReceiver(t)
	rv.handle = func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/orders" {
			panic("a bug in the receiver's handler for this event kind")
		}
		return false
	}
	s := newTestSender(t, rv, &webhook.SenderOptions{Retry: shortPolicy(4), Health: &webhook.HealthOptions{}})
	res, err := s.Send(context.Background(), rv.conn("/orders"), samplePayload())
	require.Error(t, err)
	require.Equal(t, webhook.KindReset, res.Attempts[0].Kind)
	_, err = s.Send(context.Background(), rv.conn("/users"), samplePayload())
	assert.NoError(t, err, "a delivery the receiver answers, right after (%d deliveries of the poison one's %d attempts reached it)",
		len(rv.deliveries()), len(res.Attempts))
}

// Endpoint health keeps state for the endpoints that need watching (failing,
// or with attempts in flight), not for every URL it has seen: deliveries to
// 100,000 URLs that answer leave at most 100 bytes of heap per URL, and
// nothing to report. In a synctest bubble, so that no sweep runs meanwhile.
func TestHealth_MemoryFollowsTheEndpointsThatNeedWatching(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			httptrace.ContextClientTrace(r.Context()).GotConn(httptrace.GotConnInfo{})
			return answer(http.StatusOK), nil
		})
		s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: rt}, Health: &webhook.HealthOptions{}})
		require.NoError(t, err)
		urls := 100_000
		if raceEnabled {
			urls = 10_000
		}
		p := samplePayload()
		c := fakeConn
		before := liveHeap()
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				c := c
				for i := w; i < urls; i += 8 {
					c.URL = "https://h" + strconv.Itoa(i%1000) + ".customer.example/hooks/" + strconv.Itoa(i)
					_, err := s.Send(context.Background(), c, p)
					assert.NoError(t, err)
				}
			})
		}
		wg.Wait()
		perURL := (int64(liveHeap()) - int64(before)) / int64(urls)
		assert.LessOrEqual(t, perURL, int64(100), "bytes of heap per URL delivered to")
		assert.Empty(t, s.Health())
		t.Logf("%d URLs: %d bytes of heap each", urls, perURL)
	})
}

// For a queue (Sender.Attempt), the probe that finds its endpoint still
// down is a wait for the endpoint, as a refusal to send is: Retry, until
// the next probe, whatever the policy. Send's probe stays an attempt of its
// policy.
func TestHealth_AQueuesProbeThatFindsItDownIsAWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ep := &flakyEndpoint{}
		var ch changes
		s := healthSender(t, ep, &ch, nil) // no retries
		body, err := json.Marshal(samplePayload())
		require.NoError(t, err)
		for range 3 {
			a := s.Attempt(context.Background(), fakeConn, webhook.EventUserIdentified, body, 1)
			require.Equal(t, webhook.KindRefused, a.Kind)
			assert.False(t, a.Retry, "the policy gives up")
		}
		time.Sleep(10 * time.Second) // the probe is due
		a := s.Attempt(context.Background(), fakeConn, webhook.EventUserIdentified, body, 1)
		require.Equal(t, webhook.KindRefused, a.Kind)
		assert.True(t, a.Probe)
		assert.True(t, a.Retry, "a wait for the endpoint")
		assert.GreaterOrEqual(t, a.RetryIn, 20*time.Second, "until the next probe, 20 s on")

		time.Sleep(40 * time.Second)
		res, err := s.Send(context.Background(), fakeConn, samplePayload())
		require.ErrorIs(t, err, syscall.ECONNREFUSED)
		require.Len(t, res.Attempts, 1)
		assert.True(t, res.Attempts[0].Probe)
		assert.False(t, res.Attempts[0].Retry, "Send's probe is an attempt of its policy")
	})
}

// memoryMarks is a HealthMarks in memory, as a test sees a shared store:
// keyed as riverhook's table is, recorded by the bubble's clock.
type memoryMarks struct {
	mu    sync.Mutex
	marks map[string]recordedMark
	fail  error
}

type recordedMark struct {
	h  webhook.EndpointHealth
	at time.Time
}

func (m *memoryMarks) Mark(_ context.Context, h webhook.EndpointHealth) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	if m.marks == nil {
		m.marks = map[string]recordedMark{}
	}
	key := h.Endpoint + "|" + h.URLKey
	if !h.PerURL {
		key = h.Endpoint + "|"
	}
	if old, ok := m.marks[key]; ok && old.h.Changed.After(h.Changed) {
		return nil
	}
	m.marks[key] = recordedMark{h, time.Now()}
	return nil
}

func (m *memoryMarks) Since(_ context.Context, after time.Time) ([]webhook.EndpointHealth, time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return nil, after, m.fail
	}
	var out []webhook.EndpointHealth
	next := after
	for _, r := range m.marks {
		if !r.at.Before(after) {
			out = append(out, r.h)
			if r.at.After(next) {
				next = r.at
			}
		}
	}
	return out, next, nil
}

// fleetSender returns a Sender on ep sharing marks: down after 3 failures,
// probes after 10 s, following the marks every second.
func fleetSender(t *testing.T, ep http.RoundTripper, marks webhook.HealthMarks) *webhook.Sender {
	t.Helper()
	s, err := webhook.NewSender(&webhook.SenderOptions{
		Client:         &http.Client{Transport: ep},
		Retry:          &webhook.RetryPolicy{},
		AttemptTimeout: 5 * time.Second,
		Health:         &webhook.HealthOptions{DownAfter: 3, ProbeInterval: 10 * time.Second, Marks: marks},
	})
	require.NoError(t, err)
	return s
}

// TestHealth_MarksHoldTheFleet runs two processes' Senders on one store of
// marks: the endpoint one finds down is held back by the other within
// FollowEvery, without a dial, until the mark's probe; a process starting
// up starts from the marks; the one that finds it up again clears it for
// all.
func TestHealth_MarksHoldTheFleet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		marks := &memoryMarks{}
		epA, epB := &flakyEndpoint{}, &flakyEndpoint{status: http.StatusOK} // refused for A only
		a, b := fleetSender(t, epA, marks), fleetSender(t, epB, marks)
		ctx := context.Background()
		send := func(s *webhook.Sender) error {
			_, err := s.Send(ctx, fakeConn, samplePayload())
			return err
		}
		for range 3 {
			require.ErrorIs(t, send(a), syscall.ECONNREFUSED)
		}
		require.NoError(t, a.Flush(ctx)) // A's mark is written
		require.ErrorIs(t, send(a), webhook.ErrEndpointDown)

		time.Sleep(webhook.DefaultFollowEvery)
		other := fakeConn
		other.URL = "https://other.example.com/hooks"
		_, err := b.Send(ctx, other, samplePayload()) // B reads the marks as it admits this one
		require.NoError(t, err)
		require.NoError(t, b.Flush(ctx))
		before := epB.requests.Load()
		require.ErrorIs(t, send(b), webhook.ErrEndpointDown, "B holds back what A found down")
		assert.Equal(t, before, epB.requests.Load(), "without a dial")
		require.Len(t, b.Health(), 1)
		assert.True(t, b.Health()[0].Down)

		c := fleetSender(t, &flakyEndpoint{status: http.StatusOK}, marks) // a process starting up
		require.NoError(t, c.Flush(ctx))
		require.ErrorIs(t, send(c), webhook.ErrEndpointDown, "a new process starts from the marks")

		// B's probe, when the mark's is due, finds it up: every process
		// follows within a second.
		time.Sleep(10 * time.Second)
		require.NoError(t, send(b), "B's probe answers")
		require.NoError(t, b.Flush(ctx))
		time.Sleep(webhook.DefaultFollowEvery)
		_, err = a.Send(ctx, other, samplePayload()) // refused: A's endpoint refuses every host
		require.ErrorIs(t, err, syscall.ECONNREFUSED)
		require.NoError(t, a.Flush(ctx))
		for _, h := range a.Health() {
			assert.NotEqual(t, "https://crm.example.com:443", h.Endpoint, "A followed B's mark up, before a probe of its own")
		}
		epA.set(http.StatusOK, false)
		require.NoError(t, send(a))
	})
}

// TestHealth_MarksThatFailAreLoggedNotFatal: a store that cannot be reached
// leaves each Sender to what it knows.
func TestHealth_MarksThatFailAreLoggedNotFatal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		marks := &memoryMarks{fail: errors.New("store: connection refused")}
		s := fleetSender(t, &flakyEndpoint{}, marks)
		for range 3 {
			_, err := s.Send(context.Background(), fakeConn, samplePayload())
			require.ErrorIs(t, err, syscall.ECONNREFUSED)
		}
		require.NoError(t, s.Flush(context.Background()))
		_, err := s.Send(context.Background(), fakeConn, samplePayload())
		assert.ErrorIs(t, err, webhook.ErrEndpointDown, "down by its own count")
		_, err = webhook.NewSender(&webhook.SenderOptions{Health: &webhook.HealthOptions{Marks: marks, FollowEvery: -1}})
		assert.Error(t, err)
	})
}

// TestHealth_AFollowedMarkIsAppliedOnce: another process's clock ahead (by
// 30 s here) records a down mark that this process's up, by its own clock
// earlier, cannot replace. This process finds the endpoint up: the stale
// mark, read again at every follow, must not take it down again each time
// (an OnChange "up" and a probe per second, for as long as the skew lasts).
// The same holds for an isolated URL, whose entry is forgotten once it
// answers and made again for the next delivery.
func TestHealth_AFollowedMarkIsAppliedOnce(t *testing.T) {
	for _, perURL := range []bool{false, true} {
		t.Run(map[bool]string{false: "origin", true: "url"}[perURL], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { testMarkAppliedOnce(t, perURL) })
		})
	}
}

func testMarkAppliedOnce(t *testing.T, perURL bool) {
	marks := &memoryMarks{}
	now := time.Now()
	ctx := context.Background()
	stale := webhook.EndpointHealth{Endpoint: fakeConn.Endpoint(), Down: true, Since: now.Add(30 * time.Second),
		Changed: now.Add(30 * time.Second), NextProbe: now, Failures: 3} // by a clock 30 s ahead
	if perURL {
		stale.Endpoint, stale.PerURL, stale.URLKey = fakeConn.Endpoint()+"/…", true, fakeConn.URLKey()
	}
	require.NoError(t, marks.Mark(ctx, stale))
	var mu sync.Mutex
	var ups int
	s, err := webhook.NewSender(&webhook.SenderOptions{
		Client:         &http.Client{Transport: &flakyEndpoint{status: http.StatusOK}},
		Retry:          &webhook.RetryPolicy{},
		AttemptTimeout: 5 * time.Second,
		Health: &webhook.HealthOptions{DownAfter: 3, ProbeInterval: 10 * time.Second, Marks: marks,
			OnChange: func(_ context.Context, h webhook.EndpointHealth) {
				if !h.Down {
					mu.Lock()
					ups++
					mu.Unlock()
				}
			}},
	})
	require.NoError(t, err)
	require.NoError(t, s.Flush(ctx)) // started from the mark
	var refused int
	for range 10 {
		if _, err := s.Send(ctx, fakeConn, samplePayload()); errors.Is(err, webhook.ErrEndpointDown) {
			refused++
		} else {
			require.NoError(t, err)
		}
		require.NoError(t, s.Flush(ctx))
		time.Sleep(2 * webhook.DefaultFollowEvery)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.LessOrEqual(t, ups, 1, "the endpoint came up once")
	assert.Zero(t, refused)
}

// TestHealth_AFollowedMarkHoldsBackAtMostTheLongestProbeInterval: a mark
// whose next probe is far (its process's clock an hour ahead, and that
// process gone) holds this process back no longer than its own
// MaxProbeInterval: then it probes, and finds the endpoint up.
func TestHealth_AFollowedMarkHoldsBackAtMostTheLongestProbeInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		marks := &memoryMarks{}
		now := time.Now()
		ctx := context.Background()
		ahead := now.Add(time.Hour)
		require.NoError(t, marks.Mark(ctx, webhook.EndpointHealth{Endpoint: fakeConn.Endpoint(), Down: true, Since: ahead,
			Changed: ahead, NextProbe: ahead.Add(10 * time.Second), Failures: 3}))
		s, err := webhook.NewSender(&webhook.SenderOptions{
			Client:         &http.Client{Transport: &flakyEndpoint{status: http.StatusOK}},
			Retry:          &webhook.RetryPolicy{},
			AttemptTimeout: 5 * time.Second,
			Health:         &webhook.HealthOptions{DownAfter: 3, ProbeInterval: 10 * time.Second, MaxProbeInterval: time.Minute, Marks: marks},
		})
		require.NoError(t, err)
		require.NoError(t, s.Flush(ctx)) // started from the mark
		_, err = s.Send(ctx, fakeConn, samplePayload())
		require.ErrorIs(t, err, webhook.ErrEndpointDown, "held back by the mark")
		time.Sleep(time.Minute + time.Second)
		_, err = s.Send(ctx, fakeConn, samplePayload())
		assert.NoError(t, err, "probed within MaxProbeInterval")
		require.NoError(t, s.Flush(ctx))
	})
}

// TestHealth_ASendTestThatAnswersClearsTheFleetsMark: the API tier's
// Sender makes only Send Tests. An endpoint the workers marked down after
// it started, once fixed, answers the customer's Send Test: the mark is
// cleared for the fleet (and the console), not left down until a worker
// probes, which with nothing waiting is never.
func TestHealth_ASendTestThatAnswersClearsTheFleetsMark(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		marks := &memoryMarks{}
		ctx := context.Background()
		epA := &flakyEndpoint{} // refused, for the worker
		api := fleetSender(t, &flakyEndpoint{status: http.StatusOK}, marks)
		require.NoError(t, api.Flush(ctx))
		worker := fleetSender(t, epA, marks)
		for range 3 {
			_, err := worker.Send(ctx, fakeConn, samplePayload())
			require.ErrorIs(t, err, syscall.ECONNREFUSED)
		}
		require.NoError(t, worker.Flush(ctx)) // the mark: down
		time.Sleep(2 * webhook.DefaultFollowEvery)

		for range 2 { // the customer, having fixed the endpoint, tests it
			res, err := api.SendTest(ctx, fakeConn)
			require.NoError(t, err)
			require.True(t, res.Attempts[0].OK())
			require.NoError(t, api.Flush(ctx))
		}
		got, _, err := marks.Since(ctx, time.Time{})
		require.NoError(t, err)
		require.Len(t, got, 1)
		assert.False(t, got[0].Down, "the endpoint answered the Send Test: up for the fleet")
	})
}

// slowMarks is a store of marks whose reads wait for release.
type slowMarks struct {
	*memoryMarks
	release chan struct{}
}

func (m *slowMarks) Since(ctx context.Context, after time.Time) ([]webhook.EndpointHealth, time.Time, error) {
	<-m.release
	return m.memoryMarks.Since(ctx, after)
}

// TestHealth_ANewProcessStartsFromTheMarksBeforeItsFirstAttempt: a Sender
// made while another process's down mark is in the store holds the
// endpoint back from its very first attempt, however slow the store's
// first read: the attempt waits for it, and never dials.
func TestHealth_ANewProcessStartsFromTheMarksBeforeItsFirstAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		marks := &slowMarks{memoryMarks: &memoryMarks{}, release: make(chan struct{})}
		now := time.Now()
		ctx := context.Background()
		require.NoError(t, marks.Mark(ctx, webhook.EndpointHealth{Endpoint: fakeConn.Endpoint(), Down: true, Since: now,
			Changed: now, NextProbe: now.Add(time.Minute), Failures: 3}))
		ep := &flakyEndpoint{status: http.StatusOK}
		s := fleetSender(t, ep, marks)
		errc := make(chan error, 1)
		go func() {
			_, err := s.Send(ctx, fakeConn, samplePayload())
			errc <- err
		}()
		synctest.Wait()
		assert.Zero(t, ep.requests.Load(), "no dial while the marks are read")
		close(marks.release)
		require.ErrorIs(t, <-errc, webhook.ErrEndpointDown, "the first attempt holds back what another process found down")
		assert.Zero(t, ep.requests.Load())
	})
}

// deafMarks is a store of marks whose reads ignore their context and wait
// for release: a store hung on a lock, or written without a deadline.
type deafMarks struct {
	*memoryMarks
	release chan struct{}
}

func (m *deafMarks) Since(ctx context.Context, after time.Time) ([]webhook.EndpointHealth, time.Time, error) {
	<-m.release
	return m.memoryMarks.Since(context.WithoutCancel(ctx), after)
}

// TestHealth_TheFirstAttemptWaitsForTheMarksAtMostOnChangeTimeout: a
// Sender's first attempts wait for its first read of the marks at most
// OnChangeTimeout, whatever the store does: a store that hangs, ignoring
// its context, delays a Send with a context that never ends by that much,
// and the attempt goes out with what the Sender knows.
func TestHealth_TheFirstAttemptWaitsForTheMarksAtMostOnChangeTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		marks := &deafMarks{memoryMarks: &memoryMarks{}, release: make(chan struct{})}
		defer close(marks.release)
		ep := &flakyEndpoint{status: http.StatusOK}
		s := fleetSender(t, ep, marks)
		start := time.Now()
		errc := make(chan error, 1)
		go func() {
			_, err := s.Send(context.Background(), fakeConn, samplePayload())
			errc <- err
		}()
		time.Sleep(webhook.OnChangeTimeout) // the fake clock: the bound of the first read has passed
		synctest.Wait()
		select {
		case err := <-errc:
			require.NoError(t, err)
			assert.Equal(t, webhook.OnChangeTimeout, time.Since(start), "the Send waited for the read that long, no more")
			assert.Equal(t, int32(1), ep.requests.Load())
		default:
			t.Errorf("the Send still waits for a read of the marks that never ends, %v after it began", time.Since(start))
			marks.release <- struct{}{} // let the read and the Send end
			<-errc
		}
	})
}

// marks is a service's table of down marks, keyed as it stores them:
// by Connection.Endpoint for an origin, by Connection.URLKey for a URL.
type marks struct {
	mu      sync.Mutex
	down    map[string]bool
	at      map[string]time.Time // when each mark was written: EndpointHealth.Changed
	changed chan struct{}        // a token after each change, for waitFor
}

func (m *marks) onChange(_ context.Context, h webhook.EndpointHealth) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down == nil {
		m.down, m.at = map[string]bool{}, map[string]time.Time{}
	}
	set := func(key string, down bool) {
		m.down[key], m.at[key] = down, h.Changed
	}
	defer func() {
		select {
		case m.changed <- struct{}{}:
		default:
		}
	}()
	switch {
	case h.PerURL:
		set(h.URLKey, h.Down)
	case h.Confirmed:
		// It clears only a mark written before the answer: another
		// process's report may arrive after a later one of ours.
		for _, key := range []string{h.Endpoint, h.URLKey} {
			if m.down[key] && m.at[key].Before(h.Changed) {
				set(key, false)
			}
		}
	default:
		set(h.Endpoint, h.Down)
	}
}

// isDown returns key's mark once the synctest bubble has settled: OnChange
// runs on a goroutine of its own.
func (m *marks) isDown(key string) bool {
	synctest.Wait()
	return m.state(key)
}

func (m *marks) state(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.down[key]
}

// waitFor waits, out of a bubble, for key's mark to be down; it fails the
// test after 30 s.
func (m *marks) waitFor(t *testing.T, key string, down bool) {
	t.Helper()
	deadline := time.After(30 * time.Second) // the wait is not what is tested
	for m.state(key) != down {
		select {
		case <-m.changed:
		case <-deadline:
			t.Fatalf("%s's mark is not down=%v after 30 s", key, down)
		}
	}
}

// A down mark written by a process that then dies clears once another
// process, confirming the endpoints it reaches every ConfirmUpEvery,
// reaches it: whether that process had reached it before the mark or not.
func TestHealth_AMarkLeftByADeadProcessClearsOnceAnotherReachesTheEndpoint(t *testing.T) {
	for _, seenBefore := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			var table marks
			ep := &flakyEndpoint{status: http.StatusOK}
			sender := func() *webhook.Sender {
				s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: ep}, Retry: &webhook.RetryPolicy{},
					Health: &webhook.HealthOptions{DownAfter: 2, ConfirmUpEvery: 5 * time.Minute, OnChange: table.onChange}})
				require.NoError(t, err)
				return s
			}
			a, b := sender(), sender()
			if seenBefore {
				_, err := b.Send(context.Background(), fakeConn, samplePayload())
				require.NoError(t, err)
			}
			ep.set(0, false) // refused
			for range 2 {
				a.Send(context.Background(), fakeConn, samplePayload())
			}
			require.True(t, table.isDown(fakeConn.Endpoint()), "A marked it down")
			// A is killed now: it never reports the endpoint up.

			time.Sleep(time.Second) // on the bubble's clock
			ep.set(http.StatusOK, false)
			_, err := b.Send(context.Background(), fakeConn, samplePayload())
			require.NoError(t, err)
			if seenBefore {
				assert.True(t, table.isDown(fakeConn.Endpoint()), "B confirmed it up less than ConfirmUpEvery ago")
				time.Sleep(5 * time.Minute)
				_, err = b.Send(context.Background(), fakeConn, samplePayload())
				require.NoError(t, err)
			}
			assert.False(t, table.isDown(fakeConn.Endpoint()), "B's answer cleared A's mark (seen before: %v)", seenBefore)
		})
	}
}

// A URL isolated by a process that died is cleared by another's answer
// from that URL.
func TestHealth_AnIsolatedURLsMarkClearsOnceAnotherProcessReachesIt(t *testing.T) {
	var hang atomic.Bool
	hang.Store(true)
	srv := webhooktest.NewServer(testSecret, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hang.Load() {
			<-r.Context().Done()
		}
	})})
	defer srv.Close()
	table := marks{changed: make(chan struct{}, 1)}
	sender := func() *webhook.Sender {
		// Long enough for a TLS handshake under the race detector on a
		// slow, loaded machine (CI once took more than a second): an
		// attempt cut before it connected counts against the origin, not
		// the URL. The two hanging deliveries cost 10 s.
		return srv.Sender(&webhook.SenderOptions{Retry: &webhook.RetryPolicy{}, AttemptTimeout: 5 * time.Second,
			Health: &webhook.HealthOptions{DownAfter: 2, ConfirmUpEvery: time.Minute, OnChange: table.onChange}})
	}
	a, b := sender(), sender()
	conn := srv.Connection()
	conn.URL += "/tenant-7"
	for i := range 2 {
		p := samplePayload()
		p.User.ID = fmt.Sprintf("usr_%d", i) // two deliveries: a URL's failures count once per delivery
		a.Send(context.Background(), conn, p)
	}
	table.waitFor(t, conn.URLKey(), true)
	assert.False(t, table.state(conn.Endpoint()), "not its origin")

	hang.Store(false)
	_, err := b.Send(context.Background(), conn, samplePayload())
	require.NoError(t, err)
	table.waitFor(t, conn.URLKey(), false)
}

func TestConnection_EndpointAndURLKey(t *testing.T) {
	c := webhook.Connection{URL: "https://Hooks.Example.COM./in/tok_123"}
	assert.Equal(t, "https://hooks.example.com:443", c.Endpoint())
	c.URL = "https://hooks.example.com:8443/in"
	assert.Equal(t, "https://hooks.example.com:8443", c.Endpoint())
	c.URL = "http://hooks.example.com/in"
	assert.Empty(t, c.Endpoint(), "not a valid URL")
	c.URL = "https://hooks.example.com/in/tok_123"
	assert.Len(t, c.URLKey(), 32)
	assert.NotContains(t, c.URLKey(), "tok_123")
	other := c
	other.URL += "x"
	assert.NotEqual(t, c.URLKey(), other.URLKey())
}

// Flush waits for the reports an attempt started: after it, OnChange has
// seen the endpoint go down, whatever the scheduler did.
func TestSender_FlushWaitsForTheReportsUnderWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ep := &flakyEndpoint{} // refused
		release := make(chan struct{})
		var seen atomic.Int32
		s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: ep}, Retry: &webhook.RetryPolicy{},
			Health: &webhook.HealthOptions{DownAfter: 1, OnChange: func(context.Context, webhook.EndpointHealth) {
				<-release // the service's database, slow
				seen.Add(1)
			}}})
		require.NoError(t, err)
		s.Send(context.Background(), fakeConn, samplePayload())

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		assert.ErrorIs(t, s.Flush(ctx), context.DeadlineExceeded, "the report is still under way")
		close(release)
		require.NoError(t, s.Flush(context.Background()))
		assert.EqualValues(t, 1, seen.Load(), "reported before Flush returned")
	})
}
