package riverhook

import (
	"context"

	"github.com/signedhook/webhook"
)

// This file holds what a dashboard asks the Worker of one connection: its
// Send Test, and its endpoint's health, both through the Worker's Sender
// and Resolver.

// SendTest is the dashboard's "Send Test" for the connection with the
// given id: it resolves the connection with the Worker's [Resolver] and
// makes [webhook.Sender.SendTest]'s one attempt with the Worker's Sender,
// the same attempt as a real delivery's (signed alike, through the same
// transport and guard), whose [webhook.Attempt.Diagnosis] says what
// happened. The Result and error are SendTest's. When the connection does
// not resolve, the error names it by id alone (the Resolver's error, which
// may quote a URL, goes to [WorkerOptions.Logger] and is wrapped, for
// errors.Is and errors.As); it matches [ErrConnectionGone] for one that is
// gone. It blocks for the attempt, at most the Sender's attempt timeout,
// and is safe for concurrent use.
func (w *Worker) SendTest(ctx context.Context, connectionID string) (*webhook.Result, error) {
	conn, err := w.resolveConnection(ctx, connectionID, 0)
	if err != nil {
		return nil, err
	}
	return w.sender.SendTest(ctx, conn)
}

// EndpointHealth returns the endpoint of the connection with the given id,
// its origin as [webhook.Connection.Endpoint] names it (never its path), the
// key of its URL ([webhook.Connection.URLKey], under which marks of the URL
// are kept), and what the Worker's Sender knows of it
// ([webhook.Sender.Health]): the entries for that origin and for the
// connection's own URL, those failing or down. failing is empty when the
// endpoint answers, or when the Sender's endpoint health is off. The error
// is as for [Worker.SendTest]. It is safe for concurrent use.
func (w *Worker) EndpointHealth(ctx context.Context, connectionID string) (endpoint, urlKey string, failing []webhook.EndpointHealth, err error) {
	conn, err := w.resolveConnection(ctx, connectionID, 0)
	if err != nil {
		return "", "", nil, err
	}
	endpoint, urlKey = conn.Endpoint(), conn.URLKey()
	for _, h := range w.sender.Health() {
		if h.Endpoint == endpoint && !h.PerURL || h.PerURL && h.URLKey == urlKey {
			failing = append(failing, h)
		}
	}
	return endpoint, urlKey, failing, nil
}
