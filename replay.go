package webhook

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// This file holds the memory of signatures: the ReplayStore interface a
// Verifier remembers deliveries in (being handled, or handled), and
// MemoryReplayStore, its default; once.go holds how the Verifier uses it.

// ErrReplayed is matched by the error of a delivery whose signature a
// [Verifier] accepted before, within the window, when it is verified without
// a handler ([Verifier.Verify], [Verifier.VerifyRequest]). It matches
// [ErrVerification]. The sender signs every attempt afresh, with a
// timestamp later than the attempt before, so its retry never repeats a
// signature; an exact repeat is a copy (a proxy's retry, a stored request)
// or a replay. [Verifier.Middleware] and [NewHandler] do not refuse a copy:
// they acknowledge it (see [Verifier.Middleware]).
var ErrReplayed = verificationError("webhook: replayed delivery")

// ErrInProgress is matched by the error of a copy of a delivery whose
// handler is still running, on this instance or, with a shared
// [ReplayStore], on another. It does not match [ErrVerification]: the copy
// is authentic. Middleware and NewHandler answer it 409 with a Retry-After
// header, so that the sender tries again once the first has an outcome.
var ErrInProgress = errors.New("webhook: delivery is being handled")

// ErrReplayStore is matched by the error of a delivery that verified but
// whose signature could not be checked against the [ReplayStore], because
// the store failed (a shared store that cannot be reached, say). It does not
// match [ErrVerification]: the delivery may be authentic. Middleware and
// NewHandler answer it 503, so that the sender retries later.
var ErrReplayStore = errors.New("webhook: cannot check for a replay")

// ReplayState is what a [ReplayStore] holds for a delivery's signature.
type ReplayState int

const (
	// ReplayUnseen: nothing is recorded, or what was has expired.
	ReplayUnseen ReplayState = iota
	// ReplayHandling: a handler is running for the delivery (a claim).
	ReplayHandling
	// ReplayHandled: the delivery was accepted (Verify) or handled (2xx).
	ReplayHandled
)

// String returns "unseen", "handling" or "handled".
func (s ReplayState) String() string {
	switch s {
	case ReplayUnseen:
		return "unseen"
	case ReplayHandling:
		return "handling"
	case ReplayHandled:
		return "handled"
	}
	return "ReplayState(" + strconv.Itoa(int(s)) + ")"
}

// ReplayStore remembers the signatures of deliveries for a while, with what
// became of each: being handled, or handled. Receivers running several
// instances share one, so that a delivery is handled once by all: a copy
// that reaches another instance is acknowledged there, not handled again.
//
// The Verifier calls it only for deliveries that are authentic and within
// its window, with ctx the request's context (context.Background for
// [Verifier.Verify]; without its cancellation once the handler has
// returned), key the delivery's signature as 64 lowercase hex digits (an
// HMAC: it reveals nothing of the secret or the body), and ttl the time
// until the delivery's timestamp leaves the window, at most twice the
// tolerance and a millisecond. A store may prefix the key with a namespace
// of its own. Each method is called concurrently, and each must be atomic:
// of two concurrent Add or Claim calls with one key, on any instance,
// exactly one records it. An error refuses the delivery with an error
// matching [ErrReplayStore] (Add, Claim), or is logged (Complete, Release).
//
// The Redis commands of each method, as a shared store sends them (Claim's
// GET option needs Redis 7.0 or later):
//
//	Add:      SET key handled NX PX <ttl in ms>         -> added when OK
//	Claim:    SET key handling NX PX <lease in ms> GET  -> nil: ReplayUnseen; else the value held
//	Complete: SET key handled PX <ttl in ms>
//	Release:  EVAL "if redis.call('GET', KEYS[1]) == 'handling' then return redis.call('DEL', KEYS[1]) end return 0" 1 key
type ReplayStore interface {
	// Add records key as handled for ttl unless it is recorded already,
	// in any state, and has not expired, and reports whether it recorded
	// it. Verifier.Verify uses it: true the first time, false for a copy.
	Add(ctx context.Context, key string, ttl time.Duration) (added bool, err error)

	// Claim records key as being handled for lease unless it is recorded
	// already and has not expired, and returns what it held: ReplayUnseen
	// when it recorded the claim, so that the caller runs the handler;
	// ReplayHandling or ReplayHandled otherwise. The lease bounds how long
	// a claim whose instance died blocks the delivery's copies.
	Claim(ctx context.Context, key string, lease time.Duration) (ReplayState, error)

	// Complete records key as handled for ttl, whatever it held: the
	// handler answered 2xx.
	Complete(ctx context.Context, key string, ttl time.Duration) error

	// Release forgets key if it is being handled, and leaves it if it was
	// handled: the handler failed or panicked, and the delivery's copy is
	// to be handled.
	Release(ctx context.Context, key string) error
}

// DefaultMaxReplayEntries is how many signatures a [MemoryReplayStore]
// remembers at most: 1,048,576, which covers 1,700 deliveries per second
// over twice the window (a delivery may arrive up to the tolerance early or
// late).
const DefaultMaxReplayEntries = 1 << 20

// DefaultHandlerLease is how long a copy of a delivery whose handler is
// running is asked to come back later, when the handler does not end
// meanwhile: the bound on how long an instance that died mid-handler blocks
// the copy, with a shared [ReplayStore].
const DefaultHandlerLease = time.Minute

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
// expire by time. The zero MemoryReplayStore is ready to use, with the
// defaults of NewMemoryReplayStore(nil).
//
// Memory is bounded by MaxEntries, whatever the arrival rate. Each key is
// kept as 128 bits (see Add) with its expiry, in tables of 5 seconds of
// delivery timestamps each, which are dropped whole once their last entry
// has expired, or once eviction or Release has emptied them; a table is
// never kept with fewer entries than it had room for. An entry takes about
// 41 bytes with the room tables keep to grow (a slot is 24 bytes, a table
// at most 3/4 full). At 1,000 deliveries per second arriving on time, a
// 5-minute window holds 300,000 entries: about 12 MiB (measured by
// TestMemoryReplayStore_MemoryPer1000PerSecond), and at the default bound,
// DefaultMaxReplayEntries, about 41 MiB. A shard that is full
// forgets an entry of its oldest timestamps to make room, which lets that
// one delivery be handled again until it leaves the window: size MaxEntries
// above twice the tolerance times your peak rate.
//
// A MemoryReplayStore is safe for concurrent use. No method blocks on
// anything but a shard's lock, and none fails.
type MemoryReplayStore struct {
	ready   atomic.Bool // set up: by NewMemoryReplayStore, or on first use of a zero store
	setupMu sync.Mutex  // held to set a zero store up
	now     func() time.Time
	used    int // shards in use: replayShards, or MaxEntries when fewer
	shards  [replayShards]replayShard
}

const (
	replayShards = 64
	replaySpan   = int64(5 * time.Second) // of timestamps in one bucket
	maxSpare     = 4                      // tables' slots kept for reuse per shard
)

// replayKey is an entry's key: the first 128 bits of a signature digest.
type replayKey [16]byte

// stamp is an entry: its expiry in Unix nanoseconds by the store's clock,
// whose lowest bit is set while the delivery is being handled (a claim).
type stamp int64

func newStamp(expiry int64, handling bool) stamp {
	s := stamp(expiry &^ 1)
	if handling {
		s |= 1
	}
	if s == 0 { // an empty slot's (entrySlot): expire 2 ns later
		s = 2
	}
	return s
}

// expiryAt is now (Unix ns) plus d, saturated: a huge TTL or lease never
// wraps round into an expiry in the past, nor a hugely negative one (on a
// clock before 1970) into one far ahead.
func expiryAt(now int64, d time.Duration) int64 {
	switch {
	case d > 0 && now > math.MaxInt64-int64(d):
		return math.MaxInt64
	case d < 0 && now < math.MinInt64-int64(d):
		return math.MinInt64
	}
	return now + int64(d)
}

func (s stamp) expiry() int64 { return int64(s &^ 1) }

func (s stamp) state() ReplayState {
	if s&1 == 1 {
		return ReplayHandling
	}
	return ReplayHandled
}

type replayShard struct {
	mu       sync.Mutex
	nextDrop int64          // no bucket can be dropped before, Unix ns by the store's clock
	buckets  []replayBucket // in order of index, none empty
	seed     hashSeed       // the store's
	n        int            // entries in all buckets, some maybe expired
	max      int
	spare    [][]entrySlot // slots of dropped buckets, cleared, for new ones
}

// replayBucket holds the keys of the deliveries whose timestamps fall in
// one span (for keys given without a timestamp, whose expiries do).
type replayBucket struct {
	index int64 // timestamp / replaySpan
	until int64 // when its last entry expires, or later
	seen  entryTable
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
	s := &MemoryReplayStore{}
	s.setup(maxEntries, opts.Now)
	s.ready.Store(true)
	return s, nil
}

// setup configures s for maxEntries and the clock now (nil: time.Now).
func (s *MemoryReplayStore) setup(maxEntries int, now func() time.Time) {
	s.now = now
	if s.now == nil {
		s.now = time.Now
	}
	// MaxEntries split over the shards in use, each holding one at least:
	// the bound is MaxEntries exactly.
	s.used = min(replayShards, maxEntries)
	seed := hashSeed{rand.Uint64(), rand.Uint64()}
	for i := range s.used {
		s.shards[i].seed = seed
		s.shards[i].max = maxEntries / s.used
		if i < maxEntries%s.used {
			s.shards[i].max++
		}
	}
}

// init sets a zero MemoryReplayStore (a literal, not made by
// NewMemoryReplayStore) up with the defaults on its first use.
func (s *MemoryReplayStore) init() {
	if s.ready.Load() {
		return
	}
	s.setupMu.Lock()
	defer s.setupMu.Unlock()
	if !s.ready.Load() {
		s.setup(DefaultMaxReplayEntries, nil)
		s.ready.Store(true)
	}
}

// Add records key as handled for ttl unless it is recorded already and
// has not expired, and reports whether it recorded it. It never fails. A
// key of 64 hex digits (what a Verifier gives) is kept as the first 16
// bytes it encodes, any other key as the first 16 bytes of its SHA-256: two
// keys collide with a probability of 2^-128.
func (s *MemoryReplayStore) Add(_ context.Context, key string, ttl time.Duration) (bool, error) {
	k, sh, now := s.locate(key)
	return sh.claim(k, noIndex, now, newStamp(expiryAt(now, ttl), false)) == ReplayUnseen, nil
}

// Claim records key as being handled for lease unless it is recorded
// already and has not expired, and returns what it held. It never fails.
func (s *MemoryReplayStore) Claim(_ context.Context, key string, lease time.Duration) (ReplayState, error) {
	k, sh, now := s.locate(key)
	return sh.claim(k, noIndex, now, newStamp(expiryAt(now, lease), true)), nil
}

// Complete records key as handled for ttl. It never fails.
func (s *MemoryReplayStore) Complete(_ context.Context, key string, ttl time.Duration) error {
	k, sh, now := s.locate(key)
	sh.complete(k, noIndex, now, newStamp(expiryAt(now, ttl), false))
	return nil
}

// Release forgets key if it is being handled. It never fails.
func (s *MemoryReplayStore) Release(_ context.Context, key string) error {
	k, sh, now := s.locate(key)
	sh.release(k, noIndex, now)
	return nil
}

// locate returns key's entry key, its shard and the current time.
func (s *MemoryReplayStore) locate(key string) (replayKey, *replayShard, int64) {
	s.init()
	var digest [sha256.Size]byte
	if len(key) == 2*sha256.Size && hexDigits(key) {
		hex.Decode(digest[:], []byte(key))
	} else {
		digest = sha256.Sum256([]byte(key))
	}
	var k replayKey
	copy(k[:], digest[:])
	return k, s.shard(k), s.now().UnixNano()
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
	s.init()
	now := s.now().UnixNano()
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.drop(now)
		for _, b := range sh.buckets {
			for _, e := range b.seen.slots {
				if e.st != 0 && e.st.expiry() > now {
					n++
				}
			}
		}
		sh.mu.Unlock()
	}
	return n
}

func (s *MemoryReplayStore) shard(k replayKey) *replayShard {
	return &s.shards[int(k[0])%s.used] // the key is an HMAC: uniform already
}

// The Verifier's paths: the key is the signature's digest, and it lives in
// the bucket of the delivery's timestamp, one map lookup away.

func (s *MemoryReplayStore) delivery(sig *[sha256.Size]byte, tsMillis int64) (replayKey, *replayShard, int64, int64) {
	k, sh, index := s.at(sig, tsMillis)
	return k, sh, index, s.now().UnixNano()
}

// at is delivery without the clock.
func (s *MemoryReplayStore) at(sig *[sha256.Size]byte, tsMillis int64) (replayKey, *replayShard, int64) {
	s.init()
	var k replayKey
	copy(k[:], sig[:])
	return k, s.shard(k), tsMillis * int64(time.Millisecond) / replaySpan
}
