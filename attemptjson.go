package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"time"

	"github.com/signedhook/webhook/internal/redact"
)

// This file holds the delivery-attempt log as data: the JSON a dashboard
// serves as it is.

// KindDelivered is the outcome of an attempt that succeeded, as
// [Attempt.Outcome] and the log's JSON name it. An attempt's Kind stays
// [KindNone] on success: KindDelivered is never a failure's kind.
const KindDelivered FailureKind = "delivered"

// Outcome returns the attempt's outcome as one value a program can switch
// on: [KindDelivered] for a success, its Kind otherwise.
func (a Attempt) Outcome() FailureKind {
	if a.Kind == KindNone {
		return KindDelivered
	}
	return a.Kind
}

// AttemptJSON is the JSON of an [Attempt], a stable shape a dashboard serves
// as it is (json.Marshal of an Attempt writes it):
//
//	{"n":2,"outcome":"status","start":"2026-11-24T18:03:07.215Z","duration_ms":3.21,
//	 "timestamp":1795543387215,"status":503,"error":"...","response":"...",
//	 "retry":true,"retry_in_ms":2000}
//
// Times are RFC 3339 in UTC with milliseconds; durations are milliseconds,
// to the microsecond. Error and response are printable text (see
// [Attempt.ResponseText]); they, status and retry_in_ms are left out when
// there is none, start when it is unknown (an interrupted attempt whose
// start was not recorded), and probe when false.
type AttemptJSON struct {
	N          int         `json:"n"`
	Outcome    FailureKind `json:"outcome"` // "delivered" or the failure kind
	Start      *Time       `json:"start,omitempty"`
	DurationMs float64     `json:"duration_ms"`
	Timestamp  int64       `json:"timestamp,omitempty"` // X-Service-Timestamp, Unix ms
	Status     int         `json:"status,omitempty"`
	Error      string      `json:"error,omitempty"`
	Response   string      `json:"response,omitempty"`
	Retry      bool        `json:"retry"`
	RetryInMs  float64     `json:"retry_in_ms,omitempty"`
	Probe      bool        `json:"probe,omitempty"` // the probe of an endpoint held back, which found it still held back
}

// JSON returns the attempt as its JSON shape: see [AttemptJSON].
func (a Attempt) JSON() AttemptJSON {
	j := AttemptJSON{
		N:          a.N,
		Outcome:    a.Outcome(),
		DurationMs: milliseconds(a.Duration),
		Timestamp:  a.Timestamp,
		Status:     a.StatusCode,
		Response:   a.ResponseText(),
		Retry:      a.Retry,
		RetryInMs:  milliseconds(a.RetryIn),
		Probe:      a.Probe,
	}
	if !a.Start.IsZero() {
		t := NewTime(a.Start)
		j.Start = &t
	}
	if a.Err != nil {
		j.Error = redact.Printable(a.Err.Error())
	}
	return j
}

// MarshalJSON writes the attempt's [AttemptJSON].
func (a Attempt) MarshalJSON() ([]byte, error) { return json.Marshal(a.JSON()) }

// MarshalJSON writes the delivery-attempt log as a stable shape:
//
//	{"connection_name":"CRM","outcome":"delivered","error":"...","attempts":[...]}
//
// outcome is the last attempt's ([Attempt.Outcome]), or, when nothing was
// sent, the kind of why: invalid, canceled or down. error is the result's
// error as printable text, left out on success; attempts are [AttemptJSON].
func (r Result) MarshalJSON() ([]byte, error) {
	type result struct {
		ConnectionName string      `json:"connection_name"`
		Outcome        FailureKind `json:"outcome"`
		Error          string      `json:"error,omitempty"`
		Attempts       []Attempt   `json:"attempts"`
	}
	v := result{ConnectionName: redact.Printable(r.ConnectionName), Attempts: r.Attempts}
	if v.Attempts == nil {
		v.Attempts = []Attempt{}
	}
	switch {
	case len(r.Attempts) > 0:
		v.Outcome = r.Attempts[len(r.Attempts)-1].Outcome()
		if r.Err != nil && v.Outcome == KindDelivered { // cannot be: the log's last word wins
			v.Outcome = KindOther
		}
	case r.Err != nil:
		v.Outcome = notSentKind(r.Err)
	default:
		v.Outcome = KindDelivered
	}
	if r.Err != nil {
		v.Error = redact.Printable(r.Err.Error())
	}
	return json.Marshal(v)
}

// milliseconds returns d in milliseconds, to the microsecond: the unit of
// every duration in the log's JSON.
func milliseconds(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}

// notSentKind is the kind of why a delivery sent nothing.
func notSentKind(err error) FailureKind {
	switch {
	case errors.Is(err, ErrInvalidConnection), errors.Is(err, ErrInvalidPayload):
		return KindInvalid
	case errors.Is(err, ErrNotSubscribed):
		return KindSkipped
	case errors.Is(err, ErrEndpointDown):
		return KindDown
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return KindCanceled
	}
	return KindOther
}
