package webhook

import (
	"time"
)

// This file holds endpoint health's core: what an attempt's outcome does to
// an endpoint's state at a given time, with no lock, no clock and no
// reporting (health.go holds the shell around it). One core serves both
// scopes: an origin, marked down by attempts that got no connection, and
// one URL, isolated by attempts that connected and got no answer.

// outcome sorts attempts by what they say of an endpoint.
type outcome int

const (
	outcomeNeutral outcome = iota // says nothing: not sent, or failed for a reason of its own
	outcomeReached                // the endpoint answered, or (for an origin) connected
	outcomeFailed                 // the failure this scope counts: no connection, or no answer
)

// originOutcome sorts an attempt of kind k, which got a connection if
// connected, for its origin. A timeout or a reset after the connection is
// what one path's handler did (a hang, a panic), not what the host is: it
// says the host is up. Only failing to connect counts against it: a proxy
// that could not reach the destination included.
func originOutcome(k FailureKind, connected bool) outcome {
	switch {
	case connected, k == KindNone, k == KindStatus, k == KindRedirect:
		return outcomeReached
	case k == KindDNS, k == KindRefused, k == KindReset, k == KindTLS, k == KindTimeout, k == KindUnreachable:
		return outcomeFailed
	}
	return outcomeNeutral
}

// urlOutcome sorts an attempt for its URL: any answer is progress; a
// connection that then timed out with no answer is the failure a URL
// counts (an application hung behind its load balancer, one tenant's path
// on a shared host).
func urlOutcome(k FailureKind, connected bool) outcome {
	switch {
	case k == KindNone, k == KindStatus, k == KindRedirect:
		return outcomeReached
	case connected && k == KindTimeout:
		return outcomeFailed
	}
	return outcomeNeutral
}

// healthPolicy is what decides an endpoint's transitions.
type healthPolicy struct {
	downAfter int           // failures in a row that take it down
	first     time.Duration // the first probe interval
	limit     time.Duration // the longest
	probeFor  time.Duration // how long a probe may be in flight
}

// endpointState is one endpoint's health, in either scope.
type endpointState struct {
	failures   int
	since      time.Time // when the run of failures began
	last       Attempt
	down       bool
	changed    time.Time
	reached    time.Time     // when an attempt last reached it
	interval   time.Duration // the wait after the last probe, or after going down
	nextProbe  time.Time
	lease      uint64    // the probe in flight's, or 0
	leaseUntil time.Time // when the probe in flight has surely ended
	bodies     []uint64  // a URL's: the deliveries (body hashes) counted in the run of failures
}

// admission is the core's answer to an attempt that asks to be sent.
type admission struct {
	probe bool          // let through as the endpoint's probe: take a lease
	wait  time.Duration // refused: the least wait before it may be tried again
}

// admit says whether an attempt may be sent to e at now: when it is up,
// yes; when down, only as its one probe, once due. A refusal has the least
// wait before a retry may be admitted.
func (e *endpointState) admit(now time.Time) (admission, bool) {
	switch {
	case !e.down:
		return admission{}, true
	case e.lease != 0 && now.Before(e.leaseUntil): // a probe is in flight: it ends by then
		return admission{wait: min(e.leaseUntil.Sub(now), e.interval)}, false
	case now.Before(e.nextProbe):
		return admission{wait: e.nextProbe.Sub(now)}, false
	}
	return admission{probe: true}, true
}

// grant records that the probe admitted at now holds lease.
func (e *endpointState) grant(p *healthPolicy, lease uint64, now time.Time) {
	e.lease, e.leaseUntil = lease, now.Add(p.probeFor)
}

// record applies an attempt's outcome o at now: a, admitted at admitted,
// holding lease (0 unless it was a probe), whose delivery's body hashes to
// body (0: not counted per delivery). It reports whether e went down or
// came back up, and then e's state as it changed: coming back up, the run
// of failures it ends, before it is cleared.
func (e *endpointState) record(p *healthPolicy, o outcome, a *Attempt, admitted time.Time, lease uint64, body uint64, now time.Time) (changed bool, at endpointState) {
	probe := lease != 0 && lease == e.lease // a probe that outlived its lease is not this one
	if probe {
		e.lease = 0
	}
	switch {
	case o == outcomeReached:
		return e.reach(now)
	case o == outcomeFailed && admitted.Before(e.reached):
		// Sent before the endpoint was last reached: its failure is old
		// news, not a sign that the endpoint is down again.
	case o == outcomeFailed:
		return e.fail(p, a, probe, body, now)
	case probe && a.Kind != KindCanceled:
		// A probe that says nothing (not the caller's cancellation) waits
		// as one that failed, so that such probes do not follow each other.
		e.nextProbe = now.Add(e.interval)
	}
	return false, endpointState{}
}

// reach notes an attempt that reached e at now: it is up.
func (e *endpointState) reach(now time.Time) (changed bool, at endpointState) {
	e.reached = now
	if e.down {
		e.down, e.changed = false, now
		changed, at = true, *e
	}
	e.failures, e.nextProbe, e.bodies = 0, time.Time{}, e.bodies[:0]
	return changed, at
}

// fail notes failed attempt a at now, a probe if probe, of the delivery
// whose body hashes to body.
func (e *endpointState) fail(p *healthPolicy, a *Attempt, probe bool, body uint64, now time.Time) (changed bool, at endpointState) {
	e.last = *a
	if body != 0 && !e.down && !probe {
		if countedBody(e.bodies, body) {
			// One delivery failing again (a poison payload that hangs its
			// handler) counts once: it says nothing of the others.
			return false, endpointState{}
		}
		if len(e.bodies) < p.downAfter {
			e.bodies = append(e.bodies, body)
		}
	}
	if e.failures == 0 {
		e.since = now
	}
	e.failures++
	switch {
	case e.down && probe: // a failed probe: wait longer
		e.interval = min(2*e.interval, p.limit)
		e.nextProbe = now.Add(e.interval)
	case !e.down && e.failures >= p.downAfter:
		e.down, e.changed = true, now
		e.interval = p.first
		e.nextProbe = now.Add(e.interval)
		return true, *e
	}
	return false, endpointState{}
}

func countedBody(bodies []uint64, body uint64) bool {
	for _, b := range bodies {
		if b == body {
			return true
		}
	}
	return false
}

// well reports whether e has nothing left to remember at now: no run of
// failures, not down, and no attempt admitted before it was last reached
// can still end (until then, its reached time sets such a failure aside).
func (e *endpointState) well(p *healthPolicy, now time.Time) bool {
	return e.failures == 0 && !e.down && now.Sub(e.reached) >= p.probeFor
}

// stall is a URL's attempts in flight, for the bound on an endpoint that
// is not answering.
type stall struct {
	inFlight int
	waiters  int       // attempts waiting for the answer of one in flight (a ticket's await)
	progress time.Time // the last answer, or when attempts began to be in flight
	heard    bool      // an answer came, since the URL's entry was made
}

// admitStall says whether one more attempt may be in flight to a URL, or
// wait for the answer of one, at now: yes unless maxUnanswered are in
// flight or waiting and it has given no answer for quiet. A refusal waits
// quiet.
func (s *stall) admitStall(maxUnanswered int, quiet time.Duration, now time.Time) bool {
	return s.inFlight+s.waiters < maxUnanswered || now.Sub(s.progress) < quiet
}

// begin and end count an attempt in flight; end notes an answer. A URL
// whose last attempts got no answer (silent) stays silent from then: its
// next attempts are bounded at once, not after another quiet.
func (s *stall) begin(silent bool, now time.Time) {
	if s.inFlight == 0 && !silent {
		s.progress = now
	}
	s.inFlight++
}

func (s *stall) end(answered bool, now time.Time) {
	s.inFlight--
	if answered {
		s.progress, s.heard = now, true
	}
}

// awaiting reports whether the next attempt should wait for the answer of
// the one in flight: a URL not heard from, until that attempt ends, or
// until (see health.awaitUntil). Nothing tells a URL that will answer from
// one that never does before either answers: so one attempt finds out, and
// the others wait for it, unless the URL is found silent first (see
// health.unanswered).
func (s *stall) awaiting(until, now time.Time) bool {
	return s.inFlight > 0 && !s.heard && now.Before(until)
}

// follow applies m, a mark that another process wrote, to e at now, by
// m's Changed: a mark older than what e knows is ignored. A mark down
// holds e down until the mark's next probe, as if e had gone down itself;
// a mark up (or an answer confirmed) clears e's down state or its run of
// failures, when it came after them. Nothing is reported: the change is
// the other process's.
func (e *endpointState) follow(p *healthPolicy, m *EndpointHealth, now time.Time) {
	switch {
	case m.Down && (!e.down || m.Changed.After(e.changed)):
		if !e.down {
			e.since, e.failures = m.Since, max(e.failures, m.Failures)
			e.last = Attempt{Kind: m.LastFailure.Kind}
		}
		e.down, e.changed = true, m.Changed
		e.interval = p.first // this process's own probes back off from the start
		e.nextProbe = m.NextProbe
		if e.nextProbe.IsZero() {
			e.nextProbe = now.Add(e.interval)
		}
		// By another process's clock, which may be ahead: never later
		// than this process's longest wait between probes.
		if limit := now.Add(p.limit); e.nextProbe.After(limit) {
			e.nextProbe = limit
		}
	case !m.Down && e.down && m.Changed.After(e.changed):
		e.down, e.changed = false, m.Changed
		e.failures, e.nextProbe, e.bodies = 0, time.Time{}, e.bodies[:0]
	case !m.Down && !e.down && e.failures > 0 && m.Changed.After(e.since):
		e.failures, e.bodies = 0, e.bodies[:0] // another process reached it since
	}
}
