package webhook_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
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
	mu  sync.Mutex
	got []webhook.EndpointHealth
}

func (c *changes) add(h webhook.EndpointHealth) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, h)
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
			require.ErrorIs(t, send(), syscall.ECONNREFUSED)
		}
		require.EqualValues(t, 3, ep.requests.Load())
		require.Len(t, ch.list(), 1, "reported down once")
		down := ch.list()[0]
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
			require.ErrorIs(t, send(), syscall.ECONNREFUSED, "probe %d is sent", i+1)
			require.EqualValues(t, 4+i, ep.requests.Load())
			require.ErrorIs(t, send(), webhook.ErrEndpointDown, "one probe, then waiting again")
		}
		assert.Len(t, ch.list(), 1, "probes that fail change nothing")

		// The endpoint answers again, with a 500: it is up, and the
		// deliveries go out, failing or not.
		ep.set(http.StatusInternalServerError, false)
		time.Sleep(40 * time.Second)
		res, err = s.Send(context.Background(), fakeConn, samplePayload())
		require.Error(t, err)
		assert.Equal(t, webhook.KindStatus, res.Attempts[0].Kind, "the probe got an answer")
		ep.set(http.StatusOK, false)
		_, err = s.Send(context.Background(), fakeConn, samplePayload())
		require.NoError(t, err)
		got := ch.list()
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
		assert.Empty(t, ch.list())
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
		require.Len(t, ch.list(), 1)

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
		assert.Len(t, ch.list(), 2, "and the endpoint is up")
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
		require.Len(t, ch.list(), 1, "they share its fate")
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
		assert.Equal(t, 6*time.Second, a.RetryIn, "until the probe is due")
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
	for _, o := range []webhook.HealthOptions{{DownAfter: -1}, {ProbeInterval: -time.Second}, {MaxProbeInterval: -1}} {
		_, err := webhook.NewSender(&webhook.SenderOptions{Health: &o})
		assert.Error(t, err, "%+v", o)
	}
	s, err := webhook.NewSender(nil)
	require.NoError(t, err)
	assert.Nil(t, s.Health(), "off by default")
}
