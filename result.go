package webhook

import (
	"context"
	"errors"
)

// This file holds how a delivery ends: its Result, or an attempt a panic
// left in flight.

// runForResult makes the delivery and returns its Result and error.
func (d *delivery) runForResult(ctx context.Context) (*Result, error) {
	box := new(resultWithLog)
	d.attempts = box.one[:0]
	ran := false
	defer func() {
		if !ran { // a panic in the round trip: d is not pooled
			d.abandon()
		}
	}()
	d.run(ctx)
	ran = true
	return d.result(&box.r)
}

// result fills r, the Result of the delivery, returns it with its error,
// and releases d.
func (d *delivery) result(r *Result) (*Result, error) {
	r.ConnectionName, r.Attempts = d.conn.Name, d.attempts
	switch {
	case len(d.attempts) == 0:
		r.Err = d.err
	case d.err != nil:
		r.Err = &DeliveryError{ConnectionName: d.conn.Name, Attempts: d.attempts, Err: d.err}
	case d.attempts[len(d.attempts)-1].Err != nil:
		r.Err = &DeliveryError{ConnectionName: d.conn.Name, Attempts: d.attempts, Err: d.attempts[len(d.attempts)-1].Err}
	}
	d.release()
	return r, r.Err
}

// errPanicked is the error recorded for an attempt whose round trip
// panicked (a RoundTripper's or a CheckRedirect's bug).
var errPanicked = errors.New("webhook: the attempt's round trip panicked")

// abandon ends the attempt in flight, if a panic in its round trip (or in
// CheckRedirect, or as it was signed once admitted: the caller's clock)
// left one, as finish would have: its request's context is
// canceled, its connection's allowance given back, and endpoint health
// records it as canceled, so that it is not counted in flight for ever (an
// endpoint with MaxUnanswered such attempts was refused as not answering
// from then on, and a probe's lease was held). A place to retry that finish
// took before a panic (in OnAttempt, or a Logger's handler) is given back,
// as run does when the retry never comes
// (TestSend_APanicInOnAttemptGivesBackItsPlaceToRetry). The panic goes on; the
// caller that recovers it, such as a queue's job, may deliver again. The
// retry loop lets go of the request, which holds the signed headers.
func (d *delivery) abandon() {
	d.loop.forget()
	if d.held { // a panic after finish took a place to retry (OnAttempt's, a Logger's)
		d.held = false
		d.s.health.unhold()
	}
	cur := d.cur
	if cur.cancel == nil && cur.ticket.url == "" {
		return // no attempt in flight, none admitted
	}
	d.cur = inFlight{}
	if cur.cancel != nil { // bound: admitted, and its request made
		cur.cancel()
	}
	if cur.trace != nil {
		cur.trace.done()
	}
	if d.s.health != nil {
		a := Attempt{N: d.first + len(d.attempts), Start: cur.start, Timestamp: cur.ts, Kind: KindCanceled, Err: errPanicked}
		d.s.health.record(cur.ticket, &a, false, d.body)
	}
}
