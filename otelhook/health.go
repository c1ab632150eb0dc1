package otelhook

import (
	"context"

	"github.com/signedhook/webhook"
	"go.opentelemetry.io/otel/metric"
)

// This file holds what endpoint health's changes record.

// Values of EndpointScopeKey.
const (
	EndpointScopeOrigin = "origin" // a host that cannot be connected to
	EndpointScopeURL    = "url"    // one URL that connects and does not answer
)

// OnChange returns a HealthOptions.OnChange that counts the endpoints down
// (webhook.endpoints.down: one more when an endpoint goes down, one less
// when it comes back up) and then calls next, if not nil, with the same
// change. An endpoint confirmed up (EndpointHealth.Confirmed) changes no
// count. It is safe for concurrent use.
//
// The count is this process's Senders' view. An endpoint that is down and
// that nothing is sent to for a day is forgotten by its Sender without a
// change being reported, and stays in the count.
func (i *Instruments) OnChange(next func(context.Context, webhook.EndpointHealth)) func(context.Context, webhook.EndpointHealth) {
	origin := metric.WithAttributes(EndpointScopeKey.String(EndpointScopeOrigin))
	perURL := metric.WithAttributes(EndpointScopeKey.String(EndpointScopeURL))
	return func(ctx context.Context, h webhook.EndpointHealth) {
		if h.Confirmed {
			if next != nil {
				next(ctx, h)
			}
			return
		}
		attrs := origin
		if h.PerURL {
			attrs = perURL
		}
		n := int64(-1)
		if h.Down {
			n = 1
		}
		i.down.Add(ctx, n, attrs)
		if next != nil {
			next(ctx, h)
		}
	}
}
