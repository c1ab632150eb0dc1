package webhook

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// This file holds the receiver's idempotency helper: LastWriterWins, which
// handles an event only when it is newer than the last one handled for its
// key, and the VersionStore it keeps versions in.

// VersionStore remembers, per key, the newest version handled, for
// [LastWriterWins]. Receivers running several instances share one (see the
// PostgreSQL recipe in the README). Its methods are called concurrently; an
// error makes the handler answer 500, so that the sender retries.
type VersionStore interface {
	// Last returns the newest version recorded for key, and false when
	// none is.
	Last(ctx context.Context, key string) (version time.Time, ok bool, err error)

	// Record records version for key, unless a newer one is recorded: a
	// version never goes back.
	Record(ctx context.Context, key string, version time.Time) error
}

// LastWriterOutcome is what [LastWriterWins] did with an event that ended
// without an error. Its String is a word fit for a metric's label, and its
// values are small integers, fit to index an array of counters.
type LastWriterOutcome int

const (
	// LastWriterApplied: the event was handed to fn, which returned nil.
	// Its version is recorded, unless it has none (an empty key or a zero
	// version).
	LastWriterApplied LastWriterOutcome = iota + 1

	// LastWriterStale: a newer version of its key was handled before
	// (deliveries overtook each other). fn was not called.
	LastWriterStale

	// LastWriterDuplicate: the same version of its key was handled before
	// (a copy, or a late retry of a delivery handled). fn was not called.
	LastWriterDuplicate
)

// String returns "applied", "stale" or "duplicate".
func (o LastWriterOutcome) String() string {
	switch o {
	case LastWriterApplied:
		return "applied"
	case LastWriterStale:
		return "stale"
	case LastWriterDuplicate:
		return "duplicate"
	}
	return fmt.Sprintf("LastWriterOutcome(%d)", int(o))
}

// LastWriterWinsOptions configures [LastWriterWins]. A nil
// *LastWriterWinsOptions, or a zero field, selects the documented default.
type LastWriterWinsOptions[T any] struct {
	// Store keeps the newest version handled per key. Nil means a
	// MemoryVersionStore of its own, with the default bound.
	Store VersionStore

	// Version returns an event's key and version. Nil means, for a
	// Payload, its user.id and user.updatedAt, as the spec's payload
	// orders a user's updates; for any other T it must be set. An event
	// with an empty key or a zero version has no order: it is handled.
	Version func(event T) (key string, version time.Time)

	// OnOutcome, if set, is called with each event that ends without an
	// error, once fn (if called) has returned, and says what was done:
	// count the outcomes here. It is called concurrently for different
	// keys, and must not block. Nil means no call.
	OnOutcome func(ctx context.Context, event T, outcome LastWriterOutcome)

	// Logger receives, at level Info, each event skipped as stale or as a
	// duplicate. Nil means no logging.
	Logger *slog.Logger
}

// LastWriterWins returns fn made idempotent by last writer wins: an event
// is handed to fn only when its version is newer than the newest one
// handled for its key, and is recorded once fn returns nil. An older or
// equal version (a late retry, a copy, deliveries overtaking each other) is
// skipped and acknowledged: the wrapped function returns nil without
// calling fn. fn's error is returned, and nothing recorded, so that the
// retry is handled. LastWriterWinsOptions.OnOutcome hears which of these
// happened: applied, skipped as stale, or skipped as a duplicate.
//
// Within a process, events of one key are handed to fn one at a time, so
// that the check, fn and the record cannot interleave. An event that waits
// for its key returns its context's cause once the context is done (the
// client went away), so that fn hanging on one event holds no goroutine of
// the events after it: the service retries them. Across instances,
// two deliveries of one key may pass the check at once: make fn's own write
// conditional too (the README's PostgreSQL recipe does both in one
// statement), or run one instance.
//
// With a nil opts it serves [Payload]s, the [EventUserIdentified] handler
// of [NewHandler] in one line:
//
//	webhook.NewHandler(v, webhook.LastWriterWins(onUser, nil), nil)
//
// LastWriterWins panics if fn is nil, if Version is nil for a T other
// than Payload, or if Store holds a nil pointer (map, func), as a
// programming error.
func LastWriterWins[T any](fn func(ctx context.Context, event T) error, opts *LastWriterWinsOptions[T]) func(ctx context.Context, event T) error {
	if opts == nil {
		opts = &LastWriterWinsOptions[T]{}
	}
	version := opts.Version
	if version == nil {
		var zero T
		if _, ok := any(zero).(Payload); !ok {
			panic(fmt.Sprintf("webhook: LastWriterWins needs LastWriterWinsOptions.Version for a %T", zero))
		}
		version = func(event T) (string, time.Time) {
			p := any(event).(Payload)
			return p.User.ID, p.User.UpdatedAt.Time
		}
	}
	if fn == nil {
		panic("webhook: LastWriterWins needs a function")
	}
	store := opts.Store
	if store != nil && nilValue(store) {
		panic(fmt.Sprintf("webhook: LastWriterWinsOptions.Store is a nil %T; leave it nil for the default memory store", store))
	}
	if store == nil {
		store, _ = NewMemoryVersionStore(nil) // cannot fail
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var locks keyLocks
	apply := func(ctx context.Context, event T) (LastWriterOutcome, error) {
		key, v := version(event)
		if key == "" || v.IsZero() {
			return LastWriterApplied, fn(ctx, event)
		}
		unlock, err := locks.lock(ctx, key)
		if err != nil {
			return 0, fmt.Errorf("webhook: last writer wins: waiting for the event of %q being handled: %w", key, err)
		}
		defer unlock()
		last, ok, err := store.Last(ctx, key)
		if err != nil {
			return 0, fmt.Errorf("webhook: last writer wins: reading the version of %q: %w", key, err)
		}
		if ok && !v.After(last) {
			o := LastWriterStale
			if v.Equal(last) {
				o = LastWriterDuplicate
			}
			logger.LogAttrs(ctx, slog.LevelInfo, "webhook: skipping an event; a newer or equal version was handled",
				slog.String("key", key), slog.Time("version", v), slog.String("outcome", o.String()))
			return o, nil
		}
		if err := fn(ctx, event); err != nil {
			return 0, err
		}
		if err := store.Record(context.WithoutCancel(ctx), key, v); err != nil {
			return 0, fmt.Errorf("webhook: last writer wins: recording the version of %q: %w", key, err)
		}
		return LastWriterApplied, nil
	}
	onOutcome := opts.OnOutcome
	return func(ctx context.Context, event T) error {
		o, err := apply(ctx, event)
		if err == nil && onOutcome != nil {
			onOutcome(ctx, event, o)
		}
		return err
	}
}

// keyLocks serialises the holders of one key; it holds only the keys in
// use.
type keyLocks struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	held    chan struct{} // holds a value while the key is locked
	holders int           // waiting or holding, under keyLocks.mu
}

// lock locks key and returns its unlock, or gives up with ctx's cause once
// ctx is done: a handler that hangs holds its key, not the goroutines of
// every event of that key after it.
func (l *keyLocks) lock(ctx context.Context, key string) (func(), error) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = make(map[string]*keyLock)
	}
	k := l.locks[key]
	if k == nil {
		k = &keyLock{held: make(chan struct{}, 1)}
		l.locks[key] = k
	}
	k.holders++
	l.mu.Unlock()
	leave := func() {
		l.mu.Lock()
		if k.holders--; k.holders == 0 {
			delete(l.locks, key)
		}
		l.mu.Unlock()
	}
	unlock := func() { <-k.held; leave() }
	select {
	case k.held <- struct{}{}: // free: taken whatever ctx
		return unlock, nil
	default:
	}
	select {
	case k.held <- struct{}{}:
		return unlock, nil
	case <-ctx.Done():
		leave()
		return nil, context.Cause(ctx)
	}
}

// DefaultMaxVersions is how many keys a [MemoryVersionStore] remembers at
// most: 131,072.
const DefaultMaxVersions = 1 << 17

// MemoryVersionStoreOptions configures a [MemoryVersionStore]. A nil
// *MemoryVersionStoreOptions, or a zero field, selects the documented
// default.
type MemoryVersionStoreOptions struct {
	// MaxKeys bounds how many keys the store holds. Zero means
	// DefaultMaxVersions; negative is an error.
	MaxKeys int
}

// MemoryVersionStore is the [VersionStore] of one process. It holds at
// most MaxKeys keys in two generations: the keys recorded recently, and
// those of the generation before, which is forgotten whole when the recent
// one is full. A forgotten key's next event is handled whatever its
// version, so size MaxKeys above the keys whose events can arrive out of
// order at once (the users updated within the sender's retry schedule, 7
// seconds, is a floor). A key takes about 100 bytes with its string. A
// MemoryVersionStore is safe for concurrent use; no method fails. The zero
// MemoryVersionStore is ready to use, with the default bound.
type MemoryVersionStore struct {
	mu       sync.Mutex
	max      int  // per generation: half of MaxKeys
	single   bool // MaxKeys is 1: one generation
	cur, old map[string]time.Time
}

// NewMemoryVersionStore returns an empty MemoryVersionStore configured by
// opts, which may be nil. It fails when an option is out of range.
func NewMemoryVersionStore(opts *MemoryVersionStoreOptions) (*MemoryVersionStore, error) {
	maxKeys := 0
	if opts != nil {
		maxKeys = opts.MaxKeys
	}
	switch {
	case maxKeys < 0:
		return nil, fmt.Errorf("webhook: MaxKeys must not be negative, got %d", maxKeys)
	case maxKeys == 0:
		maxKeys = DefaultMaxVersions
	}
	return &MemoryVersionStore{max: max(1, maxKeys/2), single: maxKeys == 1, cur: make(map[string]time.Time)}, nil
}

// Last returns the newest version recorded for key, and false when none
// is (or it was forgotten).
func (s *MemoryVersionStore) Last(_ context.Context, key string) (time.Time, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	last, ok := s.cur[key]
	if !ok {
		last, ok = s.old[key]
	}
	return last, ok, nil
}

// Record records version for key, unless a newer one is recorded.
func (s *MemoryVersionStore) Record(_ context.Context, key string, version time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.max == 0 { // the zero MemoryVersionStore: the default bound
		s.max = DefaultMaxVersions / 2
	}
	if s.cur == nil {
		s.cur = make(map[string]time.Time)
	}
	if last, ok := s.cur[key]; ok {
		if version.After(last) {
			s.cur[key] = version
		}
		return nil
	}
	if last, ok := s.old[key]; ok && !version.After(last) {
		version = last
	}
	if len(s.cur) >= s.max {
		s.old, s.cur = s.cur, make(map[string]time.Time, len(s.cur))
		if s.single {
			s.old = nil // MaxKeys 1: no room for a generation before
		}
	}
	s.cur[key] = version
	return nil
}

// Len returns how many keys the store holds.
func (s *MemoryVersionStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.cur)
	for k := range s.old {
		if _, ok := s.cur[k]; !ok {
			n++
		}
	}
	return n
}
