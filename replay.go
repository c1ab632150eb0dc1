package webhook

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// This file holds the replay memory: the ReplayStore interface a Verifier
// remembers deliveries in (being handled, or handled), MemoryReplayStore,
// its default, and how a Verifier consults it.

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
// the store failed (a shared store that cannot be reached, say), or the
// memory store let go of what it knew of the delivery's time while the
// delivery was held, more than 5 seconds, before it could look. It does not
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
// [Verifier]. The zero MemoryReplayStore is ready to use, with the defaults
// of NewMemoryReplayStore(nil).
//
// It holds at most MaxEntries keys, whatever the arrival rate. Each key is
// kept as 128 bits (see Add) with its expiry, in Go maps: one per 5 seconds
// of delivery timestamps, all under one lock. A map is dropped whole 5
// seconds after its last entry has expired, so that a claim judged by its
// window's time still finds it. An entry takes 43 to 54 bytes, with the room
// its map keeps to grow. Deliveries on time, over the 5-minute window
// (measured by TestMemoryReplayStore_MemoryPer1000PerSecond):
//
//   - 100 a second: 30,000 entries, about 1.6 MiB;
//   - 1,000 a second: 300,000 entries, about 12.5 MiB;
//   - at the default bound, DefaultMaxReplayEntries: about 50 MiB.
//
// A key given to Add, Claim, Complete or Release is looked for in every
// map, since nothing tells its timestamp (a Verifier passes it, and looks in
// one): a lookup per 5 seconds that the expiries held span, at most 121 at
// a Verifier's TTLs. Keys whose expiries lie hours apart cost as many more.
// A Verifier given the store itself looks for a delivery in its
// timestamp's map alone, and so does not see a key given to these methods:
// give a store that several Verifiers share to each of them alike, itself
// or wrapped.
//
// A full store forgets an entry of its oldest timestamps to make room. That
// one delivery may then be handled again until it leaves the window: size
// MaxEntries above twice the tolerance times your peak rate.
//
// A MemoryReplayStore is safe for concurrent use. No method blocks on
// anything but the store's lock, and none fails. A delivery holds the lock
// twice, for about 60 ns each in memory (BenchmarkReplayClaim): a receiver
// verifying 100,000 deliveries a second holds it about 1% of the time.
type MemoryReplayStore struct {
	ready   atomic.Bool // set up: by NewMemoryReplayStore, or on first use of a zero store
	setupMu sync.Mutex  // held to set a zero store up
	now     func() time.Time
	system  bool // now is time.Now: the clock of a Verifier without VerifierOptions.Now
	entries replayEntries
}

const replaySpan = 5 * time.Second // of timestamps in one bucket

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
	return s
}

func (s stamp) expiry() int64 { return int64(s &^ 1) }

func (s stamp) state() ReplayState {
	if s&1 == 1 {
		return ReplayHandling
	}
	return ReplayHandled
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
	s.now, s.system = now, now == nil
	if s.now == nil {
		s.now = time.Now
	}
	s.entries.max = maxEntries
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
	k, now := s.locate(key)
	return s.entries.claim(k, noIndex, now, newStamp(expiryAt(now, ttl), false)) == ReplayUnseen, nil
}

// Claim records key as being handled for lease unless it is recorded
// already and has not expired, and returns what it held. It never fails.
func (s *MemoryReplayStore) Claim(_ context.Context, key string, lease time.Duration) (ReplayState, error) {
	k, now := s.locate(key)
	return s.entries.claim(k, noIndex, now, newStamp(expiryAt(now, lease), true)), nil
}

// Complete records key as handled for ttl. It never fails.
func (s *MemoryReplayStore) Complete(_ context.Context, key string, ttl time.Duration) error {
	k, now := s.locate(key)
	s.entries.complete(k, noIndex, now, newStamp(expiryAt(now, ttl), false))
	return nil
}

// Release forgets key if it is being handled. It never fails.
func (s *MemoryReplayStore) Release(_ context.Context, key string) error {
	k, now := s.locate(key)
	s.entries.release(k, noIndex, now)
	return nil
}

// Len returns how many keys the store holds that have not expired. It
// looks at every entry under the store's lock, which deliveries then wait
// for: about 11 ms at the default bound. It is for tests and diagnosis,
// not for every request.
func (s *MemoryReplayStore) Len() int {
	s.init()
	now := s.now().UnixNano()
	m := &s.entries
	m.mu.Lock()
	defer m.mu.Unlock()
	m.drop(now)
	n := 0
	for _, b := range m.buckets {
		for _, st := range b.seen {
			if st.expiry() > now {
				n++
			}
		}
	}
	return n
}

// locate returns key's entry key and the current time.
func (s *MemoryReplayStore) locate(key string) (replayKey, int64) {
	s.init()
	var digest [sha256.Size]byte
	if len(key) == 2*sha256.Size && hexDigits(key) {
		hex.Decode(digest[:], []byte(key))
	} else {
		digest = sha256.Sum256([]byte(key))
	}
	var k replayKey
	copy(k[:], digest[:])
	return k, s.now().UnixNano()
}

func hexDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if unhexTable[s[i]] > 0xf {
			return false
		}
	}
	return true
}

// delivery returns the entry key of a delivery's signature digest and the
// index of the bucket of its timestamp (Unix ms): the Verifier's way in,
// without a key to encode and decode.
func (s *MemoryReplayStore) delivery(sig *[sha256.Size]byte, tsMillis int64) (replayKey, int64) {
	s.init()
	var k replayKey
	copy(k[:], sig[:])
	return k, tsMillis / replaySpan.Milliseconds()
}

// replayEntries is what a MemoryReplayStore holds: its entries in buckets
// by timestamp, under one lock. One lock, not a lock per share of the keys:
// every delivery then finds the lock, the buckets and the newest bucket's
// map where the one before left them, in the processor's cache, where
// shards by key had it reach for a cold one each time (BenchmarkMiddlewareTLS
// and internal/benchcmp's README).
type replayEntries struct {
	mu       sync.Mutex
	buckets  []*replayBucket // in order of index, none empty
	n        int             // entries in all buckets, some maybe expired
	max      int
	nextDrop int64 // no bucket can be dropped before, Unix ns by the store's clock

	// What drop forgot: the latest expiry of a bucket it dropped (Unix
	// ns) and the greatest index of one, if forgot. A claim judged before
	// gone, for a bucket of index up to goneIndex, may miss an entry live
	// by its time (see replayUnknown).
	forgot    bool
	gone      int64
	goneIndex int64
}

// replayUnknown is what claim answers for a Verifier's delivery judged by a
// time before an entry that drop forgot expired, in a bucket it may have
// been in: a claim held longer than dropLag between the window's judgement
// and the memory's lock (a goroutine starved by a flood), while another
// delivery's, judged later, dropped the buckets expired by its own time.
// The memory cannot tell a copy then, and says so rather than take it for
// a new delivery.
const replayUnknown ReplayState = -1

// replayBucket holds the entries of the deliveries whose timestamps fall in
// one span (for keys given without a timestamp, whose expiries do).
type replayBucket struct {
	index int64 // Unix time / replaySpan
	until int64 // when its last entry expires, or later
	seen  map[replayKey]stamp
}

// noIndex is the index of a key given without a timestamp: its entry is
// looked for in every bucket, and kept in the bucket of its expiry.
const noIndex = math.MinInt64

// claim records k as st in the bucket of index, unless it is there (or, for
// noIndex, in any bucket) and has not expired, and returns what it held.
func (m *replayEntries) claim(k replayKey, index, now int64, st stamp) ReplayState {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.drop(now)
	if _, old, ok := m.find(k, index, now); ok {
		return old.state()
	}
	if index != noIndex && m.forgot && now < m.gone && index <= m.goneIndex {
		return replayUnknown
	}
	m.put(k, index, st)
	return ReplayUnseen
}

// complete records k as st (handled), in place of a claim.
func (m *replayEntries) complete(k replayKey, index, now int64, st stamp) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b, _, ok := m.find(k, index, now); ok {
		b.seen[k] = st
		m.extend(b, st)
		return
	}
	m.put(k, index, st) // its claim expired or was evicted
}

// release forgets k if it is being handled.
func (m *replayEntries) release(k replayKey, index, now int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b, old, ok := m.find(k, index, now); ok && old.state() == ReplayHandling {
		m.remove(b, k)
	}
}

// find returns the bucket holding a live entry for k, and the entry: in
// the bucket of index, or for noIndex in any, the newest first.
func (m *replayEntries) find(k replayKey, index, now int64) (*replayBucket, stamp, bool) {
	if index != noIndex {
		i, ok := m.search(index)
		if !ok {
			return nil, 0, false
		}
		b := m.buckets[i]
		st, ok := b.seen[k]
		return b, st, ok && st.expiry() > now
	}
	for j := len(m.buckets) - 1; j >= 0; j-- {
		b := m.buckets[j]
		if st, ok := b.seen[k]; ok && st.expiry() > now {
			return b, st, true
		}
	}
	return nil, 0, false
}

// put records k as st in the bucket of index (of st's expiry for noIndex),
// forgetting an entry of the oldest bucket first when the store is full.
func (m *replayEntries) put(k replayKey, index int64, st stamp) {
	if index == noIndex {
		index = st.expiry() / int64(replaySpan)
	}
	i, ok := m.search(index)
	if ok {
		if _, ok = m.buckets[i].seen[k]; ok { // expired: replaced in place
			m.buckets[i].seen[k] = st
			m.extend(m.buckets[i], st)
			return
		}
	}
	if m.n >= m.max {
		m.evict() // which may drop a bucket: where index goes is to be found again
	}
	if i, ok = m.search(index); !ok {
		// A new span's bucket is made with room for as many entries as
		// the span before it got: no growing, entry by entry, at a steady
		// rate.
		size := 0
		if i == len(m.buckets) && i > 0 {
			size = len(m.buckets[i-1].seen)
		}
		m.buckets = slices.Insert(m.buckets, i, &replayBucket{index: index, seen: make(map[replayKey]stamp, size)})
	}
	b := m.buckets[i]
	b.seen[k] = st
	m.n++
	m.extend(b, st)
}

// extend keeps b until st expires.
func (m *replayEntries) extend(b *replayBucket, st stamp) {
	b.until = max(b.until, st.expiry())
	m.nextDrop = min(m.nextDrop, b.until)
}

// search returns the position of the bucket of index and true, or where it
// would go and false. Most deliveries are on time: their bucket is the
// last.
func (m *replayEntries) search(index int64) (int, bool) {
	i := len(m.buckets)
	for i > 0 && m.buckets[i-1].index > index {
		i--
	}
	if i > 0 && m.buckets[i-1].index == index {
		return i - 1, true
	}
	return i, false
}

// drop forgets the buckets whose every entry has expired dropLag ago.
func (m *replayEntries) drop(now int64) {
	now -= int64(dropLag)
	if now < m.nextDrop {
		return
	}
	next := int64(math.MaxInt64)
	m.buckets = slices.DeleteFunc(m.buckets, func(b *replayBucket) bool {
		if b.until > now {
			next = min(next, b.until)
			return false
		}
		m.n -= len(b.seen)
		if !m.forgot || b.until > m.gone {
			m.gone = b.until
		}
		if !m.forgot || b.index > m.goneIndex {
			m.goneIndex = b.index
		}
		m.forgot = true
		return true
	})
	m.nextDrop = next
}

// dropLag is how long a bucket is kept past its entries' expiry: a
// Verifier's claim judged by the time its window was judged (memNow) may
// come after another delivery's claim judged later, which would otherwise
// drop the buckets expired by its own time, and with them the entry the
// first still finds live (TestVerifier_ACopyTheWindowAcceptsIsRefusedWhileAnotherDeliveryIsClaimed).
// An expired entry is not counted (Len) nor found (find) meanwhile.
const dropLag = replaySpan

// evict forgets an entry of the oldest bucket, the soonest to leave the
// window, to make room.
func (m *replayEntries) evict() {
	b := m.buckets[0] // the store is full: it holds an entry
	for k := range b.seen {
		m.remove(b, k)
		return
	}
}

// remove forgets k's entry in b, and b once it is empty.
func (m *replayEntries) remove(b *replayBucket, k replayKey) {
	delete(b.seen, k)
	m.n--
	if len(b.seen) == 0 {
		m.buckets = slices.DeleteFunc(m.buckets, func(x *replayBucket) bool { return x == b })
	}
}

// The Verifier's side: the store it was given, or its own memory store by
// the way in that needs no key encoded.

// replayTTL is how long the entry of a delivery with timestamp ts (Unix
// ms), verified at now with tolerance tol, lives: until ts leaves the
// window, which checkWindow accepts at an age of exactly tol.
func replayTTL(ts int64, now time.Time, tol time.Duration) time.Duration {
	ms := ts + tol.Milliseconds() + 1 - now.UnixMilli() // cannot overflow: ts has at most 18 digits
	if ms > int64(math.MaxInt64/time.Millisecond) {
		return math.MaxInt64 // a Tolerance of centuries: the entry outlives the process
	}
	return time.Duration(ms) * time.Millisecond
}

// onSystemClock reports whether s expires its entries by time.Now.
func (s *MemoryReplayStore) onSystemClock() bool {
	s.init()
	return s.system
}

// memNow returns the time (Unix ns) by which v's memory store judges and
// records the delivery d: the time its window was judged by, when the store
// keeps v's clock, so that a delivery the window accepts is never one the
// memory has let go. A second reading, after the body was hashed, would be
// later by as long as that took: for a copy at the window's end, on a
// receiver slower to hash it than the first, past the first's entry.
func (v *Verifier) memNow(d *signed) int64 {
	if v.memClock {
		return d.now.UnixNano()
	}
	return v.mem.now().UnixNano()
}

// checkReplay records the accepted delivery d as handled, and refuses it
// when it was recorded before: Verify's rule.
func (v *Verifier) checkReplay(ctx context.Context, d *signed) error {
	ttl := replayTTL(d.ts, d.now, d.tol)
	var added bool
	if v.mem != nil {
		k, index := v.mem.delivery(&d.sig, d.ts)
		now := v.memNow(d)
		switch v.mem.entries.claim(k, index, now, newStamp(expiryAt(now, ttl), false)) {
		case replayUnknown:
			return errReplayForgotten
		case ReplayUnseen:
			added = true
		}
	} else {
		var err error
		added, err = v.store.Add(ctx, hex.EncodeToString(d.sig[:]), ttl)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrReplayStore, err)
		}
	}
	if !added {
		return fmt.Errorf("%w: this signature was accepted before, within the window; the sender signs every attempt afresh, so this is a copy", ErrReplayed)
	}
	return nil
}

// errReplayForgotten refuses a delivery the memory store answered
// replayUnknown for: so that the sender retries, signing afresh.
var errReplayForgotten = fmt.Errorf("%w: this delivery was verified by a time the replay memory has moved past since (its verification was held over %v), so it cannot tell a copy of it", ErrReplayStore, dropLag)

// claim claims the delivery d for its handler, and returns what its
// signature held: ReplayUnseen when the handler is to run.
func (v *Verifier) claim(ctx context.Context, d *signed) (ReplayState, error) {
	lease := min(v.lease, replayTTL(d.ts, d.now, d.tol))
	if v.mem != nil {
		k, index := v.mem.delivery(&d.sig, d.ts)
		d.claimed = v.memNow(d)
		st := v.mem.entries.claim(k, index, d.claimed, newStamp(expiryAt(d.claimed, lease), true))
		if st == replayUnknown {
			return 0, errReplayForgotten
		}
		return st, nil
	}
	st, err := v.store.Claim(ctx, hex.EncodeToString(d.sig[:]), lease)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrReplayStore, err)
	}
	return st, nil
}

// settle records the outcome of d's handler: handled, so that a copy is
// acknowledged, or released, so that a copy is handled. ctx is the
// request's, which may be over by now: the outcome is kept all the same.
func (v *Verifier) settle(ctx context.Context, d *signed, handled bool) {
	ttl := replayTTL(d.ts, d.now, d.tol)
	if v.mem != nil {
		// At the claim's time, not the store's clock again: the entry
		// handled expires as the window ends (ttl is from verification),
		// not a handler's time later, and a clock read is saved.
		k, index := v.mem.delivery(&d.sig, d.ts)
		if handled {
			v.mem.entries.complete(k, index, d.claimed, newStamp(expiryAt(d.claimed, ttl), false))
		} else {
			v.mem.entries.release(k, index, d.claimed)
		}
		return
	}
	ctx = context.WithoutCancel(ctx)
	key := hex.EncodeToString(d.sig[:])
	var err error
	if handled {
		err = v.store.Complete(ctx, key, ttl)
	} else {
		err = v.store.Release(ctx, key)
	}
	if err != nil && v.logger != nil { // nil only in a zero Verifier
		v.logger.LogAttrs(ctx, slog.LevelError, "webhook: cannot record a delivery's outcome in the replay store",
			slog.Bool("handled", handled), slog.String("error", err.Error()))
	}
}
