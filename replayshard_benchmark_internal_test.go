package webhook

import (
	"crypto/sha256"
	"encoding/binary"
	"testing"
	"time"
)

// BenchmarkReplayShardClaim is the store's part of the exactly-once
// middleware alone: a Verifier's claim of a new delivery and its outcome,
// handled, in a MemoryReplayStore holding 1,000 deliveries a second over
// the 5 minutes before (as BenchmarkMiddleware's fullStore), one delivery
// per millisecond of a clock that advances with them. Beside
// BenchmarkMiddleware/impl=once, it tells what the store costs alone from
// what it costs between requests, whose own memory (headers, bodies) has
// pushed the store's out of the caches.
//
//	go test -run '^$' -bench ReplayShardClaim -count 8
func BenchmarkReplayShardClaim(b *testing.B) {
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
	handled := func(k replayKey, sh *replayShard, index, at int64) {
		sh.complete(k, index, at, newStamp(expiryAt(at, DefaultTolerance), false))
	}
	base := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC).UnixMilli()
	window := DefaultTolerance.Milliseconds()
	for ts := base - window; ts < base; ts++ {
		now = time.UnixMilli(ts)
		d := sig(ts)
		k, sh, index, at := s.delivery(&d, ts)
		sh.claim(k, index, at, newStamp(expiryAt(at, DefaultHandlerLease), true))
		handled(k, sh, index, at)
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
		k, sh, index, at := s.delivery(&sigs[i], ts)
		if sh.claim(k, index, at, newStamp(expiryAt(at, DefaultHandlerLease), true)) != ReplayUnseen {
			b.Fatalf("delivery %d: claimed before", n)
		}
		handled(k, sh, index, at)
		n++
	}
}
