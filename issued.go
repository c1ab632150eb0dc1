package webhook

import (
	"hash/maphash"
	"sync"
)

// This file holds the timestamps a Sender signed lately, so that it never
// signs one body for one secret at one millisecond twice: the attempts of
// one delivery pass each other's timestamps already (delivery.sign), but
// Attempt keeps no state between calls, and two goroutines may send one
// payload at once.

const (
	issuedShards  = 16   // locks the bodies signed are spread over
	issuedKeep    = 1000 // how long a body's last timestamp is kept at least, in ms
	issuedMaxLead = 1000 // how far ahead of the clock a timestamp is moved at most, in ms
)

// issued is, per secret and body (a 64-bit hash of both), the last
// timestamp signed in the last second or two, by the Sender's clock. A
// timestamp is the current millisecond or later, so only those of this
// millisecond on could be signed again; a second's slack covers a call that
// read the clock and took the lock a while later. Two pairs whose hashes
// collide only share their timestamps: one goes out a millisecond later.
// Memory follows the bodies signed in two seconds at the most; a body sent
// many times at one instant costs one entry and one lookup each time.
type issued struct {
	seed   maphash.Seed
	shards [issuedShards]issuedShard
}

type issuedShard struct {
	mu     sync.Mutex
	last   map[uint64]int64 // hash of secret and body -> its last timestamp (Unix ms)
	pruned int64            // the clock's millisecond at the last pruning
}

func newIssued() *issued { return &issued{seed: maphash.MakeSeed()} }

// key returns the key of body signed with k's secret: a hash of the body
// and the secret's (connKey.hash).
func (is *issued) key(k *connKey, body []byte) uint64 { return maphash.Bytes(is.seed, body) ^ k.hash }

// next returns the timestamp to sign a body with for a secret, whose key
// is key: want, or the first millisecond after the last one signed for
// them if that is later, and records it. nowMs is the clock's millisecond.
// A body signed for one secret more than a thousand times a second,
// steadily, would run its timestamps ahead without end, out of receivers'
// windows: past issuedMaxLead ahead of the clock, it is signed at want
// again, a copy of one signed before rather than a delivery refused as too
// new.
func (is *issued) next(key uint64, want, nowMs int64) int64 {
	sh := &is.shards[key%issuedShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.last == nil {
		sh.last = make(map[uint64]int64)
	}
	if nowMs >= sh.pruned+issuedKeep || nowMs < sh.pruned { // once a second, O(1) a signature; and after the clock stepped back
		for k, t := range sh.last {
			if t < nowMs-issuedKeep {
				delete(sh.last, k)
			}
		}
		sh.pruned = nowMs
	}
	last, ok := sh.last[key]
	switch {
	case !ok || last < want:
		sh.last[key] = want
	case last+1 <= max(want, nowMs+issuedMaxLead):
		want = last + 1
		sh.last[key] = want
	}
	return want
}
