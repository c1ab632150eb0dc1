package webhook

import (
	"encoding/binary"
	"math/bits"
)

// This file holds the table of a MemoryReplayStore's bucket: its entries in
// one array of slots, found by linear probing from the key's seeded hash.
// A lookup reads the slots from the key's home on, one cache line or two,
// where a Go map reads its directory, a table and a group first: a claim
// between requests finds the store's memory out of the caches, and each
// line read in turn is a miss (internal/benchcmp's README, issue 29).

// hashSeed is a store's secret for placing keys in its tables. A key given
// to Add or Claim may be anyone's choice (64 hex digits are kept as they
// are); without the seed, no one can choose keys that crowd one run of
// slots.
type hashSeed struct{ a, b uint64 }

// hash mixes k's two halves with the seed: the two words of their 128-bit
// product, folded.
func (s hashSeed) hash(k *replayKey) uint64 {
	hi, lo := bits.Mul64(binary.LittleEndian.Uint64(k[:8])^s.a, binary.LittleEndian.Uint64(k[8:])^s.b)
	return hi ^ lo
}

// entryTable is a bucket's entries by key: open addressing with linear
// probing, at most 3/4 full (so a probe always ends at an empty slot), and
// deletion by shifting the entries after it back, which leaves no
// tombstones. The zero entryTable is empty.
type entryTable struct {
	slots []entrySlot // a power of two long, or none
	n     int         // entries
}

// entrySlot is an entry, or an empty slot when st is 0, which newStamp
// never makes.
type entrySlot struct {
	k  replayKey
	st stamp
}

// minSlots is the smallest table: 8 slots of 24 bytes, three cache lines.
const minSlots = 8

// slotsFor returns the table length that holds n entries at most 3/4 full.
func slotsFor(n int) int {
	size := minSlots
	for size*3/4 < n {
		size *= 2
	}
	return size
}

// lookup returns the index of k's slot and true, or, when k is not there,
// the index of the empty slot where it would go and false; -1 for a table
// without slots.
func (t *entryTable) lookup(k *replayKey, seed hashSeed) (int, bool) {
	if len(t.slots) == 0 {
		return -1, false
	}
	mask := len(t.slots) - 1
	for i := int(seed.hash(k)) & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.st == 0 {
			return i, false
		}
		if s.k == *k {
			return i, true
		}
	}
}

// insert records k, which the table does not hold, as st at i, the empty
// slot lookup returned (-1: to be found), growing the table first when it
// has no room for one more.
func (t *entryTable) insert(i int, k *replayKey, st stamp, seed hashSeed) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow(slotsFor(t.n+1), seed)
		i = -1
	}
	if i < 0 {
		i, _ = t.lookup(k, seed)
	}
	t.slots[i] = entrySlot{k: *k, st: st}
	t.n++
}

// grow moves the entries to a table of size slots.
func (t *entryTable) grow(size int, seed hashSeed) {
	old := t.slots
	t.slots = make([]entrySlot, size)
	mask := size - 1
	for _, s := range old {
		if s.st == 0 {
			continue
		}
		i := int(seed.hash(&s.k)) & mask
		for t.slots[i].st != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

// deleteAt empties slot i, moving back each entry after it, up to the next
// empty slot, whose home is not between it and i: every entry stays
// reachable from its home without a gap.
func (t *entryTable) deleteAt(i int, seed hashSeed) {
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].st != 0; j = (j + 1) & mask {
		home := int(seed.hash(&t.slots[j].k)) & mask
		// The entry at j may move to i unless its home lies cyclically in
		// (i, j]: then i is before its home, and a probe from there would
		// never pass i.
		if (j-home)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = entrySlot{}
	t.n--
}

// first returns the index of an entry, or -1 when there is none.
func (t *entryTable) first() int {
	for i := range t.slots {
		if t.slots[i].st != 0 {
			return i
		}
	}
	return -1
}

// reset empties the table, keeping its slots.
func (t *entryTable) reset() {
	clear(t.slots)
	t.n = 0
}
