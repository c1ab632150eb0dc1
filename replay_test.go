package webhook_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

func TestVerifier_RefusesReplay(t *testing.T) {
	body := []byte(`{"event":"user.identified"}`)
	ts := testNow.UnixMilli()
	v := newTestVerifier(t)

	require.NoError(t, v.Verify(signedHeader(testSecret, ts, body), body))
	err := v.Verify(signedHeader(testSecret, ts, body), body)
	require.ErrorIs(t, err, webhook.ErrReplayed)
	assert.ErrorIs(t, err, webhook.ErrVerification)

	upper := signedHeader(testSecret, ts, body)
	upper.Set(webhook.HeaderSignature, "sha256="+strings.ToUpper(strings.TrimPrefix(upper.Get(webhook.HeaderSignature), "sha256=")))
	assert.ErrorIs(t, v.Verify(upper, body), webhook.ErrReplayed, "the same digest in upper case is the same delivery")

	// The sender's retry: the identical body, signed afresh a second later.
	assert.NoError(t, v.Verify(signedHeader(testSecret, ts+1000, body), body))
	// A failed verification remembers nothing.
	tampered := append(bytes.Clone(body), ' ')
	assert.ErrorIs(t, v.Verify(signedHeader(testSecret, ts+2000, body), tampered), webhook.ErrSignatureMismatch)
	assert.NoError(t, v.Verify(signedHeader(testSecret, ts+2000, body), body))
}

func TestVerifier_AllowReplays(t *testing.T) {
	body := []byte(`{"event":"user.identified"}`)
	v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{
		Now:          func() time.Time { return testNow },
		AllowReplays: true,
		ReplayStore:  failingStore{}, // ignored
	})
	require.NoError(t, err)
	for range 3 {
		require.NoError(t, v.Verify(signedHeader(testSecret, testNow.UnixMilli(), body), body))
	}
}

// fakeStore is a shared store as a test sees it: a map under a lock,
// recording each call.
type fakeStore struct {
	mu    sync.Mutex
	held  map[string]fakeEntry
	now   func() time.Time
	calls []storeCall
}

type fakeEntry struct {
	state webhook.ReplayState
	until time.Time
}

type storeCall struct {
	Method string
	Key    string
	TTL    time.Duration
}

func newFakeStore(now func() time.Time) *fakeStore {
	return &fakeStore{held: map[string]fakeEntry{}, now: now}
}

func (s *fakeStore) Add(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	st, err := s.put("Add", key, webhook.ReplayHandled, ttl)
	return st == webhook.ReplayUnseen, err
}

func (s *fakeStore) Claim(_ context.Context, key string, lease time.Duration) (webhook.ReplayState, error) {
	return s.put("Claim", key, webhook.ReplayHandling, lease)
}

func (s *fakeStore) put(method, key string, state webhook.ReplayState, ttl time.Duration) (webhook.ReplayState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, storeCall{method, key, ttl})
	if e, ok := s.held[key]; ok && s.now().Before(e.until) {
		return e.state, nil
	}
	s.held[key] = fakeEntry{state, s.now().Add(ttl)}
	return webhook.ReplayUnseen, nil
}

func (s *fakeStore) Complete(ctx context.Context, key string, ttl time.Duration) error {
	if ctx.Err() != nil { // as a network client would
		return ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, storeCall{"Complete", key, ttl})
	s.held[key] = fakeEntry{webhook.ReplayHandled, s.now().Add(ttl)}
	return nil
}

func (s *fakeStore) Release(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, storeCall{"Release", key, 0})
	if s.held[key].state == webhook.ReplayHandling {
		delete(s.held, key)
	}
	return nil
}

type failingStore struct{}

var errStoreDown = errors.New("store: connection refused")

func (failingStore) Add(context.Context, string, time.Duration) (bool, error) {
	return false, errStoreDown
}

func (failingStore) Claim(context.Context, string, time.Duration) (webhook.ReplayState, error) {
	return 0, errStoreDown
}

func (failingStore) Complete(context.Context, string, time.Duration) error { return errStoreDown }
func (failingStore) Release(context.Context, string) error                 { return errStoreDown }

// TestVerifier_SharedReplayStore shows two instances of a receiver sharing
// one store: a delivery accepted by one is refused by the other, each
// signature is remembered until it leaves the window, and the key is the
// signature's digest.
func TestVerifier_SharedReplayStore(t *testing.T) {
	now := testNow
	clock := func() time.Time { return now }
	store := newFakeStore(clock)
	instance := func() *webhook.Verifier {
		v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{Now: clock, ReplayStore: store})
		require.NoError(t, err)
		return v
	}
	a, b := instance(), instance()
	body := []byte(`{"event":"user.identified"}`)

	onTime := signedHeader(testSecret, now.UnixMilli(), body)
	require.NoError(t, a.Verify(onTime, body))
	assert.ErrorIs(t, b.Verify(onTime, body), webhook.ErrReplayed)

	early := signedHeader(testSecret, now.Add(-time.Minute).UnixMilli(), body) // a minute old: 4 minutes left
	require.NoError(t, b.Verify(early, body))
	assert.ErrorIs(t, a.Verify(early, body), webhook.ErrReplayed)

	ahead := signedHeader(testSecret, now.Add(2*time.Minute).UnixMilli(), body) // the sender's clock is ahead
	require.NoError(t, a.Verify(ahead, body))

	digest := func(h http.Header) string { return strings.TrimPrefix(h.Get(webhook.HeaderSignature), "sha256=") }
	const ms = time.Millisecond
	want := []storeCall{
		{"Add", digest(onTime), 5*time.Minute + ms},
		{"Add", digest(onTime), 5*time.Minute + ms},
		{"Add", digest(early), 4*time.Minute + ms},
		{"Add", digest(early), 4*time.Minute + ms},
		{"Add", digest(ahead), 7*time.Minute + ms},
	}
	assert.Equal(t, want, store.calls)

	// Past the window, the store has forgotten it and the window refuses it.
	now = now.Add(5*time.Minute + ms)
	assert.ErrorIs(t, a.Verify(onTime, body), webhook.ErrTimestampExpired)
	assert.Len(t, store.calls, len(want), "only fresh, authentic deliveries reach the store")
}

func TestVerifier_FailingReplayStore(t *testing.T) {
	v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{
		Now:         func() time.Time { return testNow },
		ReplayStore: failingStore{},
	})
	require.NoError(t, err)
	body := []byte(`{"event":"user.identified"}`)
	err = v.Verify(signedHeader(testSecret, testNow.UnixMilli(), body), body)
	require.ErrorIs(t, err, webhook.ErrReplayStore)
	assert.ErrorIs(t, err, errStoreDown)
	assert.NotErrorIs(t, err, webhook.ErrVerification, "the delivery may be authentic")

	rec := httptest.NewRecorder()
	v.Middleware(http.NotFoundHandler()).ServeHTTP(rec, newSignedRequest(testSecret, testNow.UnixMilli(), body))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code, "answered so that the sender retries")
}

// TestVerifier_ReplayEntryLeavesWithTheWindow runs the window's 5 minutes
// on synctest's clock: a delivery is refused as a replay up to the last
// millisecond of its window, as expired from then on, and the store forgets
// it.
func TestVerifier_ReplayEntryLeavesWithTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, err := webhook.NewMemoryReplayStore(nil)
		require.NoError(t, err)
		v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{ReplayStore: store})
		require.NoError(t, err)
		body := []byte(`{"event":"user.identified"}`)
		onTime := signedHeader(testSecret, time.Now().UnixMilli(), body)
		ahead := signedHeader(testSecret, time.Now().Add(webhook.DefaultTolerance).UnixMilli(), body) // as far ahead as accepted

		require.NoError(t, v.Verify(onTime, body))
		require.NoError(t, v.Verify(ahead, body))
		assert.Equal(t, 2, store.Len())

		time.Sleep(webhook.DefaultTolerance)
		assert.ErrorIs(t, v.Verify(onTime, body), webhook.ErrReplayed, "exactly 5 minutes old is within the window")
		time.Sleep(time.Millisecond)
		assert.ErrorIs(t, v.Verify(onTime, body), webhook.ErrTimestampExpired)
		assert.Equal(t, 1, store.Len(), "the entry left with the window")

		time.Sleep(webhook.DefaultTolerance - time.Millisecond)
		assert.ErrorIs(t, v.Verify(ahead, body), webhook.ErrReplayed, "a delivery from ahead is remembered for twice the tolerance")
		time.Sleep(time.Millisecond)
		assert.ErrorIs(t, v.Verify(ahead, body), webhook.ErrTimestampExpired)
		assert.Equal(t, 0, store.Len())
	})
}

func TestMemoryReplayStore_Add(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := webhook.NewMemoryReplayStore(nil)
		require.NoError(t, err)
		ctx := context.Background()
		digest := strings.Repeat("ab", 32)
		for _, tc := range []struct {
			key   string
			sleep time.Duration
			want  bool
		}{
			{digest, 0, true},
			{digest, 0, false},
			{strings.ToUpper(digest), 0, false}, // the same 16 bytes
			{"any other key", 0, true},
			{"any other key", time.Second - time.Nanosecond, false},
			{"any other key", time.Nanosecond, true}, // expired: recorded again
			{digest, 0, true},
		} {
			time.Sleep(tc.sleep)
			added, err := s.Add(ctx, tc.key, time.Second)
			require.NoError(t, err)
			assert.Equal(t, tc.want, added, "Add(%q)", tc.key)
		}
	})
	_, err := webhook.NewMemoryReplayStore(&webhook.MemoryReplayStoreOptions{MaxEntries: -1})
	assert.Error(t, err)
}

func TestMemoryReplayStore_IsBounded(t *testing.T) {
	const max = 256
	s, err := webhook.NewMemoryReplayStore(&webhook.MemoryReplayStoreOptions{MaxEntries: max})
	require.NoError(t, err)
	for i := range 100 * max {
		added, _ := s.Add(context.Background(), fmt.Sprint(i), time.Hour)
		require.True(t, added)
		if i%max == 0 {
			require.LessOrEqual(t, s.Len(), max)
		}
	}
	assert.Equal(t, max, s.Len())
	// A full store forgets its oldest entry first: the newest are kept.
	added, _ := s.Add(context.Background(), fmt.Sprint(100*max-1), time.Hour)
	assert.False(t, added)
}

// TestVerifier_ReplayRefusalUnderConcurrency sends every delivery from
// several goroutines at once: each is accepted exactly once.
func TestVerifier_ReplayRefusalUnderConcurrency(t *testing.T) {
	v := newTestVerifier(t)
	body := []byte(`{"event":"user.identified"}`)
	const deliveries, copies = 200, 8
	var accepted [deliveries]atomic.Int32
	var wg sync.WaitGroup
	for range copies {
		wg.Go(func() {
			for i := range deliveries {
				h := signedHeader(testSecret, testNow.UnixMilli()-int64(i), body)
				switch err := v.Verify(h, body); {
				case err == nil:
					accepted[i].Add(1)
				case !errors.Is(err, webhook.ErrReplayed):
					t.Errorf("delivery %d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	for i := range accepted {
		assert.Equal(t, int32(1), accepted[i].Load(), "delivery %d", i)
	}
}

const memoryChildEnv = "WEBHOOK_REPLAY_MEMORY_CHILD"

// TestMemoryReplayStore_MemoryPer1000PerSecond measures the figures the
// documentation gives: 1,000 and 100 deliveries per second over a 5-minute
// window, one after another on a clock that moves on with them, as
// deliveries on time arrive. It measures in a child process of its own: in
// the package's process, the heap also holds what other tests' goroutines,
// pools and connections free or take while the store fills.
func TestMemoryReplayStore_MemoryPer1000PerSecond(t *testing.T) {
	if raceEnabled {
		t.Skip("heap figures under the race detector include its own; CI runs this without it")
	}
	if testing.Short() {
		t.Skip("fills 300,000 entries")
	}
	if os.Getenv(memoryChildEnv) != "1" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMemoryReplayStore_MemoryPer1000PerSecond$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), memoryChildEnv+"=1")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "the child failed:\n%s", out)
		require.Contains(t, string(out), "1000 a second: ", "the child measured:\n%s", out)
		t.Logf("the child:\n%s", out)
		return
	}
	for _, tc := range []struct {
		perSecond int
		wantUnder uint64 // bytes
		docs      string
	}{
		{1000, 14 << 20, "the documentation says about 12.5 MiB"},
		{100, 2 << 20, "the documentation says about 1.6 MiB"},
	} {
		const window = 5 * time.Minute
		entries := tc.perSecond * int(window/time.Second)
		clock := time.Unix(1_700_000_000, 0)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s, err := webhook.NewMemoryReplayStore(&webhook.MemoryReplayStoreOptions{Now: func() time.Time { return clock }})
		require.NoError(t, err)
		var key [32]byte
		for i := range entries {
			key[0], key[1], key[2], key[3] = byte(i), byte(i>>8), byte(i>>16), byte(i>>24)
			s.Add(context.Background(), hex.EncodeToString(key[:]), window)
			clock = clock.Add(time.Second / time.Duration(tc.perSecond))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		used := after.HeapAlloc - before.HeapAlloc
		t.Logf("%d a second: %d entries, %.1f MiB, %d bytes each", tc.perSecond, s.Len(), float64(used)/(1<<20), used/uint64(entries))
		assert.Less(t, used, tc.wantUnder, tc.docs)
		runtime.KeepAlive(s)
	}
}

// TestMemoryReplayStore_MemoryIsBoundedUnderFlood verifies authentic,
// distinct deliveries at ten and at a hundred times the rate MaxEntries is
// sized for (its entries over twice the window), for twice the window on a
// fake clock: the memory the store holds follows MaxEntries, not the
// arrival rate.
func TestMemoryReplayStore_MemoryIsBoundedUnderFlood(t *testing.T) {
	for _, times := range []float64{10, 100} {
		t.Run(fmt.Sprintf("%vx", times), func(t *testing.T) { testReplayFlood(t, times) })
	}
}

func testReplayFlood(t *testing.T, times float64) {
	if raceEnabled {
		t.Skip("heap figures under the race detector include its own; CI runs this without it")
	}
	const maxEntries = 4096
	window := 2 * webhook.DefaultTolerance
	rate := times * float64(maxEntries) / window.Seconds() // deliveries per second
	step := time.Duration(float64(time.Second) / rate)
	now := testNow
	store, err := webhook.NewMemoryReplayStore(&webhook.MemoryReplayStoreOptions{MaxEntries: maxEntries, Now: func() time.Time { return now }})
	require.NoError(t, err)
	v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{Now: func() time.Time { return now }, ReplayStore: store})
	require.NoError(t, err)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	body := []byte(`{"event":"user.identified","n":00000000}`)
	n := int(window / step)
	for i := range n {
		copy(body[len(body)-9:], fmt.Sprintf("%08d", i))
		// Timestamps anywhere in the window, as deliveries late and early arrive.
		ts := now.UnixMilli() - int64(i*7919%int(webhook.DefaultTolerance.Milliseconds()))
		require.NoError(t, v.Verify(signedHeader(testSecret, ts, body), body))
		now = now.Add(step)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	used := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d deliveries at %.0f/s: %d entries held, %.2f MiB", n, rate, store.Len(), float64(used)/(1<<20))
	assert.LessOrEqual(t, store.Len(), maxEntries)
	// An entry costs under 100 bytes with its map's room: a store of 4,096
	// that held 12 MiB under this flood would fail here.
	assert.Less(t, used, int64(2<<20), "memory under a flood must follow MaxEntries")
	runtime.KeepAlive(v)
}

// TestMemoryReplayStore_HoldsAtMostMaxEntries for a MaxEntries that is not
// of any size: the bound is exact.
func TestMemoryReplayStore_HoldsAtMostMaxEntries(t *testing.T) {
	for _, maxEntries := range []int{1, 10, 100, 1000} {
		s, err := webhook.NewMemoryReplayStore(&webhook.MemoryReplayStoreOptions{MaxEntries: maxEntries})
		require.NoError(t, err)
		for i := range 20 * maxEntries {
			added, _ := s.Add(context.Background(), fmt.Sprint(i), time.Hour)
			require.True(t, added)
		}
		assert.LessOrEqual(t, s.Len(), maxEntries, "MaxEntries %d", maxEntries)
		assert.Greater(t, s.Len(), maxEntries*9/10, "MaxEntries %d: the room is used", maxEntries)
	}
}

func TestMemoryReplayStore_ClaimCompleteRelease(t *testing.T) {
	now := testNow
	s, err := webhook.NewMemoryReplayStore(&webhook.MemoryReplayStoreOptions{Now: func() time.Time { return now }})
	require.NoError(t, err)
	ctx := context.Background()
	claim := func(key string) webhook.ReplayState {
		st, err := s.Claim(ctx, key, time.Minute)
		require.NoError(t, err)
		return st
	}
	assert.Equal(t, webhook.ReplayUnseen, claim("a"))
	assert.Equal(t, webhook.ReplayHandling, claim("a"))
	require.NoError(t, s.Release(ctx, "a"))
	assert.Equal(t, webhook.ReplayUnseen, claim("a"), "released: the copy claims it")
	require.NoError(t, s.Complete(ctx, "a", time.Hour))
	require.NoError(t, s.Release(ctx, "a"))
	assert.Equal(t, webhook.ReplayHandled, claim("a"), "Release leaves a handled key")
	added, err := s.Add(ctx, "a", time.Hour)
	require.NoError(t, err)
	assert.False(t, added)

	assert.Equal(t, webhook.ReplayUnseen, claim("b"))
	now = now.Add(time.Minute)
	assert.Equal(t, webhook.ReplayUnseen, claim("b"), "a claim past its lease is gone")
	assert.Equal(t, "handling", webhook.ReplayHandling.String())
}

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

// TestVerifier_ACopyTheWindowAcceptsIsRefusedWhileAnotherDeliveryIsClaimed:
// the copy of the test above, judged by the window at its last millisecond,
// is claimed in the memory by that time; but another delivery, judged a
// moment later while the copy is hashed (a receiver serves deliveries
// concurrently), claims first, and its claim drops every bucket expired by
// its own later time: the copy's first delivery with it. The copy then
// finds nothing and verifies again: the defect of the window's edge, by
// another request's clock in place of its own second reading.
func TestVerifier_ACopyTheWindowAcceptsIsRefusedWhileAnotherDeliveryIsClaimed(t *testing.T) {
	assert.ErrorIs(t, verifyACopyHeldWhileAnotherIsClaimed(t, 2*time.Millisecond), webhook.ErrReplayed, "a copy within the window")
}

// TestVerifier_ACopyIsNeverAcceptedHoweverLongAnotherClaimCameFirst: the
// test above, with the copy held longer than the memory's dropLag between
// reading the clock and claiming (a goroutine starved by a flood of
// requests, a stop of its own): the other delivery's claim, judged 6 s
// later, drops the copy's first delivery, which the copy's own time still
// finds live. However late it claims, a copy is never accepted.
func TestVerifier_ACopyIsNeverAcceptedHoweverLongAnotherClaimCameFirst(t *testing.T) {
	err := verifyACopyHeldWhileAnotherIsClaimed(t, 6*time.Second)
	require.Error(t, err, "a copy within the window is never accepted")
	assert.ErrorIs(t, err, webhook.ErrReplayStore, "the memory cannot tell: the sender retries")
}

// verifyACopyHeldWhileAnotherIsClaimed verifies a delivery, then a copy of
// it at the window's last millisecond, during whose verification (as it
// reads the clock) another delivery is verified hold later, and returns
// the copy's error.
func verifyACopyHeldWhileAnotherIsClaimed(t *testing.T, hold time.Duration) error {
	t.Helper()
	body := []byte(`{"event":"user.identified"}`)
	ts := testNow.UnixMilli()
	lastMillisecond := testNow.Add(webhook.DefaultTolerance) // age exactly the tolerance: accepted
	later := lastMillisecond.Add(hold)
	other := []byte(`{"event":"user.deleted"}`)

	now := testNow
	var during func() // run as the copy reads the clock: while it is held
	clock := func() time.Time {
		if f := during; f != nil {
			during = nil
			t := now
			f()
			return t
		}
		return now
	}
	v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{Now: clock})
	require.NoError(t, err)
	h := signedHeader(testSecret, ts, body)
	require.NoError(t, v.Verify(h, body))

	now = lastMillisecond
	during = func() {
		now = later
		require.NoError(t, v.Verify(signedHeader(testSecret, later.UnixMilli(), other), other), "another delivery")
	}
	return v.Verify(h, body)
}
