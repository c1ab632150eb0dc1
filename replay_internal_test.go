package webhook

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// checkEntries fails t unless sh's count is its entries', within its bound,
// its buckets in order and none empty.
func checkEntries(t *testing.T, sh *replayEntries) {
	t.Helper()
	n := 0
	for i, b := range sh.buckets {
		if len(b.seen) == 0 {
			t.Errorf("bucket %d is empty", b.index)
		}
		if i > 0 && sh.buckets[i-1].index >= b.index {
			t.Errorf("bucket %d after bucket %d", b.index, sh.buckets[i-1].index)
		}
		n += len(b.seen)
	}
	if n != sh.n || n > sh.max {
		t.Fatalf("the store counts %d entries and holds %d; its bound is %d", sh.n, n, sh.max)
	}
}

// stateOf returns what sh holds for k, live, in the bucket of index.
func stateOf(sh *replayEntries, k replayKey, index, now int64) ReplayState {
	if _, st, ok := sh.find(k, index, now); ok {
		return st.state()
	}
	return ReplayUnseen
}

// A store's entries against a plain map of what each key holds, under random
// claims, completions and releases on a clock that moves on: some keys
// given with the index of their delivery's timestamp (the Verifier's),
// others without (a ReplayStore's Add and Claim). Its bound is never
// reached, so nothing live is forgotten.
func TestReplayEntries_AgainstAMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	sh := &replayEntries{max: 1 << 20}
	type key struct {
		k     replayKey
		index int64
	}
	keys := make([]key, 64)
	for i := range keys {
		keys[i].k[0] = byte(i)
		keys[i].index = noIndex
		if i%2 == 0 {
			keys[i].index = int64(i % 5)
		}
	}
	want := map[replayKey]stamp{}
	live := func(k replayKey, now int64) (stamp, bool) {
		st, ok := want[k]
		return st, ok && st.expiry() > now
	}
	now := int64(0)
	for step := range 20000 {
		now += r.Int64N(int64(2 * time.Second))
		k := keys[r.IntN(len(keys))]
		st := newStamp(now+r.Int64N(int64(time.Minute)), r.IntN(2) == 0)
		switch r.IntN(3) {
		case 0:
			got := sh.claim(k.k, k.index, now, st)
			old, ok := live(k.k, now)
			switch {
			case ok && got != old.state():
				t.Fatalf("step %d: claim answered %v, the map holds %v", step, got, old.state())
			case !ok && got != ReplayUnseen:
				t.Fatalf("step %d: claim answered %v, the map holds nothing", step, got)
			case !ok:
				want[k.k] = st
			}
		case 1:
			sh.complete(k.k, k.index, now, st)
			want[k.k] = st
		case 2:
			sh.release(k.k, k.index, now)
			if old, ok := live(k.k, now); ok && old.state() == ReplayHandling {
				delete(want, k.k)
			}
		}
		checkEntries(t, sh)
		for _, k := range keys {
			wantState := ReplayUnseen
			if st, ok := live(k.k, now); ok {
				wantState = st.state()
			}
			if got := stateOf(sh, k.k, k.index, now); got != wantState {
				t.Fatalf("step %d: key %d holds %v, the map %v", step, k.k[0], got, wantState)
			}
		}
	}
}

// A Verifier's outcome is recorded in one lookup where its claim is; where
// the claim is gone (evicted from a full store, or expired) it is recorded
// all the same, counted, and within the store's bound.
func TestReplayEntries_CompleteWhereTheClaimIs(t *testing.T) {
	const index = 7
	now := int64(index) * int64(replaySpan)
	lease, ttl := now+int64(time.Minute), now+int64(5*time.Minute)
	keys := []replayKey{{1}, {2}, {3}}

	t.Run("claimed", func(t *testing.T) {
		sh := &replayEntries{max: 4}
		sh.claim(keys[0], index, now, newStamp(lease, true))
		sh.complete(keys[0], index, now, newStamp(ttl, false))
		checkEntries(t, sh)
		if got := stateOf(sh, keys[0], index, now); got != ReplayHandled {
			t.Fatalf("after complete: %v, want handled", got)
		}
		if got := sh.claim(keys[0], index, now, newStamp(lease, true)); got != ReplayHandled {
			t.Fatalf("a copy's claim: %v, want handled", got)
		}
	})

	t.Run("evicted", func(t *testing.T) {
		sh := &replayEntries{max: 2}
		for _, k := range keys { // the third claim evicts one of the first two
			sh.claim(k, index, now, newStamp(lease, true))
		}
		checkEntries(t, sh)
		for _, k := range keys {
			sh.complete(k, index, now, newStamp(ttl, false))
			checkEntries(t, sh)
			if got := stateOf(sh, k, index, now); got != ReplayHandled {
				t.Fatalf("after complete: %v, want handled", got)
			}
		}
	})

	t.Run("expired", func(t *testing.T) {
		sh := &replayEntries{max: 4}
		sh.claim(keys[0], index, now, newStamp(now+2, true))
		later := now + 2 // the lease is over: a copy may claim it again
		sh.complete(keys[0], index, later, newStamp(ttl, false))
		checkEntries(t, sh)
		if got := stateOf(sh, keys[0], index, later); got != ReplayHandled {
			t.Fatalf("after complete: %v, want handled", got)
		}
	})

	t.Run("bucket gone", func(t *testing.T) {
		sh := &replayEntries{max: 4}
		sh.claim(keys[1], index+1, now, newStamp(lease, true)) // another bucket
		sh.complete(keys[0], index, now, newStamp(ttl, false))
		checkEntries(t, sh)
		if got := stateOf(sh, keys[0], index, now); got != ReplayHandled {
			t.Fatalf("after complete: %v, want handled", got)
		}
	})
}

// storeOnClock returns a MemoryReplayStore whose clock reads *now.
func storeOnClock(tb testing.TB, now *time.Time) *MemoryReplayStore {
	tb.Helper()
	s, err := NewMemoryReplayStore(&MemoryReplayStoreOptions{Now: func() time.Time { return *now }})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// Len counts every live entry once, among buckets made in any order (keys whose expiries fall far apart, each in a bucket of its
// own, and the Verifier's by timestamp), some of whose entries expired.
func TestMemoryReplayStore_LenCountsEveryBucketOnce(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := storeOnClock(t, &now)
	ctx := context.Background()
	ttl := func(i int) time.Duration {
		if i%3 == 0 {
			return time.Duration(i%7+1) * time.Second
		}
		return time.Duration(500-i) * 7 * time.Second // descending: each new bucket goes first
	}
	const later = 10 * time.Second // when Len counts: the TTLs up to it have expired
	want := 0
	for i := range 500 {
		if added, _ := s.Add(ctx, strconv.Itoa(i), ttl(i)); !added {
			t.Fatalf("key %d not added", i)
		}
		if ttl(i) > later {
			want++
		}
	}
	now = now.Add(later)
	if got := s.Len(); got != want {
		t.Fatalf("Len = %d, want %d", got, want)
	}
	for i := range 500 { // every key is found where it is, or is gone
		added, _ := s.Add(ctx, strconv.Itoa(i), time.Hour)
		if live := ttl(i) > later; added == live {
			t.Fatalf("key %d, live %v: added again %v", i, live, added)
		}
	}
	checkEntries(t, &s.entries)
}

// Len is a count of one moment: while another goroutine fills a full
// store, opening new buckets as it goes, Len never counts past MaxEntries
// (a review's finding: counted a bucket at a time, it reached 1,863 of
// 1,000, counting entries again after they moved ahead of it).
func TestMemoryReplayStore_LenNeverPassesMaxEntries(t *testing.T) {
	const maxEntries = 1000
	s, err := NewMemoryReplayStore(&MemoryReplayStoreOptions{MaxEntries: maxEntries})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			s.Add(ctx, strconv.Itoa(i), time.Hour+time.Duration(i/50)*replaySpan)
		}
	})
	worst := 0
	for range 20_000 {
		worst = max(worst, s.Len())
	}
	stop.Store(true)
	wg.Wait()
	if worst > maxEntries {
		t.Errorf("Len reached %d, MaxEntries %d", worst, maxEntries)
	}
}

// A negative TTL on a clock before 1970 expires at once: the sum
// saturates rather than wrapping round into an expiry centuries ahead,
// which would hold the key for good.
func TestExpiryAt_NegativeDurationsSaturate(t *testing.T) {
	now := int64(-100 * time.Second)
	if got := expiryAt(now, time.Duration(math.MinInt64)); got > now {
		t.Fatalf("expiryAt(%d, MinInt64) = %d: after now", now, got)
	}
	if got := expiryAt(math.MaxInt64-1, time.Hour); got != math.MaxInt64 {
		t.Fatalf("a huge TTL: %d", got)
	}
	s, err := NewMemoryReplayStore(&MemoryReplayStoreOptions{Now: func() time.Time { return time.Unix(-100, 0) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s.Add(ctx, "k", time.Duration(math.MinInt64))
	if added, _ := s.Add(ctx, "k", time.Minute); !added {
		t.Fatal("a key added with a negative TTL is still held")
	}
}

// BenchmarkReplayClaim is the store's part of the exactly-once
// middleware alone, for diagnosis: a Verifier's claim of a new delivery and
// its outcome, handled, in a MemoryReplayStore holding 1,000 deliveries a
// second over the 5 minutes before (as BenchmarkMiddleware's fullStore),
// one delivery per millisecond of a clock that advances with them.
// Speed is judged end to end, in internal/benchcmp's BenchmarkMiddlewareTLS.
//
//	go test -run '^$' -bench ReplayClaim -count 8
func BenchmarkReplayClaim(b *testing.B) {
	var now time.Time
	s, err := NewMemoryReplayStore(&MemoryReplayStoreOptions{Now: func() time.Time { return now }})
	if err != nil {
		b.Fatal(err)
	}
	sig := func(ts int64) [sha256.Size]byte { // a digest per delivery, as an HMAC's
		var x [8]byte
		binary.LittleEndian.PutUint64(x[:], uint64(ts))
		return sha256.Sum256(x[:])
	}
	deliver := func(d *[sha256.Size]byte, ts int64) ReplayState {
		k, index := s.delivery(d, ts)
		at := ts * int64(time.Millisecond)
		st := s.entries.claim(k, index, at, newStamp(expiryAt(at, DefaultHandlerLease), true))
		s.entries.complete(k, index, at, newStamp(expiryAt(at, DefaultTolerance), false))
		return st
	}
	base := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC).UnixMilli()
	window := DefaultTolerance.Milliseconds()
	for ts := base - window; ts < base; ts++ {
		now = time.UnixMilli(ts)
		d := sig(ts)
		deliver(&d, ts)
	}
	const batch = 4096
	sigs := make([][sha256.Size]byte, batch)
	var n int64
	for b.Loop() {
		i := n % batch
		if i == 0 {
			b.StopTimer()
			for j := range sigs {
				sigs[j] = sig(base + n + int64(j))
			}
			b.StartTimer()
		}
		ts := base + n
		now = time.UnixMilli(ts)
		if deliver(&sigs[i], ts) != ReplayUnseen {
			b.Fatalf("delivery %d: claimed before", n)
		}
		n++
	}
}

// BenchmarkReplayAddFarApart adds keys to a MemoryReplayStore holding
// 10,000 buckets, one per key given with expiries far apart, each key to a
// bucket other than the newest: a key given without its timestamp is looked
// for in every bucket, so the cost grows with them (65 µs an Add here; a
// review's finding: 417 µs at 60,000 buckets, each caller behind the one
// lock). A Verifier gives the timestamp and looks in one bucket.
//
//	go test -run '^$' -bench ReplayAddFarApart -count 6
func BenchmarkReplayAddFarApart(b *testing.B) {
	now := time.Unix(1_700_000_000, 0)
	s := storeOnClock(b, &now)
	ctx := context.Background()
	const buckets = 10_000
	for i := range buckets {
		s.Add(ctx, "fill-"+strconv.Itoa(i), time.Duration(buckets-i)*replaySpan)
	}
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = "k-" + strconv.Itoa(i)
	}
	i := 0
	for b.Loop() {
		s.Add(ctx, keys[i%len(keys)], time.Duration(1+i%(buckets-1))*replaySpan)
		i++
	}
}
