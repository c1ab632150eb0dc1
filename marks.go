package webhook

import (
	"context"
	"time"
)

// This file holds the interface through which the Senders of a deployment
// share endpoint health: the root keeps no storage of its own.

// HealthMarks keeps the endpoint health marks of a deployment where every
// process reads them: each Sender with HealthOptions.Marks writes the
// changes it sees and follows those the others write, so that an endpoint
// one process found down is held back by all within about
// HealthOptions.FollowEvery, and a process starting up starts from the
// marks. riverhook's PostgreSQL store is one (riverhook.EndpointMarks).
//
// Its methods are called off the attempt path, concurrently, with a context
// that ends after OnChangeTimeout; an error is logged and the Sender goes on
// with what it knows itself.
type HealthMarks interface {
	// Mark records h, a change or a confirmation as HealthOptions.OnChange
	// reports it, unless the store holds a mark of the same endpoint (its
	// origin, or for a PerURL mark its URLKey) that changed later
	// (Changed): reports of several processes may arrive out of order.
	Mark(ctx context.Context, h EndpointHealth) error

	// Since returns the marks recorded at or after after, by the store's
	// clock (all of them for the zero time), and the time to give the next
	// call: the latest recording time among them, or after when there are
	// none. A mark is returned again if recorded again; the Sender applies
	// each by its Changed.
	Since(ctx context.Context, after time.Time) (marks []EndpointHealth, next time.Time, err error)
}
