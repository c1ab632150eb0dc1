package webhook

import (
	"math"
	"slices"
)

// This file holds a MemoryReplayStore's shard: its entries in buckets by
// timestamp, found, claimed, settled, dropped as they expire and evicted
// when the shard is full. replay.go holds the store and its interface,
// replaytable.go a bucket's table.

// noIndex is the index of a key given without a timestamp: its entry is
// looked for in every bucket, and kept in the bucket of its expiry.
const noIndex = math.MinInt64

// claim records k as st in the bucket of index, unless it is there (or, for
// noIndex, in any bucket) and has not expired, and returns what it held.
func (sh *replayShard) claim(k replayKey, index, now int64, st stamp) ReplayState {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if now >= sh.nextDrop {
		sh.drop(now)
	}
	if index != noIndex { // the Verifier's: one bucket, one lookup
		b := sh.bucket(index)
		i, ok := b.seen.lookup(&k, sh.seed)
		if ok {
			if old := b.seen.slots[i].st; old.expiry() > now {
				return old.state()
			}
			sh.replace(b, i, st) // expired
			return ReplayUnseen
		}
		if sh.n >= sh.max {
			sh.evict()
			b, i = sh.bucket(index), -1 // where k goes is to be found again
		}
		sh.insert(b, i, &k, st)
		return ReplayUnseen
	}
	if _, _, old, ok := sh.find(k, index, now); ok {
		return old.state()
	}
	sh.put(k, index, now, st)
	return ReplayUnseen
}

// complete records k as st (handled), in place of a claim.
func (sh *replayShard) complete(k replayKey, index, now int64, st stamp) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if index != noIndex { // the Verifier's: its claim is in the bucket of index
		if b := sh.at(index); b != nil {
			if i, ok := b.seen.lookup(&k, sh.seed); ok { // the claim, or an expired entry
				sh.replace(b, i, st)
				return
			}
		}
	}
	if b, i, _, ok := sh.find(k, index, now); ok {
		sh.replace(b, i, st)
		return
	}
	sh.put(k, index, now, st) // its claim expired or was evicted
}

// release forgets k if it is being handled.
func (sh *replayShard) release(k replayKey, index, now int64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if b, i, old, ok := sh.find(k, index, now); ok && old.state() == ReplayHandling {
		sh.removeAt(b, i)
	}
}

// find returns the bucket holding a live entry for k, its slot, and the
// entry.
func (sh *replayShard) find(k replayKey, index, now int64) (*replayBucket, int, stamp, bool) {
	for j := len(sh.buckets) - 1; j >= 0; j-- {
		b := &sh.buckets[j]
		if index != noIndex && b.index != index {
			if b.index < index {
				break
			}
			continue
		}
		if i, ok := b.seen.lookup(&k, sh.seed); ok {
			if st := b.seen.slots[i].st; st.expiry() > now {
				return b, i, st, true
			}
		}
	}
	return nil, -1, 0, false
}

// put records k as st in the bucket of index (of st's expiry for noIndex),
// forgetting an entry of the oldest bucket when the shard is full.
func (sh *replayShard) put(k replayKey, index, now int64, st stamp) {
	if index == noIndex {
		index = st.expiry() / replaySpan
	}
	b := sh.bucket(index)
	i, ok := b.seen.lookup(&k, sh.seed)
	if ok {
		sh.replace(b, i, st) // expired
		return
	}
	if sh.n >= sh.max {
		sh.evict()
		b, i = sh.bucket(index), -1 // b is empty: evict took from another
	}
	sh.insert(b, i, &k, st)
}

// insert records k as st in b, at i, the empty slot b's lookup returned
// (-1: to be found), counted.
func (sh *replayShard) insert(b *replayBucket, i int, k *replayKey, st stamp) {
	b.seen.insert(i, k, st, sh.seed)
	sh.n++
	sh.extend(b, st)
}

// replace records st in b's slot i, which holds the same key.
func (sh *replayShard) replace(b *replayBucket, i int, st stamp) {
	b.seen.slots[i].st = st
	sh.extend(b, st)
}

// extend keeps b until st expires.
func (sh *replayShard) extend(b *replayBucket, st stamp) {
	b.until = max(b.until, st.expiry())
	sh.nextDrop = min(sh.nextDrop, b.until)
}

// at returns the bucket of index, or nil.
func (sh *replayShard) at(index int64) *replayBucket {
	for i := len(sh.buckets) - 1; i >= 0 && sh.buckets[i].index >= index; i-- {
		if sh.buckets[i].index == index {
			return &sh.buckets[i]
		}
	}
	return nil
}

// bucket returns the bucket of index, made if need be. Most deliveries are
// on time: their bucket is the last. The pointer holds until the shard's
// buckets change.
func (sh *replayShard) bucket(index int64) *replayBucket {
	i := len(sh.buckets)
	for i > 0 && sh.buckets[i-1].index >= index {
		if sh.buckets[i-1].index == index {
			return &sh.buckets[i-1]
		}
		i--
	}
	// A bucket after the newest is the next span of arrivals on time: the
	// room the newest needed, as they come at a rate. Any other (a late
	// delivery's, a key's of another TTL) starts small and grows with its
	// own entries: sized by another bucket, every one of a shard's buckets
	// could take the room of the largest, and memory would grow with the
	// square of MaxEntries.
	hint := 0
	if i == len(sh.buckets) && i > 0 {
		hint = sh.buckets[i-1].seen.n
	}
	b := replayBucket{index: index}
	b.seen.slots = sh.spareFor(slotsFor(hint))
	sh.buckets = slices.Insert(sh.buckets, i, b)
	return &sh.buckets[i]
}

// spareFor returns slots for a table of size slots: a spare one, which
// keeps its room (no garbage, no growing), when one is at most twice as
// large, or new ones. A larger spare is left for a larger bucket, rather
// than held by one of a few entries until it expires.
func (sh *replayShard) spareFor(size int) []entrySlot {
	for j := len(sh.spare) - 1; j >= 0; j-- {
		if s := sh.spare[j]; len(s) <= 2*size {
			sh.spare = slices.Delete(sh.spare, j, j+1)
			return s
		}
	}
	return make([]entrySlot, size)
}

// drop forgets the buckets whose every entry has expired.
func (sh *replayShard) drop(now int64) {
	next := int64(math.MaxInt64)
	sh.buckets = slices.DeleteFunc(sh.buckets, func(b replayBucket) bool {
		if b.until > now {
			next = min(next, b.until)
			return false
		}
		sh.n -= b.seen.n
		sh.recycle(&b)
		return true
	})
	sh.nextDrop = next
}

// evict forgets an entry of the oldest bucket, the soonest to leave the
// window, to make room.
func (sh *replayShard) evict() {
	for j := range sh.buckets { // one may be empty: made for the entry to come
		b := &sh.buckets[j]
		if i := b.seen.first(); i >= 0 {
			sh.removeAt(b, i)
			return
		}
	}
}

// removeAt forgets the entry in b's slot i, and b once it is empty: a
// table emptied one entry at a time keeps the room it grew to, so an empty
// bucket goes at once rather than at its expiry.
func (sh *replayShard) removeAt(b *replayBucket, i int) {
	b.seen.deleteAt(i, sh.seed)
	sh.n--
	if b.seen.n == 0 {
		index := b.index
		sh.recycle(b)
		sh.buckets = slices.DeleteFunc(sh.buckets, func(x replayBucket) bool { return x.index == index })
	}
}

// recycle keeps the slots of a bucket that is gone for a new one, unless
// enough are kept.
func (sh *replayShard) recycle(b *replayBucket) {
	if len(sh.spare) < maxSpare {
		b.seen.reset()
		sh.spare = append(sh.spare, b.seen.slots)
	}
	b.seen = entryTable{}
}
