package webhook

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"
)

// This file holds how endpoint health reports: OnChange, in order, off the
// lock; the log lines; the snapshot Sender.Health returns.

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
				h.forgetIfWell(e.shown, e, h.now())
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

// tell calls OnChange with c, logging a panic: the changes queued behind it
// are still reported.
func (h *health) tell(c EndpointHealth) {
	defer func() {
		if v := recover(); v != nil {
			h.logger.LogAttrs(context.Background(), slog.LevelError, "webhook: HealthOptions.OnChange panicked",
				slog.String("endpoint", c.Endpoint), slog.Bool("down", c.Down), slog.Any("panic", v))
		}
	}()
	h.onChange(c)
}

// state returns what is known of e. Under h.mu.
func (e *endpoint) state() EndpointHealth { return e.stateOf(&e.endpointState) }

// stateOf returns e as reported in state st.
func (e *endpoint) stateOf(st *endpointState) EndpointHealth {
	s := EndpointHealth{Endpoint: e.shown, Down: st.down, Since: st.since, Changed: st.changed, Failures: st.failures, LastFailure: st.last, PerURL: e.perURL}
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
