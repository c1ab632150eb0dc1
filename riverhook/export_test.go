package riverhook

import (
	"time"

	"github.com/riverqueue/river/rivertype"
)

// WithoutAttemptLog makes w keep no attempt log: for BenchmarkDelivery to
// measure what the log costs.
func WithoutAttemptLog(w *Worker) *Worker {
	w.noLog = true
	return w
}

// SetClock makes w read the time from now when it stores a retry.
func SetClock(w *Worker, now func() time.Time) { w.now = now }

// PendingRetries returns how many retries w keeps for River's NextRetry.
func PendingRetries(w *Worker) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.retries)
}

// PlaceKey is the advisory lock of place 0 of connection id in schema.
func PlaceKey(schema, id string) int64 { return placeKey(schema, id) }

// SetMarksClock makes m read the process's clock from c, for a process
// whose clock is off.
func SetMarksClock(m *EndpointMarks, c rivertype.TimeGenerator) {
	m.clock = processClock(c)
	m.clock.db = true
}
