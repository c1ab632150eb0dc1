package webhook

import (
	"crypto/sha256"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// homeOf returns the address of the slot where a lookup of k in b's table
// starts.
func homeOf(sh *replayShard, b *replayBucket, k *replayKey) uintptr {
	i := int(sh.seed.hash(k)) & (len(b.seen.slots) - 1)
	return uintptr(unsafe.Pointer(&b.seen.slots[i]))
}

// The slot a Verifier warms before its HMAC is the one its claim then
// reads first: in the table of the bucket the shard's last claim went to,
// also once that table has grown and moved, and for a delivery of another
// span, none.
func TestMemoryReplayStore_WarmsTheSlotTheClaimReads(t *testing.T) {
	s, err := NewMemoryReplayStore(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := (&MemoryReplayStore{}).warmAddr(&[sha256.Size]byte{}, 0); got != 0 {
		t.Fatalf("an unused zero store warms %#x", got)
	}
	r := rand.New(rand.NewPCG(1, 2))
	sigIn := func(shard byte) *[sha256.Size]byte { // a signature whose key is in shard
		var sig [sha256.Size]byte
		for i := range sig {
			sig[i] = byte(r.Uint32())
		}
		sig[0] = shard
		return &sig
	}
	const tsMillis = 1_700_000_000_000
	claim := func(sig *[sha256.Size]byte, tsMillis int64) (*replayShard, *replayBucket, replayKey) {
		k, sh, index, now := s.delivery(sig, tsMillis)
		if st := sh.claim(k, index, now, newStamp(now+int64(time.Minute), true)); st != ReplayUnseen {
			t.Fatalf("a new delivery's claim: %v", st)
		}
		return sh, sh.at(index), k
	}
	if got := s.warmAddr(sigIn(3), tsMillis); got != 0 {
		t.Fatalf("a shard no claim went to warms %#x", got)
	}

	sh, b, _ := claim(sigIn(3), tsMillis)
	slots := len(b.seen.slots)
	for range 4 * slots { // past 3/4 full: the table grows, and moves
		next := sigIn(3)
		var k replayKey
		copy(k[:], next[:])
		if got, want := s.warmAddr(next, tsMillis), homeOf(sh, b, &k); got != want {
			t.Fatalf("with %d entries in a table of %d slots: warms %#x, the claim reads %#x first", b.seen.n, len(b.seen.slots), got, want)
		}
		sh, b, _ = claim(next, tsMillis)
	}
	if len(b.seen.slots) == slots {
		t.Fatalf("the table did not grow past %d slots", slots)
	}
	if got := s.warmAddr(sigIn(3), tsMillis+replaySpan/int64(time.Millisecond)); got != 0 {
		t.Fatalf("a delivery of the next span warms %#x", got)
	}
	if got := s.warmAddr(sigIn(4), tsMillis); got != 0 {
		t.Fatalf("another shard warms %#x", got)
	}

	// A late delivery's claim moves the hint to its bucket, and the next
	// claim on time moves it back.
	late := int64(tsMillis - 60_000)
	claim(sigIn(3), late)
	next := sigIn(3)
	if got := s.warmAddr(next, tsMillis); got != 0 {
		t.Fatalf("after a late delivery's claim, one on time warms %#x", got)
	}
	claim(next, tsMillis)
	if got := s.warmAddr(sigIn(3), tsMillis); got == 0 {
		t.Fatal("a claim on time did not take the hint back")
	}
}

// Warming reads the hint without the shard's lock while claims publish it:
// the race detector sees atomics only, and the prefetch reads nothing.
func TestMemoryReplayStore_WarmBesideClaims(t *testing.T) {
	s, err := NewMemoryReplayStore(&MemoryReplayStoreOptions{MaxEntries: 1024})
	if err != nil {
		t.Fatal(err)
	}
	const tsMillis = 1_700_000_000_000
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 0))
			for i := range 2000 {
				var sig [sha256.Size]byte
				for j := range sig {
					sig[j] = byte(r.Uint32())
				}
				ts := tsMillis + int64(i)*7 // across spans: tables made, grown, dropped, evicted
				s.warm(&sig, ts)
				k, sh, index, now := s.delivery(&sig, ts)
				sh.claim(k, index, now, newStamp(now+int64(time.Second), true))
			}
		})
	}
	wg.Wait()
}

// The hint holds a table's address as a uintptr, which keeps nothing
// alive: once a table is garbage, the allocator may place another, of
// another length, at the same address (a large table's pages are handed
// out again whole). A bucket of the same index given such a table must
// get its own mask published, not keep the old table's, which would warm
// the wrong slot (or one past the table) for every claim of the span.
func TestWarmHint_PublishesATableOfAnotherLengthAtAReusedAddress(t *testing.T) {
	var h warmHint
	mem := make([]entrySlot, 64) // two tables, one after the other, at one address
	h.publish(&replayBucket{index: 7, seen: entryTable{slots: mem[:16:16]}})
	h.publish(&replayBucket{index: 7, seen: entryTable{slots: mem}})
	if got, want := h.mask.Load(), uint64(len(mem)-1); got != want {
		t.Fatalf("a table of %d slots at the address of one of 16: the hint's mask is %d, want %d", len(mem), got, want)
	}
}
