package webhook

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"time"
)

// This file holds how a Verifier hands a delivery to its handler once per
// signature: the claim before the handler, the outcome recorded after, and
// the status writer that tells the outcome; replay.go holds the store.

// serveOnce hands the authentic delivery d to serve unless its signature
// was handled (a copy is acknowledged) or is being handled (a copy is asked
// to come back). The outcome is recorded when serve returns: handled on a
// 2xx answer; otherwise, or when serve panics, forgotten, so that a copy is
// handled.
func (v *Verifier) serveOnce(sw *statusWriter, r *http.Request, d *signed, body []byte, serve func(http.ResponseWriter, []byte)) {
	w := sw.w
	state, err := v.claim(r.Context(), d)
	switch {
	case err != nil:
		v.refuse(w, r, err)
		return
	case state == ReplayHandling:
		v.refuse(w, r, fmt.Errorf("%w: a copy of this delivery (the same signature) is being handled; retry once it has an outcome", ErrInProgress))
		return
	case state != ReplayUnseen && state != ReplayHandling && state != ReplayHandled:
		v.refuse(w, r, fmt.Errorf("%w: Claim answered %v, which is no ReplayState", ErrReplayStore, state))
		return
	case state == ReplayHandled:
		if v.logger != nil { // nil only in a zero Verifier
			v.logger.LogAttrs(r.Context(), slog.LevelInfo, "webhook: duplicate delivery acknowledged; it was handled before",
				slog.String("remote", r.RemoteAddr))
		}
		writeAck(w)
		return
	}
	ended := false
	defer func() { v.settle(r.Context(), d, ended && sw.succeeded()) }()
	serve(sw, body)
	ended = true
}

// statusWriter records the status a handler answers, for serveOnce: a
// view of the request's serving, whose body's mark tells the delivery
// claimed for the handler (see recordedOutside). Unwrap lets
// http.ResponseController reach the writer underneath.
type statusWriter serving

func (w *statusWriter) Header() http.Header { return w.w.Header() }

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.w.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.w.Write(p)
}

// Flush flushes the writer underneath, if it can: a flush before any
// status sends 200. A writer that cannot flush sent nothing, and the status
// is still the handler's to choose.
func (w *statusWriter) Flush() {
	err := http.NewResponseController(w.w).Flush()
	if w.status == 0 && !errors.Is(err, http.ErrNotSupported) {
		w.status = http.StatusOK
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.w }

// succeeded reports whether the answer is a 2xx: a handler that wrote
// nothing is answered 200 by net/http.
func (w *statusWriter) succeeded() bool { return w.status == 0 || w.status >= 200 && w.status < 300 }

// The Verifier's side: the store it was given, or its own memory store by
// the fast path.

// replayTTL is how long the entry of a delivery with timestamp ts (Unix
// ms), verified at now with tolerance tol, lives: until ts leaves the
// window, which checkWindow accepts at an age of exactly tol.
func replayTTL(ts int64, now time.Time, tol time.Duration) time.Duration {
	ms := ts + tol.Milliseconds() + 1 - now.UnixMilli() // cannot overflow: ts has at most 18 digits
	if ms > int64(math.MaxInt64/time.Millisecond) {
		return math.MaxInt64 // a Tolerance of centuries: the entry outlives the process
	}
	return time.Duration(ms) * time.Millisecond
}

// checkReplay records the accepted delivery d as handled, and refuses it
// when it was recorded before: Verify's rule.
func (v *Verifier) checkReplay(ctx context.Context, d *signed) error {
	ttl := replayTTL(d.ts, d.now, d.tol)
	var added bool
	if v.mem != nil {
		k, sh, index, now := v.mem.delivery(&d.sig, d.ts)
		added = sh.claim(k, index, now, newStamp(expiryAt(now, ttl), false)) == ReplayUnseen
	} else {
		var err error
		added, err = v.store.Add(ctx, hex.EncodeToString(d.sig[:]), ttl)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrReplayStore, err)
		}
	}
	if !added {
		return fmt.Errorf("%w: this signature was accepted before, within the window; the sender signs every attempt afresh, so this is a copy", ErrReplayed)
	}
	return nil
}

// claim claims the delivery d for its handler, and returns what its
// signature held: ReplayUnseen when the handler is to run.
func (v *Verifier) claim(ctx context.Context, d *signed) (ReplayState, error) {
	lease := min(v.lease, replayTTL(d.ts, d.now, d.tol))
	if v.mem != nil {
		k, sh, index, now := v.mem.delivery(&d.sig, d.ts)
		d.claimed = now
		return sh.claim(k, index, now, newStamp(expiryAt(now, lease), true)), nil
	}
	st, err := v.store.Claim(ctx, hex.EncodeToString(d.sig[:]), lease)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrReplayStore, err)
	}
	return st, nil
}

// settle records the outcome of d's handler: handled, so that a copy is
// acknowledged, or released, so that a copy is handled. ctx is the
// request's, which may be over by now: the outcome is kept all the same.
func (v *Verifier) settle(ctx context.Context, d *signed, handled bool) {
	ttl := replayTTL(d.ts, d.now, d.tol)
	if v.mem != nil {
		// At the claim's time, not the store's clock again: the entry
		// handled expires as the window ends (ttl is from verification),
		// not a handler's time later, and a clock read is saved.
		k, sh, index := v.mem.at(&d.sig, d.ts)
		now := d.claimed
		if handled {
			sh.complete(k, index, now, newStamp(expiryAt(now, ttl), false))
		} else {
			sh.release(k, index, now)
		}
		return
	}
	ctx = context.WithoutCancel(ctx)
	key := hex.EncodeToString(d.sig[:])
	var err error
	if handled {
		err = v.store.Complete(ctx, key, ttl)
	} else {
		err = v.store.Release(ctx, key)
	}
	if err != nil && v.logger != nil { // nil only in a zero Verifier
		v.logger.LogAttrs(ctx, slog.LevelError, "webhook: cannot record a delivery's outcome in the replay store",
			slog.Bool("handled", handled), slog.String("error", err.Error()))
	}
}
