package webhooktest

import (
	"bufio"
	"errors"
	"net"
	"net/http"
)

// statusRecorder notes the status of a Handler's answer. It is an
// http.Flusher and an http.Hijacker, as net/http's writer is. Unwrap lets
// http.NewResponseController reach the connection's writer (Flush,
// deadlines), as the Handler would without it; Hijack notes that the
// Handler took the connection.
type statusRecorder struct {
	http.ResponseWriter
	status   int  // the first final status written; 0 until then
	flushed  bool // the status is on the wire
	hijacked bool // the Handler took the connection: what it wrote there is not known
}

// flushedStatus returns the status that reached the sender, as far as the
// recorder knows: one flushed, not one still in net/http's buffer.
func (r *statusRecorder) flushedStatus() int {
	if r.hijacked || !r.flushed {
		return 0
	}
	return r.status
}

// Hijack takes the connection, for http.NewResponseController and the
// http.Hijacker interface.
func (r *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, buf, err := http.NewResponseController(r.ResponseWriter).Hijack()
	if err == nil {
		r.hijacked = true
	}
	return conn, buf, err
}

func (r *statusRecorder) WriteHeader(code int) {
	informational := code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols
	if r.status == 0 && !informational {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(p)
}

// FlushError flushes the writer underneath, for http.NewResponseController:
// a flush before any status answers 200.
func (r *statusRecorder) FlushError() error {
	err := http.NewResponseController(r.ResponseWriter).Flush()
	if !errors.Is(err, http.ErrNotSupported) {
		if r.status == 0 {
			r.status = http.StatusOK
		}
		r.flushed = true
	}
	return err
}

// Flush is FlushError, for a Handler that asserts http.Flusher, as the
// ResponseWriter net/http gives it is one.
func (r *statusRecorder) Flush() { r.FlushError() }

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
