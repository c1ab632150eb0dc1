package riverhook

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// fixedClock is a process's clock standing at its value.
type fixedClock struct{ t time.Time }

func (f *fixedClock) Now() time.Time       { return f.t }
func (f *fixedClock) NowOrNil() *time.Time { return nil }

// TestClock_Read pins how the offset to the database's clock is read: at
// the middle of a round trip's network time, the most precise reading
// standing until clockKeep old, and not at all in a clock Register did not
// install (River's own then is the process's).
func TestClock_Read(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 21, 0, 0, 0, time.UTC)
	db := t0.Add(-30 * time.Second) // the process's clock is 30 s ahead
	local := &fixedClock{t: t0}
	c := databaseClock(local)

	// Sent at t0, answered 10 ms later; the statement ran 4 ms of them,
	// so the network took 6 ms: the database began 3 ms after t0.
	c.read(t0, t0.Add(10*time.Millisecond), db.Add(3*time.Millisecond), db.Add(7*time.Millisecond))
	assert.Equal(t, db, c.Now(), "the database's time at the process's t0")

	// A less precise reading (40 ms of network), off by 15 ms, is ignored.
	at := t0.Add(time.Second)
	c.read(at, at.Add(40*time.Millisecond), db.Add(time.Second+35*time.Millisecond), db.Add(time.Second+35*time.Millisecond))
	assert.Equal(t, db, c.Now(), "the more precise reading stands")

	// Once the precise one is clockKeep old, the next reading replaces it.
	at = t0.Add(clockKeep)
	c.read(at, at.Add(40*time.Millisecond), db.Add(clockKeep+35*time.Millisecond), db.Add(clockKeep+35*time.Millisecond))
	assert.Equal(t, db.Add(15*time.Millisecond), c.Now(), "a reading a minute on replaces it")

	process := processClock(local)
	process.read(t0, t0.Add(10*time.Millisecond), db, db)
	assert.Equal(t, t0, process.Now(), "a clock Register did not install stays the process's")
}
