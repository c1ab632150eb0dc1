package webhook

import (
	"context"
	"fmt"
	"net/http/httptrace"
	"net/textproto"
	"sync/atomic"
)

// This file holds the bound on a receiver's 1xx answers when the caller's
// context traces them; delivery.go sets it on each attempt.

// errInformationalTooLarge fails an attempt whose 1xx answers passed the
// bounds of bound1xx.
var errInformationalTooLarge = fmt.Errorf("net/http: more than %d 1xx answers, or more than %d bytes of their headers", max1xxAnswers, maxResponseHeaderBytes)

// max1xxAnswers is how many 1xx answers an attempt reads when the caller
// traces them (bound1xx): a receiver sends one or two (100, 103).
const max1xxAnswers = 5

// bound1xx bounds the 1xx answers of an attempt whose context carries a
// ClientTrace with Got1xxResponse (a caller's tracing): net/http then
// leaves them unbounded ("the user is responsible"), each with a header
// bound of its own, and a receiver could send them without end. The
// returned context carries a copy of that trace whose Got1xxResponse
// counts them and their header bytes (a reason phrase does not show: the
// count bounds those), and fails the attempt past max1xxAnswers or
// maxResponseHeaderBytes, before calling the caller's.
func bound1xx(ctx context.Context, caller *httptrace.ClientTrace) context.Context {
	t := *caller
	var answers, size atomic.Int64
	t.Got1xxResponse = func(code int, h textproto.MIMEHeader) error {
		n := int64(len("HTTP/1.1 100 \r\n\r\n"))
		for name, vs := range h {
			for _, v := range vs {
				n += int64(len(name) + len(v) + len(": \r\n"))
			}
		}
		if answers.Add(1) > max1xxAnswers || size.Add(n) > maxResponseHeaderBytes {
			return errInformationalTooLarge
		}
		return caller.Got1xxResponse(code, h)
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
