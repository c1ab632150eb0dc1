package webhook

import (
	"context"
	"log/slog"
	"time"
)

// This file holds how a Sender shares endpoint health with the other
// processes of a deployment (HealthOptions.Marks): its changes are written
// through OnChange's path, and the others' marks are read at most
// FollowEvery apart, lazily, when attempts are admitted, and applied to the
// core by their time of change.

// DefaultFollowEvery is how often, at most, a Sender reads the marks of
// the other processes (HealthOptions.FollowEvery): a process stops dialling
// an endpoint another found down within about a second.
const DefaultFollowEvery = time.Second

// marksOverlap is how far before the last mark read a Sender reads again:
// a mark recorded by a transaction that committed late, with an earlier
// time, is read all the same; applying a mark twice does nothing.
const marksOverlap = 2 * time.Second

// fleet is what a health following HealthOptions.Marks holds, under
// health.mu.
type fleet struct {
	marks    HealthMarks
	every    time.Duration
	cursor   time.Time // the store's time to read from next
	last     time.Time // when the last read began, on health's clock
	reading  bool
	first    chan struct{}             // closed once the first read has ended, done or not
	firstBy  time.Time                 // when the first read's bound ends (OnChangeTimeout), on the system clock
	urlMarks map[string]EndpointHealth // the other processes' URL marks down, by URLKey
	applied  map[string]time.Time      // the down marks applied, by origin or URLKey: their Changed
}

// newFleet returns the fleet of marks, and wraps onChange so that every
// change is written there before it is handed on.
func newFleet(marks HealthMarks, every time.Duration, onChange *func(context.Context, EndpointHealth), logger *slog.Logger) *fleet {
	next := *onChange
	*onChange = func(ctx context.Context, c EndpointHealth) {
		if err := marks.Mark(ctx, c); err != nil {
			logger.LogAttrs(ctx, slog.LevelWarn, "webhook: cannot write an endpoint health mark",
				slog.String("endpoint", c.Endpoint), slog.Bool("down", c.Down), slog.String("error", err.Error()))
		}
		if next != nil {
			next(ctx, c)
		}
	}
	return &fleet{marks: marks, every: every, urlMarks: map[string]EndpointHealth{}, applied: map[string]time.Time{},
		first: make(chan struct{}), firstBy: time.Now().Add(OnChangeTimeout)}
}

// seeded waits, with HealthOptions.Marks, until the Sender's first read of
// the marks has ended, OnChangeTimeout after NewSender at most (a store
// that ignores its context does not hold the attempts longer), or ctx is
// done: a process starting up holds back from its first attempt an
// endpoint another process marked down. Afterwards it costs a receive
// from a closed channel.
func (h *health) seeded(ctx context.Context) {
	if h.fleet == nil {
		return
	}
	select {
	case <-h.fleet.first:
		return
	default:
	}
	t := time.NewTimer(time.Until(h.fleet.firstBy))
	defer t.Stop()
	select {
	case <-h.fleet.first:
	case <-t.C:
	case <-ctx.Done():
	}
}

// followDue starts reading the marks when FollowEvery has passed since the
// last read began. Under h.mu.
func (h *health) followDue(now time.Time) {
	f := h.fleet
	if f == nil || f.reading || (!f.last.IsZero() && now.Sub(f.last) < f.every) {
		return
	}
	f.reading, f.last = true, now
	h.reports.Add(1) // Sender.Flush waits for it
	go h.follow()
}

// follow reads the marks recorded since the last read, and applies them.
func (h *health) follow() {
	defer h.reports.Done()
	ctx, cancel := context.WithTimeout(context.Background(), OnChangeTimeout)
	defer cancel()
	h.mu.Lock()
	from := h.fleet.cursor
	h.mu.Unlock()
	if !from.IsZero() {
		from = from.Add(-marksOverlap)
	}
	marks, next, err := h.fleet.marks.Since(ctx, from)
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.fleet.first:
	default:
		defer close(h.fleet.first) // after the marks are applied, under h.mu
	}
	h.fleet.reading = false
	if err != nil {
		h.logger.LogAttrs(ctx, slog.LevelWarn, "webhook: cannot read the endpoint health marks", slog.String("error", err.Error()))
		return
	}
	if next.After(h.fleet.cursor) {
		h.fleet.cursor = next
	}
	now := h.now()
	for i := range marks {
		h.apply(&marks[i], now)
	}
}

// apply applies mark m of another process at now. Under h.mu.
func (h *health) apply(m *EndpointHealth, now time.Time) {
	if m.Changed.IsZero() {
		return
	}
	// A down mark is applied once: read again (the overlap, or no later
	// mark recorded since), it would take down again an endpoint this
	// process has found up since, when its up could not replace the mark
	// (another process's clock ahead, a write that failed).
	key := "|" + m.Endpoint
	if m.PerURL {
		key = m.URLKey
	}
	if m.Down {
		if c, ok := h.fleet.applied[key]; ok && c.Equal(m.Changed) {
			return
		}
		h.fleet.applied[key] = m.Changed
	} else {
		delete(h.fleet.applied, key)
	}
	if m.PerURL {
		if m.Down {
			h.fleet.urlMarks[m.URLKey] = *m
		} else {
			delete(h.fleet.urlMarks, m.URLKey)
		}
		for raw, u := range h.urls { // those in flight or failing: few
			if urlKey(raw) == m.URLKey {
				u.follow(&h.policy, m, now)
			}
		}
		return
	}
	e := h.endpoints[m.Endpoint]
	if e == nil {
		if !m.Down {
			return
		}
		e = &endpoint{origin: m.Endpoint}
		h.endpoints[m.Endpoint] = e
	}
	e.touched = now
	e.follow(&h.policy, m, now)
	h.forgetIfWell(m.Endpoint, e, now)
}

// seedURL applies to u, a URL entry just made, the other processes' mark
// of its URL, if any. Under h.mu.
func (h *health) seedURL(u *urlEntry, now time.Time) {
	if h.fleet == nil || len(h.fleet.urlMarks) == 0 {
		return
	}
	if m, ok := h.fleet.urlMarks[urlKey(u.url)]; ok {
		u.follow(&h.policy, &m, now)
	}
}
