package webhook_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/webhooktest"
)

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
