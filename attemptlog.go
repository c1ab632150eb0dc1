package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/signedhook/webhook/internal/human"
	"github.com/signedhook/webhook/internal/redact"
)

// This file holds the delivery-attempt log, Attempt, Result, FailureKind
// and DeliveryError: how they are printed for people, and their JSON shape,
// which a dashboard serves as it is.

// FailureKind says why an attempt failed, so a program can switch on it.
// The empty kind, KindNone, is a success.
type FailureKind string

// Failure kinds.
const (
	KindNone     FailureKind = ""         // the receiver answered 2xx
	KindInvalid  FailureKind = "invalid"  // the connection or the event is invalid; nothing was sent
	KindSkipped  FailureKind = "skipped"  // the connection does not subscribe to the event; nothing was sent
	KindBlocked  FailureKind = "blocked"  // the address is not public; nothing was sent
	KindDNS      FailureKind = "dns"      // the host name did not resolve
	KindRefused  FailureKind = "refused"  // the connection was refused
	KindReset    FailureKind = "reset"    // the connection (or an HTTP/2 stream) was reset or closed early
	KindTimeout  FailureKind = "timeout"  // no complete answer within the attempt timeout
	KindTLS      FailureKind = "tls"      // the TLS handshake or certificate failed
	KindRedirect FailureKind = "redirect" // a 3xx answer: redirects are never followed
	KindStatus   FailureKind = "status"   // another non-2xx answer
	KindCanceled FailureKind = "canceled" // the caller's context was done
	KindOther    FailureKind = "other"    // any other failure

	// KindUnreachable is an attempt whose egress proxy answered that it
	// could not reach the endpoint (502, 503 or 504 to CONNECT): like a
	// refused connection, it counts against the endpoint's health.
	KindUnreachable FailureKind = "unreachable"

	// KindDown is an attempt that was not sent because its endpoint is
	// down (SenderOptions.Health): its error matches ErrEndpointDown.
	// Sender.Attempt returns one, with the wait until the endpoint may be
	// tried again (spread over a probe interval, so that a queue's backlog
	// does not come back at one instant); Send and SendAll return the error
	// alone.
	KindDown FailureKind = "down"

	// KindInterrupted is an attempt that ended before its outcome was
	// known: its process died (a crash, a SIGKILL), or a durable queue cut
	// it when its process lost its hold on the connection's place in
	// flight. The receiver may have had it. Only a durable queue, which
	// runs the delivery again, logs one; it costs no retry.
	KindInterrupted FailureKind = "interrupted"
)

// Attempt is one try of a delivery: an entry of the delivery-attempt log.
type Attempt struct {
	N            int           // 1 for the first attempt
	Start        time.Time     // when it was signed and sent
	Duration     time.Duration // until the answer was read, or the failure
	Timestamp    int64         // the X-Service-Timestamp it was signed with (Unix ms)
	StatusCode   int           // the receiver's status; 0 when none came
	Err          error         // nil on success; otherwise why it failed
	Kind         FailureKind   // KindNone on success
	ResponseBody []byte        // at most the first 4 KiB of the answer's body, without the connection's secrets
	Retry        bool          // whether a retry was scheduled (Send) or is due (Sender.Attempt)
	RetryIn      time.Duration // the wait before that retry; 0 when Retry is false
	Probe        bool          // the probe of an endpoint held back (HealthOptions), which found it still held back: no connection, or no answer
}

// OK reports whether the attempt succeeded: a 2xx answer.
func (a Attempt) OK() bool { return a.Err == nil }

// Result is the delivery-attempt log of one delivery to one connection.
type Result struct {
	ConnectionName string    // the connection's Name
	Attempts       []Attempt // in order; empty when the connection was invalid
	Err            error     // nil when the last attempt succeeded; see Sender.Send
}

// DeliveryError is the error of a delivery whose every attempt failed, or
// that was stopped between attempts. It holds the whole attempt log.
type DeliveryError struct {
	ConnectionName string    // the connection's Name
	Attempts       []Attempt // every attempt made, in order
	Err            error     // the last cause: the last attempt's error, or the context's
}

// Error says how many attempts were made and the last cause.
func (e *DeliveryError) Error() string {
	return fmt.Sprintf("webhook: delivery to %q failed after %d attempt(s): %v", e.ConnectionName, len(e.Attempts), e.Err)
}

// Unwrap returns the last cause.
func (e *DeliveryError) Unwrap() error { return e.Err }

// String returns the attempt on one line for people, such as
// "attempt 1: 503 status in 3.2ms, retry in 1s" or
// "attempt 3: 200 delivered in 610µs".
func (a Attempt) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "attempt %d: ", a.N)
	if a.StatusCode != 0 {
		fmt.Fprintf(&b, "%d ", a.StatusCode)
	}
	b.WriteString(string(a.Outcome()))
	if a.Kind != KindInterrupted { // how long it ran is unknown
		fmt.Fprintf(&b, " in %v", human.Duration(a.Duration))
	}
	if a.Retry {
		fmt.Fprintf(&b, ", retry in %v", a.RetryIn)
	}
	return b.String()
}

// WriteTable writes the delivery-attempt log to w for people: a header line,
// one aligned row per attempt (number, X-Service-Timestamp, status, outcome,
// duration, next step, the start of the answer's body), then the last
// attempt's [Attempt.Diagnosis], or the error when nothing was sent.
func (r *Result) WriteTable(w io.Writer) error {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "delivery-attempt log for %q:\n", r.ConnectionName)
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tX-Service-Timestamp\tstatus\toutcome\ttook\tnext\tresponse")
	for _, a := range r.Attempts {
		next := "-"
		if a.Retry {
			next = "retry in " + a.RetryIn.String()
		}
		status := "-"
		if a.StatusCode != 0 {
			status = fmt.Sprint(a.StatusCode)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%v\t%s\t%s\n", a.N, a.Timestamp, status, a.Outcome(),
			human.Duration(a.Duration), next, redact.PrintableCut(string(a.ResponseBody), 60))
	}
	tw.Flush()
	switch {
	case len(r.Attempts) > 0:
		last := r.Attempts[len(r.Attempts)-1]
		buf.WriteString(last.Diagnosis() + "\n")
		var de *DeliveryError
		if last.Retry && errors.As(r.Err, &de) { // stopped while waiting for the retry
			buf.WriteString(redact.Printable(de.Err.Error()) + "\n")
		}
	case r.Err != nil:
		buf.WriteString("not sent: " + redact.Printable(r.Err.Error()) + "\n")
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// ResponseText returns the start of the answer's body, ResponseBody, as one
// line of text that is safe to print on a terminal and to store in a text
// column: valid UTF-8 without any control or format character. Line breaks
// and other white space become spaces; every other control or format
// character (C0 and C1 controls, DEL, bidi overrides and isolates,
// zero-width characters, NUL), every character that shows nothing
// (variation selectors, Hangul fillers, the combining grapheme joiner),
// every unassigned or private-use code point and every byte that is not
// UTF-8 becomes U+FFFD; the ends are trimmed. It
// is empty when no body came.
func (a Attempt) ResponseText() string { return redact.Printable(string(a.ResponseBody)) }

// Diagnosis describes the attempt in one sentence a person can act on: what
// happened and, for a failure, what to check. Text that came from the
// receiver is made printable as [Attempt.ResponseText] describes.
func (a Attempt) Diagnosis() string { return redact.Printable(a.diagnosis()) }

func (a Attempt) diagnosis() string {
	took := human.Duration(a.Duration)
	switch a.Kind {
	case KindNone:
		return fmt.Sprintf("delivered: the endpoint answered %d in %v", a.StatusCode, took)
	case KindInvalid, KindSkipped:
		return fmt.Sprintf("not sent: %v", a.Err)
	case KindBlocked:
		return "not sent: the URL's host resolves to a private or otherwise non-public address, which deliveries never reach"
	case KindDNS:
		return "failed: the URL's host name does not resolve; check its spelling and DNS"
	case KindRefused:
		return "failed: the connection was refused; check that the server listens on that port and that the firewall admits incoming requests"
	case KindReset:
		return "failed: the server closed the connection before answering; check the server's logs"
	case KindTLS:
		return fmt.Sprintf("failed: the TLS handshake failed (%s); the endpoint needs a valid certificate for its host name", failureDetail(a.Err))
	case KindTimeout:
		return fmt.Sprintf("failed: no answer within %v; answer within 5 seconds and do heavy work in the background", took)
	case KindRedirect:
		return fmt.Sprintf("failed: %v; configure the final URL", a.Err)
	case KindStatus:
		if a.StatusCode == http.StatusUnauthorized || a.StatusCode == http.StatusForbidden {
			return fmt.Sprintf("failed: the endpoint answered %d; check that it verifies with this connection's secret, over the raw body", a.StatusCode)
		}
		return fmt.Sprintf("failed: the endpoint answered %d in %v; any 2xx status means success", a.StatusCode, took)
	case KindCanceled:
		return "not completed: the request was canceled"
	case KindUnreachable:
		return fmt.Sprintf("failed: %v; the egress proxy could not reach the endpoint: check that it is up", a.Err)
	case KindDown:
		if errors.Is(a.Err, ErrEndpointNotAnswering) {
			return "not sent: the URL connects but does not answer, its last attempts timed out; it is probed, and deliveries go again once it answers"
		}
		return "not sent: the endpoint is down, its last attempts could not connect; it is probed, and deliveries go again once it answers"
	case KindInterrupted:
		return "interrupted: the process making the attempt stopped (a crash or a kill), or lost its place in flight, before it ended; it was run again and cost no retry"
	}
	return fmt.Sprintf("failed: %v", a.Err)
}

// failureDetail returns the cause's text of err, an attempt's error: as
// scrubbed as err's own text, never the raw cause, whose text came in part
// from the receiver. An error read back from a stored log is its text.
func failureDetail(err error) string {
	var ae *attemptError
	switch {
	case errors.As(err, &ae):
		return ae.detail
	case err != nil:
		return err.Error()
	}
	return "no detail"
}

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
