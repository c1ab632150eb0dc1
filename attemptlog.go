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
	fmt.Fprintf(&b, "%s in %v", a.outcome(), roundDuration(a.Duration))
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
			roundDuration(a.Duration), next, printable(a.ResponseBody, 60))
	}
	tw.Flush()
	switch {
	case len(r.Attempts) > 0:
		last := r.Attempts[len(r.Attempts)-1]
		buf.WriteString(last.Diagnosis() + "\n")
		var de *DeliveryError
		if last.Retry && errors.As(r.Err, &de) { // stopped while waiting for the retry
			fmt.Fprintf(&buf, "%v\n", de.Err)
		}
	case r.Err != nil:
		fmt.Fprintf(&buf, "not sent: %v\n", r.Err)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// printable returns at most max bytes of body on one line, with control
// characters replaced: a receiver's answer is not trusted to be text.
func printable(body []byte, max int) string {
	body = bytes.TrimSpace(body)
	cut := len(body) > max
	if cut {
		body = body[:max]
	}
	s := strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f || r == '\uFFFD' {
			return '.'
		}
		return r
	}, strings.ToValidUTF8(string(body), "."))
	if cut {
		s += "…"
	}
	return s
}

// Diagnosis describes the attempt in one sentence a person can act on: what
// happened and, for a failure, what to check.
func (a Attempt) Diagnosis() string {
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
