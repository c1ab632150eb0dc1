package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// This file holds the Sender, the public API of sending: its options and
// constructor, and Send, SendBytes, SendAll, SendTest and Attempt.

// DefaultAttemptTimeout is how long one attempt may take, from dialling to
// reading the answer.
const DefaultAttemptTimeout = 30 * time.Second

// DefaultMaxConcurrency is how many deliveries [Sender.SendAll] makes at once.
const DefaultMaxConcurrency = 16

// SenderOptions configures a [Sender]. A nil *SenderOptions, or a zero
// field, selects the documented default.
type SenderOptions struct {
	// Client makes the requests. It is copied, never modified: the copy
	// does not follow redirects (a 3xx answer is a failed attempt), has no
	// cookie Jar (one receiver's cookie would reach another on its host)
	// and AttemptTimeout replaces its Timeout. Nil means a client on
	// NewTransport's transport, guarded unless AllowPrivateNetworks is set,
	// on which one HTTP/2 write and a TLS handshake may wait AttemptTimeout,
	// if that is longer than the transport's 30 seconds.
	// A Client of your own keeps the private-network guard when its
	// Transport is, or wraps, one from NewTransport; any other transport
	// has no guard, no bound on response headers, and over HTTP/2 no bound
	// on a receiver that stops reading (see NewTransport).
	Client *http.Client

	// Retry is the retry policy. Nil means DefaultRetryPolicy(): to turn
	// retries off, give a policy with MaxRetries 0.
	Retry *RetryPolicy

	// AttemptTimeout bounds each attempt, from dialling to the end of the
	// answer's body, whatever the receiver sends. Zero means
	// DefaultAttemptTimeout.
	AttemptTimeout time.Duration

	// MaxBodyBytes is the largest body sent. A larger one is refused before
	// sending, as an invalid payload: receivers refuse bodies over
	// DefaultMaxBodyBytes by default, so it could only fail. Zero means
	// DefaultMaxBodyBytes; raise it only for receivers that accept more.
	MaxBodyBytes int64

	// Logger receives each attempt: failures at level Warn, successes at
	// Debug. Nil means no logging: the Sender prints nothing to stderr.
	// (net/http's transport itself writes a few protocol violations of a
	// receiver to the standard library's log package, such as bytes sent
	// after an answer on a kept-alive connection, quoted with %q.)
	Logger *slog.Logger

	// OnAttempt, if not nil, is called after each attempt with the
	// delivery's context (carrying the caller's values: trace spans,
	// request ids), its connection and its entry of the log, from the
	// goroutine making the delivery: concurrently under SendAll and
	// concurrent calls. The delivery waits for it, so it should be quick.
	OnAttempt func(ctx context.Context, c Connection, a Attempt)

	// AllowPrivateNetworks lets the default transport connect to loopback,
	// private, link-local and other non-public addresses, which it refuses
	// otherwise. It has no effect with a Client: see TransportOptions.
	AllowPrivateNetworks bool

	// Now returns the current time, used for timestamps and durations. Nil
	// means time.Now.
	Now func() time.Time

	// MaxConcurrency bounds how many deliveries SendAll makes at once. Zero
	// means DefaultMaxConcurrency.
	MaxConcurrency int

	// Health, if not nil, turns endpoint health on: an endpoint whose
	// attempts keep failing to connect is marked down, and while it is
	// down only one probe at a time is sent to it; other deliveries to it
	// fail at once, sending nothing, with an error matching
	// ErrEndpointDown. See HealthOptions. Nil means every attempt is sent,
	// as the service's schedule says.
	Health *HealthOptions
}

// Sender delivers payloads to connections, signing each attempt and
// retrying failures by its policy. Between deliveries it keeps its
// connection pool, each secret's keyed HMAC and last URL checked (4,096
// secrets at most), the timestamps signed lately and, with endpoint health
// on, the endpoints' health; it is safe for concurrent use. Create one
// with [NewSender]: a zero Sender refuses every delivery with an error.
type Sender struct {
	client    *http.Client
	policy    RetryPolicy
	logger    *slog.Logger
	onAttempt func(context.Context, Connection, Attempt)
	now       func() time.Time
	maxConc   int
	maxBody   int64
	timeout   time.Duration // per attempt
	health    *health       // nil unless SenderOptions.Health
	keys      *keyCache     // the keyed states of the connections' secrets
	issued    *issued       // the timestamps signed lately, per secret and body: none signed twice

	deliveries sync.Pool // of *delivery
}

// NewSender returns a Sender configured by opts, which may be nil. It fails
// when an option is out of range.
func NewSender(opts *SenderOptions) (*Sender, error) {
	if opts == nil {
		opts = &SenderOptions{}
	}
	s := &Sender{
		logger:    opts.Logger,
		onAttempt: opts.OnAttempt,
		now:       opts.Now,
		maxConc:   opts.MaxConcurrency,
		maxBody:   opts.MaxBodyBytes,
		keys:      newKeyCache(),
		issued:    newIssued(),
	}
	policy := opts.Retry
	if policy == nil {
		policy = DefaultRetryPolicy()
	}
	if policy.MaxRetries < 0 {
		return nil, fmt.Errorf("webhook: RetryPolicy.MaxRetries must not be negative, got %d", policy.MaxRetries)
	}
	s.policy = *policy
	if s.policy.Backoff == nil {
		s.policy.Backoff = defaultBackoff
	}
	timeout := opts.AttemptTimeout
	switch {
	case timeout < 0:
		return nil, fmt.Errorf("webhook: AttemptTimeout must not be negative, got %v", timeout)
	case timeout == 0:
		timeout = DefaultAttemptTimeout
	}
	switch {
	case s.maxConc < 0:
		return nil, fmt.Errorf("webhook: MaxConcurrency must not be negative, got %d", s.maxConc)
	case s.maxConc == 0:
		s.maxConc = DefaultMaxConcurrency
	}
	switch {
	case s.maxBody < 0:
		return nil, fmt.Errorf("webhook: MaxBodyBytes must not be negative, got %d", s.maxBody)
	case s.maxBody == 0:
		s.maxBody = DefaultMaxBodyBytes
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	var client http.Client
	if opts.Client != nil {
		client = *opts.Client
	} else {
		tr, err := NewTransport(&TransportOptions{AllowPrivateNetworks: opts.AllowPrivateNetworks})
		if err != nil {
			return nil, err
		}
		// A write may wait as long as an attempt may take, and no less than
		// on NewTransport's own: a shorter bound would close a connection
		// under the deliveries queued behind a slow write.
		tr.HTTP2.WriteByteTimeout = max(timeout, DefaultAttemptTimeout)
		// A handshake has the attempt's time too: the attempt's deadline
		// bounds it, not a shorter one of the transport's.
		tr.TLSHandshakeTimeout = max(timeout, DefaultAttemptTimeout)
		client.Transport = tr
	}
	rt := client.Transport
	switch {
	case rt == nil:
		rt = http.DefaultTransport
	case nilValue(rt):
		// Every delivery would panic in it.
		return nil, fmt.Errorf("webhook: SenderOptions.Client's Transport is a nil %T: a transport declared and never made", rt)
	}
	s.timeout = timeout
	if opts.Health != nil {
		h, err := newHealth(opts.Health, timeout, time.Now, s.logger)
		if err != nil {
			return nil, err
		}
		s.health = h
	}
	client.Transport = &attemptTransport{rt: rt}
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	client.Jar = nil   // a receiver's cookie is never sent to another, nor kept
	client.Timeout = 0 // each attempt's request is bounded (delivery.bound), without a goroutine per request
	s.client = &client
	return s, nil
}

// Health returns what the Sender knows of the endpoints that are failing
// or down, sorted by endpoint: for a dashboard, or a metric of the endpoints
// down. It is empty when endpoint health is off (SenderOptions.Health) or
// every endpoint answers. It is safe for concurrent use.
func (s *Sender) Health() []EndpointHealth {
	if s.health == nil {
		return nil
	}
	return s.health.snapshot()
}

// AttemptTimeout returns how long one attempt may take: the
// SenderOptions.AttemptTimeout the Sender was made with, or its default. A
// job queue running [Sender.Attempt] gives each job at least this long.
func (s *Sender) AttemptTimeout() time.Duration { return s.timeout }

// MaxRetries returns the retries of the Sender's retry policy: a delivery
// makes at most MaxRetries()+1 attempts. A durable queue sizes its jobs by
// it, so that the queue and the Sender never count two policies.
func (s *Sender) MaxRetries() int { return s.policy.MaxRetries }

// Flush waits until the endpoint-health reports under way
// (HealthOptions.OnChange, which runs off the attempt path) have returned,
// or ctx is done. Call it on shutdown, after the last delivery: a process
// that exits at once may cut the report of its last attempts, such as an
// endpoint coming back up. Each report is bounded by OnChangeTimeout.
func (s *Sender) Flush(ctx context.Context) error {
	if s.health == nil {
		return nil
	}
	done := make(chan struct{})
	go func() {
		s.health.reports.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// CloseIdleConnections closes the idle connections of the Sender's pool.
// Deliveries in progress are not affected.
func (s *Sender) CloseIdleConnections() {
	if s.client == nil {
		return
	}
	if c, ok := s.client.Transport.(*attemptTransport).rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// Send encodes p once and delivers it to c: signed with a fresh timestamp
// for each attempt over the identical body, retried by the Sender's policy.
// It blocks until the delivery succeeds, the policy gives up, or ctx is done
// (also in the middle of a wait).
//
// The Result is never nil and holds every attempt. The error is nil when
// the last attempt succeeded; otherwise it is a [*FieldError] matching
// [ErrInvalidConnection] or [ErrInvalidPayload] when c or p is invalid
// (nothing is sent; see [Connection.Validate] and [Payload.Validate]), or a
// [*DeliveryError] holding every attempt and the last cause. With endpoint
// health on (SenderOptions.Health), an endpoint that is down gets nothing:
// the error matches [ErrEndpointDown], alone when no attempt was made, or
// as the last cause when the endpoint went down before a retry. A context that
// is done before the first attempt sends nothing: the Result has no attempt
// and the error wraps the context's cause. Result.Err is the same error.
func (s *Sender) Send(ctx context.Context, c Connection, p Payload) (*Result, error) {
	if s.client == nil {
		return failed(c, errZeroSender)
	}
	body, err := encodePayload(&p)
	if err != nil {
		return failed(c, err)
	}
	return s.SendBytes(ctx, c, p.Event, body)
}

// errZeroSender is the error of every delivery asked of a Sender that was
// not made by NewSender.
var errZeroSender = errors.New("webhook: the Sender is not configured; create it with NewSender")

// failed returns the Result of a delivery to c that sent nothing, and err.
func failed(c Connection, err error) (*Result, error) {
	return &Result{ConnectionName: c.Name, Err: err}, err
}

// encodePayload validates p and encodes it, once for every attempt.
func encodePayload(p *Payload) ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	body, err := json.Marshal(p)
	if err != nil { // NaN in metadata, a time past year 9999
		return nil, fmt.Errorf("%w: cannot be encoded as JSON: %w", ErrInvalidPayload, err)
	}
	return body, nil
}

// SendBytes is Send for a body encoded already: event goes in the
// X-Service-Event header and body is sent byte for byte, unchecked. An empty
// event, one with control characters, or a body over
// SenderOptions.MaxBodyBytes is refused like an invalid payload.
func (s *Sender) SendBytes(ctx context.Context, c Connection, event string, body []byte) (*Result, error) {
	if s.client == nil {
		return failed(c, errZeroSender)
	}
	return s.newDelivery(c, event, body, mode{first: 1, maxRetries: s.policy.MaxRetries}).runForResult(ctx)
}

// SendAll delivers p to every connection in cs, at most
// SenderOptions.MaxConcurrency at once, each independently of the others'
// failures. It returns one Result per connection, in the order of cs; a
// failed delivery has its Result.Err set. p is validated and encoded once.
// It blocks until every delivery has ended. A panic of the caller's code
// in a delivery (OnAttempt, a Logger's handler, a RoundTripper) is raised
// again in SendAll's goroutine, with its value, once the others have ended.
func (s *Sender) SendAll(ctx context.Context, cs []Connection, p Payload) []*Result {
	results := make([]*Result, len(cs))
	body, err := encodePayload(&p)
	if s.client == nil {
		err = errZeroSender
	}
	if err != nil {
		for i, c := range cs {
			results[i] = &Result{ConnectionName: c.Name, Err: err}
		}
		return results
	}
	sem := make(chan struct{}, s.maxConc)
	var wg sync.WaitGroup
	var panicked sync.Once
	var first any // the first panic of a delivery, re-raised in the caller's goroutine
	for i, c := range cs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			defer func() {
				if v := recover(); v != nil {
					panicked.Do(func() { first = v })
				}
			}()
			results[i], _ = s.SendBytes(ctx, c, p.Event, body)
		}()
	}
	wg.Wait()
	if first != nil {
		panic(first)
	}
	return results
}

// Attempt makes exactly one try, numbered n (1 for the first), of
// delivering body to c, and returns its log entry, in which Retry and
// RetryIn say whether the Sender's policy would retry it and after how long.
// It is the primitive for a durable job queue that owns the retries across
// restarts: store the Attempt, schedule attempt n+1 after RetryIn if Retry.
//
// Unlike Send, the decision ignores ctx's deadline: a queue runs each
// attempt under a deadline of its own and schedules the retry itself. An
// invalid connection, event or body gives an attempt of kind [KindInvalid],
// and a ctx done before sending one of kind [KindCanceled], with nothing
// sent and no retry. With endpoint health on, an endpoint held back gives
// one of kind [KindDown], nothing sent, Retry true and RetryIn the time
// until its next probe; the probe that finds it still held back
// ([Attempt.Probe]: no connection, or no answer) has the same Retry and
// RetryIn, whatever the policy: both are waits for the endpoint, which a
// queue need not count as attempts of the policy (riverhook's Worker does
// not), and which it bounds itself (riverhook's WorkerOptions.MaxWait).
func (s *Sender) Attempt(ctx context.Context, c Connection, event string, body []byte, n int) (a Attempt) {
	if s.client == nil {
		a.N, a.Err, a.Kind = max(n, 1), errZeroSender, KindInvalid
		return a
	}
	// Each step a call of its own, so that this frame, above the round
	// trip, stays small (see delivery.request).
	d := s.newAttempt(&c, event, body, n)
	defer d.release()
	d.run(ctx)
	d.only(&a)
	return a
}

// newAttempt returns the delivery of Attempt's one try, numbered n.
func (s *Sender) newAttempt(c *Connection, event string, body []byte, n int) *delivery {
	d := s.newDelivery(*c, event, body, mode{first: max(n, 1), maxRetries: s.policy.MaxRetries, queued: true})
	d.attempts = d.one[:0] // copied out by only, before d is pooled
	return d
}

// only writes to a the one try of d, made by Attempt, or what stopped it.
func (d *delivery) only(a *Attempt) {
	if len(d.attempts) > 0 {
		*a = d.attempts[0]
		return
	}
	*a = Attempt{N: d.first, Start: d.s.now(), Err: d.err, Kind: d.errKind}
	if a.Kind == KindDown { // not an attempt: the queue tries again once the endpoint may be
		a.Retry, a.RetryIn = true, d.downWait
	}
}

// SendTest is the dashboard's "Send Test": it makes one attempt, without
// retries, to deliver a complete, valid [EventUserIdentified] payload with
// obviously sample data (see [SamplePayload]), signed like any other delivery;
// with endpoint health on, also to an endpoint that is down.
// The Result's single attempt says what happened; its [Attempt.Diagnosis]
// says it in words a person can act on. The error is as for Send.
func (s *Sender) SendTest(ctx context.Context, c Connection) (*Result, error) {
	if s.client == nil {
		return failed(c, errZeroSender)
	}
	body, err := json.Marshal(SamplePayload(s.now()))
	if err != nil { // cannot happen: the payload is fixed
		return failed(c, err)
	}
	return s.SendTestBytes(ctx, c, EventUserIdentified, body)
}

// SendTestBytes is SendTest for an event of the caller's choosing, with
// body as its sample, sent byte for byte, unchecked, as SendBytes sends
// it: the Send Test of a service with events of its own. A test is sent
// whatever the connection subscribes to (Connection.Events): the customer
// asked for it.
func (s *Sender) SendTestBytes(ctx context.Context, c Connection, event string, body []byte) (*Result, error) {
	if s.client == nil {
		return failed(c, errZeroSender)
	}
	// A test is never retried, and is sent even to an endpoint that is down.
	return s.newDelivery(c, event, body, mode{first: 1, bypass: true}).runForResult(ctx)
}

// SendTestSource is the "source" metadata of the payload SendTest delivers
// (see [SamplePayload]): the marker [Payload.IsSendTest] looks for.
const SendTestSource = "send_test"

// SamplePayload returns the payload SendTest delivers: an
// [EventUserIdentified] event at now about an obviously fictitious user
// ("usr_test_0000", test.user@example.com), whose metadata "source" is
// [SendTestSource], so that a receiver can recognise it with
// [Payload.IsSendTest] and skip storing it.
func SamplePayload(now time.Time) Payload {
	t := NewTime(now)
	return Payload{
		Event:     EventUserIdentified,
		Timestamp: t,
		User: User{
			ID:        UserID("test_0000"),
			Email:     "test.user@example.com",
			Name:      "Test User",
			FirstName: "Test",
			LastName:  "User",
			Phone:     "+1 555 0100",
			Metadata:  Metadata{"plan": "test", "source": SendTestSource},
			CreatedAt: t,
			UpdatedAt: t,
		},
		Application: Application{ID: ApplicationID("test_0000"), Name: "Send Test"},
	}
}
