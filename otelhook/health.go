package otelhook

import (
	"context"
	"sync"

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
// when it comes back up or is confirmed up) and then calls next, if not
// nil, with the same change. It is safe for concurrent use. Use one per
// Sender (SenderOptions does): it remembers what its Sender counted.
//
// The count is of the endpoints this process's Senders found down. With
// HealthOptions.Marks, an endpoint a Sender holds back because another
// process marked it down is counted by that process, not again by each
// process following the mark, so the count summed over a deployment's
// processes is of endpoints, not of processes; and an up reported for an
// endpoint this Sender never counted takes nothing off, so the count never
// goes below zero. An endpoint that is down and that nothing is sent to for
// a day is forgotten by its Sender without a change being reported, and
// stays in the count.
func (i *Instruments) OnChange(next func(context.Context, webhook.EndpointHealth)) func(context.Context, webhook.EndpointHealth) {
	origin := metric.WithAttributes(EndpointScopeKey.String(EndpointScopeOrigin))
	perURL := metric.WithAttributes(EndpointScopeKey.String(EndpointScopeURL))
	var mu sync.Mutex
	counted := map[string]bool{} // the endpoints this Sender found down: "o" + origin, or "u" + URL key
	count := func(ctx context.Context, key string, down bool, attrs metric.AddOption) {
		mu.Lock()
		n := int64(0)
		switch {
		case down && !counted[key]:
			counted[key], n = true, 1
		case !down && counted[key]:
			delete(counted, key)
			n = -1
		}
		mu.Unlock()
		if n != 0 {
			i.down.Add(ctx, n, attrs)
		}
	}
	return func(ctx context.Context, h webhook.EndpointHealth) {
		switch {
		case h.Confirmed: // the URL answered: its origin and the URL are up
			count(ctx, "o"+h.Endpoint, false, origin)
			if h.URLKey != "" {
				count(ctx, "u"+h.URLKey, false, perURL)
			}
		case h.PerURL:
			count(ctx, "u"+h.URLKey, h.Down, perURL)
		default:
			count(ctx, "o"+h.Endpoint, h.Down, origin)
		}
		if next != nil {
			next(ctx, h)
		}
	}
}
