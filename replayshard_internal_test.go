package webhook

import (
	"testing"
	"time"
)

// checkShard fails t unless sh's count is its entries', within its bound,
// and no bucket is empty.
func checkShard(t *testing.T, sh *replayShard) {
	t.Helper()
	n := 0
	for _, b := range sh.buckets {
		if b.seen.n == 0 {
			t.Errorf("bucket %d is empty", b.index)
		}
		held := 0
		for _, e := range b.seen.slots {
			if e.st != 0 {
				held++
			}
		}
		if held != b.seen.n {
			t.Errorf("bucket %d counts %d entries and holds %d", b.index, b.seen.n, held)
		}
		n += b.seen.n
	}
	if n != sh.n || n > sh.max {
		t.Fatalf("the shard counts %d entries and holds %d; its bound is %d", sh.n, n, sh.max)
	}
}

// stateOf returns what the shard holds for k, live, in the bucket of index.
func stateOf(sh *replayShard, k replayKey, index, now int64) ReplayState {
	if _, _, st, ok := sh.find(k, index, now); ok {
		return st.state()
	}
	return ReplayUnseen
}

// A Verifier's outcome is recorded in one lookup where its claim is; where
// the claim is gone (evicted from a full shard, or expired) it is recorded
// all the same, counted, and within the shard's bound.
func TestReplayShard_CompleteWhereTheClaimIs(t *testing.T) {
	const index = 7
	now := int64(index) * replaySpan
	lease, ttl := now+int64(time.Minute), now+int64(5*time.Minute)
	keys := []replayKey{{1}, {2}, {3}}

	t.Run("claimed", func(t *testing.T) {
		sh := &replayShard{max: 4, nextDrop: now + int64(time.Hour)}
		sh.claim(keys[0], index, now, newStamp(lease, true))
		sh.complete(keys[0], index, now, newStamp(ttl, false))
		checkShard(t, sh)
		if got := stateOf(sh, keys[0], index, now); got != ReplayHandled {
			t.Fatalf("after complete: %v, want handled", got)
		}
		if got := sh.claim(keys[0], index, now, newStamp(lease, true)); got != ReplayHandled {
			t.Fatalf("a copy's claim: %v, want handled", got)
		}
	})

	t.Run("evicted", func(t *testing.T) {
		sh := &replayShard{max: 2, nextDrop: now + int64(time.Hour)}
		for _, k := range keys { // the third claim evicts one of the first two
			sh.claim(k, index, now, newStamp(lease, true))
		}
		checkShard(t, sh)
		for _, k := range keys {
			sh.complete(k, index, now, newStamp(ttl, false))
			checkShard(t, sh)
			if got := stateOf(sh, k, index, now); got != ReplayHandled {
				t.Fatalf("after complete: %v, want handled", got)
			}
		}
	})

	t.Run("expired", func(t *testing.T) {
		sh := &replayShard{max: 4, nextDrop: now + int64(time.Hour)}
		sh.claim(keys[0], index, now, newStamp(now+1, true))
		later := now + 2 // the lease is over: a copy may claim it again
		sh.complete(keys[0], index, later, newStamp(ttl, false))
		checkShard(t, sh)
		if got := stateOf(sh, keys[0], index, later); got != ReplayHandled {
			t.Fatalf("after complete: %v, want handled", got)
		}
	})

	t.Run("bucket gone", func(t *testing.T) {
		sh := &replayShard{max: 4, nextDrop: now + int64(time.Hour)}
		sh.claim(keys[1], index+1, now, newStamp(lease, true)) // another bucket
		sh.complete(keys[0], index, now, newStamp(ttl, false))
		checkShard(t, sh)
		if got := stateOf(sh, keys[0], index, now); got != ReplayHandled {
			t.Fatalf("after complete: %v, want handled", got)
		}
	})
}
