package riverhook

import (
	"encoding/json"
	"slices"

	"github.com/riverqueue/river/rivertype"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook/internal/human"
)

// This file holds a delivery's status and its JSON: what a dashboard serves
// as it is.

// Status is where a delivery stands, in the words a dashboard shows and
// [List] filters by.
type Status string

// Statuses of a delivery.
const (
	StatusDelivered Status = "delivered" // its job completed
	StatusRetrying  Status = "retrying"  // under way after a run that failed
	StatusWaiting   Status = "waiting"   // under way, no run has failed: queued, running its first attempt, or waiting for its endpoint
	StatusGivenUp   Status = "given_up"  // its job was discarded: see Delivery.Reason
	StatusCancelled Status = "cancelled" // its job was cancelled: see Delivery.Reason
)

// statuses is every Status, in a dashboard's order: that of [Count]'s
// query.
var statuses = [...]Status{StatusDelivered, StatusRetrying, StatusWaiting, StatusGivenUp, StatusCancelled}

// Statuses returns every Status, in a dashboard's order, in a new slice.
func Statuses() []Status { return slices.Clone(statuses[:]) }

// statusOf returns the status of job, as List's filter computes it in SQL.
func statusOf(job *rivertype.JobRow) Status {
	switch job.State {
	case rivertype.JobStateCompleted:
		return StatusDelivered
	case rivertype.JobStateDiscarded:
		return StatusGivenUp
	case rivertype.JobStateCancelled:
		return StatusCancelled
	}
	if len(job.Errors) > 0 {
		return StatusRetrying
	}
	return StatusWaiting
}

// MarshalJSON writes the attempt as [webhook.AttemptJSON] with the run that
// made it: {"n":2,"run":3,"outcome":"status",...}.
func (a Attempt) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		N   int `json:"n"`
		Run int `json:"run"`
		webhook.AttemptJSON
	}{a.N, a.Run, a.JSON()})
}

// MarshalJSON writes the delivery as a stable shape a dashboard serves as
// it is:
//
//	{"job_id":42,"connection_id":"crm","delivery_id":"evt_1","event":"user.identified",
//	 "status":"retrying","river_state":"retryable","created_at":"2026-11-24T18:03:07.215Z",
//	 "next_at":"2026-11-24T18:08:07.215Z","attempts_left":4,"reason":"...",
//	 "resent_from":41,"resend_reason":"...","attempts":[...]}
//
// Times are RFC 3339 in UTC with milliseconds; next_at, reason, resent_from,
// resend_reason, resent_as and erased are left out when empty. The attempts are those of
// [Attempt.MarshalJSON]. Text is printable, as in the attempt log. An erased
// delivery ([Delivery.Erased]) has "erased":true, and "[erased]" for its
// resend_reason and its attempts' error and response texts.
func (d *Delivery) MarshalJSON() ([]byte, error) {
	type delivery struct {
		JobID        int64         `json:"job_id"`
		ConnectionID string        `json:"connection_id"`
		DeliveryID   string        `json:"delivery_id"`
		Event        string        `json:"event"`
		Status       Status        `json:"status"`
		State        string        `json:"river_state"`
		CreatedAt    webhook.Time  `json:"created_at"`
		NextAt       *webhook.Time `json:"next_at,omitempty"`
		AttemptsLeft int           `json:"attempts_left"`
		Reason       string        `json:"reason,omitempty"`
		ResentFrom   int64         `json:"resent_from,omitempty"`
		ResendReason string        `json:"resend_reason,omitempty"`
		ResentAs     int64         `json:"resent_as,omitempty"`
		Erased       bool          `json:"erased,omitempty"`
		Attempts     []Attempt     `json:"attempts"`
	}
	v := delivery{JobID: d.JobID, ConnectionID: human.Printable(d.ConnectionID), DeliveryID: human.Printable(d.DeliveryID),
		Event: human.Printable(d.Event), Status: d.Status, State: string(d.State), CreatedAt: webhook.NewTime(d.CreatedAt),
		AttemptsLeft: d.AttemptsLeft, Reason: human.Printable(d.Reason), ResentFrom: d.ResentFrom,
		ResendReason: human.Printable(d.ResendReason), ResentAs: d.ResentAs, Erased: d.Erased, Attempts: d.Attempts}
	if !d.NextAt.IsZero() {
		t := webhook.NewTime(d.NextAt)
		v.NextAt = &t
	}
	if v.Attempts == nil {
		v.Attempts = []Attempt{}
	}
	return json.Marshal(v)
}
