package webhook

import (
	"context"
	"encoding/hex"
	"math/rand/v2"
	"testing"
	"time"
)

// shardKey returns a key of 64 hex digits (kept as its bytes by Add) that
// lands in shard 0.
func shardKey(r *rand.Rand) string {
	var b [32]byte
	for i := 1; i < len(b); i++ {
		b[i] = byte(r.Uint32())
	}
	return hex.EncodeToString(b[:])
}

// slotsHeld returns the slots of sh's buckets' tables, and its buckets.
func slotsHeld(sh *replayShard) (slots, buckets int) {
	for _, b := range sh.buckets {
		slots += len(b.seen.slots)
	}
	return slots, len(sh.buckets)
}

// A bucket's table is sized for the entries it comes to hold, not for
// another bucket's: whatever the mix of TTLs (or, for a Verifier, of late
// timestamps), the slots a shard holds stay in proportion to its entries,
// so that MaxEntries bounds memory as MemoryReplayStore documents (about
// 41 bytes an entry; a bucket of one entry takes a table of minSlots).
func TestMemoryReplayStore_TablesAreSizedForTheirOwnEntries(t *testing.T) {
	bound := func(t *testing.T, sh *replayShard) {
		t.Helper()
		slots, buckets := slotsHeld(sh)
		if limit := 4*sh.n + minSlots*buckets; slots > limit {
			t.Fatalf("%d entries in %d buckets hold %d slots (%d KiB); at most %d expected",
				sh.n, buckets, slots, slots*24>>10, limit)
		}
	}
	ctx := context.Background()

	t.Run("a far bucket's size is not every earlier bucket's", func(t *testing.T) {
		now := time.Unix(1_800_000_000, 0)
		s, err := NewMemoryReplayStore(&MemoryReplayStoreOptions{MaxEntries: 64 * 2048, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(1, 2))
		for range 512 { // one bucket, far ahead: a day's TTL
			s.Add(ctx, shardKey(r), 24*time.Hour)
		}
		for i := range 512 { // then one entry in each of 512 earlier buckets
			s.Add(ctx, shardKey(r), time.Duration(i+1)*6*time.Second)
		}
		bound(t, &s.shards[0])
	})

	t.Run("a spare table is not kept by a bucket of a few entries", func(t *testing.T) {
		now := time.Unix(1_800_000_000, 0)
		s, err := NewMemoryReplayStore(&MemoryReplayStoreOptions{MaxEntries: 64 * 2048, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(3, 4))
		for round := range 200 {
			for range 512 { // a burst that expires in a minute
				s.Add(ctx, shardKey(r), time.Minute)
			}
			now = now.Add(2 * time.Minute) // the burst's bucket is dropped, its table spare
			// one entry kept for a day, in a bucket of its own
			s.Add(ctx, shardKey(r), 24*time.Hour+time.Duration(round)*6*time.Second)
		}
		s.Len() // drops what expired
		bound(t, &s.shards[0])
	})
}
