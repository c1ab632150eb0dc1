package riverhook

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/riverqueue/river/rivertype"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook/internal/human"
)

// attemptLog is a job's output (river.RecordOutput): its delivery's whole
// attempt log, oldest first. The package documentation shows its JSON.
type attemptLog struct {
	Attempts []logEntry `json:"attempts"`
}

// logEntry is one attempt of the log, at most maxEntryBytes of JSON.
type logEntry struct {
	N         int       `json:"n"`   // the attempt's number, as the policy counts
	Run       int       `json:"run"` // River's attempt number of the run that made it
	Kind      string    `json:"kind"`
	Start     time.Time `json:"start,omitzero"`
	Status    int       `json:"status,omitempty"`
	Took      string    `json:"took,omitempty"`
	Timestamp int64     `json:"timestamp,omitempty"` // X-Service-Timestamp, Unix ms
	RetryIn   string    `json:"retry_in,omitempty"`  // present when a retry follows, "0s" included
	Error     string    `json:"error,omitempty"`
	Response  string    `json:"response,omitempty"`
	Probe     bool      `json:"probe,omitempty"` // the probe of a down endpoint that found it still down: no attempt of the policy
}

// placeCut reports whether e is an attempt its own run cut as the
// process lost its place in flight (Worker.interrupt): interrupted, with
// its start known, where a crash's leaves none.
func (e logEntry) placeCut() bool {
	return e.Kind == string(webhook.KindInterrupted) && !e.Start.IsZero()
}

// logKept are the JSON names of logEntry's fields that an erasure keeps:
// numbers, riverhook's words, times and durations. The others, Error and
// Response, may quote the body: an erasure replaces them (erasedText).
// TestLogKept holds it to logEntry's fields.
var logKept = []string{"n", "run", "kind", "start", "status", "took", "timestamp", "retry_in", "probe"}

const (
	// maxEntryBytes bounds one entry of the log, as JSON, also as
	// PostgreSQL prints it: jsonb adds a space after each ':' and ','.
	maxEntryBytes = 1024
	jsonbSpaces   = 2 * 10
	// maxErrorBytes bounds an entry's error text; the response excerpt
	// gets what is left.
	maxErrorBytes = 400
)

// errInterrupted is the Err of an attempt whose run was cut.
var errInterrupted = errors.New("riverhook: interrupted: the run making the attempt ended without an outcome (its process died, or River lost it)")

// newLogEntry returns the entry of attempt a, made by River's run run.
func newLogEntry(a webhook.Attempt, run int) logEntry {
	e := logEntry{N: a.N, Run: run, Kind: string(webhook.KindDelivered), Status: a.StatusCode, Timestamp: a.Timestamp,
		Took: tookText(a.Duration)}
	if !a.Start.IsZero() {
		e.Start = a.Start.UTC().Round(time.Microsecond)
	}
	if !a.OK() {
		e.Kind = string(a.Kind)
		e.Error = cutJSON(a.Err.Error(), maxErrorBytes)
	}
	if a.Retry {
		e.RetryIn = a.RetryIn.String()
	}
	if text := a.ResponseText(); text != "" {
		head, _ := json.Marshal(e) // fails only for a start past year 9999, as marshalLog then does
		e.Response = cutJSON(text, maxEntryBytes-jsonbSpaces-len(head)-len(`,"response":""`))
	}
	return e
}

// marshalLog returns the JSON of attemptLog{Attempts: entries}, the job's
// output.
func marshalLog(entries []logEntry) ([]byte, error) {
	return json.Marshal(attemptLog{Attempts: entries})
}

// tookText is an entry's Took: to the microsecond, which DeliveryOf reads
// back into Attempt.Duration. It is the log's precision, not a rounding for
// people (human.Duration).
func tookText(d time.Duration) string { return d.Round(time.Microsecond).String() }

// cutJSON returns the longest start of s, cut at a rune boundary and ended
// with "…" when cut, whose JSON string encoding (quotes excluded) takes at
// most max bytes.
func cutJSON(s string, max int) string { return human.Cut(s, max, jsonLen, "…") }

// jsonLen is how many bytes encoding/json takes for r inside a string.
func jsonLen(r rune) int {
	switch {
	case r == '"' || r == '\\':
		return 2
	case r < 0x20, r == '<', r == '>', r == '&', r == '\u2028', r == '\u2029',
		r == utf8.RuneError: // \ufffd for an invalid byte
		return 6
	}
	return utf8.RuneLen(r)
}

// attempt returns the entry as the webhook.Attempt it records. The
// response excerpt comes back as ResponseBody.
func (e logEntry) attempt() webhook.Attempt {
	a := webhook.Attempt{N: e.N, Start: e.Start, StatusCode: e.Status, Timestamp: e.Timestamp, Probe: e.Probe}
	a.Duration, _ = time.ParseDuration(e.Took)
	if e.RetryIn != "" {
		a.Retry = true
		a.RetryIn, _ = time.ParseDuration(e.RetryIn)
	}
	if e.Response != "" {
		a.ResponseBody = []byte(e.Response)
	}
	switch e.Kind {
	case string(webhook.KindDelivered):
	case string(webhook.KindInterrupted):
		a.Kind, a.Err = webhook.KindInterrupted, errInterrupted
	default:
		a.Kind, a.Err = webhook.FailureKind(e.Kind), errors.New(cmp.Or(e.Error, e.Kind))
	}
	return a
}

// readLog returns the attempt log that job's previous runs recorded.
func readLog(job *rivertype.JobRow) ([]logEntry, error) {
	out := job.Output()
	var log attemptLog
	if len(out) > 0 {
		if err := json.Unmarshal(out, &log); err != nil {
			return nil, fmt.Errorf("riverhook: job %d's output is not an attempt log: %w", job.ID, err)
		}
	}
	return log.Attempts, nil
}

// interrupted returns the entries of the runs of job after the log's last
// one, up to run last, that were cut: no attempt in the log, and no error
// in the job's errors but the rescuer's. Such a run's process died, or
// River lost its outcome, and River's rescuer ran the job again. A run
// with an error of its own made no attempt and was not cut: the Resolver
// failed, or River failed the run itself (a client without the Worker
// fetched it during a rolling deploy: "job kind is not registered"). Each
// carries the number of the attempt it would have made.
func interrupted(job *rivertype.JobRow, entries []logEntry, last int) []logEntry {
	from, probed := 1, 0
	if n := len(entries); n > 0 {
		from = entries[n-1].Run + 1
		if last := entries[n-1]; last.Probe || last.placeCut() {
			// A probe that found the endpoint down, or an attempt cut as
			// its place was lost, snoozed its job, and River gave its
			// run's number back: a next run has it too. Only River's
			// rescue says one did and was cut (a job cancelled during the
			// run keeps the number, and no run followed).
			from, probed = entries[n-1].Run, entries[n-1].Run
		}
	}
	if from > last {
		return nil
	}
	ended, rescued := map[int]bool{}, map[int]bool{}
	for _, e := range job.Errors {
		if e.Error != rescuedError {
			ended[e.Attempt] = true
		} else {
			rescued[e.Attempt] = true
		}
	}
	n := attemptsMade(entries) + 1
	var cut []logEntry
	for run := from; run <= last; run++ {
		if !ended[run] && (run != probed || rescued[run]) {
			cut = append(cut, logEntry{N: n, Run: run, Kind: string(webhook.KindInterrupted)})
		}
	}
	return cut
}

// attemptsMade counts the entries of attempts that reached an outcome.
func attemptsMade(entries []logEntry) int {
	n := 0
	for _, e := range entries {
		if e.Kind != string(webhook.KindInterrupted) && e.Kind != string(webhook.KindDown) && !e.Probe {
			n++
		}
	}
	return n
}

// Delivery is one durable delivery to one connection as River holds it:
// its job and its whole attempt log, for a dashboard. It marshals to a
// stable JSON shape: see [Delivery.MarshalJSON].
type Delivery struct {
	JobID        int64
	ConnectionID string
	DeliveryID   string
	Event        string

	// Status is where the delivery stands, in a dashboard's words.
	Status Status

	// State is the job's: completed (delivered), discarded (ended without
	// success: see Reason), cancelled (see Reason), or a state in which the
	// delivery is still under way (available, scheduled, retryable,
	// running, pending).
	State rivertype.JobState

	// CreatedAt is when the job was inserted; NextAt is when its next run
	// may start, for a job waiting for one (available, scheduled,
	// retryable), and zero otherwise.
	CreatedAt, NextAt time.Time

	// Attempts is the attempt log, oldest first: every attempt made, and
	// the runs cut by a crash as attempts of kind webhook.KindInterrupted
	// (also those of a job River's rescuer has not run again yet). The
	// ResponseBody of each holds its response excerpt, as text.
	Attempts []Attempt

	// AttemptsLeft is how many attempts the policy the job was inserted
	// with still allows: zero once the delivery has ended. Runs cut by a
	// crash are not counted, as they cost no attempt.
	AttemptsLeft int

	// Reason says why an ended delivery did not succeed: the policy gave
	// up, River ran the job its MaxAttempts times, or the job was cancelled
	// (the connection is gone, invalid or blocked, someone cancelled it in
	// River, running or waiting, or a river.ErrorHandler did). Empty for a
	// delivery that succeeded or is under way.
	Reason string

	// ResentFrom is the job this one sends again ([Resend], [Recover]),
	// and ResendReason why, as the caller gave it; zero and empty for a
	// delivery's first job.
	ResentFrom   int64
	ResendReason string

	// ResentAs is the job that sends this one again, once it was resent
	// ([Resend], [Recover]); it may have been deleted by River since. Zero
	// for a job never resent.
	ResentAs int64

	// Erased reports that the delivery's personal data was erased
	// ([EraseSubject], [EraseBodies]): there is no body, and each response
	// excerpt and error text of the log reads "[erased]" (but an endpoint
	// down's), its outcomes, statuses, times and runs kept. Reason is kept,
	// but for a delivery riverhook cancelled: its reason, a text River
	// keeps, reads "[erased]".
	Erased bool
}

// Attempt is one entry of a [Delivery]'s attempt log: the attempt, and the
// River run that made it (River's attempt number, which counts runs cut by
// a crash too).
type Attempt struct {
	webhook.Attempt
	Run int
}

// DeliveryOf returns the delivery that job, a job of kind [Kind] from
// River (JobList, JobGet, an event), holds, with its attempt log. It reads
// job alone, without the database. The error says why job is not one.
func DeliveryOf(job *rivertype.JobRow) (*Delivery, error) {
	if job.Kind != Kind {
		return nil, fmt.Errorf("riverhook: job %d has kind %q, not %q", job.ID, job.Kind, Kind)
	}
	var args stored
	if err := json.Unmarshal(job.EncodedArgs, &args); err != nil {
		return nil, fmt.Errorf("riverhook: job %d's args: %w", job.ID, err)
	}
	entries, err := readLog(job)
	if err != nil {
		return nil, err
	}
	last := job.Attempt // every run but one still running has ended
	if job.State == rivertype.JobStateRunning {
		last--
	}
	entries = append(entries, interrupted(job, entries, last)...)
	d := &Delivery{JobID: job.ID, ConnectionID: args.ConnectionID, DeliveryID: args.DeliveryID, Event: args.Event,
		Status: statusOf(job), State: job.State, CreatedAt: job.CreatedAt, Attempts: make([]Attempt, len(entries)),
		ResentFrom: args.ResentFrom, ResendReason: args.ResendReason, ResentAs: args.ResentAs, Erased: args.Erased}
	for i, e := range entries {
		d.Attempts[i] = Attempt{Attempt: e.attempt(), Run: e.Run}
	}
	if last := len(d.Attempts) - 1; last >= 0 && d.Attempts[last].Kind == webhook.KindInterrupted && d.Attempts[last].Run == job.Attempt &&
		job.State != rivertype.JobStateRunning && job.AttemptedAt != nil {
		d.Attempts[last].Start = *job.AttemptedAt // the cut run's start, until a new run replaces it
	}
	if d.Status == StatusRetrying || d.Status == StatusWaiting {
		d.AttemptsLeft = max(job.MaxAttempts-MaxInterruptedRuns-attemptsMade(entries), 0)
	}
	switch job.State {
	case rivertype.JobStateAvailable, rivertype.JobStateScheduled, rivertype.JobStateRetryable:
		d.NextAt = job.ScheduledAt
	case rivertype.JobStateCancelled:
		d.Reason = cancelReason(job)
	case rivertype.JobStateDiscarded:
		made := attemptsMade(entries)
		if n := len(entries); n > 0 && entries[n-1].Kind == string(webhook.KindDown) {
			d.Reason = "riverhook: " + strings.TrimPrefix(entries[n-1].Error, "riverhook: ")
		} else if n := len(entries); n > 0 && entries[n-1].Run == job.Attempt && entries[n-1].Kind != string(webhook.KindInterrupted) &&
			entries[n-1].RetryIn == "" {
			d.Reason = fmt.Sprintf("riverhook: the policy gave up after attempt %d", made)
		} else {
			d.Reason = fmt.Sprintf("riverhook: River ran the job %d times, its MaxAttempts; %d run(s) ended without an attempt (interrupted, or the connection did not resolve)",
				job.Attempt, job.Attempt-made)
		}
	}
	return d, nil
}

// cancelReason says why job was cancelled. A cancel in River
// (client.JobCancel, River UI, EraseSubject) stamps the job's metadata with
// cancel_attempted_at and adds no error for a job that is not running, and
// "job cancelled remotely" for one that is, which that run started before:
// an error later than the stamp is a cancel of the run's own (riverhook's:
// the connection is gone, invalid or blocked), or an ErrorHandler's.
func cancelReason(job *rivertype.JobRow) string {
	stamp := cancelAttemptedAt(job)
	var last *rivertype.AttemptError
	if n := len(job.Errors); n > 0 {
		last = &job.Errors[n-1]
	}
	switch {
	case !stamp.IsZero() && (last == nil || !last.At.After(stamp)):
		return "riverhook: cancelled in River (client.JobCancel, River UI's Cancel, or EraseSubject)"
	case last == nil:
		return "riverhook: cancelled"
	}
	if text, ok := cancelledText(last.Error); ok {
		return text
	}
	return fmt.Sprintf("riverhook: cancelled by the client's ErrorHandler after run %d: %s", last.Attempt, last.Error)
}
