package webhook

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// checkTable fails t unless tb holds exactly want, each entry reachable
// from its home without an empty slot between, at most 3/4 full.
func checkTable(t *testing.T, tb *entryTable, seed hashSeed, want map[replayKey]stamp) {
	t.Helper()
	if tb.n != len(want) {
		t.Fatalf("the table counts %d entries, want %d", tb.n, len(want))
	}
	if tb.n*4 > len(tb.slots)*3 {
		t.Fatalf("%d entries in %d slots: over 3/4", tb.n, len(tb.slots))
	}
	held := 0
	for _, s := range tb.slots {
		if s.st != 0 {
			held++
		}
	}
	if held != tb.n {
		t.Fatalf("the table counts %d entries and holds %d", tb.n, held)
	}
	for k, st := range want {
		i, ok := tb.lookup(&k, seed)
		if !ok || tb.slots[i].st != st {
			t.Fatalf("key %x: found %v at %d, want stamp %d", k[:4], ok, i, st)
		}
	}
}

// The table against a map, under random inserts, replacements and
// deletions: with a seed and keys that make every key's home the same
// slot (the longest runs, wrapping round the end), and with a random seed.
func TestEntryTable_AgainstAMap(t *testing.T) {
	for _, tc := range []struct {
		name string
		seed hashSeed
		key  func(r *rand.Rand) replayKey
	}{
		{"every key at one home", hashSeed{}, func(r *rand.Rand) replayKey {
			var k replayKey // first half 0: the product, and so the hash, is 0
			binary.LittleEndian.PutUint64(k[8:], r.Uint64N(64)+1)
			return k
		}},
		{"random seed", hashSeed{rand.Uint64(), rand.Uint64()}, func(r *rand.Rand) replayKey {
			var k replayKey
			binary.LittleEndian.PutUint64(k[:8], r.Uint64N(200))
			return k
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			var tb entryTable
			want := map[replayKey]stamp{}
			for step := range 20000 {
				k := tc.key(r)
				i, ok := tb.lookup(&k, tc.seed)
				if _, in := want[k]; in != ok {
					t.Fatalf("step %d: lookup found %v, the map %v", step, ok, in)
				}
				switch {
				case ok && r.IntN(2) == 0:
					tb.deleteAt(i, tc.seed)
					delete(want, k)
				case ok:
					st := newStamp(int64(step), false)
					tb.slots[i].st = st
					want[k] = st
				default:
					st := newStamp(int64(step), true)
					tb.insert(i, &k, st, tc.seed)
					want[k] = st
				}
				checkTable(t, &tb, tc.seed, want)
			}
		})
	}
}

// A stamp is never the empty slot's 0, whatever the clock says.
func TestNewStamp_NeverZero(t *testing.T) {
	for _, expiry := range []int64{0, 1} {
		if s := newStamp(expiry, false); s == 0 || s.state() != ReplayHandled {
			t.Errorf("newStamp(%d, false) = %d (%v)", expiry, s, s.state())
		}
	}
	if s := newStamp(0, true); s == 0 || s.state() != ReplayHandling {
		t.Errorf("newStamp(0, true) = %d (%v)", s, s.state())
	}
}

// A negative TTL on a clock before 1970 expires at once: the sum
// saturates rather than wrapping round into an expiry centuries ahead,
// which would hold the key for good.
func TestExpiryAt_NegativeDurationsSaturate(t *testing.T) {
	now := int64(-100 * time.Second)
	if got := expiryAt(now, time.Duration(math.MinInt64)); got > now {
		t.Fatalf("expiryAt(%d, MinInt64) = %d: after now", now, got)
	}
	if got := expiryAt(math.MaxInt64-1, time.Hour); got != math.MaxInt64 {
		t.Fatalf("a huge TTL: %d", got)
	}
	s, err := NewMemoryReplayStore(&MemoryReplayStoreOptions{Now: func() time.Time { return time.Unix(-100, 0) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s.Add(ctx, "k", time.Duration(math.MinInt64))
	if added, _ := s.Add(ctx, "k", time.Minute); !added {
		t.Fatal("a key added with a negative TTL is still held")
	}
}
