package riverhook

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/signedhook/webhook"
)

// This file holds the Worker's options and their validation.

// WorkerOptions configures a [Worker]. A nil *WorkerOptions, or a zero field,
// selects the documented default; [NewWorker] refuses a negative one.
type WorkerOptions struct {
	// MaxInFlightPerConnection bounds the deliveries to one connection in
	// flight at once, so that one slow endpoint cannot take every worker:
	// in the process, or across the fleet with Places. A job over the bound
	// is snoozed to a slot of the connection's (see SnoozeFor), costing no
	// attempt. A connection's own webhook.Connection.MaxInFlight, as the
	// Resolver returns it, takes its place. Zero means no bound.
	MaxInFlightPerConnection int

	// SnoozeFor is how long an attempt to a connection is taken to last
	// before one has ended. The slots of a connection's waiting jobs are
	// spaced by its attempts' time over the bound, and by SnoozeFor over
	// the bound until one has ended. Jobs waiting for a down endpoint come
	// back one bound's worth per SnoozeFor, however many they are. Zero
	// means one second; under a millisecond is refused.
	SnoozeFor time.Duration

	// Places, if not nil, holds what the fleet must agree on about a
	// connection: its places in flight, its last start, and its chain of
	// slots. Use [NewConnectionPlaces] in every process of a deployment,
	// so that MaxInFlightPerConnection and RateLimit hold for the fleet.
	// Nil keeps them in the process's memory: the same algorithm, the
	// outage wake included, for one process.
	Places Places

	// RateLimit, if not nil, returns the most deliveries a second that may
	// begin to the connection with the given id: a customer's throttle. It
	// is asked only for a connection without a rate of its own
	// (webhook.Connection.RateLimit, as the Resolver returns it).
	// Zero, a negative number or NaN means no limit; a rate under one a
	// year is one a year. Deliveries begin evenly spaced, with no burst:
	// 2% over 1/rate apart, so that a start a few milliseconds late does
	// not put one more than the rate within a second; with Places whose
	// database takes longer than 10 ms to answer a start, further apart by
	// the excess, since a start may be used that late. A job that comes
	// early is snoozed to a slot, costing no attempt; one back at its slot
	// takes the next start up to its holding on ahead and waits for it. A
	// changed rate takes effect at the next start. It is called once per
	// run, from River's worker goroutines: answer from memory, not from a
	// query per call. A panic in it is logged, and the delivery waits for
	// SnoozeFor.
	RateLimit func(connectionID string) float64

	// MaxWait is how long a delivery may wait for an endpoint that is down
	// (the Sender's endpoint health), counted from when it was inserted:
	// past it, its job is discarded with a reason that says so, and
	// OnAttempt is told. Zero means [DefaultMaxWait], three days; under a
	// millisecond is refused.
	MaxWait time.Duration

	// Life is the policy of a connection's life: when its failing
	// attempts disable it, when the service is warned, and how long a
	// disabled connection keeps its deliveries. Nil, or a zero field,
	// means the defaults (see [LifePolicy]). The state lives in riverhook's
	// table riverhook_connection_state: run [Migrate] in every set-up.
	Life *LifePolicy

	// OnAttempt, if not nil, is called with each entry of a job's attempt
	// log as it is added: after each attempt made, and, when a job whose
	// previous run was cut by a crash runs again, with that interrupted
	// attempt (kind webhook.KindInterrupted) before the next one (again,
	// should that run be cut too: entries reach it at least once). job is
	// a copy of River's that nothing writes afterwards, so it may be kept
	// past the call (its Body and the row's slices are shared: read them
	// only). It is called from River's worker goroutines, so concurrently.
	// Its error, or panic, is logged and never fails the delivery.
	OnAttempt func(ctx context.Context, job *river.Job[Args], a webhook.Attempt) error

	// Logger receives the errors of OnAttempt and of recording the attempt
	// log, the Resolver's errors and panics, as they are (see [Resolver]),
	// and RateLimit's panics. Nil means no logging.
	Logger *slog.Logger
}

// minDuration is the shortest SnoozeFor and MaxWait NewWorker takes. An
// untyped 1 written for a second is a nanosecond: as SnoozeFor, the slots
// of a backlog would be spaced by nothing, and each of its jobs would run
// again at River's next fetch; as MaxWait, every delivery to a down
// endpoint would be given up at its first refusal.
const minDuration = time.Millisecond

// validate refuses a negative option, and a SnoozeFor or MaxWait under
// minDuration.
func (o *WorkerOptions) validate() error {
	switch {
	case o.MaxInFlightPerConnection < 0:
		return fmt.Errorf("riverhook: WorkerOptions.MaxInFlightPerConnection is %d: it must not be negative (zero means no bound)", o.MaxInFlightPerConnection)
	case o.SnoozeFor < 0:
		return fmt.Errorf("riverhook: WorkerOptions.SnoozeFor is %v: it must not be negative (zero means one second)", o.SnoozeFor)
	case o.SnoozeFor > 0 && o.SnoozeFor < minDuration:
		return fmt.Errorf("riverhook: WorkerOptions.SnoozeFor is %v: want at least %v, such as 1 * time.Second (zero means one second)", o.SnoozeFor, minDuration)
	case o.MaxWait < 0:
		return fmt.Errorf("riverhook: WorkerOptions.MaxWait is %v: it must not be negative (zero means DefaultMaxWait)", o.MaxWait)
	case o.MaxWait > 0 && o.MaxWait < minDuration:
		return fmt.Errorf("riverhook: WorkerOptions.MaxWait is %v: want at least %v, such as 72 * time.Hour (zero means DefaultMaxWait)", o.MaxWait, minDuration)
	}
	_, err := o.Life.withDefaults()
	return err
}
