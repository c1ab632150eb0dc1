package webhook

import (
	"testing"
	"time"
)

// TestEndpointState runs event scripts against endpoint health's core, on
// a clock of the script's own: each step is an event at a time and what
// the endpoint's state must then say. Times are seconds from the start.
func TestEndpointState(t *testing.T) {
	p := &healthPolicy{downAfter: 3, first: 10 * time.Second, limit: 40 * time.Second, probeFor: 31 * time.Second}
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	type step struct {
		at      float64 // seconds
		event   string  // "fail", "reach", "neutral", "admit", "probe-fail", "probe-reach", "fail-sent-at N", "fail-body B"
		body    uint64
		sentAt  float64
		admit   bool          // for "admit": let through
		wait    time.Duration // for "admit": the least wait of a refusal
		down    bool          // the state after the step
		changed bool          // the step changed it
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"down after a run of failures, probed at doubling intervals, up at an answer", []step{
			{at: 0, event: "fail"},
			{at: 1, event: "fail"},
			{at: 2, event: "fail", down: true, changed: true},
			{at: 3, event: "admit", wait: 9 * time.Second, down: true},
			{at: 12, event: "admit", admit: true, down: true},            // the probe
			{at: 12, event: "admit", wait: 10 * time.Second, down: true}, // one at a time
			{at: 13, event: "probe-fail", down: true},                    // next in 20 s
			{at: 32, event: "admit", wait: time.Second, down: true},
			{at: 33, event: "admit", admit: true, down: true},
			{at: 34, event: "probe-reach", changed: true},
			{at: 35, event: "admit", admit: true},
		}},
		{"an answer resets the run", []step{
			{at: 0, event: "fail"},
			{at: 1, event: "fail"},
			{at: 2, event: "reach"},
			{at: 3, event: "fail"},
			{at: 4, event: "fail"},
			{at: 5, event: "fail", down: true, changed: true},
		}},
		{"a failure of an attempt sent before the endpoint was last reached is old news", []step{
			{at: 0, event: "fail"},
			{at: 1, event: "fail"},
			{at: 5, event: "reach"},
			{at: 6, event: "fail-sent-at", sentAt: 4},
			{at: 6, event: "fail-sent-at", sentAt: 4},
			{at: 7, event: "fail-sent-at", sentAt: 4},
			{at: 8, event: "admit", admit: true},
		}},
		{"one delivery failing again and again counts once", []step{
			{at: 0, event: "fail-body", body: 7},
			{at: 1, event: "fail-body", body: 7},
			{at: 2, event: "fail-body", body: 7},
			{at: 3, event: "fail-body", body: 7},
			{at: 4, event: "fail-body", body: 8},
			{at: 5, event: "fail-body", body: 9, down: true, changed: true},
		}},
		{"a probe that says nothing waits as one that failed", []step{
			{at: 0, event: "fail"},
			{at: 0, event: "fail"},
			{at: 0, event: "fail", down: true, changed: true},
			{at: 10, event: "admit", admit: true, down: true},
			{at: 11, event: "probe-neutral", down: true},
			{at: 20, event: "admit", wait: time.Second, down: true},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var e endpointState
			var lease uint64
			for i, s := range tc.steps {
				now := t0.Add(time.Duration(s.at * float64(time.Second)))
				a := &Attempt{Kind: KindRefused}
				var changed bool
				switch s.event {
				case "admit":
					ad, ok := e.admit(now)
					if ok != s.admit || !ok && ad.wait != s.wait {
						t.Fatalf("step %d at %vs: admit = %v, wait %v; want %v, wait %v", i, s.at, ok, ad.wait, s.admit, s.wait)
					}
					if ad.probe {
						lease++
						e.grant(p, lease, now)
					}
				case "fail":
					changed, _ = e.record(p, outcomeFailed, a, now, 0, 0, now)
				case "fail-body":
					changed, _ = e.record(p, outcomeFailed, a, now, 0, s.body, now)
				case "fail-sent-at":
					changed, _ = e.record(p, outcomeFailed, a, t0.Add(time.Duration(s.sentAt*float64(time.Second))), 0, 0, now)
				case "reach":
					changed, _ = e.record(p, outcomeReached, a, now, 0, 0, now)
				case "probe-fail":
					changed, _ = e.record(p, outcomeFailed, a, now, lease, 0, now)
				case "probe-reach":
					changed, _ = e.record(p, outcomeReached, a, now, lease, 0, now)
				case "probe-neutral":
					changed, _ = e.record(p, outcomeNeutral, &Attempt{Kind: KindOther}, now, lease, 0, now)
				default:
					t.Fatalf("unknown event %q", s.event)
				}
				if e.down != s.down || changed != s.changed {
					t.Fatalf("step %d at %vs (%s): down=%v changed=%v, want down=%v changed=%v", i, s.at, s.event, e.down, changed, s.down, s.changed)
				}
			}
		})
	}
}

// TestStall scripts the bound on attempts in flight to a URL that does not
// answer: a URL answering is never held back, however many attempts wait
// on it; one silent for quiet takes no more than max.
func TestStall(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	const quiet = 250 * time.Millisecond
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var s stall
	for range 64 { // 64 at once to a fresh URL: all go
		if !s.admitStall(4, quiet, at(0)) {
			t.Fatal("a burst to a fresh URL is held back")
		}
		s.begin(false, at(0))
	}
	for i := range 64 { // answers come every few ms: never held back
		s.end(true, at(20+i))
		if !s.admitStall(4, quiet, at(20+i)) {
			t.Fatalf("held back while it answers, at %d ms", 20+i)
		}
		s.begin(false, at(20+i))
	}
	// Silence: 64 in flight, no answer for quiet.
	if s.admitStall(4, quiet, at(83+249)) != true {
		t.Fatal("held back before quiet passed")
	}
	if s.admitStall(4, quiet, at(83+250)) {
		t.Fatal("not held back after quiet with 64 in flight")
	}
	for range 61 {
		s.end(false, at(600))
	}
	if !s.admitStall(4, quiet, at(600)) {
		t.Fatal("3 in flight, under the bound: held back")
	}
	s.begin(false, at(600))
	if s.admitStall(4, quiet, at(600)) {
		t.Fatal("4 in flight to a silent URL: not held back")
	}
	s.end(true, at(700)) // an answer: progress
	if !s.admitStall(4, quiet, at(700)) {
		t.Fatal("held back right after an answer")
	}

	// A URL whose attempts ended with no answer stays silent: bounded at
	// once when attempts start again.
	var q stall
	q.begin(false, at(0))
	q.end(false, at(500))
	for range 4 {
		q.begin(true, at(1000))
	}
	if q.admitStall(4, quiet, at(1000)) {
		t.Fatal("a URL that timed out got a fresh quiet")
	}
}
