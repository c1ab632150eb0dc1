package riverhook

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river/rivertype"
)

// clock is the time River and the Worker schedule by, once [Register] has
// made it River's (Config.Test.Time): the process's clock corrected by
// its offset to the database's, so that every time a process hands another
// (a snooze's or a retry's scheduled_at, an error's time, a job's end) is
// on the database's clock, which River's fetch and riverhook's slots
// compare it with. The Worker reads the offset with its due's statement,
// and in each of the process's first runs; the most precise reading
// stands until a minute old. NowOrNil is nil: River's statements take the
// database's now(). Until Register installs it, it is the process's clock,
// as River's own is then. It is safe for concurrent use.
type clock struct {
	local rivertype.TimeGenerator // the process's clock: the configuration's Test.Time, or time.Now
	db    bool                    // set by Register: the offset follows the database's clock

	offset atomic.Int64 // the database's time minus the process's, in nanoseconds

	mu     sync.Mutex
	spread time.Duration // the uncertainty of the reading that set offset
	readAt time.Time     // when it was read, by local
}

// clockKeep is how long the most precise reading of the database's clock
// stands against less precise ones: a reading is as imprecise as the wait
// for a pool's connection makes it, and a busy pool's wait is long; a minute
// bounds how long a reading taken before the process's clock was stepped
// stands.
const clockKeep = time.Minute

// processClock returns the process's clock, local (nil: time.Now).
func processClock(local rivertype.TimeGenerator) *clock {
	if local == nil {
		local = timeNow{}
	}
	return &clock{local: local}
}

// databaseClock returns the database's clock as a process whose clock is
// local (nil: time.Now) reads it.
func databaseClock(local rivertype.TimeGenerator) *clock {
	c := processClock(local)
	c.db = true
	return c
}

// Now returns the database's time as the process reads it, with the
// process's monotonic reading: durations between two of them are the
// process's.
func (c *clock) Now() time.Time { return c.local.Now().Add(time.Duration(c.offset.Load())) }

// NowOrNil returns nil: River's statements use the database's now().
func (c *clock) NowOrNil() *time.Time { return nil }

// read takes a reading of the database's clock: a statement sent at the
// process's sent and answered at answered, that began at start and ended
// at end by the database's clock. The database's start is taken at the
// middle of the round trip's network time, and the reading is as
// uncertain as half of it.
func (c *clock) read(sent, answered, start, end time.Time) {
	if !c.db {
		return
	}
	network := max(answered.Sub(sent)-end.Sub(start), 0)
	// In whole milliseconds: a time moved to the database's clock and back
	// is the time stored (PostgreSQL keeps microseconds), and a reading a
	// little more precise mostly leaves the offset as it was, so that a
	// mark read twice reads the same (see EndpointMarks).
	offset := start.Sub(sent.Add(network / 2)).Round(time.Millisecond)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.readAt.IsZero() && network/2 >= c.spread && answered.Sub(c.readAt) < clockKeep {
		return // the reading that stands is as precise or more, and recent
	}
	c.offset.Store(int64(offset))
	c.spread, c.readAt = network/2, answered
}

// unread reports whether the clock is the database's and has no reading
// of it yet.
func (c *clock) unread() bool {
	if !c.db {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readAt.IsZero()
}

// stale reports whether the clock has no reading of the database's, or
// one clockKeep old, at the process's now.
func (c *clock) stale(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readAt.IsZero() || now.Sub(c.readAt) >= clockKeep
}

// toDB returns t, a time of the process's clock, on the database's; the
// zero time stays zero.
func (c *clock) toDB(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Add(time.Duration(c.offset.Load()))
}

// fromDB returns t, a time of the database's clock, on the process's.
func (c *clock) fromDB(t time.Time) time.Time { return t.Add(-time.Duration(c.offset.Load())) }

// timeNow is the process's clock: time.Now.
type timeNow struct{}

func (timeNow) Now() time.Time       { return time.Now() }
func (timeNow) NowOrNil() *time.Time { return nil }

var _ rivertype.TimeGenerator = (*clock)(nil)
