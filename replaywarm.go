package webhook

import (
	"crypto/sha256"
	"sync/atomic"
	"time"
	"unsafe"
)

// This file holds how a Verifier warms the slot its claim will read before
// it computes the HMAC. Between requests, the slots of a shard's newest
// bucket are out of the caches, and a claim that reads its slot waits for
// memory with the shard's lock held (internal/benchcmp's README, issue 29).
// The signature is known as soon as its header is parsed, a microsecond or
// so before the claim: a prefetch issued then overlaps the miss with the
// HMAC's work.

// warmHint is where a shard's next claim of a delivery will most likely
// go: the table of the bucket its last claim went to, which is the current
// span's while deliveries come on time. It is published under the shard's
// lock and read without it, so its three words may be seen stale or from
// two publications: they only ever choose an address to prefetch, which
// reads nothing and cannot fault, and are never dereferenced.
type warmHint struct {
	base  atomic.Uintptr // the address of the table's first slot
	mask  atomic.Uint64  // the table's length less one
	index atomic.Int64   // the bucket's index
}

// publish makes b's table the hint. A table moves when it grows, so its
// address is compared too, and its length: the address, a uintptr, keeps
// nothing alive, and once the table it was is garbage another of another
// length may be given it. Stored only when it changed, the hint costs a
// claim three loads.
func (h *warmHint) publish(b *replayBucket) {
	base := uintptr(unsafe.Pointer(unsafe.SliceData(b.seen.slots)))
	mask := uint64(len(b.seen.slots) - 1)
	if h.base.Load() == base && h.index.Load() == b.index && h.mask.Load() == mask {
		return
	}
	h.base.Store(base)
	h.mask.Store(mask)
	h.index.Store(b.index)
}

// warmAddr returns the address of the slot where a claim of the delivery
// signed sig at tsMillis will look first, or 0 when its bucket is not the
// hint's (or s has not been used).
func (s *MemoryReplayStore) warmAddr(sig *[sha256.Size]byte, tsMillis int64) uintptr {
	if !s.ready.Load() { // the seed is set before ready
		return 0
	}
	var k replayKey
	copy(k[:], sig[:])
	sh := s.shard(k)
	if sh.hot.index.Load() != tsMillis*int64(time.Millisecond)/replaySpan {
		return 0
	}
	return sh.hot.base.Load() + uintptr(sh.seed.hash(&k)&sh.hot.mask.Load())*unsafe.Sizeof(entrySlot{})
}

// warm prefetches the slot of warmAddr, when there is one; a nil s has none.
func (s *MemoryReplayStore) warm(sig *[sha256.Size]byte, tsMillis int64) {
	if s == nil {
		return
	}
	if p := s.warmAddr(sig, tsMillis); p != 0 {
		prefetch(p)
	}
}

// warmed returns the store v's claims read, for verify to warm: none when
// v allows replays (no claim) or was given another ReplayStore.
func (v *Verifier) warmed() *MemoryReplayStore {
	if v.allowReplays {
		return nil
	}
	return v.mem
}
