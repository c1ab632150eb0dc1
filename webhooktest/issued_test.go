package webhooktest

import (
	"math/rand/v2"
	"testing"
)

// TestIssued_NeverTwice signs random instants, near and far apart, for a
// few keys, past maxRuns runs: no timestamp is given twice for a key, none
// before its instant, and the instant itself while it is free and no runs
// were merged.
func TestIssued_NeverTwice(t *testing.T) {
	s := &issued{cur: make(map[[32]byte][]run)}
	r := rand.New(rand.NewPCG(1, 2))
	given := map[[32]byte]map[int64]bool{}
	for i := range 20000 {
		var key [32]byte
		key[0] = byte(r.IntN(3))
		at := int64(r.IntN(200))
		if r.IntN(10) == 0 {
			at = int64(r.IntN(1e6))
		}
		if given[key] == nil {
			given[key] = map[int64]bool{}
		}
		ts := s.next(key, at)
		switch {
		case given[key][ts]:
			t.Fatalf("call %d: key %d at %d: %d given before", i, key[0], at, ts)
		case ts < at:
			t.Fatalf("call %d: %d before its instant %d", i, ts, at)
		case ts != at && !given[key][at] && len(given[key]) < maxRuns:
			t.Fatalf("call %d: %d for a free instant %d", i, ts, at)
		}
		given[key][ts] = true
		runs := s.cur[key]
		for j := 1; j < len(runs); j++ {
			if runs[j].lo <= runs[j-1].hi+1 || runs[j].lo > runs[j].hi {
				t.Fatalf("call %d: runs %v not sorted and apart", i, runs)
			}
		}
		if len(runs) > maxRuns {
			t.Fatalf("%d runs", len(runs))
		}
	}
}
