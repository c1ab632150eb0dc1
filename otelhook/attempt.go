package otelhook

import (
	"context"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/signedhook/webhook"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// This file holds what an attempt records: its span, its duration, and the
// counts of attempts and deliveries.

// Attribute keys of the library's own.
const (
	AttemptKey        = attribute.Key("webhook.attempt")         // the attempt's number, 1 for the first
	ConnectionNameKey = attribute.Key("webhook.connection.name") // the connection's Name
	OutcomeKey        = attribute.Key("webhook.outcome")         // "delivered" or "failed"
	FailureKindKey    = attribute.Key("webhook.failure_kind")    // a failure's webhook.FailureKind
	RetryKey          = attribute.Key("webhook.retry")           // whether a retry is scheduled or due
	RetryInKey        = attribute.Key("webhook.retry_in_ms")     // the wait before it, in milliseconds
	EndpointScopeKey  = attribute.Key("webhook.endpoint.scope")  // "origin" or "url"
)

// Values of OutcomeKey.
const (
	OutcomeDelivered = "delivered" // the receiver answered 2xx
	OutcomeFailed    = "failed"    // any other end: see FailureKindKey
)

// OnAttempt returns a SenderOptions.OnAttempt that records each attempt (its
// span, its duration, the count of attempts and, when it is not retried, of
// deliveries) and then calls next, if not nil, with the same arguments. It
// is safe for concurrent use, as OnAttempt must be.
func (i *Instruments) OnAttempt(next func(context.Context, webhook.Connection, webhook.Attempt)) func(context.Context, webhook.Connection, webhook.Attempt) {
	return func(ctx context.Context, c webhook.Connection, a webhook.Attempt) {
		i.record(ctx, c, a)
		if next != nil {
			next(ctx, c, a)
		}
	}
}

// record records attempt a to c, made under ctx.
func (i *Instruments) record(ctx context.Context, c webhook.Connection, a webhook.Attempt) {
	ep := endpointOf(c.URL)
	method := c.Method
	if method == "" {
		method = "POST"
	}
	errorType := errorTypeOf(a)
	var own []attribute.KeyValue
	if i.attributes != nil {
		own = i.attributes(ctx, c)
	}

	i.span(ctx, c, a, method, ep, errorType, own)

	// The metrics.
	endpoint := append(i.endpointAttrs(ep), i.sets.admit(own)...)
	durAttrs := append(make([]attribute.KeyValue, 0, 5), semconv.HTTPRequestMethodKey.String(method))
	durAttrs = append(durAttrs, endpoint...)
	if a.StatusCode != 0 {
		durAttrs = append(durAttrs, semconv.HTTPResponseStatusCode(a.StatusCode))
	}
	if errorType != "" {
		durAttrs = append(durAttrs, semconv.ErrorTypeKey.String(errorType))
	}
	i.duration.Record(ctx, a.Duration.Seconds(), metric.WithAttributeSet(attribute.NewSet(durAttrs...)))
	counted := metric.WithAttributeSet(attribute.NewSet(append(outcomeAttrs(a), endpoint...)...))
	i.attempts.Add(ctx, 1, counted)
	if !a.Retry {
		i.deliveries.Add(ctx, 1, counted)
	}
}

// span records attempt a to c as a span, child of ctx's, timed as the
// attempt was.
func (i *Instruments) span(ctx context.Context, c webhook.Connection, a webhook.Attempt, method string, ep endpoint, errorType string, own []attribute.KeyValue) {
	attrs := make([]attribute.KeyValue, 0, 16+len(own))
	attrs = append(attrs,
		semconv.HTTPRequestMethodKey.String(method),
		semconv.ServerAddress(ep.host),
		semconv.ServerPort(ep.port),
		semconv.URLScheme(ep.scheme),
		AttemptKey.Int(a.N),
	)
	if a.N > 1 {
		attrs = append(attrs, semconv.HTTPRequestResendCount(a.N-1))
	}
	if c.Name != "" {
		attrs = append(attrs, ConnectionNameKey.String(c.Name))
	}
	if a.StatusCode != 0 {
		attrs = append(attrs, semconv.HTTPResponseStatusCode(a.StatusCode))
	}
	attrs = append(attrs, outcomeAttrs(a)...)
	if errorType != "" {
		attrs = append(attrs, semconv.ErrorTypeKey.String(errorType))
	}
	attrs = append(attrs, own...)
	attrs = append(attrs, RetryKey.Bool(a.Retry))
	if a.Retry {
		attrs = append(attrs, RetryInKey.Int64(a.RetryIn.Milliseconds()))
	}
	_, span := i.tracer.Start(ctx, method,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(a.Start),
		trace.WithAttributes(attrs...),
	)
	if errorType != "" {
		span.SetStatus(codes.Error, errorType)
	}
	span.End(trace.WithTimestamp(a.Start.Add(a.Duration)))
}

// outcomeAttrs returns a's outcome and, for a failure, its kind.
func outcomeAttrs(a webhook.Attempt) []attribute.KeyValue {
	if a.Err == nil {
		return []attribute.KeyValue{OutcomeKey.String(OutcomeDelivered)}
	}
	kind := string(a.Kind)
	if kind == "" {
		kind = string(webhook.KindOther)
	}
	return []attribute.KeyValue{OutcomeKey.String(OutcomeFailed), FailureKindKey.String(kind)}
}

// errorTypeOf returns the error.type of a failed attempt, as the HTTP
// client conventions say: the status code of a 4xx or 5xx answer, a
// low-cardinality name of the failure otherwise; "" for a success.
func errorTypeOf(a webhook.Attempt) string {
	switch {
	case a.Err == nil:
		return ""
	case a.StatusCode >= 400:
		return strconv.Itoa(a.StatusCode)
	case a.Kind == "":
		return string(webhook.KindOther)
	}
	return string(a.Kind)
}

// endpoint is a URL's origin, in one spelling for one host and port.
type endpoint struct {
	scheme, host string
	port         int
}

// endpointOf returns the origin of rawURL, a connection's URL: its scheme,
// its host in lower case without a final dot (an IP address in canonical
// form) and its port, written or not. Never its path, query or user
// information.
func endpointOf(rawURL string) endpoint {
	u, err := url.Parse(rawURL)
	if err != nil {
		return endpoint{}
	}
	return endpointOfURL(u)
}

func endpointOfURL(u *url.URL) endpoint {
	ep := endpoint{scheme: strings.ToLower(u.Scheme), host: strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")}
	if ip, err := netip.ParseAddr(ep.host); err == nil {
		ep.host = ip.Unmap().String()
	}
	if p, err := strconv.Atoi(u.Port()); err == nil {
		ep.port = p
	} else {
		ep.port = defaultPorts[ep.scheme]
	}
	return ep
}

var defaultPorts = map[string]int{"https": 443, "http": 80}

// endpointAttrs returns server.address and server.port of ep, for a
// metric; none with Options.OmitEndpoint.
func (i *Instruments) endpointAttrs(ep endpoint) []attribute.KeyValue {
	if i.omitEndpoint {
		return nil
	}
	return []attribute.KeyValue{semconv.ServerAddress(ep.host), semconv.ServerPort(ep.port)}
}
