package riverhook

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestPacer runs scripts of jobs asking a connection's pacer for slots: the
// waits it hands out spread a backlog at the given spacing, wake a far slot
// early by River's scheduler interval and then exactly, and space the jobs
// waiting for a down endpoint however many ask at once.
func TestPacer(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	type step struct {
		at       time.Duration // since t0
		job      int64
		down     time.Duration // > 0: a job waiting for a down endpoint that may be tried after this
		wantWait time.Duration
	}
	const spacing = 125 * time.Millisecond // 1 s attempts, 8 in flight
	tests := []struct {
		name  string
		steps []step
	}{
		{"a burst is spread at the connection's rate", []step{
			{0, 1, 0, 125 * time.Millisecond},
			{0, 2, 0, 250 * time.Millisecond},
			{0, 3, 0, 375 * time.Millisecond},
			{time.Second, 4, 0, 125 * time.Millisecond}, // the earlier slots have passed
		}},
		{"a slot beyond the scheduler's interval wakes early, then exactly", func() []step {
			var s []step
			for i := range int64(48) { // 48 x 125 ms = 6 s
				wait := time.Duration(i+1) * spacing
				if wait > schedulerInterval {
					wait -= schedulerInterval // woken 5 s early
				}
				s = append(s, step{0, i + 1, 0, wait})
			}
			s = append(s, step{time.Second + 2*time.Millisecond, 48, 0, 5*time.Second - 2*time.Millisecond})
			// woken on time and still over the bound: a new slot, after the others
			s = append(s, step{6 * time.Second, 48, 0, spacing})
			return s
		}()},
		{"a job whose slot passed waits at the front, not behind the backlog", []step{
			{0, 1, 0, 125 * time.Millisecond},
			{0, 2, 0, 250 * time.Millisecond},
			{0, 3, 0, 375 * time.Millisecond},
			{125 * time.Millisecond, 1, 0, 125 * time.Millisecond}, // no place at its slot: next at the front
			{125 * time.Millisecond, 4, 0, 375 * time.Millisecond}, // a new job: after the backlog
		}},
		{"jobs waiting for a down endpoint wake one per spacing", []step{
			{0, 1, 10 * time.Second, 10*time.Second + 0},
			{0, 2, 10 * time.Second, 10*time.Second + spacing},
			{0, 3, 2 * time.Second, 10*time.Second + 2*spacing},
			{time.Minute, 4, 2 * time.Second, 2 * time.Second},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p pacer
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				var got time.Duration
				if s.down > 0 {
					got = p.downSlot(now, s.down, spacing)
				} else {
					got = p.busySlot(s.job, now, spacing)
				}
				assert.Equal(t, s.wantWait, got, "step %d (job %d at %v)", i, s.job, s.at)
			}
		})
	}
}

func TestPacer_Observe(t *testing.T) {
	var p pacer
	p.observe(time.Second)
	assert.Equal(t, time.Second, p.took, "the first attempt sets the average")
	for range 64 {
		p.observe(100 * time.Millisecond)
	}
	assert.InDelta(t, float64(100*time.Millisecond), float64(p.took), float64(time.Millisecond), "the average follows the attempts")
}

func TestSignAfter(t *testing.T) {
	now := time.UnixMilli(1_000_000).Add(300 * time.Microsecond)
	for _, tc := range []struct {
		last int64
		want time.Duration
	}{
		{0, 0},
		{999_999, 0},
		{1_000_000, time.Millisecond},     // the same millisecond
		{1_000_004, 5 * time.Millisecond}, // another process's clock ahead
	} {
		if got := signAfter([]logEntry{{Timestamp: 5}, {Timestamp: tc.last}}, now); got != tc.want {
			t.Errorf("last signed at %d: got %v, want %v", tc.last, got, tc.want)
		}
	}
}

// TestWakeSpacing: a backlog wakes a tenth faster than its connection
// takes deliveries, so that a run waits for each place as it frees, but
// never faster than the connection's rate allows.
func TestWakeSpacing(t *testing.T) {
	assert.Equal(t, 90*time.Millisecond, wakeSpacing(100*time.Millisecond, 0))
	assert.Equal(t, 95*time.Millisecond, wakeSpacing(100*time.Millisecond, 95*time.Millisecond), "the rate's time between starts")
}
