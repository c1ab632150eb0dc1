package console

import (
	"sync"
	"time"
)

// limiter allows one action per connection per interval.
type limiter struct {
	every map[string]time.Duration // by action; negative: no limit
	now   func() time.Time

	mu   sync.Mutex
	last map[[2]string]time.Time // action, connection -> when last allowed
}

func newLimiter(every map[string]time.Duration) *limiter {
	return &limiter{every: every, now: time.Now, last: map[[2]string]time.Time{}}
}

// allow reports whether action may run for conn now, and if not, how long
// until it may.
func (l *limiter) allow(action, conn string) (time.Duration, bool) {
	every := l.every[action]
	if every < 0 {
		return 0, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	key := [2]string{action, conn}
	if last, ok := l.last[key]; ok && now.Sub(last) < every {
		return every - now.Sub(last), false
	}
	if len(l.last) >= 10_000 { // forget what no longer limits
		for k, at := range l.last {
			if now.Sub(at) >= l.every[k[0]] {
				delete(l.last, k)
			}
		}
	}
	l.last[key] = now
	return 0, true
}
