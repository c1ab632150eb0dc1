package webhook

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// This file holds replay refusal: the ReplayStore interface a Verifier
// remembers accepted signatures in, and MemoryReplayStore, its default.

// ErrReplayed is matched by the error of a delivery whose signature a
// [Verifier] accepted before, within the window. It matches
// [ErrVerification]: the sender signs every attempt afresh, so a genuine
// retry never repeats a signature and an exact repeat is a replay (from a
// log, a proxy, a shared debugging session). One corner: two connections of
// one customer with the same URL and secret, sent the same body in the same
// millisecond, carry one signature; the second is refused once, and its
// retry, signed afresh, is accepted.
var ErrReplayed = verificationError("webhook: replayed delivery")

// ErrReplayStore is matched by the error of a delivery that verified but
// whose signature could not be checked against the [ReplayStore], because
// the store failed (a shared store that cannot be reached, say). It does not
// match [ErrVerification]: the delivery may be authentic. Middleware and
// NewHandler answer it 503, so that the sender retries later.
var ErrReplayStore = errors.New("webhook: cannot check for a replay")

// ReplayStore remembers keys for a while: the signatures a [Verifier]
// accepted, until they leave its window. Receivers running several
// instances share one, so that a delivery accepted by one instance is
// refused as a replay by all.
//
// Add records key for ttl unless it is recorded already and has not
// expired, and reports whether it recorded it: true the first time, false
// for a repeat. It must be atomic, so that of two concurrent calls with one
// key, on any instance, exactly one returns true: Redis's
// "SET key 1 NX PX <ttl in ms>" is such an operation (added is true when it
// answers OK), as is memcached's add. An error refuses the delivery with an
// error matching [ErrReplayStore].
//
// The Verifier calls Add only for deliveries that are authentic and within
// its window, with ctx the request's context (context.Background for
// [Verifier.Verify]), key the delivery's signature as 64 lowercase hex digits
// (an HMAC: it reveals nothing of the secret or the body), and ttl the time
// until the delivery's timestamp leaves the window, at most twice the
// tolerance and a millisecond. A store may prefix the key with a namespace of
// its own. Add is called concurrently.
type ReplayStore interface {
	Add(ctx context.Context, key string, ttl time.Duration) (added bool, err error)
}

// DefaultMaxReplayEntries is how many signatures a [MemoryReplayStore]
// remembers at most: 1,048,576, which covers 3,400 deliveries per second
// arriving on time in a 5-minute window.
const DefaultMaxReplayEntries = 1 << 20

// MemoryReplayStoreOptions configures a [MemoryReplayStore]. A nil
// *MemoryReplayStoreOptions, or a zero field, selects the documented
// default.
type MemoryReplayStoreOptions struct {
	// MaxEntries bounds how many keys the store holds. Zero means
	// DefaultMaxReplayEntries; negative is an error.
	MaxEntries int

	// Now returns the current time, by which entries expire. Nil means
	// time.Now.
	Now func() time.Time
}

// MemoryReplayStore is the [ReplayStore] of one process, the default of a
// [Verifier]: entries spread over 64 shards, each with its own lock, and
// expire by time.
//
// Memory is bounded by MaxEntries. Each key is kept as 128 bits (see Add)
// with its expiry, in maps of 30 seconds of delivery timestamps each, which
// are dropped whole once their last entry has expired: no entry is deleted
// one by one, and the map a delivery goes into is small and warm. An entry
// takes about 46 bytes with the room maps keep to grow. At 1,000 deliveries
// per second arriving on time, a 5-minute window holds 300,000 entries:
// about 13 MiB (measured by TestMemoryReplayStore_MemoryPer1000PerSecond),
// and at the default bound, DefaultMaxReplayEntries, about 50 MiB. A shard
// that is full forgets an entry of its oldest timestamps to make room, which
// lets that one delivery be replayed until it leaves the window: size
// MaxEntries above twice the tolerance times your peak rate.
//
// A MemoryReplayStore is safe for concurrent use. Add never blocks on
// anything but a shard's lock.
type MemoryReplayStore struct {
	now    func() time.Time
	shards [replayShards]replayShard
}

const (
	replayShards = 64
	replaySpan   = int64(5 * time.Second) // of timestamps in one bucket
	maxSpare     = 4                      // maps kept for reuse per shard
)

// replayKey is an entry's key: the first 128 bits of a signature digest.
type replayKey [16]byte

type replayShard struct {
	mu       sync.Mutex
	buckets  []*replayBucket // in order of index
	n        int             // entries in all buckets, some maybe expired
	max      int
	nextDrop int64                 // no bucket can be dropped before, Unix ns by the store's clock
	spare    []map[replayKey]int64 // maps of dropped buckets, cleared, for new ones
}

// replayBucket holds the keys of the deliveries whose timestamps fall in
// one span (for keys given to Add, whose expiries do).
type replayBucket struct {
	index int64               // timestamp / replaySpan
	until int64               // when its last entry expires
	seen  map[replayKey]int64 // key -> expiry
}

// NewMemoryReplayStore returns an empty MemoryReplayStore configured by
// opts, which may be nil. It fails when an option is out of range.
func NewMemoryReplayStore(opts *MemoryReplayStoreOptions) (*MemoryReplayStore, error) {
	if opts == nil {
		opts = &MemoryReplayStoreOptions{}
	}
	maxEntries := opts.MaxEntries
	switch {
	case maxEntries < 0:
		return nil, fmt.Errorf("webhook: MaxEntries must not be negative, got %d", maxEntries)
	case maxEntries == 0:
		maxEntries = DefaultMaxReplayEntries
	}
	s := &MemoryReplayStore{now: opts.Now}
	if s.now == nil {
		s.now = time.Now
	}
	perShard := max(1, (maxEntries+replayShards-1)/replayShards)
	for i := range s.shards {
		s.shards[i].max = perShard
	}
	return s, nil
}

// Add records key for ttl unless it is recorded already and has not
// expired, and reports whether it recorded it. It never fails. A key of 64
// hex digits (what a Verifier gives) is kept as the first 16 bytes it
// encodes, any other key as the first 16 bytes of its SHA-256: two keys
// collide with a probability of 2^-128.
func (s *MemoryReplayStore) Add(_ context.Context, key string, ttl time.Duration) (bool, error) {
	var digest [sha256.Size]byte
	if len(key) == 2*sha256.Size && hexDigits(key) {
		hex.Decode(digest[:], []byte(key))
	} else {
		digest = sha256.Sum256([]byte(key))
	}
	var k replayKey
	copy(k[:], digest[:])
	now := s.now().UnixNano()
	// Without a timestamp, a key's bucket is its expiry's: look in all.
	return s.shard(k).add(k, (now+int64(ttl))/replaySpan, now, ttl, true), nil
}

func hexDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if unhexTable[s[i]] > 0xf {
			return false
		}
	}
	return true
}

// Len returns how many keys the store holds that have not expired. It
// looks at every entry, taking every shard's lock in turn.
func (s *MemoryReplayStore) Len() int {
	now := s.now().UnixNano()
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.drop(now)
		for _, b := range sh.buckets {
			for _, exp := range b.seen {
				if exp > now {
					n++
				}
			}
		}
		sh.mu.Unlock()
	}
	return n
}

func (s *MemoryReplayStore) shard(k replayKey) *replayShard {
	return &s.shards[k[0]%replayShards] // the key is an HMAC: uniform already
}

// addDelivery is Add for a delivery with timestamp tsMillis, whose key is
// in the bucket of its timestamp: the Verifier's path, one map lookup.
func (s *MemoryReplayStore) addDelivery(k replayKey, tsMillis int64, ttl time.Duration) bool {
	now := s.now().UnixNano()
	return s.shard(k).add(k, tsMillis*int64(time.Millisecond)/replaySpan, now, ttl, false)
}

// add records k, expiring ttl after now, in the bucket of index, unless it
// is there (or, with everywhere, in any bucket) and has not expired.
func (sh *replayShard) add(k replayKey, index, now int64, ttl time.Duration, everywhere bool) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if now >= sh.nextDrop {
		sh.drop(now)
	}
	if everywhere {
		for _, b := range sh.buckets {
			if exp, ok := b.seen[k]; ok && exp > now {
				return false
			}
		}
	}
	b := sh.bucket(index)
	if exp, ok := b.seen[k]; ok {
		if exp > now {
			return false
		}
		sh.n-- // expired: replaced below
	}
	if sh.n >= sh.max {
		sh.evict()
	}
	exp := now + int64(ttl)
	b.seen[k] = exp
	sh.n++
	if exp > b.until {
		b.until = exp
	}
	return true
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
		b.seen = make(map[replayKey]int64)
	}
	sh.buckets = slices.Insert(sh.buckets, i, b)
	sh.nextDrop = math.MinInt64 // until b.until is known: drop recomputes it
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
		if len(sh.spare) < maxSpare {
			clear(b.seen)
			sh.spare = append(sh.spare, b.seen)
		}
		return true
	})
	sh.nextDrop = next
}

// evict forgets an entry of the oldest bucket, the soonest to leave the
// window, to make room.
func (sh *replayShard) evict() {
	for _, b := range sh.buckets {
		for k := range b.seen {
			delete(b.seen, k)
			sh.n--
			return
		}
	}
}

// checkReplay records the accepted signature sig of a delivery with
// timestamp ts (Unix ms), verified at now with tolerance tol, and refuses
// it when it was recorded before. The entry lives until ts leaves the
// window: checkWindow accepts an age of exactly tol.
func (v *Verifier) checkReplay(ctx context.Context, sig *[sha256.Size]byte, ts int64, now time.Time, tol time.Duration) error {
	ttl := time.Duration(ts+tol.Milliseconds()+1-now.UnixMilli()) * time.Millisecond
	var added bool
	if v.mem != nil {
		var k replayKey
		copy(k[:], sig[:])
		added = v.mem.addDelivery(k, ts, ttl)
	} else {
		var err error
		added, err = v.store.Add(ctx, hex.EncodeToString(sig[:]), ttl)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrReplayStore, err)
		}
	}
	if !added {
		return fmt.Errorf("%w: this signature was accepted before, within the window; the sender signs every attempt afresh, so this is a copy", ErrReplayed)
	}
	return nil
}
