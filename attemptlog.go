package webhook

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"
)

// String returns the attempt on one line for people, such as
// "attempt 1: 503 status in 3.2ms, retry in 1s" or
// "attempt 3: 200 delivered in 610µs".
func (a Attempt) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "attempt %d: ", a.N)
	if a.StatusCode != 0 {
		fmt.Fprintf(&b, "%d ", a.StatusCode)
	}
	b.WriteString(a.outcome())
	if a.Kind != KindInterrupted { // how long it ran is unknown
		fmt.Fprintf(&b, " in %v", roundDuration(a.Duration))
	}
	if a.Retry {
		fmt.Fprintf(&b, ", retry in %v", a.RetryIn)
	}
	return b.String()
}

// outcome is "delivered" for a success, the failure kind otherwise.
func (a Attempt) outcome() string {
	if a.Kind == KindNone {
		return "delivered"
	}
	return string(a.Kind)
}

// WriteTable writes the delivery-attempt log to w for people: a header line,
// one aligned row per attempt (number, X-Service-Timestamp, status, outcome,
// duration, next step, the start of the answer's body), then the last
// attempt's [Attempt.Diagnosis], or the error when nothing was sent.
func (r *Result) WriteTable(w io.Writer) error {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "delivery-attempt log for %q:\n", r.Connection)
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
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%v\t%s\t%s\n", a.N, a.Timestamp, status, a.outcome(),
			roundDuration(a.Duration), next, printable(string(a.ResponseBody), 60))
	}
	tw.Flush()
	switch {
	case len(r.Attempts) > 0:
		last := r.Attempts[len(r.Attempts)-1]
		buf.WriteString(last.Diagnosis() + "\n")
		var de *DeliveryError
		if last.Retry && errors.As(r.Err, &de) { // stopped while waiting for the retry
			buf.WriteString(printable(de.Err.Error(), 0) + "\n")
		}
	case r.Err != nil:
		buf.WriteString("not sent: " + printable(r.Err.Error(), 0) + "\n")
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// ResponseText returns the start of the answer's body, ResponseBody, as one
// line of text that is safe to print on a terminal and to store in a text
// column: valid UTF-8 without any control or format character. Line breaks
// and other white space become spaces; every other control or format
// character (C0 and C1 controls, DEL, bidi overrides and isolates,
// zero-width characters, NUL), every unassigned or private-use code point
// and every byte that is not UTF-8 becomes U+FFFD; the ends are trimmed. It
// is empty when no body came.
func (a Attempt) ResponseText() string { return printable(string(a.ResponseBody), 0) }

// printable returns s as ResponseText describes, cut after maxRunes runes
// with "…" when it is longer and maxRunes is positive. A receiver's answer,
// its status line and its certificate's names are not trusted to be text.
func printable(s string, maxRunes int) string {
	var b strings.Builder
	b.Grow(len(s))
	n := 0
	for _, r := range strings.TrimSpace(s) {
		if maxRunes > 0 && n == maxRunes {
			b.WriteString("…")
			break
		}
		n++
		switch {
		case unicode.IsSpace(r):
			b.WriteByte(' ')
		case !unicode.IsPrint(r): // invalid bytes decode as U+FFFD, which is printable
			b.WriteRune(utf8.RuneError)
		default:
			b.WriteRune(r)
		}
	}
	return strings.TrimSpace(b.String())
}

// Diagnosis describes the attempt in one sentence a person can act on: what
// happened and, for a failure, what to check. Text that came from the
// receiver is made printable as [Attempt.ResponseText] describes.
func (a Attempt) Diagnosis() string { return printable(a.diagnosis(), 0) }

func (a Attempt) diagnosis() string {
	took := roundDuration(a.Duration)
	switch a.Kind {
	case KindNone:
		return fmt.Sprintf("delivered: the endpoint answered %d in %v", a.StatusCode, took)
	case KindInvalid:
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
		return fmt.Sprintf("failed: the TLS handshake failed (%v); the endpoint needs a valid certificate for its host name", errors.Unwrap(a.Err))
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
	case KindInterrupted:
		return "interrupted: the process making the attempt stopped before it ended (a crash or a kill); it was run again and cost no retry"
	}
	return fmt.Sprintf("failed: %v", a.Err)
}

// roundDuration keeps two or three significant digits: 3.2ms, 410µs, 1.25s.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond)
	}
	return d.Round(10 * time.Microsecond)
}
