//go:build race

package webhook_test

// raceEnabled reports whether the race detector is on: it makes sync.Pool
// drop items at random, so allocation counts are not meaningful then.
const raceEnabled = true
