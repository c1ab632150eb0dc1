package webhook

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// This file holds endpoint health: marking an endpoint down after a run of
// failures without an answer, probing it while down, and reporting changes.

// Endpoint health: defaults of [HealthOptions].
const (
	DefaultDownAfter        = 5
	DefaultProbeInterval    = 10 * time.Second
	DefaultMaxProbeInterval = 5 * time.Minute
)

// ErrEndpointDown is matched by the error of a delivery, or of an attempt,
// that a [Sender] with endpoint health did not send because its endpoint is
// down. Nothing was sent: the caller decides what to do with it.
var ErrEndpointDown = errors.New("webhook: endpoint down")

// HealthOptions turns endpoint health on in a [Sender]
// (SenderOptions.Health). A nil *HealthOptions there leaves it off: every
// attempt dials, as the service's schedule says. A zero field selects the
// documented default.
//
// An endpoint is a URL's origin, its scheme, host and port: connections to
// one host and port share its fate, since what is dead (a name that no
// longer resolves, a port that refuses, a host that hangs) is the host, not
// a path. After DownAfter failed attempts in a row that say the endpoint
// cannot be reached (kinds dns, refused, reset, tls and timeout, the last
// of which costs a whole attempt timeout), the endpoint is marked down. An
// answer, whatever its status, proves it up: a 4xx or 5xx from a live server
// is not down, and resets the count. While it is down, no attempt dials it
// except one probe at a time, a real attempt of a real delivery, let through
// ProbeInterval after it went down and then at intervals that double after
// each failed probe, up to MaxProbeInterval; the first answer marks it up.
// Every other attempt to it fails at once with kind [KindDown] and an error
// matching [ErrEndpointDown], having sent nothing.
//
// Each Sender keeps its own view, in memory: several processes each learn
// and probe on their own, so a down endpoint sees at most one probe at a
// time from each.
type HealthOptions struct {
	// DownAfter is how many failed attempts in a row, of the kinds that
	// say the endpoint cannot be reached, mark it down. Zero means
	// DefaultDownAfter.
	DownAfter int

	// ProbeInterval is how long after it went down an endpoint is first
	// probed; each failed probe doubles the wait, up to MaxProbeInterval.
	// Zero means DefaultProbeInterval.
	ProbeInterval time.Duration

	// MaxProbeInterval caps the wait between probes. Zero means
	// DefaultMaxProbeInterval.
	MaxProbeInterval time.Duration

	// OnChange, if not nil, is called when an endpoint goes down and when
	// it comes back up, once per change, with its state then: to show it
	// in a dashboard, tell the customer, or disable a connection that has
	// been down for days (a decision, and a storage, of the service's).
	// Changes of one endpoint are reported in order, one at a time, from
	// the goroutine of an attempt that caused one (the attempt waits for
	// it: keep it quick); changes of different endpoints may be reported
	// concurrently.
	OnChange func(EndpointHealth)
}

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

	// Failures is how many attempts in a row failed without an answer.
	Failures int

	// LastFailure is the last of them.
	LastFailure Attempt

	// NextProbe is, while it is down, when the next probe may go.
	NextProbe time.Time
}

// String describes h on one line for people.
func (h EndpointHealth) String() string {
	state := "failing"
	if h.Down {
		state = "down"
	}
	return fmt.Sprintf("%s %s since %s: %d failed attempt(s) in a row, the last %s",
		h.Endpoint, state, h.Since.UTC().Format(time.RFC3339), h.Failures, h.LastFailure.Kind)
}

// health is a Sender's view of its endpoints: only those failing or down
// are kept, so a Sender reaching thousands of healthy hosts keeps nothing.
type health struct {
	downAfter int
	first     time.Duration // the first probe interval
	limit     time.Duration // the longest
	probeFor  time.Duration // how long a probe may be in flight: the attempt timeout
	onChange  func(EndpointHealth)
	now       func() time.Time
	logger    *slog.Logger

	mu        sync.RWMutex
	endpoints map[string]*endpoint
}

// endpoint is the state of one failing or down endpoint, under health.mu.
type endpoint struct {
	failures   int
	since      time.Time
	last       Attempt
	down       bool
	changed    time.Time
	interval   time.Duration // the wait after the last probe, or after going down
	nextProbe  time.Time
	probeUntil time.Time // while a probe is in flight: when it has surely ended

	changes   []EndpointHealth // to report, in order
	reporting bool             // a goroutine is reporting them
}

func newHealth(o *HealthOptions, attemptTimeout time.Duration, now func() time.Time, logger *slog.Logger) (*health, error) {
	switch {
	case o.DownAfter < 0:
		return nil, fmt.Errorf("webhook: HealthOptions.DownAfter must not be negative, got %d", o.DownAfter)
	case o.ProbeInterval < 0 || o.MaxProbeInterval < 0:
		return nil, fmt.Errorf("webhook: HealthOptions probe intervals must not be negative, got %v and %v", o.ProbeInterval, o.MaxProbeInterval)
	}
	h := &health{
		downAfter: cmp.Or(o.DownAfter, DefaultDownAfter),
		first:     cmp.Or(o.ProbeInterval, DefaultProbeInterval),
		limit:     cmp.Or(o.MaxProbeInterval, DefaultMaxProbeInterval),
		probeFor:  attemptTimeout,
		onChange:  o.OnChange,
		now:       now,
		logger:    logger,
		endpoints: map[string]*endpoint{},
	}
	h.limit = max(h.limit, h.first)
	return h, nil
}

// endpointKey returns the origin of u, the validated URL of a connection,
// with its port always written: https://host:443 and https://host are one
// endpoint.
func endpointKey(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "443"
	}
	return u.Scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// admit says whether an attempt to endpoint key may be sent now: when it
// is up, yes; when it is down, only as its one probe, once the probe is
// due. A refusal comes with the wait until a retry may be admitted and the
// error of the attempt.
func (h *health) admit(key string) (probe bool, wait time.Duration, err error) {
	h.mu.RLock()
	_, tracked := h.endpoints[key]
	h.mu.RUnlock()
	if !tracked { // the common case: an endpoint that is not failing
		return false, 0, nil
	}
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.endpoints[key]
	switch {
	case e == nil || !e.down:
		return false, 0, nil
	case now.Before(e.probeUntil): // a probe is in flight: it ends by then
		wait = min(e.probeUntil.Sub(now), e.interval)
	case now.Before(e.nextProbe):
		wait = e.nextProbe.Sub(now)
	default:
		e.probeUntil = now.Add(h.probeFor)
		return true, 0, nil
	}
	wait = max(wait, time.Millisecond) // a queue that waits it never spins
	return false, wait, fmt.Errorf("%w: %s has failed %d attempt(s) in a row since %s, the last: %s; nothing was sent",
		ErrEndpointDown, key, e.failures, e.since.UTC().Format(time.RFC3339), e.last.Kind)
}

// outcome sorts attempt kinds by what they say of an endpoint.
type outcome int

const (
	outcomeNeutral     outcome = iota // says nothing: not sent, canceled, an unknown failure
	outcomeAnswered                   // any answer: the endpoint is up
	outcomeUnreachable                // no answer: dns, refused, reset, tls, timeout
)

func outcomeOf(k FailureKind) outcome {
	switch k {
	case KindNone, KindStatus, KindRedirect:
		return outcomeAnswered
	case KindDNS, KindRefused, KindReset, KindTLS, KindTimeout:
		return outcomeUnreachable
	}
	return outcomeNeutral
}

// record notes the attempt a to endpoint key, which was its probe if probe
// is set, and reports a change of state through OnChange.
func (h *health) record(key string, a *Attempt, probe bool) {
	o := outcomeOf(a.Kind)
	if o != outcomeUnreachable && !probe {
		h.mu.RLock()
		_, tracked := h.endpoints[key]
		h.mu.RUnlock()
		if !tracked {
			return
		}
	}
	now := h.now()
	h.mu.Lock()
	e := h.endpoints[key]
	if e == nil {
		if o != outcomeUnreachable {
			h.mu.Unlock()
			return
		}
		e = &endpoint{since: now}
		h.endpoints[key] = e
	}
	if probe {
		e.probeUntil = time.Time{}
	}
	switch o {
	case outcomeAnswered:
		if e.down {
			e.down, e.changed = false, now
			h.queue(key, e)
		}
		e.failures, e.nextProbe = 0, time.Time{}
	case outcomeUnreachable:
		e.failures++
		e.last = *a
		switch {
		case e.down && probe: // a failed probe: wait longer
			e.interval = min(2*e.interval, h.limit)
			e.nextProbe = now.Add(e.interval)
		case !e.down && e.failures >= h.downAfter:
			e.down, e.changed = true, now
			e.interval = h.first
			e.nextProbe = now.Add(e.interval)
			h.queue(key, e)
		}
	}
	report := len(e.changes) > 0 && !e.reporting
	if report {
		e.reporting = true
	}
	h.forgetIfWell(key, e)
	h.mu.Unlock()
	if report {
		h.report(key, e)
	}
}

// queue logs e's new state and adds it to the changes to report.
func (h *health) queue(key string, e *endpoint) {
	st := e.state(key)
	level, msg := slog.LevelInfo, "webhook: endpoint up"
	if st.Down {
		level, msg = slog.LevelWarn, "webhook: endpoint down"
	}
	h.logger.LogAttrs(context.Background(), level, msg, slog.String("endpoint", key),
		slog.Time("since", st.Since), slog.Int("failures", st.Failures), slog.String("last_kind", string(st.LastFailure.Kind)))
	if h.onChange != nil {
		e.changes = append(e.changes, st)
	}
}

// forgetIfWell drops e once it is well and nothing of it is left to
// report. Under h.mu.
func (h *health) forgetIfWell(key string, e *endpoint) {
	if e.failures == 0 && !e.down && !e.reporting && h.endpoints[key] == e {
		delete(h.endpoints, key)
	}
}

// report hands e's changes to OnChange, in order, until none is left. Only
// one goroutine reports an endpoint's changes at a time.
func (h *health) report(key string, e *endpoint) {
	defer func() {
		h.mu.Lock()
		e.reporting = false // also if OnChange panicked
		h.forgetIfWell(key, e)
		h.mu.Unlock()
	}()
	for {
		h.mu.Lock()
		if len(e.changes) == 0 {
			h.mu.Unlock()
			return
		}
		c := e.changes[0]
		e.changes = e.changes[1:]
		h.mu.Unlock()
		h.onChange(c)
	}
}

// state returns what is known of e. Under h.mu.
func (e *endpoint) state(key string) EndpointHealth {
	s := EndpointHealth{Endpoint: key, Down: e.down, Since: e.since, Changed: e.changed, Failures: e.failures, LastFailure: e.last}
	if e.down {
		s.NextProbe = e.nextProbe
	}
	return s
}

// snapshot returns the endpoints failing or down, sorted.
func (h *health) snapshot() []EndpointHealth {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make([]EndpointHealth, 0, len(h.endpoints))
	for key, e := range h.endpoints {
		if e.failures > 0 || e.down {
			out = append(out, e.state(key))
		}
	}
	slices.SortFunc(out, func(a, b EndpointHealth) int { return strings.Compare(a.Endpoint, b.Endpoint) })
	return out
}
