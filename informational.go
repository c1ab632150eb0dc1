package webhook

import (
	"context"
	"fmt"
	"net/http/httptrace"
	"net/textproto"
	"sync/atomic"
)

// This file holds the bound on a receiver's 1xx answers, which net/http
// drops when a trace sets Got1xxResponse; delivery.go sets it on each
// attempt.

// errInformationalTooLarge fails an attempt whose 1xx answers passed the
// bounds of informational.count.
var errInformationalTooLarge = fmt.Errorf("webhook: the receiver sent more than %d 1xx answers, or more than %d bytes of their headers", max1xxAnswers, maxResponseHeaderBytes)

// max1xxAnswers is how many 1xx answers an attempt reads, as net/http
// does when nothing traces them: a receiver sends one or two (100, 103).
const max1xxAnswers = 5

// informational counts an attempt's 1xx answers and their header bytes (a
// reason phrase does not show: the count bounds those). net/http bounds
// them itself only when no ClientTrace of the request sets Got1xxResponse
// ("the user is responsible"); a caller's tracing may set one, before the
// attempt or inside a RoundTripper wrapping the transport (otelhttp's), so
// every attempt counts them here (connTrace's hook).
type informational struct {
	answers, size atomic.Int64
}

// count fails the attempt past max1xxAnswers answers or
// maxResponseHeaderBytes of their headers.
func (c *informational) count(h textproto.MIMEHeader) error {
	n := int64(len("HTTP/1.1 100 \r\n\r\n"))
	for name, vs := range h {
		for _, v := range vs {
			n += int64(len(name) + len(v) + len(": \r\n"))
		}
	}
	if c.answers.Add(1) > max1xxAnswers || c.size.Add(n) > maxResponseHeaderBytes {
		return errInformationalTooLarge
	}
	return nil
}

// bound1xx bounds the 1xx answers of an attempt whose caller's context
// carries a ClientTrace with Got1xxResponse, hook, composed with the
// attempt's own (composed): httptrace keeps the caller's result of the
// composed hook, so the count's error would be lost. The returned context
// carries a copy of the composed trace whose Got1xxResponse counts with c,
// once, and then calls hook: calling the composed hook would count each
// answer twice.
func bound1xx(ctx context.Context, composed *httptrace.ClientTrace, hook func(int, textproto.MIMEHeader) error, c *informational) context.Context {
	t := *composed
	t.Got1xxResponse = func(code int, h textproto.MIMEHeader) error {
		if err := c.count(h); err != nil {
			return err
		}
		return hook(code, h)
	}
	return &traceContext{Context: ctx, trace: &t}
}

// traceContext is a context whose ClientTrace is trace, in place of its
// parent's: httptrace.WithClientTrace would call both hooks and keep the
// parent's result, losing bound1xx's error.
type traceContext struct {
	context.Context
	trace *httptrace.ClientTrace
}

func (c *traceContext) Value(key any) any {
	v := c.Context.Value(key)
	if _, ok := v.(*httptrace.ClientTrace); ok {
		return c.trace
	}
	return v
}
