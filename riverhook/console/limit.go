package console

import (
	"sync"
	"time"
)

// limiter allows one action per connection per interval. An action on the
// subject of the one allowed last (a resend of the delivery resent last)
// is allowed again within the interval, taking no turn of its own: the
// caller makes it a repeat of the first, such as a double click's second
// post.
type limiter struct {
	every map[string]time.Duration // by action; negative: no limit
	now   func() time.Time

	mu   sync.Mutex
	last map[[2]string]turn // action, connection -> the last allowed
}

// turn is an action allowed: when, and on what.
type turn struct {
	at      time.Time
	subject string
}

func newLimiter(every map[string]time.Duration) *limiter {
	return &limiter{every: every, now: time.Now, last: map[[2]string]turn{}}
}

// allow reports whether action may run for conn, on subject if it is not
// empty, now; and if not, how long until it may.
func (l *limiter) allow(action, conn, subject string) (time.Duration, bool) {
	every := l.every[action]
	if every < 0 {
		return 0, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	key := [2]string{action, conn}
	if last, ok := l.last[key]; ok && now.Sub(last.at) < every {
		if subject != "" && subject == last.subject {
			return 0, true // the same again, within the turn it had
		}
		return every - now.Sub(last.at), false
	}
	if len(l.last) >= 10_000 { // forget what no longer limits
		for k, t := range l.last {
			if now.Sub(t.at) >= l.every[k[0]] {
				delete(l.last, k)
			}
		}
	}
	l.last[key] = turn{at: now, subject: subject}
	return 0, true
}
