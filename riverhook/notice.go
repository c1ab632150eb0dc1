package riverhook

import (
	"time"

	"github.com/riverqueue/river"
)

// This file holds the notices of a connection's life: the River job the
// service's own worker turns into an e-mail or a message.

// NoticeKind is the River job kind of a notice ([NoticeArgs]).
const NoticeKind = "riverhook_notice"

// NoticeQueue is the River queue of the notices: add it to the Queues of
// the clients that register your worker of [NoticeArgs]. A deployment that
// works no such queue keeps its notices, unworked and harmless, and no
// client fails them for a kind it has no worker for.
const NoticeQueue = "riverhook_notice"

// Change is a step of a connection's life that the service is told of.
type Change string

// The changes a notice tells.
const (
	// ChangeFailing: the connection's attempts began failing; it is disabled
	// at DisableAt if they go on.
	ChangeFailing Change = "failing"
	// ChangeWarning: it will be disabled at DisableAt, [LifePolicy].WarnBefore
	// or less from now, unless an attempt succeeds.
	ChangeWarning Change = "warning"
	// ChangeDisabled: it is disabled, for Reason; its deliveries are kept.
	ChangeDisabled Change = "disabled"
	// ChangeEnabled: [Enable] made it active again; Waiting deliveries go.
	ChangeEnabled Change = "enabled"
	// ChangeActive: an attempt succeeded after failures: it is active again.
	ChangeActive Change = "active"
)

// NoticeArgs is a notice of a step of a connection's life, a River job of
// kind [NoticeKind]: the Worker (or [Enable], [Disable]) inserts it in the
// transaction that changes the state, so a crash neither loses nor doubles
// it. The library sends no e-mail: register a worker of yours for it, add
// [NoticeQueue] to the client's queues, and turn it into an e-mail or a
// Slack message there, for example:
//
//	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[riverhook.NoticeArgs]) error {
//		return mail.Send(ctx, ownerOf(job.Args.ConnectionID), job.Args)
//	}))
//	config.Queues[riverhook.NoticeQueue] = river.QueueConfig{MaxWorkers: 2}
//
// Register that worker in every River client, as the Worker: River's
// elected leader discards a stuck job of a kind its client has no worker
// for. River runs the job until your worker returns nil, as any job: a run
// cut by a crash runs again, so make it idempotent by the job's id.
type NoticeArgs struct {
	ConnectionID string        `json:"connection_id"`
	Change       Change        `json:"change"`
	State        State         `json:"state"`            // the connection's state after the change
	Reason       DisableReason `json:"reason,omitempty"` // disabled: why
	At           time.Time     `json:"at"`               // when it changed, by the database's clock
	DisableAt    time.Time     `json:"disable_at,omitzero"`
	// Waiting counts the deliveries to it not ended when it changed; the
	// one whose attempt made the change and ended with it (a 2xx, a 410)
	// is not among them.
	Waiting int `json:"waiting"`
}

// Kind returns [NoticeKind].
func (NoticeArgs) Kind() string { return NoticeKind }

// InsertOpts puts a notice in [NoticeQueue].
func (NoticeArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: NoticeQueue} }

// noticeOf returns the notice of change c to state s at now, with waiting
// deliveries.
func noticeOf(s ConnectionState, c Change, now time.Time, waiting int) NoticeArgs {
	return NoticeArgs{ConnectionID: s.ConnectionID, Change: c, State: s.State, Reason: s.Reason, At: now, DisableAt: s.DisableAt, Waiting: waiting}
}
