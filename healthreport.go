package webhook

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
)

// This file holds how endpoint health reports: EndpointHealth; OnChange, in order, off the
// lock; the log lines; the snapshot Sender.Health returns.

// EndpointHealth is what a [Sender] knows of an endpoint that is failing or
// down.
type EndpointHealth struct {
	// Endpoint is the origin that identifies it, such as
	// "https://hooks.example.com:443".
	Endpoint string

	// Down reports whether deliveries to it are held back.
	Down bool

	// Since is when its run of failures began.
	Since time.Time

	// Changed is when it last went down or came back up; zero while it
	// fails without being down.
	Changed time.Time

	// Failures is how many attempts in a row failed without a
	// connection.
	Failures int

	// LastFailure is the last of them.
	LastFailure Attempt

	// NextProbe is, while it is down, when the next probe may go.
	NextProbe time.Time

	// PerURL reports whether this is one URL of Endpoint, not the whole
	// origin: a URL whose attempts connect and then get no answer, isolated
	// alone so that the origin's other paths are unaffected. Its path is
	// not shown (Endpoint ends in "/…"): it may be a credential.
	PerURL bool

	// Confirmed reports that this is not a change but an endpoint that
	// answered, confirmed up (HealthOptions.ConfirmUpEvery): it may have
	// been up all along. Down is false.
	Confirmed bool

	// URLKey is, for a URL's change (PerURL) and for an endpoint
	// confirmed up (HealthOptions.ConfirmUpEvery), the key of that URL:
	// what [Connection.URLKey] returns for it, never the URL itself.
	URLKey string
}

// String describes h on one line for people.
func (h EndpointHealth) String() string {
	state := "failing"
	if h.Down {
		state = "down"
	}
	if h.PerURL {
		state = "not answering"
		if h.Down {
			state = "isolated, not answering"
		}
	}
	return fmt.Sprintf("%s %s since %s: %d failed attempt(s) in a row, the last %s",
		h.Endpoint, state, h.Since.UTC().Format(time.RFC3339), h.Failures, h.LastFailure.Kind)
}

// queue logs e's new state, at, and adds it to the changes to report; it
// returns reports with e added when the caller is to report them. Under
// h.mu.
func (h *health) queue(e *endpoint, at endpointState, reports []*endpoint) []*endpoint {
	st := e.stateOf(&at)
	level, msg := slog.LevelInfo, "webhook: endpoint up"
	switch {
	case st.Down && st.PerURL:
		level, msg = slog.LevelWarn, "webhook: endpoint isolated: a URL that connects and does not answer"
	case st.Down:
		level, msg = slog.LevelWarn, "webhook: endpoint down"
	}
	h.logger.LogAttrs(context.Background(), level, msg, slog.String("endpoint", st.Endpoint),
		slog.Time("since", st.Since), slog.Int("failures", st.Failures), slog.String("last_kind", string(st.LastFailure.Kind)))
	if h.onChange == nil {
		return reports
	}
	if !st.Down && !st.PerURL && h.confirmUp > 0 {
		h.confirmed[st.Endpoint] = at.changed // reported up: the next confirmation is due a ConfirmUpEvery later
	}
	e.changes = append(e.changes, st)
	if e.reporting {
		return reports
	}
	e.reporting = true
	return append(reports, e)
}

// report hands e's changes to OnChange, in order, until none is left. Only
// one goroutine reports an endpoint's changes at a time; it stops reporting
// under the lock under which it finds none left, so a change queued by
// another goroutine is always reported.
func (h *health) report(e *endpoint) {
	for {
		h.mu.Lock()
		if len(e.changes) == 0 {
			e.reporting = false
			if !e.perURL {
				h.forgetIfWell(e.origin, e, h.now())
			} else if u := h.urls[e.url]; u != nil && &u.endpoint == e && u.settled() {
				h.forgetURL(e.url, u)
			}
			h.mu.Unlock()
			return
		}
		c := e.changes[0]
		e.changes = e.changes[1:]
		h.mu.Unlock()
		h.tell(c)
	}
}

// confirm reports, with ConfirmUpEvery, the origin of attempt a, which
// answered, up: at its first answer, then at most once per
// ConfirmUpEvery. It goes through the origin's changes, so that it is
// never reported out of order with its going down. Under h.mu.
func (h *health) confirm(t ticket, a *Attempt, now time.Time, reports []*endpoint) []*endpoint {
	if h.confirmUp <= 0 || h.onChange == nil || a.StatusCode == 0 {
		return reports
	}
	if last, ok := h.confirmed[t.origin]; ok && now.Sub(last) < h.confirmUp {
		return reports
	}
	e := h.endpoints[t.origin]
	if e == nil {
		e = &endpoint{origin: t.origin, touched: now}
		h.endpoints[t.origin] = e
	}
	if e.down {
		return reports
	}
	h.confirmed[t.origin] = now
	st := e.state()
	st.Changed, st.URLKey, st.Confirmed = now, urlKey(t.url), true
	e.changes = append(e.changes, st)
	if e.reporting {
		return reports
	}
	e.reporting = true
	return append(reports, e)
}

// forgetConfirmed drops the confirmations older than ConfirmUpEvery: their
// next answer is confirmed again. Under h.mu.
func (h *health) forgetConfirmed(now time.Time) {
	for origin, at := range h.confirmed {
		if now.Sub(at) >= h.confirmUp {
			delete(h.confirmed, origin)
		}
	}
}

// tell calls OnChange with c, logging a panic: the changes queued behind it
// are still reported. Its context ends after OnChangeTimeout.
func (h *health) tell(c EndpointHealth) {
	ctx, cancel := context.WithTimeout(context.Background(), OnChangeTimeout)
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			h.logger.LogAttrs(context.Background(), slog.LevelError, "webhook: HealthOptions.OnChange panicked",
				slog.String("endpoint", c.Endpoint), slog.Bool("down", c.Down), slog.Any("panic", v))
		}
	}()
	h.onChange(ctx, c)
}

// state returns what is known of e. Under h.mu.
func (e *endpoint) state() EndpointHealth { return e.stateOf(&e.endpointState) }

// stateOf returns e as reported in state st.
func (e *endpoint) stateOf(st *endpointState) EndpointHealth {
	s := EndpointHealth{Endpoint: e.name(), Down: st.down, Since: st.since, Changed: st.changed, Failures: st.failures, LastFailure: st.last, PerURL: e.perURL}
	if e.perURL {
		s.URLKey = urlKey(e.url)
	}
	if st.down {
		s.NextProbe = st.nextProbe
	}
	return s
}

// snapshot returns the endpoints and URLs failing or down, sorted, having
// forgotten the idle ones.
func (h *health) snapshot() []EndpointHealth {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.swept = time.Time{} // now, whatever the last sweep was
	h.sweep(h.now())
	out := make([]EndpointHealth, 0, len(h.endpoints))
	for _, e := range h.endpoints {
		if e.failures > 0 || e.down {
			out = append(out, e.state())
		}
	}
	for _, u := range h.urls {
		if u.failures > 0 || u.down {
			out = append(out, u.state())
		}
	}
	slices.SortFunc(out, func(a, b EndpointHealth) int {
		return cmp.Or(strings.Compare(a.Endpoint, b.Endpoint), cmp.Compare(boolInt(a.PerURL), boolInt(b.PerURL)))
	})
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
