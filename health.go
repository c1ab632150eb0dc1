package webhook

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
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
// An endpoint is a URL's origin, its scheme, host and port (in one
// spelling: a host name in lower case without its final dot, an IP address
// in its canonical form, port 443 written or not): connections to one host
// and port share its fate, since what is dead (a name that no longer
// resolves, a port that refuses, a host that hangs) is the host, not a
// path. After DownAfter attempts in a row that got no connection (kinds
// dns, refused, tls, and a timeout or reset before a connection was had),
// the endpoint is marked down. An attempt that got a connection, or an
// answer, proves it up and resets the count, whatever became of it: a 4xx
// or 5xx, or a timeout or reset after the request was sent, is what one
// path's handler did (a tenant's handler that hangs on a shared host, a
// handler that panics on one payload), not what the host is. So a host
// whose TLS answers but whose application hangs is never down: each attempt
// to it is bounded by the attempt timeout. The failure of an attempt sent
// before the endpoint was last reached is old news and not counted.
//
// While it is down, no attempt dials it except one probe at a time, a real
// attempt of a real delivery, let through ProbeInterval after it went down
// and then at intervals that double after each failed probe, up to
// MaxProbeInterval; the first connection marks it up. Every other attempt
// to it fails at once with kind [KindDown] and an error matching
// [ErrEndpointDown], having sent nothing; [Sender.SendTest] is always sent,
// so that a customer who fixed the endpoint sees it answer.
//
// Each Sender keeps its own view, in memory: several processes each learn
// and probe on their own, so a down endpoint sees at most one probe at a
// time from each. An endpoint no attempt is made to is forgotten, after an
// hour, or a day if it is down: it is likely gone (a connection changed or
// deleted); if it is still dead when a delivery goes to it again, it is
// marked down, and reported, again.
type HealthOptions struct {
	// DownAfter is how many attempts in a row that got no connection mark
	// the endpoint down. Zero means DefaultDownAfter.
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
	// concurrently. A panic in it is logged (SenderOptions.Logger), and
	// the changes after it are still reported.
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

	// Failures is how many attempts in a row failed without a
	// connection.
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
// are kept, and only while attempts are made to them, so a Sender reaching
// thousands of healthy hosts keeps nothing.
type health struct {
	downAfter int
	first     time.Duration // the first probe interval
	limit     time.Duration // the longest
	probeFor  time.Duration // how long a probe may be in flight: the attempt timeout and room
	onChange  func(EndpointHealth)
	now       func() time.Time
	logger    *slog.Logger

	mu        sync.RWMutex
	endpoints map[string]*endpoint
	leases    uint64    // the last probe lease handed out
	swept     time.Time // when idle endpoints were last forgotten
}

// endpoint is the state of one failing or down endpoint, under health.mu.
type endpoint struct {
	failures   int
	since      time.Time // when the run of failures began
	last       Attempt
	down       bool
	changed    time.Time
	reached    time.Time     // when an attempt last got a connection or an answer
	touched    time.Time     // when an attempt was last admitted or recorded
	interval   time.Duration // the wait after the last probe, or after going down
	nextProbe  time.Time
	lease      uint64    // the probe in flight's, or 0
	leaseUntil time.Time // when the probe in flight has surely ended

	changes   []EndpointHealth // to report, in order
	reporting bool             // a goroutine is reporting them
}

// Endpoints no attempt was made to for so long are forgotten: a run of
// failures an hour old says little, and a down endpoint nothing is sent to
// for a day is likely gone (a connection changed or deleted).
const (
	forgetFailingAfter = time.Hour
	forgetDownAfter    = 24 * time.Hour
	sweepEvery         = time.Minute
)

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
// in one spelling for one host and port: the port always written, a host
// name in lower case without its final dot, an IP address in its canonical
// form (an IPv4-mapped IPv6 address as the IPv4 address net dials).
func endpointKey(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "443"
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.Unmap().String()
	}
	return u.Scheme + "://" + net.JoinHostPort(host, port)
}

// admit says whether an attempt to endpoint key may be sent now: when it
// is up, yes; when it is down, only as its one probe, once the probe is
// due, with a lease (non-zero) to give back to record. A refusal comes with
// the error of the attempt and a wait after which a retry may be admitted,
// spread over a probe interval so that the deliveries a queue holds back do
// not all come back at one instant.
func (h *health) admit(key string) (lease uint64, wait time.Duration, err error) {
	h.mu.RLock()
	_, tracked := h.endpoints[key]
	h.mu.RUnlock()
	if !tracked { // the common case: an endpoint that is not failing
		return 0, 0, nil
	}
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweep(now)
	e := h.endpoints[key]
	if e == nil {
		return 0, 0, nil
	}
	e.touched = now
	switch {
	case !e.down:
		return 0, 0, nil
	case e.lease != 0 && now.Before(e.leaseUntil): // a probe is in flight: it ends by then
		wait = min(e.leaseUntil.Sub(now), e.interval)
	case now.Before(e.nextProbe):
		wait = e.nextProbe.Sub(now)
	default:
		h.leases++
		e.lease, e.leaseUntil = h.leases, now.Add(h.probeFor)
		return e.lease, 0, nil
	}
	wait += rand.N(e.interval + 1)
	wait = max(wait, time.Millisecond) // a queue that waits it never spins
	return 0, wait, fmt.Errorf("%w: %s has failed %d attempt(s) in a row since %s, the last: %s; nothing was sent",
		ErrEndpointDown, key, e.failures, e.since.UTC().Format(time.RFC3339), e.last.Kind)
}

// outcome sorts attempts by what they say of an endpoint.
type outcome int

const (
	outcomeNeutral     outcome = iota // says nothing: not sent, or failed for a reason of its own
	outcomeReached                    // a connection or an answer: the endpoint is up
	outcomeUnreachable                // no connection: dns, refused, tls, or a timeout or reset before one
)

// outcomeOf sorts an attempt of kind k, which got a connection if
// connected. A timeout or a reset after the connection is what one path's
// handler did (a hang, a panic), not what the host is: it says the host is
// up. Only failing to connect counts against it.
func outcomeOf(k FailureKind, connected bool) outcome {
	switch {
	case connected, k == KindNone, k == KindStatus, k == KindRedirect:
		return outcomeReached
	case k == KindDNS, k == KindRefused, k == KindReset, k == KindTLS, k == KindTimeout:
		return outcomeUnreachable
	}
	return outcomeNeutral
}

// record notes attempt a to endpoint key, admitted at admitted (health's
// clock), which got a connection if connected and was a probe if lease is
// not zero; it reports a change of state through OnChange.
func (h *health) record(key string, a *Attempt, connected bool, admitted time.Time, lease uint64) {
	o := outcomeOf(a.Kind, connected)
	if o != outcomeUnreachable && lease == 0 {
		h.mu.RLock()
		_, tracked := h.endpoints[key]
		h.mu.RUnlock()
		if !tracked {
			return
		}
	}
	now := h.now()
	h.mu.Lock()
	h.sweep(now)
	e := h.endpoints[key]
	if e == nil {
		if o != outcomeUnreachable {
			h.mu.Unlock()
			return
		}
		e = &endpoint{}
		h.endpoints[key] = e
	}
	e.touched = now
	probe := lease != 0 && lease == e.lease // a probe that outlived its lease is not this one
	if probe {
		e.lease = 0
	}
	switch {
	case o == outcomeReached:
		e.reached = now
		if e.down {
			e.down, e.changed = false, now
			h.queue(key, e)
		}
		e.failures, e.nextProbe = 0, time.Time{}
	case o == outcomeUnreachable && admitted.Before(e.reached):
		// Sent before the endpoint was last reached: its failure is old
		// news, not a sign that the endpoint is down again.
	case o == outcomeUnreachable:
		if e.failures == 0 {
			e.since = now
		}
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
	case probe && a.Kind != KindCanceled:
		// A probe that says nothing (not the caller's cancellation) waits
		// as one that failed, so that such probes do not follow each other.
		e.nextProbe = now.Add(e.interval)
	}
	report := len(e.changes) > 0 && !e.reporting
	if report {
		e.reporting = true
	}
	h.forgetIfWell(key, e, now)
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

// forgetIfWell drops e once it is well, nothing of it is left to report,
// and no attempt admitted before it was last reached can still end: until
// then its reached time sets such an attempt's failure aside. Under h.mu.
func (h *health) forgetIfWell(key string, e *endpoint, now time.Time) {
	if e.failures == 0 && !e.down && !e.reporting && len(e.changes) == 0 && now.Sub(e.reached) >= h.probeFor && h.endpoints[key] == e {
		delete(h.endpoints, key)
	}
}

// sweep forgets, at most once a sweepEvery, the endpoints no attempt was
// made to for forgetFailingAfter (forgetDownAfter for one that is down),
// with nothing to report. A forgotten endpoint's next delivery is sent as
// to any other. Under h.mu, locked.
func (h *health) sweep(now time.Time) {
	if now.Sub(h.swept) < sweepEvery {
		return
	}
	h.swept = now
	for key, e := range h.endpoints {
		idle := now.Sub(e.touched)
		if !e.reporting && len(e.changes) == 0 && (idle >= forgetDownAfter || !e.down && idle >= forgetFailingAfter) {
			delete(h.endpoints, key)
			continue
		}
		h.forgetIfWell(key, e, now)
	}
}

// report hands e's changes to OnChange, in order, until none is left. Only
// one goroutine reports an endpoint's changes at a time; it stops reporting
// under the lock under which it finds none left, so a change queued by
// another goroutine is always reported.
func (h *health) report(key string, e *endpoint) {
	for {
		h.mu.Lock()
		if len(e.changes) == 0 {
			e.reporting = false
			h.forgetIfWell(key, e, h.now())
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
func (e *endpoint) state(key string) EndpointHealth {
	s := EndpointHealth{Endpoint: key, Down: e.down, Since: e.since, Changed: e.changed, Failures: e.failures, LastFailure: e.last}
	if e.down {
		s.NextProbe = e.nextProbe
	}
	return s
}

// snapshot returns the endpoints failing or down, sorted, having forgotten
// the idle ones.
func (h *health) snapshot() []EndpointHealth {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.swept = time.Time{} // now, whenever the last sweep was
	h.sweep(h.now())
	out := make([]EndpointHealth, 0, len(h.endpoints))
	for key, e := range h.endpoints {
		if e.failures > 0 || e.down {
			out = append(out, e.state(key))
		}
	}
	slices.SortFunc(out, func(a, b EndpointHealth) int { return strings.Compare(a.Endpoint, b.Endpoint) })
	return out
}
