package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"

	"github.com/signedhook/webhook/internal/redact"
)

// This file holds how a failed attempt is classified: its FailureKind, and
// the printable, scrubbed error that names the endpoint by its origin alone.

// classify returns the kind and error of an attempt with answer resp or
// transport error err. The error's text names the endpoint by its origin
// alone (redactURL), shows none of the connection's secret texts (scrub: a
// status line's reason phrase, a Location header and a certificate's names
// are the receiver's text, which may echo them) and is printable.
func classify(ctx context.Context, resp *http.Response, err error, rawURL string, scrub func(string) string) (FailureKind, error) {
	if err == nil {
		code := resp.StatusCode
		switch {
		case code >= 200 && code < 300:
			return KindNone, nil
		case code >= 300 && code < 400:
			msg := "webhook: receiver answered " + answerText(resp.Status, scrub) + "; redirects are not followed"
			if loc := resp.Header.Get("Location"); loc != "" {
				msg += " (Location: " + answerText(redact.URL(loc), scrub) + ")"
			}
			return KindRedirect, errors.New(msg)
		}
		msg := "webhook: receiver answered " + answerText(resp.Status, scrub)
		if code == http.StatusGone {
			return KindStatus, &goneError{msg}
		}
		return KindStatus, errors.New(msg)
	}
	cause := err
	var ue *url.Error
	if errors.As(err, &ue) {
		cause = ue.Err
	}
	kind := KindOther
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	var recordErr tls.RecordHeaderError
	var alertErr tls.AlertError
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalidCert x509.CertificateInvalidError
	switch {
	case errors.Is(err, ErrBlockedDestination):
		kind = KindBlocked
	case errors.As(err, new(*proxyUnreachableError)):
		kind = KindUnreachable
	case ctx.Err() != nil:
		kind = KindCanceled
	case errors.As(err, &dnsErr):
		kind = KindDNS
	case errors.As(err, &certErr), errors.As(err, &recordErr), errors.As(err, &alertErr),
		errors.As(err, &unknownCA), errors.As(err, &hostErr), errors.As(err, &invalidCert),
		// net/http replaces the RecordHeaderError of a plain-HTTP answer by
		// a string error.
		strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		kind = KindTLS
	case isTimeout(err):
		kind = KindTimeout
	case errors.Is(err, syscall.ECONNREFUSED):
		kind = KindRefused
	case errors.Is(err, errNotResent), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		// net/http's HTTP/2 stream error (RST_STREAM) is not exported.
		strings.HasPrefix(cause.Error(), "stream error: "):
		kind = KindReset
	}
	detail := answerText(cause.Error(), scrub)
	msg := "webhook: " + kindText[kind] + " " + redact.URL(rawURL) + ": " + detail
	return kind, &attemptError{msg: redact.Printable(scrub(msg)), detail: detail, cause: cause}
}

// maxAnswerRunes bounds what an attempt's error quotes of a text the
// receiver chose (a status line, a Location, GOAWAY's debug data, which
// net/http quotes whole, a control byte as four characters): as much as a
// line of a log, where the answer's body has its excerpt.
const maxAnswerRunes = 1 << 10

// answerText returns s, which holds a receiver's text, without the
// connection's secret texts (scrub, over the whole of s: a cut splits
// none), printable and cut after maxAnswerRunes.
func answerText(s string, scrub func(string) string) string {
	return redact.PrintableCut(scrub(s), maxAnswerRunes)
}

// attemptError is the error of an attempt that failed without an answer:
// printable text, and the cause for errors.Is and errors.As. detail is the
// cause's text made as printable and as scrubbed as msg, for Diagnosis:
// the cause's own text is the receiver's too (a certificate's names).
type attemptError struct {
	msg    string
	detail string
	cause  error
}

func (e *attemptError) Error() string { return e.msg }

func (e *attemptError) Unwrap() error { return e.cause }

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}

var kindText = map[FailureKind]string{
	KindBlocked:     "refused to connect to",
	KindCanceled:    "canceled request to",
	KindDNS:         "cannot resolve host of",
	KindTLS:         "TLS failed with",
	KindTimeout:     "timed out waiting for",
	KindRefused:     "connection refused by",
	KindReset:       "connection reset by",
	KindOther:       "request failed to",
	KindUnreachable: "the egress proxy could not reach",
}

// ErrEndpointGone is matched by the error of an attempt answered 410 Gone:
// the receiver says the endpoint is gone for good, as Standard Webhooks
// has it. The Sender does not retry it, whatever the policy; the service
// decides what to do with the connection (disable it, tell the customer):
// the library keeps no state of its own.
var ErrEndpointGone = errors.New("webhook: endpoint gone")

// goneError is a 410 answer's error: its text as any status's, matching
// ErrEndpointGone.
type goneError struct{ msg string }

func (e *goneError) Error() string        { return e.msg }
func (e *goneError) Is(target error) bool { return target == ErrEndpointGone }
