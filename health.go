package webhook

import (
	"cmp"
	"context"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"
)

// This file holds endpoint health: marking an endpoint down after a run of
// failures without an answer, probing it while down, and reporting changes.

// health is a Sender's view of its endpoints: the origins failing or down,
// and the URLs with attempts in flight or failing. Only those are kept, and
// only while attempts are made to them, so a Sender reaching thousands of
// healthy hosts keeps little.
type health struct {
	reports       sync.WaitGroup // the reports under way, for Sender.Flush
	policy        healthPolicy
	maxUnanswered int
	maxWaiting    int           // HealthOptions.MaxUnansweredTotal
	quietMax      time.Duration // the longest silence before a URL's attempts in flight are bounded
	typical       time.Duration // a moving average of answered attempts' durations, under mu
	answers       uint64        // how many answers it has seen, under mu
	onChange      func(context.Context, EndpointHealth)
	confirmUp     time.Duration
	confirmed     map[string]time.Time // origin -> when last reported up, with ConfirmUpEvery
	fleet         *fleet               // with HealthOptions.Marks, under mu
	now           func() time.Time
	logger        *slog.Logger
	seed          maphash.Seed

	mu        sync.Mutex
	endpoints map[string]*endpoint // by origin
	urls      map[string]*urlEntry // by whole URL, never shown
	leases    uint64               // the last probe lease handed out
	waiting   int                  // what waits on endpoints not answering (MaxUnansweredTotal)
	swept     time.Time            // when idle entries were last forgotten
	spare     sync.Pool            // of *urlEntry: forgotten ones, unreachable, to make the next
}

// endpoint is an origin's or a URL's health with its reporting, under
// health.mu.
type endpoint struct {
	endpointState
	origin    string    // the origin, or a URL's origin
	perURL    bool      // a URL's
	url       string    // a URL's raw text, whose key it reports
	touched   time.Time // when an attempt was last admitted or recorded
	changes   []EndpointHealth
	reporting bool // a goroutine is reporting them
}

// name returns how e is shown: its origin, and for a URL "/…" after it,
// never its path, which may be a credential.
func (e *endpoint) name() string {
	if e.perURL {
		return e.origin + "/…"
	}
	return e.origin
}

// urlEntry is one URL's attempts in flight and its health.
type urlEntry struct {
	stall
	endpoint
}

// ticket is what admit hands an attempt it lets through, for record.
type ticket struct {
	origin, url string
	admitted    time.Time // on health's clock
	lease       uint64    // the origin's probe lease, or 0
	urlLease    uint64    // the URL's probe lease, or 0
	waiting     bool      // it holds a place among what waits on endpoints not answering
}

// Entries no attempt was made to for so long are forgotten: a run of
// failures an hour old says little, and a down endpoint nothing is sent to
// for a day is likely gone (a connection changed or deleted).
const (
	forgetFailingAfter = time.Hour
	forgetDownAfter    = 24 * time.Hour
	sweepEvery         = time.Minute
)

// newHealth returns the health of a Sender whose attempts take at most
// attemptTimeout.
func newHealth(o *HealthOptions, attemptTimeout time.Duration, now func() time.Time, logger *slog.Logger) (*health, error) {
	switch {
	case o.DownAfter < 0:
		return nil, fmt.Errorf("webhook: HealthOptions.DownAfter must not be negative, got %d", o.DownAfter)
	case o.ProbeInterval < 0 || o.MaxProbeInterval < 0:
		return nil, fmt.Errorf("webhook: HealthOptions probe intervals must not be negative, got %v and %v", o.ProbeInterval, o.MaxProbeInterval)
	case o.ConfirmUpEvery < 0:
		return nil, fmt.Errorf("webhook: HealthOptions.ConfirmUpEvery must not be negative, got %v", o.ConfirmUpEvery)
	case o.MaxUnanswered < 0:
		return nil, fmt.Errorf("webhook: HealthOptions.MaxUnanswered must not be negative, got %d", o.MaxUnanswered)
	case o.FollowEvery < 0:
		return nil, fmt.Errorf("webhook: HealthOptions.FollowEvery must not be negative, got %v", o.FollowEvery)
	case o.MaxUnansweredTotal < 0:
		return nil, fmt.Errorf("webhook: HealthOptions.MaxUnansweredTotal must not be negative, got %d", o.MaxUnansweredTotal)
	}
	h := &health{
		policy: healthPolicy{
			downAfter: cmp.Or(o.DownAfter, DefaultDownAfter),
			first:     cmp.Or(o.ProbeInterval, DefaultProbeInterval),
			limit:     cmp.Or(o.MaxProbeInterval, DefaultMaxProbeInterval),
			// A probe is in flight for at most an attempt; the second is
			// room for its outcome to be recorded.
			probeFor: attemptTimeout + time.Second,
		},
		maxUnanswered: cmp.Or(o.MaxUnanswered, DefaultMaxUnanswered),
		maxWaiting:    cmp.Or(o.MaxUnansweredTotal, DefaultMaxUnansweredTotal),
		quietMax:      min(attemptTimeout/2, 5*time.Second),
		onChange:      o.OnChange,
		confirmUp:     o.ConfirmUpEvery,
		confirmed:     map[string]time.Time{},
		now:           now,
		logger:        logger,
		seed:          maphash.MakeSeed(),
		endpoints:     map[string]*endpoint{},
		urls:          map[string]*urlEntry{},
	}
	h.policy.limit = max(h.policy.limit, h.policy.first)
	if o.Marks != nil {
		h.fleet = newFleet(o.Marks, cmp.Or(o.FollowEvery, DefaultFollowEvery), &h.onChange, logger)
		h.mu.Lock()
		h.followDue(now()) // a process starts from the marks
		h.mu.Unlock()
	}
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

// admit says whether an attempt to origin's URL rawURL may be sent now,
// and returns the ticket to give back to record. held says that the
// delivery holds a place among what waits on endpoints not answering
// (holdRetry): the attempt takes it, or it is given back. A refusal comes
// with the error of the attempt and a wait after which a retry may be
// admitted, spread so that the deliveries a queue holds back do not all
// come back at one instant.
func (h *health) admit(origin, rawURL string, held bool) (ticket, time.Duration, error) {
	now := h.now()
	t := ticket{origin: origin, url: rawURL, admitted: now}
	h.mu.Lock()
	defer h.mu.Unlock()
	if held {
		h.waiting-- // the attempt takes a place again if it needs one
	}
	h.sweep(now)
	h.followDue(now)
	originFailing, originSilent := false, false
	if e := h.endpoints[origin]; e != nil {
		originFailing, originSilent = e.failures > 0, e.silent()
		e.touched = now
		ad, ok := e.admit(now)
		if !ok {
			return t, spread(ad.wait, e.interval), fmt.Errorf("%w: %s has failed %d attempt(s) in a row since %s, the last: %s; nothing was sent",
				ErrEndpointDown, origin, e.failures, e.since.UTC().Format(time.RFC3339), e.last.Kind)
		}
		if ad.probe {
			t.lease = h.grant(&e.endpointState, now)
		}
	}
	u := h.url(origin, rawURL, now)
	ad, ok := u.admit(now)
	switch {
	case !ok:
		h.release(origin, t.lease)
		return t, spread(ad.wait, u.interval), fmt.Errorf("%w: %s: %d attempt(s) in a row connected and got no answer since %s; nothing was sent",
			ErrEndpointNotAnswering, u.name(), u.failures, u.since.UTC().Format(time.RFC3339))
	case !ad.probe && !u.admitStall(h.maxUnanswered, h.quiet(), now):
		h.release(origin, t.lease)
		return t, spread(h.quiet(), h.quiet()), fmt.Errorf("%w: %s: %d attempt(s) in flight, no answer for %s; nothing was sent",
			ErrEndpointNotAnswering, u.name(), u.inFlight, now.Sub(u.progress).Round(time.Millisecond))
	}
	if originSilent || h.unanswered(u, now) {
		if h.waiting >= h.maxWaiting {
			h.release(origin, t.lease)
			return t, h.spreadFull(), h.full(u.name(), "nothing was sent")
		}
		h.waiting++
		t.waiting = true
	}
	if ad.probe {
		t.urlLease = h.grant(&u.endpointState, now)
	}
	u.begin(u.failures > 0 || originFailing, now)
	return t, 0, nil
}

// unanswered reports whether URL u is not answering at now: failing with
// no answer, isolated, or silent for quiet with attempts in flight (two at
// least: one slow answer at a busy moment is not silence). Under h.mu.
func (h *health) unanswered(u *urlEntry, now time.Time) bool {
	return u.failures > 0 || u.down || u.inFlight > 1 && now.Sub(u.progress) >= h.quiet()
}

// silent reports whether origin e is failing or down with attempts that
// time out before they connect: each holds its caller for an attempt's
// time. One that refuses or does not resolve fails at once.
func (e *endpoint) silent() bool {
	return (e.failures > 0 || e.down) && e.last.Kind == KindTimeout
}

// full returns the error of an attempt or a retry refused because
// MaxUnansweredTotal are waiting on endpoints not answering. Under h.mu.
func (h *health) full(shown, what string) error {
	return fmt.Errorf("%w: %s does not answer, and %d attempt(s) or retries already wait on endpoints that do not (HealthOptions.MaxUnansweredTotal); %s",
		ErrEndpointNotAnswering, shown, h.waiting, what)
}

// spreadFull returns the wait after a refusal by MaxUnansweredTotal: places
// come free as attempts end, within an attempt's time.
func (h *health) spreadFull() time.Duration {
	return spread(h.quiet(), h.policy.probeFor)
}

// unhold gives back the place a delivery held to retry (holdRetry) and did
// not use.
func (h *health) unhold() {
	h.mu.Lock()
	h.waiting--
	h.mu.Unlock()
}

// admitTest counts a Send Test to origin's URL rawURL in flight, as any
// attempt, and returns its ticket: a test is sent whatever the endpoint's
// health, but the attempts waiting on a URL that does not answer include
// it, and its end is recorded as any other's.
func (h *health) admitTest(origin, rawURL string) ticket {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweep(now)
	h.followDue(now) // a Sender making only Send Tests (the console's) follows the marks too
	e := h.endpoints[origin]
	if e != nil {
		e.touched = now
	}
	u := h.url(origin, rawURL, now)
	t := ticket{origin: origin, url: rawURL, admitted: now}
	if e != nil && e.silent() || h.unanswered(u, now) {
		h.waiting++ // counted, never refused
		t.waiting = true
	}
	u.begin(u.failures > 0 || e != nil && e.failures > 0, now)
	return t
}

// url returns origin's URL rawURL's entry, made if need be, touched at
// now. Under h.mu.
func (h *health) url(origin, rawURL string, now time.Time) *urlEntry {
	u := h.urls[rawURL]
	if u == nil {
		u, _ = h.spare.Get().(*urlEntry)
		if u == nil {
			u = new(urlEntry)
		}
		*u = urlEntry{endpoint: endpoint{origin: origin, perURL: true, url: rawURL}}
		if e := h.endpoints[origin]; e != nil && e.failures > 0 {
			u.progress = e.since // no answer from its origin since
		}
		h.urls[rawURL] = u
		h.seedURL(u, now)
	}
	u.touched = now
	return u
}

// Silence before a URL's attempts in flight are bounded: eight times what
// an answer typically takes at this Sender, at least minQuiet, at most half
// the attempt timeout (and 5 s, the time the spec gives a receiver).
const minQuiet = 50 * time.Millisecond

// quiet returns how long a URL may be silent, with MaxUnanswered attempts
// in flight, before more are refused. Under h.mu.
func (h *health) quiet() time.Duration {
	return min(max(8*h.typical, minQuiet), h.quietMax)
}

// holdRetry returns, for a delivery about to wait for its retry, the error
// of its endpoint (origin or URL) having gone down meanwhile, or of its
// endpoint not answering with MaxUnansweredTotal waiting on such endpoints
// already, with how long until it may be tried: such a delivery ends now
// rather than after its wait. Nil when it may be retried; then held says
// that the delivery holds a place among what waits on endpoints not
// answering, for its next attempt (admit) or to give back (unhold).
func (h *health) holdRetry(origin, url string) (held bool, _ time.Duration, _ error) {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.endpoints[origin]
	if e != nil && e.down {
		return false, spread(e.nextProbe.Sub(now), e.interval), fmt.Errorf("%w: %s has failed %d attempt(s) in a row since %s, the last: %s; no retry was sent",
			ErrEndpointDown, origin, e.failures, e.since.UTC().Format(time.RFC3339), e.last.Kind)
	}
	u := h.urls[url]
	if u != nil && u.down {
		return false, spread(u.nextProbe.Sub(now), u.interval), fmt.Errorf("%w: %s: %d attempt(s) in a row connected and got no answer since %s; no retry was sent",
			ErrEndpointNotAnswering, u.name(), u.failures, u.since.UTC().Format(time.RFC3339))
	}
	shown := origin
	switch {
	case e != nil && e.silent():
	case u != nil && h.unanswered(u, now):
		shown = u.name()
	default:
		return false, 0, nil
	}
	if h.waiting >= h.maxWaiting {
		return false, h.spreadFull(), h.full(shown, "no retry was sent")
	}
	h.waiting++
	return true, 0, nil
}

// probeFoundDown reports whether a probe that failed with kind k found its
// endpoint still down: no connection, or (a URL's) no answer. Any other
// failure (refused by the guard, cut by its context, of no known kind) is
// the delivery's, not a wait for the endpoint. riverhook's Worker keeps
// the same list.
func probeFoundDown(k FailureKind) bool {
	switch k {
	case KindDNS, KindRefused, KindReset, KindTLS, KindTimeout, KindUnreachable:
		return true
	}
	return false
}

// downFor reports whether origin or its URL url is held back (down, or not
// answering), and then how long until its next probe may be admitted.
func (h *health) downFor(origin, url string) (time.Duration, bool) {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.endpoints[origin]; e != nil && e.down {
		return spread(e.nextProbe.Sub(now), e.interval), true
	}
	if u := h.urls[url]; u != nil && u.down {
		return spread(u.nextProbe.Sub(now), u.interval), true
	}
	return 0, false
}

// grant hands e's probe a new lease. Under h.mu.
func (h *health) grant(e *endpointState, now time.Time) uint64 {
	h.leases++
	e.grant(&h.policy, h.leases, now)
	return h.leases
}

// release gives back origin's probe lease, for an attempt admitted by the
// origin but refused by its URL. Under h.mu.
func (h *health) release(origin string, lease uint64) {
	if e := h.endpoints[origin]; e != nil && lease != 0 && e.lease == lease {
		e.lease = 0
	}
}

// spread returns wait plus a random share of interval, at least a
// millisecond, so that a queue that waits it never spins.
func spread(wait, interval time.Duration) time.Duration {
	return max(wait+rand.N(interval+1), time.Millisecond)
}
