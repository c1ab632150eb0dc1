package otelhook

import (
	"context"
	"io"
	"net/http"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// This file holds the transport wrapper that counts the attempts in flight.

// Transport returns a RoundTripper that counts the requests in flight on
// next (webhook.attempts.active), from the call of RoundTrip to the close
// of the answer's body (the Sender always closes it), or to RoundTrip's
// error. It makes every request on next, unchanged: wrapping a transport
// from [webhook.NewTransport] keeps its private-network guard. Nil next
// means http.DefaultTransport, which has no guard, as it does for a
// Sender's Client. Its CloseIdleConnections closes next's. It is safe for
// concurrent use if next is.
func (i *Instruments) Transport(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &transport{next: next, i: i}
}

type transport struct {
	next http.RoundTripper
	i    *Instruments
}

func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	var set attribute.Set
	if !t.i.omitEndpoint {
		set = attribute.NewSet(t.i.endpointAttrs(endpointOfURL(r.URL))...)
	}
	attrs := metric.WithAttributeSet(set)
	// The count goes down after the attempt's context has ended: only its
	// values are kept.
	ctx := context.WithoutCancel(r.Context())
	t.i.active.Add(ctx, 1, attrs)
	handed := false // to the answer's body, which ends the count when closed
	defer func() {
		if !handed { // an error, or a panic the caller may recover
			t.i.active.Add(ctx, -1, attrs)
		}
	}()
	resp, err := t.next.RoundTrip(r)
	if err != nil || resp == nil || resp.Body == nil {
		return resp, err
	}
	resp.Body = &activeBody{ReadCloser: resp.Body, end: func() { t.i.active.Add(ctx, -1, attrs) }}
	handed = true
	return resp, nil
}

// CloseIdleConnections closes the idle connections of the wrapped
// transport, if it has the method.
func (t *transport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// Unwrap returns the wrapped transport.
func (t *transport) Unwrap() http.RoundTripper { return t.next }

// activeBody is an answer's body that ends its attempt's count when closed,
// once.
type activeBody struct {
	io.ReadCloser
	once sync.Once
	end  func()
}

func (b *activeBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.end)
	return err
}
