package riverhook

import (
	"context"
	"errors"
	"fmt"

	"github.com/riverqueue/river"
)

// This file holds erasure: a user's personal data out of the job rows.

// ErrErased is returned by [Resend] and [Recover] for a delivery whose body
// was erased: there is nothing left to send.
var ErrErased = errors.New("riverhook: the delivery's body was erased")

// EraseBodies erases the personal data of the given deliveries' jobs that
// have ended, delivered or not, and returns how many held some: the body
// (the payload, with the user's email, name and phone), and every text of
// the job that may quote it, which a receiver that echoes the body fills
// with it: each response excerpt and error text of the attempt log, the
// error texts River keeps of each run, a resend's reason. Each becomes
// "[erased]"; the log keeps its outcomes, statuses, times, durations and
// runs. A delivery still under way keeps its body, which its next attempt
// signs and sends: erase it once it has ended, or cancel it first
// (client.JobCancel). An erased delivery cannot be resent ([ErrErased]).
//
// Call it for the deliveries of a user who asked to be forgotten (the
// service knows which delivery ids carried that user), or for every
// delivery once it has ended, to keep personal data out of River's tables
// and River UI at all: see the package documentation, "Retention and
// personal data". It is one UPDATE, run on db: River's client has no API
// for it. db is on the database of client (any client will do, for its
// schema): a pool, or the caller's transaction.
func EraseBodies[TTx any](ctx context.Context, client *river.Client[TTx], db DB, deliveryIDs []string) (int, error) {
	if len(deliveryIDs) == 0 {
		return 0, nil
	}
	n, err := erase(ctx, db, client.Schema(), deliveryIDs)
	if err != nil {
		return 0, fmt.Errorf("riverhook: erasing the bodies of %d deliveries: %w", len(deliveryIDs), err)
	}
	return n, nil
}

// EraseResult says what an [EraseSubject] did.
type EraseResult struct {
	// Erased counts the jobs whose personal data the call erased.
	Erased int `json:"erased"`
}

// EraseSubject erases the personal data of subject ([Args.Subject]) from
// every ended delivery of it, resends included, and says what it did.
// Its jobs are found by their args, on River's GIN index on args. db is as
// for [EraseBodies].
func EraseSubject[TTx any](ctx context.Context, client *river.Client[TTx], db DB, subject string) (*EraseResult, error) {
	if subject == "" {
		return nil, fmt.Errorf("%w: the subject to erase must not be empty", ErrInvalidSubject)
	}
	if err := checkSubject(subject); err != nil {
		return nil, err
	}
	n, err := eraseSubject(ctx, db, client.Schema(), subject)
	if err != nil {
		return nil, fmt.Errorf("riverhook: erasing a subject's deliveries: %w", err)
	}
	return &EraseResult{Erased: n}, nil
}
