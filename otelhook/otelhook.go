// Package otelhook records a [webhook.Sender]'s deliveries as OpenTelemetry
// metrics and traces, through the Sender's own hooks: nothing in the webhook
// module depends on OpenTelemetry.
//
// [New] makes the [Instruments]; [Instruments.SenderOptions] plugs them into
// the options of a Sender, keeping the hooks already set there:
//
//	inst, err := otelhook.New(nil) // the global meter and tracer providers
//	if err != nil {
//		return err
//	}
//	s, err := webhook.NewSender(inst.SenderOptions(&webhook.SenderOptions{
//		Health: &webhook.HealthOptions{OnChange: markInDatabase},
//	}))
//
// The hooks are also there one by one ([Instruments.OnAttempt],
// [Instruments.Transport], [Instruments.OnChange]) for options built by hand.
//
// # Metrics
//
// Durations are in seconds. An endpoint is named by its origin only, as
// server.address (the host) and server.port; [Options].OmitEndpoint leaves
// them off the metrics.
//
//   - http.client.request.duration (histogram, s): each attempt's duration,
//     from signing to the end of the answer, as OpenTelemetry's HTTP client
//     conventions define it, with http.request.method, server.address,
//     server.port, http.response.status_code when an answer came, and
//     error.type when the attempt failed: the status code for a 4xx or 5xx
//     answer, the failure kind otherwise ("timeout", "refused", "redirect",
//     "blocked", ...: see [webhook.FailureKind]).
//   - webhook.attempts (counter): attempts, by webhook.outcome ("delivered"
//     or "failed") and, for a failure, webhook.failure_kind.
//   - webhook.deliveries (counter): deliveries that ended, by the same
//     attributes, those of their last attempt. A delivery ends with an
//     attempt that is not retried; one refused before any attempt (an
//     invalid connection, an endpoint down) or stopped while waiting for a
//     retry makes no attempt that ends it and is not counted.
//     With a durable queue calling [webhook.Sender.Attempt], an attempt
//     that the queue does not retry ends the delivery in the same way; a
//     Send Test is a delivery of one attempt.
//   - webhook.attempts.active (up-down counter): attempts in flight, from
//     sending the request to the end of reading the answer.
//   - webhook.endpoints.down (up-down counter): endpoints that endpoint
//     health found down, by webhook.endpoint.scope: "origin" for a host
//     that cannot be connected to, "url" for one URL that connects and does
//     not answer. Fed by [webhook.HealthOptions].OnChange; zero when health
//     is off. With HealthOptions.Marks, each endpoint is counted by the
//     process that found it down, not by those following its mark (see
//     [Instruments.OnChange]).
//
// # Traces
//
// Each attempt is a span of kind client, named after its method ("POST"),
// a child of the span in the context given to Send (or to Attempt, such as
// the job's span of River's OpenTelemetry middleware), timed from the
// attempt's start to its end. Its attributes are those of the duration
// histogram, always with the endpoint, plus http.request.resend_count on a
// retry, webhook.attempt (its number), webhook.connection.name,
// webhook.outcome, webhook.failure_kind, webhook.retry and, when a retry is
// scheduled, webhook.retry_in_ms. A failed attempt has the status Error,
// described by its error.type.
//
// A span never holds the URL's path or query (where many webhook URLs carry
// a credential, so url.full is left out), a secret, a header's value, the
// error's text or the answer's body. The span is recorded once the attempt
// has ended: nothing is propagated to the receiver (no traceparent header),
// since a customer's endpoint is a third party.
//
// # Keeping the guard
//
// The Sender's default transport refuses private addresses. A Client keeps
// that guard when its transport is, or wraps, one from
// [webhook.NewTransport]: [Instruments.SenderOptions] wraps the Client's
// transport, or a new one from NewTransport when there is no Client, and
// never replaces it.
//
// # Durable deliveries
//
// With riverhook, River runs one [webhook.Sender.Attempt] per job, under
// the job's context. River's own OpenTelemetry middleware, otelriver from
// github.com/riverqueue/rivercontrib, set in river.Config's Middleware,
// makes a span per job run, of which each attempt's span is then a child;
// its EnableTracePropagation links the run to the span that inserted the
// job. Give the worker's Sender the Instruments' options as above. otelhook
// does not depend on rivercontrib: see this module's README.md.
package otelhook

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"github.com/signedhook/webhook"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the meter and the tracer: the
// package's import path.
const ScopeName = "github.com/signedhook/webhook/otelhook"

// Options configures [New]. A nil *Options, or a zero field, selects the
// documented default.
type Options struct {
	// MeterProvider makes the meter. Nil means the global one,
	// otel.GetMeterProvider().
	MeterProvider metric.MeterProvider

	// TracerProvider makes the tracer. Nil means the global one,
	// otel.GetTracerProvider().
	TracerProvider trace.TracerProvider

	// OmitEndpoint leaves server.address and server.port off the metrics,
	// whose series are then per outcome, not per endpoint and outcome: for
	// a service delivering to many customers' hosts. Spans keep them.
	OmitEndpoint bool

	// Attributes, if not nil, returns attributes of each attempt's
	// connection, added to its span and to the attempt and delivery
	// metrics (http.client.request.duration, webhook.attempts,
	// webhook.deliveries): the dimension on-call looks at in a service with
	// many customers, such as a customer id the service put in ctx or the
	// connection's Name (ConnectionNameKey). It is called concurrently,
	// with the context given to Send or Attempt. Nil means none.
	Attributes func(ctx context.Context, c webhook.Connection) []attribute.KeyValue

	// MaxAttributeSets bounds the distinct sets of values Attributes gives
	// that the metrics record: past it, a new set is recorded as the one
	// attribute otel.metric.overflow=true, as the OpenTelemetry SDK does
	// past its cardinality limit, so that a service with a million
	// connections cannot make a million series. Spans always carry the
	// values. Zero means DefaultMaxAttributeSets; negative is an error.
	MaxAttributeSets int
}

// DefaultMaxAttributeSets is how many distinct sets of Options.Attributes'
// values the metrics record at most: 1,000.
const DefaultMaxAttributeSets = 1000

// OverflowKey is the attribute that stands, on the metrics, for the
// Options.Attributes values past Options.MaxAttributeSets.
const OverflowKey = attribute.Key("otel.metric.overflow")

// Instruments records a Sender's attempts, deliveries and endpoint health
// as OpenTelemetry metrics and spans, through the hooks it hands out. Make
// it with [New]; one Instruments may serve several Senders. It is safe for
// concurrent use.
type Instruments struct {
	tracer       trace.Tracer
	omitEndpoint bool
	attributes   func(context.Context, webhook.Connection) []attribute.KeyValue
	sets         boundedSets

	duration   metric.Float64Histogram
	attempts   metric.Int64Counter
	deliveries metric.Int64Counter
	active     metric.Int64UpDownCounter
	down       metric.Int64UpDownCounter
}

// New returns the Instruments configured by opts, which may be nil, having
// made their meter's instruments. It fails when an option is out of range or
// the meter provider refuses an instrument.
func New(opts *Options) (*Instruments, error) {
	if opts == nil {
		opts = &Options{}
	}
	maxSets := opts.MaxAttributeSets
	switch {
	case maxSets < 0:
		return nil, fmt.Errorf("otelhook: MaxAttributeSets must not be negative, got %d", maxSets)
	case maxSets == 0:
		maxSets = DefaultMaxAttributeSets
	}
	mp, tp := opts.MeterProvider, opts.TracerProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	meter := mp.Meter(ScopeName)
	i := &Instruments{tracer: tp.Tracer(ScopeName), omitEndpoint: opts.OmitEndpoint,
		attributes: opts.Attributes, sets: boundedSets{max: maxSets}}
	var err error
	if i.duration, err = meter.Float64Histogram("http.client.request.duration",
		metric.WithDescription("Duration of HTTP client requests."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10),
	); err != nil {
		return nil, err
	}
	if i.attempts, err = meter.Int64Counter("webhook.attempts",
		metric.WithDescription("Webhook delivery attempts, by outcome and failure kind."),
		metric.WithUnit("{attempt}"),
	); err != nil {
		return nil, err
	}
	if i.deliveries, err = meter.Int64Counter("webhook.deliveries",
		metric.WithDescription("Webhook deliveries that ended, by the outcome and failure kind of their last attempt."),
		metric.WithUnit("{delivery}"),
	); err != nil {
		return nil, err
	}
	if i.active, err = meter.Int64UpDownCounter("webhook.attempts.active",
		metric.WithDescription("Webhook delivery attempts in flight."),
		metric.WithUnit("{attempt}"),
	); err != nil {
		return nil, err
	}
	if i.down, err = meter.Int64UpDownCounter("webhook.endpoints.down",
		metric.WithDescription("Webhook endpoints held down by endpoint health, by scope (origin or url)."),
		metric.WithUnit("{endpoint}"),
	); err != nil {
		return nil, err
	}
	return i, nil
}

// SenderOptions returns a copy of opts (nil for the defaults) with the
// Instruments plugged in, for [webhook.NewSender]; opts itself is not
// modified:
//
//   - OnAttempt records each attempt, then calls opts.OnAttempt, if any
//     ([Instruments.OnAttempt]);
//   - the Client is a copy of opts.Client whose Transport is wrapped to
//     count attempts in flight ([Instruments.Transport]); with no Client,
//     one on a new transport from [webhook.NewTransport], guarded unless
//     opts.AllowPrivateNetworks, with one HTTP/2 write bounded by
//     opts.AttemptTimeout when that is longer, as the Sender's default is;
//   - with endpoint health on (opts.Health not nil), a copy of the
//     HealthOptions whose OnChange counts the endpoints down, then calls
//     opts.Health.OnChange, if any ([Instruments.OnChange]).
func (i *Instruments) SenderOptions(opts *webhook.SenderOptions) *webhook.SenderOptions {
	var o webhook.SenderOptions
	if opts != nil {
		o = *opts
	}
	var c http.Client
	if o.Client != nil {
		c = *o.Client
	} else {
		tr, _ := webhook.NewTransport(&webhook.TransportOptions{AllowPrivateNetworks: o.AllowPrivateNetworks}) // no option that can be invalid
		// As the Sender's own: a TLS handshake and one HTTP/2 write may
		// wait as long as an attempt may take, and no less than
		// NewTransport's bound.
		tr.TLSHandshakeTimeout = max(o.AttemptTimeout, webhook.DefaultAttemptTimeout)
		tr.HTTP2.WriteByteTimeout = tr.TLSHandshakeTimeout
		c.Transport = tr
	}
	c.Transport = i.Transport(c.Transport)
	o.Client = &c
	o.OnAttempt = i.OnAttempt(o.OnAttempt)
	if o.Health != nil {
		h := *o.Health
		h.OnChange = i.OnChange(h.OnChange)
		o.Health = &h
	}
	return &o
}

// boundedSets admits at most max distinct attribute sets to the metrics.
type boundedSets struct {
	max  int
	mu   sync.Mutex
	seen map[attribute.Distinct]struct{}
}

// admit returns attrs, or the overflow attribute when attrs is a set past
// the bound. It does not modify attrs: Options.Attributes may return a
// slice it shares among concurrent deliveries.
func (b *boundedSets) admit(attrs []attribute.KeyValue) []attribute.KeyValue {
	if len(attrs) == 0 {
		return nil
	}
	set := attribute.NewSet(slices.Clone(attrs)...) // NewSet sorts and de-duplicates its argument in place
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.seen[set.Equivalent()]; ok {
		return attrs
	}
	if len(b.seen) >= b.max {
		return []attribute.KeyValue{OverflowKey.Bool(true)}
	}
	if b.seen == nil {
		b.seen = make(map[attribute.Distinct]struct{})
	}
	b.seen[set.Equivalent()] = struct{}{}
	return attrs
}
