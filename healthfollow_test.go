package webhook_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

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
