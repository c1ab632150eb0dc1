package console

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/signedhook/webhook/riverhook"
)

// This file holds the console's errors: in the API, {"error": "..."} in
// JSON; elsewhere, a page.

// isAPI reports whether r is the JSON API's, answered in JSON.
func isAPI(r *http.Request) bool {
	return r.URL.Path == "/api" || strings.HasPrefix(r.URL.Path, "/api/")
}

// routed serves mux, answering what none of its routes takes as the
// console answers its own errors (JSON in the API, a page elsewhere)
// rather than in net/http's plain text: 404, or 405 with Allow.
func (c *console) routed(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		// No route: the mux's 404 or 405, or its redirect to a clean path.
		p := &statusOnly{header: http.Header{}}
		h.ServeHTTP(p, r)
		req := request{api: isAPI(r)}
		switch p.status {
		case http.StatusNotFound:
			c.notFound(w, r, req)
		case http.StatusMethodNotAllowed:
			w.Header().Set("Allow", p.header.Get("Allow"))
			if req.api {
				writeError(w, http.StatusMethodNotAllowed, "method not allowed: "+p.header.Get("Allow")+" only")
				return
			}
			c.errorPage(w, r, http.StatusMethodNotAllowed, "Not allowed", "This page does not take that request.", "")
		default:
			mux.ServeHTTP(w, r)
		}
	})
}

// statusOnly is a ResponseWriter that keeps the status and the header, and
// drops the body.
type statusOnly struct {
	header http.Header
	status int
}

func (p *statusOnly) Header() http.Header { return p.header }
func (p *statusOnly) WriteHeader(status int) {
	if p.status == 0 {
		p.status = status
	}
}
func (p *statusOnly) Write(b []byte) (int, error) {
	p.WriteHeader(http.StatusOK)
	return len(b), nil
}

// crossOrigin answers a state-changing request that
// http.CrossOriginProtection refused: 403.
func (c *console) crossOrigin(w http.ResponseWriter, r *http.Request) {
	const msg = "a cross-origin request is refused: act from the console's own pages"
	if isAPI(r) {
		writeError(w, http.StatusForbidden, msg)
		return
	}
	c.errorPage(w, r, http.StatusForbidden, "Refused", "The request came from another site, and was refused. Use the buttons of the console's own pages.", "")
}

func (c *console) notFound(w http.ResponseWriter, r *http.Request, req request) {
	if req.api {
		writeError(w, http.StatusNotFound, "not found")
		return
	}
	c.errorPage(w, r, http.StatusNotFound, "Not found", "There is no such page.", "")
}

// badRequest answers 400 with msg, which says what is wrong with the
// request.
func (c *console) badRequest(w http.ResponseWriter, r *http.Request, req request, msg string) {
	if req.api {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	c.errorPage(w, r, http.StatusBadRequest, "Bad request", msg, connOf(req.conn).Path)
}

// fail answers 500, logging err: its text may name what a customer must not
// read.
func (c *console) fail(w http.ResponseWriter, r *http.Request, req request, err error) {
	if errors.Is(err, riverhook.ErrConnectionGone) { // the customer's to read: nothing failed
		const msg = "This connection no longer exists: its delivery log is kept, but nothing can be sent to it."
		if req.api {
			writeError(w, http.StatusGone, msg)
			return
		}
		c.errorPage(w, r, http.StatusGone, "Connection gone", msg, connOf(req.conn).Path)
		return
	}
	c.logger.ErrorContext(r.Context(), "console: answering 500", slog.String("path", r.URL.Path), slog.String("error", err.Error()))
	if req.api {
		writeError(w, http.StatusInternalServerError, "internal error")
		return
	}
	c.errorPage(w, r, http.StatusInternalServerError, "Something went wrong", "The delivery log could not be read. Try again in a moment.", "")
}

// tooSoon answers 429, with Retry-After in whole seconds.
func (c *console) tooSoon(w http.ResponseWriter, r *http.Request, req request, wait time.Duration) {
	secs := int((wait + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
	if req.api {
		writeError(w, http.StatusTooManyRequests, fmt.Sprintf("too soon: try again in %d s", max(secs, 1)))
		return
	}
	c.errorPage(w, r, http.StatusTooManyRequests, "Too soon", fmt.Sprintf("That was done a moment ago for this connection. Try again in %d seconds.", max(secs, 1)), connOf(req.conn).Path)
}

// busy answers a Send Test that would pass the connection's bound of
// attempts in flight (riverhook.ErrBusy): 503, to try again shortly.
func (c *console) busy(w http.ResponseWriter, r *http.Request, req request) {
	w.Header().Set("Retry-After", "5")
	const msg = "The endpoint has as many deliveries in flight as its limit allows; a test would pass it. Try again in a few seconds."
	if req.api {
		writeError(w, http.StatusServiceUnavailable, msg)
		return
	}
	c.errorPage(w, r, http.StatusServiceUnavailable, "Busy", msg, connOf(req.conn).Path)
}

// notSent answers a Send Test the console does not send, an event without
// a sample or that the connection does not subscribe to: 400, with msg,
// which names the event.
func (c *console) notSent(w http.ResponseWriter, r *http.Request, req request, msg string) {
	if req.api {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	c.errorPage(w, r, http.StatusBadRequest, "Not sent", msg, connOf(req.conn).Path)
}
