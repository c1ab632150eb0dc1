package webhook

import (
	"hash/maphash"
	"time"
)

// This file holds what an attempt's end does to endpoint health: its
// outcome recorded for its URL and its origin, the changes queued for
// OnChange, and the forgetting of what no longer needs watching.

// record notes attempt a, admitted with t, which got a connection if
// connected and whose delivery's body is body; it reports the changes of
// state through OnChange.
func (h *health) record(t ticket, a *Attempt, connected bool, body []byte) {
	now := h.now()
	var bodyHash uint64
	uo := urlOutcome(a.Kind, connected)
	if uo == outcomeFailed {
		bodyHash = maphash.Bytes(h.seed, body) | 1 // never 0, which counts no delivery
	}
	h.mu.Lock()
	if t.waiting {
		h.waiting--
	}
	h.sweep(now)
	if a.StatusCode != 0 { // an answer: the typical time it takes
		h.typical = average(h.typical, a.Duration, h.answers == 0)
		h.answers++
	}
	reports := h.recordURL(t, uo, a, bodyHash, now, nil)
	reports = h.recordOrigin(t, originOutcome(a.Kind, connected), a, now, reports)
	h.mu.Unlock()
	for _, e := range reports {
		h.reports.Add(1) // before the attempt returns: Sender.Flush waits for it
		go func() {
			defer h.reports.Done()
			h.report(e)
		}()
	}
}

// average adds d to the moving average avg (weight 1/16); the first d
// sets it.
func average(avg, d time.Duration, first bool) time.Duration {
	if first {
		return d
	}
	return avg + (d-avg)/16
}

// recordURL applies outcome o of attempt a to its URL. Under h.mu.
func (h *health) recordURL(t ticket, o outcome, a *Attempt, body uint64, now time.Time, reports []*endpoint) []*endpoint {
	u := h.urls[t.url]
	if u == nil {
		return reports
	}
	u.touched = now
	u.end(a.StatusCode != 0, now)
	if o != outcomeNeutral || t.urlLease != 0 {
		if changed, at := u.record(&h.policy, o, a, t.admitted, t.urlLease, body, now); changed {
			reports = h.queue(&u.endpoint, at, reports)
			if !u.down && h.fleet != nil {
				// Found up here: another process's mark no longer seeds
				// this URL's next entry, though it may stay recorded
				// (its clock ahead of this one's).
				delete(h.fleet.urlMarks, urlKey(t.url))
			}
		}
	}
	if u.settled() {
		h.forgetURL(t.url, u)
	}
	return reports
}

// forgetURL drops u, the entry of URL key, and keeps it for the next URL
// to come: nothing refers to it once it is out of the map (a report in
// progress would, but then u is not dropped). Under h.mu.
func (h *health) forgetURL(key string, u *urlEntry) {
	delete(h.urls, key)
	*u = urlEntry{} // what it held (its last failure's error and body) may go
	h.spare.Put(u)
}

// settled reports whether u has nothing to remember: nothing in flight, no
// run of failures, not down, nothing to report. Unlike an origin, whose
// attempts are not counted, a URL need not keep the time it was last
// reached once nothing is in flight: no attempt sent before can still end.
// So a URL that answers is kept only while attempts to it are in flight.
func (u *urlEntry) settled() bool {
	return u.inFlight == 0 && u.failures == 0 && !u.down && !u.reporting && len(u.changes) == 0
}

// recordOrigin applies outcome o of attempt a to its origin, which a
// failure begins to track. Under h.mu.
func (h *health) recordOrigin(t ticket, o outcome, a *Attempt, now time.Time, reports []*endpoint) []*endpoint {
	e := h.endpoints[t.origin]
	if e == nil && o != outcomeFailed {
		return h.confirm(t, a, now, reports)
	}
	if e == nil {
		e = &endpoint{origin: t.origin}
		h.endpoints[t.origin] = e
	}
	e.touched = now
	if changed, at := e.record(&h.policy, o, a, t.admitted, t.lease, 0, now); changed {
		reports = h.queue(e, at, reports)
	} else {
		reports = h.confirm(t, a, now, reports)
	}
	h.forgetIfWell(t.origin, e, now)
	return reports
}

// forgetIfWell drops origin e once it is well and nothing of it is left to
// report. Under h.mu.
func (h *health) forgetIfWell(origin string, e *endpoint, now time.Time) {
	if e.well(&h.policy, now) && !e.reporting && len(e.changes) == 0 && h.endpoints[origin] == e {
		delete(h.endpoints, origin)
	}
}

// sweep forgets, at most once a sweepEvery, the entries no attempt was made
// to for forgetFailingAfter (forgetDownAfter for one that is down), with
// nothing to report and, for a URL, nothing in flight. A forgotten
// endpoint's next delivery is sent as to any other. Under h.mu, locked.
func (h *health) sweep(now time.Time) {
	if now.Sub(h.swept) < sweepEvery {
		return
	}
	h.swept = now
	h.forgetConfirmed(now)
	idle := func(e *endpoint) bool {
		d := now.Sub(e.touched)
		return !e.reporting && len(e.changes) == 0 && (d >= forgetDownAfter || !e.down && d >= forgetFailingAfter)
	}
	for key, e := range h.endpoints {
		if idle(e) {
			delete(h.endpoints, key)
			continue
		}
		h.forgetIfWell(key, e, now)
	}
	for key, u := range h.urls {
		if u.inFlight == 0 && idle(&u.endpoint) || u.settled() {
			h.forgetURL(key, u)
		}
	}
}
