package webhook_test

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signedhook/webhook"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readingClock is a receiver's clock that moves on by step at each read,
// as a real one does while the receiver hashes a body between two reads.
type readingClock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func (c *readingClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.t
	c.t = c.t.Add(c.step)
	return t
}

func (c *readingClock) set(t time.Time, step time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t, c.step = t, step
}

// TestVerifier_ACopyTheWindowAcceptsIsRefusedHoweverLongItsHashTakes: a
// delivery is verified at once, and a copy of it arrives at the window's
// last millisecond, on a receiver that now takes a millisecond to hash the
// body (a large body under load). The window accepts the copy by the time
// read before the hash; the replay memory, on the Verifier's own clock,
// must still hold the delivery then, or the copy verifies again (Verify)
// and is handled twice (Middleware). It judged it by a second reading of
// the clock, after the hash: the delivery had left the memory by then.
func TestVerifier_ACopyTheWindowAcceptsIsRefusedHoweverLongItsHashTakes(t *testing.T) {
	body := []byte(`{"event":"user.identified"}`)
	ts := testNow.UnixMilli()
	lastMillisecond := testNow.Add(webhook.DefaultTolerance) // age exactly the tolerance: accepted

	t.Run("Verify", func(t *testing.T) {
		clock := &readingClock{t: testNow}
		v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{Now: clock.now})
		require.NoError(t, err)
		h := signedHeader(testSecret, ts, body)
		require.NoError(t, v.Verify(h, body))

		clock.set(lastMillisecond, time.Millisecond)
		assert.ErrorIs(t, v.Verify(h, body), webhook.ErrReplayed, "a copy within the window")
	})

	t.Run("Middleware", func(t *testing.T) {
		clock := &readingClock{t: testNow}
		v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{Now: clock.now})
		require.NoError(t, err)
		var calls atomic.Int32
		h := v.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls.Add(1) }))
		require.Equal(t, http.StatusOK, serve(h, newSignedRequest(testSecret, ts, body)))

		clock.set(lastMillisecond, time.Millisecond)
		assert.Equal(t, http.StatusOK, serve(h, newSignedRequest(testSecret, ts, body)), "the copy is acknowledged")
		assert.Equal(t, int32(1), calls.Load(), "the delivery is handled once")
	})
}
