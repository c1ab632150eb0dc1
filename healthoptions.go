package webhook

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// This file holds endpoint health's options, defaults and errors; health.go
// holds what a Sender does with them.

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
// Before a URL is known not to answer, MaxUnanswered bounds the attempts
// waiting on it once it has been silent for a while: it cannot hold every
// caller. MaxUnansweredTotal bounds the same across every endpoint not
// answering, probes included, so that many dead endpoints cannot hold
// every caller either. A URL that answers, however slowly and at whatever
// concurrency, is never held back.
//
// Each Sender keeps its own view, in memory, of what is failing or in
// flight only. With several processes, each learns and probes on its own.
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

	// MaxUnanswered bounds the attempts in flight to one URL that has been
	// silent for eight times what an answer typically takes at this Sender
	// (at least 50 ms, at most half the attempt timeout and 5 s, the time
	// the spec gives a receiver): past it, the next attempts to that URL
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
	// (beyond the first two attempts to each, which nothing tells from
	// attempts to an endpoint that answers), and the others go to the
	// endpoints that answer. A Send Test
	// is counted, never refused. Zero means DefaultMaxUnansweredTotal:
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
	// error is logged and the Sender goes on with what it knows.
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
