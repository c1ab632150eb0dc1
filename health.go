package webhook

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
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

// This file holds endpoint health: its options and what it reports, then
// the Sender's shell (health) around the clock-explicit core in
// healthstate.go: admitting an attempt, recording its end, reporting the
// changes, and following the marks of the other processes.

// Endpoint health: defaults of [HealthOptions].
const (
	DefaultDownAfter          = 5
	DefaultProbeInterval      = 10 * time.Second
	DefaultMaxProbeInterval   = 5 * time.Minute
	DefaultMaxUnanswered      = 4
	DefaultMaxUnansweredTotal = 8
)

// ErrEndpointDown is matched by the error of a delivery, or of an attempt,
// that a [Sender] with endpoint health did not send because its endpoint is
// down. Nothing was sent: the caller decides what to do with it.
var ErrEndpointDown = errors.New("webhook: endpoint down")

// ErrEndpointNotAnswering is matched, with [ErrEndpointDown], by the error
// of an attempt that a [Sender] with endpoint health did not send because
// its URL does not answer: attempts connect and then time out with no
// answer (the URL is isolated, probed one attempt at a time), or
// [HealthOptions].MaxUnanswered attempts are in flight to it and none has
// answered for a while, or [HealthOptions].MaxUnansweredTotal attempts and
// retries wait on endpoints that do not answer. Nothing was sent.
var ErrEndpointNotAnswering = fmt.Errorf("%w: not answering", ErrEndpointDown)

// HealthOptions turns endpoint health on in a [Sender]
// (SenderOptions.Health). A nil *HealthOptions there leaves it off: every
// attempt dials, as the service's schedule says. A zero field selects the
// documented default.
//
// Health watches two scopes. An origin (scheme, host and port, in one
// spelling: see [EndpointHealth]) is what fails to connect: a name that no
// longer resolves, a port that refuses, a host that hangs in its TLS
// handshake, a proxy that cannot reach it. One URL is what connects and
// then never answers: an application hung behind its load balancer, one
// tenant's path on a shared host. Each is marked down after DownAfter
// failures of its own in a row. An origin's are attempts with no
// connection: kinds dns, refused, tls and unreachable, and a timeout or
// reset before a connection. A URL's are attempts that connected and timed
// out with no answer. They count once per delivery, so one payload that
// hangs its handler, retried again and again, never takes its URL down. Any
// answer, a 4xx or 5xx included, proves both up and resets the counts. An
// attempt sent before the endpoint was last reached is old news: its
// failure is not counted.
//
// While an origin or URL is down, no attempt is sent to it but one probe
// at a time: a real attempt of a real delivery, let through ProbeInterval
// after it went down, then at intervals that double after each failed
// probe, up to MaxProbeInterval. Every other attempt fails at once with
// kind [KindDown], having sent nothing, with an error matching
// [ErrEndpointDown] ([ErrEndpointNotAnswering] too for a URL). A delivery
// whose endpoint goes down during its attempt ends then, rather than
// waiting for a retry that would be refused. [Sender.SendTest] is always
// sent, so that a customer who fixed the endpoint sees it answer.
//
// Before a URL is heard from, nothing tells it from one that never
// answers: so one attempt finds out, and the next ones wait for its
// answer. An answer lets them all go. The URL is found not answering once
// it has been silent a short while (eight times what an answer typically
// takes, at least 50 ms) and an attempt made half of that while later has
// been answered: a stalled Sender, where every attempt is late, finds no
// URL silent. Then that first attempt counts among what waits on endpoints
// not answering, and the next ones go as to any URL not answering. Until
// then they wait, for the first attempt's time at most, and never so long
// that the caller's deadline would cut their own attempt; past that short
// while, no more than MaxUnanswered attempts are in flight to the URL or
// wait for its answer, and the others are refused. MaxUnanswered
// bounds the attempts waiting on one such URL, and MaxUnansweredTotal the
// same across every endpoint not answering, probes included, so that many
// dead endpoints cannot hold every caller either: from the first attempt,
// only the one attempt that finds out per URL comes on top. A wait for the
// first answer of a URL silent that short while counts among them too:
// callers that each wait on another dead URL cannot all wait, sending
// nothing whose answer would show that the URLs are dead. Nothing tells
// such callers from a stall of the Sender, where every answer is late: in
// a stall, the waits past MaxUnansweredTotal are refused as well, while
// the first attempts go and no URL is found silent. A URL is never held
// back for answering as slowly as it has answered before, at whatever
// concurrency: its slowest answer is remembered. One that turns slower
// than ever, past that short while, cannot be told from one that stopped
// answering until its next answer comes: until then, its attempts past
// MaxUnanswered are refused, and Send retries them by its policy.
//
// Each Sender keeps its own view, in memory, of what is failing, in
// flight or slow only. With several processes, each learns and probes on its own.
// An endpoint no attempt is made to is forgotten after an hour, or a day if
// it is down.
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

	// MaxUnanswered bounds the attempts in flight to one URL, or waiting
	// for the answer of its first, that has been silent for eight times
	// what an answer typically takes at this Sender
	// (at least 50 ms, at most half the attempt timeout and 5 s, the time
	// the spec gives a receiver), or, for a URL heard from, for twice the
	// longest it took to answer: past it, the next attempts to that URL
	// are refused at once ([ErrEndpointNotAnswering]) until one answers.
	// Zero means DefaultMaxUnanswered.
	MaxUnanswered int

	// MaxUnansweredTotal bounds, across all endpoints, what waits on an
	// endpoint that is not answering: attempts in flight to a URL that is
	// failing with no answer or isolated (its probes), to an origin whose
	// attempts time out before they connect (its probes too), or to a URL
	// silent as MaxUnanswered says; and deliveries of [Sender.Send] waiting
	// to retry one of them. Past it, such attempts are refused at once, and
	// such deliveries end rather than wait for their retry, with an error
	// matching [ErrEndpointNotAnswering]: however many endpoints stop
	// answering, they hold at most this many of the caller's goroutines
	// (beyond the first attempt to each, which nothing tells from an
	// attempt to an endpoint that answers, and which counts once the URL
	// is found silent; the attempts waiting for its answer count once it
	// has been silent a short while, and past the bound such a wait is
	// refused too), and the others go to the endpoints that answer. A
	// Send Test is counted, never refused. Zero means DefaultMaxUnansweredTotal:
	// twice the default per URL, so that one silent URL is bounded by its
	// own bound, and a small share of the tens of goroutines a service
	// delivers from; raise it with the workers if many endpoints are
	// probed at once.
	MaxUnansweredTotal int

	// OnChange, if not nil, is called when an endpoint goes down and when
	// it comes back up, once per change, with its state then: to mark it
	// in the service's table (join on [Connection.Endpoint] and
	// [Connection.URLKey]), tell the customer, or disable a connection
	// down for days. It runs off the attempt path, on a goroutine of its
	// own, with a context that ends after [OnChangeTimeout]. Changes of one
	// endpoint are reported in order, one at a time; those of different
	// endpoints may be reported concurrently. A panic in it is logged
	// (SenderOptions.Logger), and the changes after it are still reported.
	// On shutdown, [Sender.Flush] waits for the reports under way.
	OnChange func(ctx context.Context, h EndpointHealth)

	// Marks, if not nil, shares endpoint health with the other processes
	// of a deployment: every change this Sender reports (and, with
	// ConfirmUpEvery, every confirmation) is also written there, and the
	// marks the others write are read at most FollowEvery apart and
	// followed, so that every process holds back an endpoint one of them
	// found down, and a process starting up starts from the marks: they
	// are read at NewSender, and the first attempts wait for that read
	// (at most OnChangeTimeout). Later reads are off the attempt path; an
	// error, or a panic of the store, is logged and the Sender goes on with
	// what it knows. A nil pointer (a store never made) is an error of
	// NewSender.
	Marks HealthMarks

	// FollowEvery is how often, at most, the marks are read while
	// attempts are made. Zero means DefaultFollowEvery; negative is an
	// error.
	FollowEvery time.Duration

	// ConfirmUpEvery, if not zero, also reports an endpoint up (Down
	// false) at its first answer and then at most once per ConfirmUpEvery
	// while it answers, with the URL that answered (URLKey). With several
	// processes, a down mark written by one that then died is cleared
	// within ConfirmUpEvery of another's next answer from that endpoint.
	// Clear only a mark written before the confirmation's Changed: reports
	// of several processes may arrive out of order. It costs one OnChange
	// per endpoint answering, per ConfirmUpEvery.
	ConfirmUpEvery time.Duration
}

// OnChangeTimeout bounds each call of HealthOptions.OnChange: its context
// ends then.
const OnChangeTimeout = 10 * time.Second

// HealthMarks keeps the endpoint health marks of a deployment where every
// process reads them: each Sender with HealthOptions.Marks writes the
// changes it sees and follows those the others write, so that an endpoint
// one process found down is held back by all within about
// HealthOptions.FollowEvery, and a process starting up starts from the
// marks. riverhook's PostgreSQL store is one (riverhook.EndpointMarks).
//
// Its methods are called off the attempt path, concurrently, with a context
// that ends after OnChangeTimeout; an error is logged and the Sender goes on
// with what it knows itself.
type HealthMarks interface {
	// Mark records h, a change or a confirmation as HealthOptions.OnChange
	// reports it, unless the store holds a mark of the same endpoint (its
	// origin, or for a PerURL mark its URLKey) that changed later
	// (Changed): reports of several processes may arrive out of order.
	Mark(ctx context.Context, h EndpointHealth) error

	// Since returns the marks recorded at or after after, by the store's
	// clock (all of them for the zero time), and the time to give the next
	// call: the latest recording time among them, or after when there are
	// none. A mark is returned again if recorded again; the Sender applies
	// each by its Changed.
	Since(ctx context.Context, after time.Time) (marks []EndpointHealth, next time.Time, err error)
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

// health is a Sender's view of its endpoints: the origins failing or down,
// and the URLs with attempts in flight, failing, or slow to answer. Only
// those are kept, and only while attempts are made to them, so a Sender
// reaching thousands of healthy hosts keeps little.
type health struct {
	reports       sync.WaitGroup // the reports under way, for Sender.Flush
	policy        healthPolicy
	maxUnanswered int
	maxWaiting    int           // HealthOptions.MaxUnansweredTotal
	quietMax      time.Duration // the longest silence before a URL's attempts in flight are bounded
	typical       time.Duration // a moving average of answered attempts' durations, under mu
	answers       uint64        // how many answers it has seen, under mu
	answeredFrom  time.Time     // when the latest attempt answered yet was admitted, under mu
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
	logq      []EndpointHealth     // the changes to log, in order, before the lock is given back (logChanges)
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
	slow      bool          // it answered once slower than quiet: remembered, see settled
	longest   time.Duration // the longest it took to answer: it is silent only past twice that (quietOf)
	uncounted int           // its attempts in flight admitted without a place among what waits
	late      int           // of those, how many hold one since it was found not answering
	answer    chan struct{} // closed when an attempt in flight ends, for those that await it
}

// ticket is what admit hands an attempt it lets through, for record, or
// the answer it awaits before asking again.
type ticket struct {
	origin, url string
	admitted    time.Time     // on health's clock
	lease       uint64        // the origin's probe lease, or 0
	urlLease    uint64        // the URL's probe lease, or 0
	waiting     bool          // it holds a place among what waits on endpoints not answering
	await       chan struct{} // not admitted yet: ask again once it is closed, or after the wait
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
	case o.Marks != nil && nilValue(o.Marks):
		// Read on a goroutine of the Sender's, where its panic would end
		// the process.
		return nil, fmt.Errorf("webhook: HealthOptions.Marks holds a nil %T: a store declared and never made", o.Marks)
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
// come back at one instant. An attempt that waits for a URL's first answer
// (a ticket with await) leaves itself its time before deadline, the
// caller's, if not zero (see awaitUntil).
func (h *health) admit(origin, rawURL string, held bool, deadline time.Time) (ticket, time.Duration, error) {
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
	unanswered := h.unanswered(u, now)
	switch {
	case !ok:
		h.release(origin, t.lease)
		return t, spread(ad.wait, u.interval), fmt.Errorf("%w: %s: %d attempt(s) in a row connected and got no answer since %s; nothing was sent",
			ErrEndpointNotAnswering, u.name(), u.failures, u.since.UTC().Format(time.RFC3339))
	case !ad.probe && !u.admitStall(h.maxUnanswered, h.quietOf(u), now):
		h.release(origin, t.lease)
		return t, spread(h.quietOf(u), h.quietOf(u)), fmt.Errorf("%w: %s: %d attempt(s) in flight or waiting for one's answer, no answer for %s; nothing was sent",
			ErrEndpointNotAnswering, u.name(), u.inFlight+u.waiters, now.Sub(u.progress).Round(time.Millisecond))
	case !ad.probe && !unanswered && u.awaiting(h.awaitUntil(u, deadline), now):
		h.release(origin, t.lease)
		if now.Sub(u.progress) >= h.quiet() {
			// Silent for quiet: the wait takes a place among what waits on
			// endpoints not answering, until unwait. Callers that each wait
			// on another dead URL cannot all wait, sending nothing whose
			// answer would show that the URLs are dead (nor would an answer
			// sent after the first attempts tell them from a stall: there
			// is none to wait for when every caller waits).
			if h.waiting >= h.maxWaiting {
				return t, h.spreadFull(), fmt.Errorf("%w: %s has not answered its first attempt in %s, and %d attempt(s), retries or waits already wait on endpoints not answering (HealthOptions.MaxUnansweredTotal); nothing was sent",
					ErrEndpointNotAnswering, u.name(), now.Sub(u.progress).Round(time.Millisecond), h.waiting)
			}
			h.waiting++
			t.waiting = true
		}
		if u.answer == nil {
			u.answer = make(chan struct{})
		}
		u.waiters++ // until unwait
		t.await = u.answer
		// Until quiet has passed, then a quarter of it at a time: whether
		// the URL was found silent meanwhile is asked again.
		quiet, waited := h.quiet(), now.Sub(u.progress)
		if waited < quiet {
			return t, quiet - waited, nil
		}
		return t, min(quiet/4, h.awaitUntil(u, deadline).Sub(now)), nil
	}
	if originSilent || unanswered {
		if h.waiting >= h.maxWaiting {
			h.release(origin, t.lease)
			return t, h.spreadFull(), h.full(u.name(), "nothing was sent")
		}
		h.waiting++
		t.waiting = true
	} else {
		u.uncounted++
	}
	if ad.probe {
		t.urlLease = h.grant(&u.endpointState, now)
	}
	u.begin(u.failures > 0 || originFailing, now)
	return t, 0, nil
}

// awaitUntil returns until when the next attempt to URL u, not heard from,
// waits for the answer of its attempt in flight: quiet at least, then until
// the first attempt's time is up (probeFor: a RoundTripper that ignores its
// context holds no one longer), and never so late that deadline, the
// caller's if not zero (a queue's job), would cut its own attempt: probeFor
// before it. Under h.mu.
func (h *health) awaitUntil(u *urlEntry, deadline time.Time) time.Time {
	limit := u.progress.Add(h.policy.probeFor)
	if latest := deadline.Add(-h.policy.probeFor); !deadline.IsZero() && latest.Before(limit) {
		limit = latest
	}
	if least := u.progress.Add(h.quiet()); limit.Before(least) {
		limit = least
	}
	return limit
}

// unanswered reports whether URL u is not answering at now: failing with
// no answer, isolated, or silent for quietOf(u) with attempts in flight: two at
// least (one slow answer at a busy moment is not silence), or its first,
// not heard from, once an attempt admitted half a quiet after it has been
// answered (the Sender itself is not stalled: a pause of the process, its
// collector's or a loaded machine's, makes every attempt late at once).
// Found so, its attempts in flight that took no place among what waits on
// endpoints not answering take one now, even past MaxUnansweredTotal: the
// next are refused until they end. Under h.mu.
func (h *health) unanswered(u *urlEntry, now time.Time) bool {
	quiet := h.quietOf(u)
	silent := u.failures > 0 || u.down || now.Sub(u.progress) >= quiet &&
		(u.inFlight > 1 || u.inFlight == 1 && !u.heard && h.answeredFrom.Sub(u.progress) >= quiet/2)
	if silent && u.late < u.uncounted {
		h.waiting += u.uncounted - u.late
		u.late = u.uncounted
	}
	return silent
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
	return fmt.Errorf("%w: %s does not answer, and %d attempt(s), retries or waits for a first answer already wait on endpoints that do not (HealthOptions.MaxUnansweredTotal); %s",
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
	if h.unanswered(u, now) || e != nil && e.silent() {
		h.waiting++ // counted, never refused
		t.waiting = true
	} else {
		u.uncounted++
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

// quietOf returns how long URL u may be silent, with attempts in flight,
// before it is found not answering: quiet, or for a URL heard from that
// took longer to answer, twice its longest answer, so that a URL is never
// held back for answering as slowly as it has before, at whatever
// concurrency; at most an attempt's time. Under h.mu.
func (h *health) quietOf(u *urlEntry) time.Duration {
	return max(h.quiet(), min(2*u.longest, h.policy.probeFor))
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

// What an attempt's end does: its outcome recorded for its URL and its
// origin, the changes queued for OnChange, and the forgetting of what no
// longer needs watching.

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
		if t.admitted.After(h.answeredFrom) {
			h.answeredFrom = t.admitted
		}
	}
	reports := h.recordURL(t, uo, a, bodyHash, now, nil)
	reports = h.recordOrigin(t, originOutcome(a.Kind, connected), a, now, reports)
	for _, e := range reports {
		h.reports.Add(1) // before the attempt returns: Sender.Flush waits for it
		go func() {
			defer h.reports.Done()
			h.report(e)
		}()
	}
	h.logChanges()
	h.mu.Unlock()
}

// logChanges writes the log lines of the changes queue noted, in order,
// once the state they describe is whole and their reports started: a
// Logger that panics (the caller's handler) leaves nothing half done, and
// the lock is given back as the panic goes on. Under h.mu, locked.
func (h *health) logChanges() {
	if len(h.logq) == 0 {
		return
	}
	locked := true
	defer func() {
		if locked { // a panic: the lock goes with it
			h.mu.Unlock()
		}
	}()
	logs := h.logq
	h.logq = nil
	for _, st := range logs {
		level, msg := slog.LevelInfo, "webhook: endpoint up"
		switch {
		case st.Down && st.PerURL:
			level, msg = slog.LevelWarn, "webhook: endpoint isolated: a URL that connects and does not answer"
		case st.Down:
			level, msg = slog.LevelWarn, "webhook: endpoint down"
		}
		h.logger.LogAttrs(context.Background(), level, msg, slog.String("endpoint", st.Endpoint),
			slog.Time("since", st.Since), slog.Int("failures", st.Failures), slog.String("last_kind", string(st.LastFailure.Kind)))
	}
	locked = false
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
	if a.StatusCode != 0 && a.Duration >= h.quiet() {
		u.slow = true
	}
	if a.StatusCode != 0 {
		u.longest = max(u.longest, a.Duration)
	}
	if !t.waiting {
		u.uncounted--
		if u.late > 0 {
			u.late--
			h.waiting--
		}
	}
	if u.answer != nil { // those that await an answer ask again, and find it here
		close(u.answer)
		u.answer = nil
	}
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
// run of failures, not down, nothing to report, and not slow (a URL that
// answered slower than quiet is kept until no attempt was made to it for
// forgetFailingAfter, so that its next attempts go at once rather than
// wait for its first answer again). Unlike an origin, whose attempts are
// not counted, a URL need not keep the time it was last reached once
// nothing is in flight: no attempt sent before can still end. So a URL
// that answers within quiet is kept only while attempts to it are in
// flight.
func (u *urlEntry) settled() bool {
	return u.inFlight == 0 && u.waiters == 0 && u.failures == 0 && !u.down && !u.reporting && len(u.changes) == 0 && !u.slow
}

// unwait ends the wait of t, an attempt's ticket that awaited the answer of
// the one in flight to its URL, which then asks again or gives up; the
// place the wait took, if it took one, is given back. The entry stays,
// settled or not: the others woken with it find it heard when they ask
// again, and a settled one goes at its next attempt's end or sweep.
func (h *health) unwait(t ticket) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t.waiting {
		h.waiting--
	}
	if u := h.urls[t.url]; u != nil {
		u.waiters--
	}
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
	h.forgetMarks(now)
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
		if u.inFlight == 0 && u.waiters == 0 && idle(&u.endpoint) || u.settled() {
			h.forgetURL(key, u)
		}
	}
}

// Reporting: OnChange, in order, off the lock; the log lines; the snapshot
// Sender.Health returns.

// queue notes e's new state, at, for the log (logChanges) and adds it to
// the changes to report; it returns reports with e added when the caller
// is to report them. Under h.mu.
func (h *health) queue(e *endpoint, at endpointState, reports []*endpoint) []*endpoint {
	st := e.stateOf(&at)
	h.logq = append(h.logq, st)
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
			h.logOff(slog.LevelError, "webhook: HealthOptions.OnChange panicked",
				slog.String("endpoint", c.Endpoint), slog.Bool("down", c.Down), slog.Any("panic", v))
		}
	}()
	h.onChange(ctx, c)
}

// logOff writes a line from one of endpoint health's own goroutines, off
// the attempt path: a panic of the Logger (the caller's handler) there has
// no caller to reach, and would end the process; it is dropped.
func (h *health) logOff(level slog.Level, msg string, attrs ...slog.Attr) {
	defer func() { recover() }()
	h.logger.LogAttrs(context.Background(), level, msg, attrs...)
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

// Following the marks (HealthOptions.Marks): a Sender's changes are written
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
	applied  map[string]appliedMark    // the down marks applied, by origin or URLKey
	reads    uint64                    // the reads whose marks were applied
}

// newFleet returns the fleet of marks, and wraps onChange so that every
// change is written there before it is handed on.
func newFleet(marks HealthMarks, every time.Duration, onChange *func(context.Context, EndpointHealth), logger *slog.Logger) *fleet {
	next := *onChange
	*onChange = func(ctx context.Context, c EndpointHealth) {
		if err := writeMark(ctx, marks, c); err != nil {
			logger.LogAttrs(ctx, slog.LevelWarn, "webhook: cannot write an endpoint health mark",
				slog.String("endpoint", c.Endpoint), slog.Bool("down", c.Down), slog.String("error", err.Error()))
		}
		if next != nil {
			next(ctx, c)
		}
	}
	return &fleet{marks: marks, every: every, urlMarks: map[string]EndpointHealth{}, applied: map[string]appliedMark{},
		first: make(chan struct{}), firstBy: time.Now().Add(OnChangeTimeout)}
}

// writeMark writes c to marks; a panic of the store is its error, so
// that OnChange, called next, still reports the change.
func writeMark(ctx context.Context, marks HealthMarks, c EndpointHealth) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("HealthMarks.Mark panicked: %v", v)
		}
	}()
	return marks.Mark(ctx, c)
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
	marks, next, err := h.readMarks(ctx, from)
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.fleet.first:
	default:
		defer close(h.fleet.first) // after the marks are applied, under h.mu
	}
	h.fleet.reading = false
	if err != nil {
		h.logOff(slog.LevelWarn, "webhook: cannot read the endpoint health marks", slog.String("error", err.Error()))
		return
	}
	if next.After(h.fleet.cursor) {
		h.fleet.cursor = next
	}
	h.fleet.reads++
	now := h.now()
	for i := range marks {
		h.apply(&marks[i], now, h.fleet.reads)
	}
}

// readMarks calls the store's Since; a panic of it (the caller's store)
// is a failed read: on this goroutine of the Sender's, no caller could
// recover it, and it would end the process.
func (h *health) readMarks(ctx context.Context, from time.Time) (marks []EndpointHealth, next time.Time, err error) {
	defer func() {
		if v := recover(); v != nil {
			marks, next, err = nil, from, fmt.Errorf("HealthMarks.Since panicked: %v", v)
		}
	}()
	return h.fleet.marks.Since(ctx, from)
}

// appliedMark is a down mark of another process that was applied: its
// Changed, when it was applied (on health's clock), and the read that last
// returned it. Each read returns every mark recorded since marksOverlap
// before the cursor, which never moves back: one that the latest read did
// not return, no read returns again, unless it is recorded again, whether
// the cursor has moved since or not (a fleet gone quiet: TestHealth_TheFleetsMarksAreForgottenWhenTheFleetGoesQuiet).
type appliedMark struct {
	changed, at time.Time
	read        uint64
}

// forgetMarks drops, as sweep forgets an endpoint, the marks applied
// forgetDownAfter ago or more that no read can return again, and the URL
// marks with them: what the Sender keeps of the fleet follows the endpoints
// marked down lately, not every endpoint ever marked down. Under h.mu.
func (h *health) forgetMarks(now time.Time) {
	f := h.fleet
	if f == nil {
		return
	}
	for key, a := range f.applied {
		if now.Sub(a.at) >= forgetDownAfter && a.read < f.reads {
			delete(f.applied, key)
			delete(f.urlMarks, key) // a URL's key; an origin's starts with "|"
		}
	}
}

// apply applies mark m of another process at now, returned by read number
// read. Under h.mu.
func (h *health) apply(m *EndpointHealth, now time.Time, read uint64) {
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
		if a, ok := h.fleet.applied[key]; ok && a.changed.Equal(m.Changed) {
			h.fleet.applied[key] = appliedMark{changed: a.changed, at: a.at, read: read} // read again
			return
		}
		h.fleet.applied[key] = appliedMark{changed: m.Changed, at: now, read: read}
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
