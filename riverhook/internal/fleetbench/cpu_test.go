package main

import (
	"context"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDueBy_IsExact: the items due after elapsed at rate a second are
// 1 + elapsed*rate, to the item: the float product rounded down gave one
// fewer (29 at 290 ms at 100 a second), the item a tick late.
func TestDueBy_IsExact(t *testing.T) {
	for _, rate := range []int{1, 3, 7, 100, 333, 1000, 2000, 3000} {
		for ms := int64(0); ms <= 60_000; ms += 10 {
			want := 1 + int(ms*int64(rate)/1000)
			if got := dueBy(time.Duration(ms)*time.Millisecond, rate); got != want {
				t.Fatalf("dueBy(%d ms, %d a second) = %d, want %d", ms, rate, got, want)
			}
		}
	}
	assert.Positive(t, dueBy(2*time.Second, math.MaxInt), "a rate too large for the product: all due, not a negative count")
}

// TestPaced_ReturnsWithTheLastItem: once the last item is given, paced
// returns; it does not wait for one more tick (10 ms more of a round's
// time, counted in its deliveries a second).
func TestPaced_ReturnsWithTheLastItem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		require.NoError(t, paced(context.Background(), 250, 1000, func(int, int) error { return nil }))
		assert.Equal(t, 250*time.Millisecond, time.Since(start))
	})
}

// TestRoundLimit_AddsThePacing: a round's limit is its pacing's time plus
// ten minutes, so that a slow -cpu-rate does not time the in-process
// Sends out (3,000 at 2 a second take 25 minutes).
func TestRoundLimit_AddsThePacing(t *testing.T) {
	assert.Equal(t, 10*time.Minute, roundLimit(3000, 0))
	assert.Equal(t, 10*time.Minute+1499500*time.Millisecond, roundLimit(3000, 2))
	assert.Equal(t, 10*time.Minute, roundLimit(1, 1000))
}

// TestShare_SplitsTheWholeEvenly: the in-process floor's processes get
// shares of the deliveries and of the rate that add up to the whole and
// differ by at most one.
func TestShare_SplitsTheWholeEvenly(t *testing.T) {
	for _, k := range []int{1, 2, 3, 4, 7} {
		for _, n := range []int{0, 1, 2, 5, 999, 1000, 1501, 2000} {
			sum, lo, hi := 0, math.MaxInt, 0
			for j := range k {
				s := share(n, k, j)
				sum, lo, hi = sum+s, min(lo, s), max(hi, s)
			}
			assert.Equal(t, n, sum, "n %d, k %d", n, k)
			assert.LessOrEqual(t, hi-lo, 1, "n %d, k %d", n, k)
		}
	}
}
