package webhook

import (
	"math"
	"slices"
)

// This file holds a MemoryReplayStore's shard: its entries in buckets by
// timestamp, found, claimed, settled, dropped as they expire and evicted
// when the shard is full. replay.go holds the store and its interface.

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
		if old, ok := b.seen[k]; ok {
			if old.expiry() > now {
				return old.state()
			}
			sh.n-- // expired: replaced below
		} else if sh.n >= sh.max {
			sh.evict()
			b = sh.bucket(index)
		}
		sh.store(b, k, st)
		return ReplayUnseen
	}
	if _, old, ok := sh.find(k, index, now); ok {
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
			n := len(b.seen)
			b.seen[k] = st // one lookup: the claim, or an expired entry, replaced
			if len(b.seen) == n {
				b.until = max(b.until, st.expiry())
				sh.nextDrop = min(sh.nextDrop, b.until)
				return
			}
			delete(b.seen, k) // the claim was evicted: put counts and bounds it
		}
	}
	if b, _, ok := sh.find(k, index, now); ok {
		b.seen[k] = st
		b.until = max(b.until, st.expiry())
		sh.nextDrop = min(sh.nextDrop, b.until)
		return
	}
	sh.put(k, index, now, st) // its claim expired or was evicted
}

// release forgets k if it is being handled.
func (sh *replayShard) release(k replayKey, index, now int64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if b, old, ok := sh.find(k, index, now); ok && old.state() == ReplayHandling {
		sh.remove(b, k)
	}
}

// find returns the bucket holding a live entry for k, and the entry.
func (sh *replayShard) find(k replayKey, index, now int64) (*replayBucket, stamp, bool) {
	for i := len(sh.buckets) - 1; i >= 0; i-- {
		b := sh.buckets[i]
		if index != noIndex && b.index != index {
			if b.index < index {
				break
			}
			continue
		}
		if st, ok := b.seen[k]; ok && st.expiry() > now {
			return b, st, true
		}
	}
	return nil, 0, false
}

// put records k as st in the bucket of index (of st's expiry for noIndex),
// forgetting an entry of the oldest bucket when the shard is full.
func (sh *replayShard) put(k replayKey, index, now int64, st stamp) {
	if index == noIndex {
		index = st.expiry() / replaySpan
	}
	b := sh.bucket(index)
	if _, ok := b.seen[k]; ok {
		sh.n-- // expired: replaced below
	} else if sh.n >= sh.max {
		sh.evict()
		b = sh.bucket(index) // b is empty: evict took from another
	}
	sh.store(b, k, st)
}

// store records k as st in b, counted.
func (sh *replayShard) store(b *replayBucket, k replayKey, st stamp) {
	b.seen[k] = st
	sh.n++
	b.until = max(b.until, st.expiry())
	sh.nextDrop = min(sh.nextDrop, b.until)
}

// at returns the bucket of index, or nil.
func (sh *replayShard) at(index int64) *replayBucket {
	for i := len(sh.buckets) - 1; i >= 0 && sh.buckets[i].index >= index; i-- {
		if sh.buckets[i].index == index {
			return sh.buckets[i]
		}
	}
	return nil
}

// bucket returns the bucket of index, made if need be. Most deliveries are
// on time: their bucket is the last.
func (sh *replayShard) bucket(index int64) *replayBucket {
	i := len(sh.buckets)
	for i > 0 && sh.buckets[i-1].index >= index {
		if sh.buckets[i-1].index == index {
			return sh.buckets[i-1]
		}
		i--
	}
	b := &replayBucket{index: index}
	if n := len(sh.spare); n > 0 { // keeps its room: no garbage, no growing
		b.seen, sh.spare = sh.spare[n-1], sh.spare[:n-1]
	} else {
		hint := 0 // the room the newest bucket needed: arrivals come at a rate
		if n := len(sh.buckets); n > 0 {
			hint = len(sh.buckets[n-1].seen)
		}
		b.seen = make(map[replayKey]stamp, hint)
	}
	sh.buckets = slices.Insert(sh.buckets, i, b)
	return b
}

// drop forgets the buckets whose every entry has expired.
func (sh *replayShard) drop(now int64) {
	next := int64(math.MaxInt64)
	sh.buckets = slices.DeleteFunc(sh.buckets, func(b *replayBucket) bool {
		if b.until > now {
			next = min(next, b.until)
			return false
		}
		sh.n -= len(b.seen)
		sh.recycle(b)
		return true
	})
	sh.nextDrop = next
}

// evict forgets an entry of the oldest bucket, the soonest to leave the
// window, to make room.
func (sh *replayShard) evict() {
	for _, b := range sh.buckets {
		for k := range b.seen {
			sh.remove(b, k)
			return
		}
	}
}

// remove forgets k of b, and b once it is empty: a map emptied one entry
// at a time keeps the room it grew to, so an empty bucket goes at once
// rather than at its expiry.
func (sh *replayShard) remove(b *replayBucket, k replayKey) {
	delete(b.seen, k)
	sh.n--
	if len(b.seen) == 0 {
		sh.buckets = slices.DeleteFunc(sh.buckets, func(x *replayBucket) bool { return x == b })
		sh.recycle(b)
	}
}

// recycle keeps the map of a bucket that is gone for a new one, unless
// enough are kept.
func (sh *replayShard) recycle(b *replayBucket) {
	if len(sh.spare) < maxSpare {
		clear(b.seen)
		sh.spare = append(sh.spare, b.seen)
	}
	b.seen = nil
}
