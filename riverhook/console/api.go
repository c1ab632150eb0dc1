package console

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/riverqueue/river/rivertype"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
)

// This file holds the JSON API, and what the pages share with it: reading
// a listing's query, a recover's form, an endpoint's health.

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v) //nolint:errcheck // the client went away
}

func writeError(w http.ResponseWriter, status int, text string) {
	writeJSON(w, status, map[string]string{"error": text})
}

// listQuery reads a listing's filters and page from q.
func listQuery(q url.Values, now time.Time) (*riverhook.ListParams, error) {
	p := &riverhook.ListParams{Event: q.Get("event"), After: q.Get("after")}
	for _, v := range q["status"] {
		for s := range strings.SplitSeq(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				p.Statuses = append(p.Statuses, riverhook.Status(s))
			}
		}
	}
	for _, s := range p.Statuses {
		if !validStatus(s) {
			return nil, fmt.Errorf("unknown status %.40q", s)
		}
	}
	slices.Sort(p.Statuses) // each once: a status repeated is one OR of the query
	p.Statuses = slices.Compact(p.Statuses)
	if !printable(p.Event) {
		// No delivery has it (riverhook refuses it too), and PostgreSQL's
		// text cannot hold a NUL: the request's error, not a 500.
		return nil, fmt.Errorf("event %.40q is not an event name", p.Event)
	}
	var err error
	if p.Since, err = timeParam(q, "since", now); err != nil {
		return nil, err
	}
	if p.Until, err = timeParam(q, "until", now); err != nil {
		return nil, err
	}
	if v := q.Get("limit"); v != "" {
		if p.Limit, err = strconv.Atoi(v); err != nil || p.Limit < 1 {
			return nil, errors.New("limit must be a positive number")
		}
	}
	if p.After != "" {
		if id, err := strconv.ParseInt(p.After, 10, 64); err != nil || id <= 0 {
			return nil, errors.New("after must be the next cursor of a page")
		}
	}
	return p, nil
}

func validStatus(s riverhook.Status) bool { return slices.Contains(riverhook.Statuses(), s) }

// timeParam reads q's name as RFC 3339 or as a duration before now, such as
// 24h; empty is the zero time.
func timeParam(q url.Values, name string, now time.Time) (time.Time, error) {
	v := q.Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s must be an RFC 3339 time or a duration such as 24h", name)
	}
	return t, nil
}

// listing is a connection's page of deliveries, as the API serves it.
type listing struct {
	ConnectionID string                   `json:"connection_id"`
	Deliveries   []*riverhook.Delivery    `json:"deliveries"`
	Next         string                   `json:"next,omitempty"`
	Counts       map[riverhook.Status]int `json:"counts"` // since the listing's since
}

func (c *console) list(r *http.Request, req request) (*listing, error) {
	// ParseQuery, not URL.Query, which drops what it cannot decode: a
	// filter asked for would be read as absent, and list every delivery.
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, &badRequest{fmt.Errorf("the parameters cannot be read: %.200s", err)}
	}
	p, err := listQuery(q, time.Now())
	if err != nil {
		return nil, &badRequest{err}
	}
	page, err := riverhook.List(r.Context(), c.client, req.conn, p)
	if err != nil {
		return nil, err
	}
	counts, err := riverhook.Count(r.Context(), c.client, c.db, req.conn, p.Since)
	if err != nil {
		return nil, err
	}
	return &listing{ConnectionID: req.conn, Deliveries: page.Deliveries, Next: page.Next, Counts: counts}, nil
}

// badRequest is an error of the request's, answered 400 with its text.
type badRequest struct{ err error }

func (e *badRequest) Error() string { return e.err.Error() }

func (c *console) apiList(w http.ResponseWriter, r *http.Request, req request) {
	l, err := c.list(r, req)
	var bad *badRequest
	switch {
	case errors.As(err, &bad):
		writeError(w, http.StatusBadRequest, bad.Error())
	case err != nil:
		c.fail(w, r, req, err)
	default:
		if l.Deliveries == nil {
			l.Deliveries = []*riverhook.Delivery{}
		}
		writeJSON(w, http.StatusOK, l)
	}
}

// deliveryJSON is a delivery with, when shown, its payload.
type deliveryJSON struct {
	*riverhook.Delivery
	Payload json.RawMessage `json:"payload,omitempty"`
}

func (d deliveryJSON) MarshalJSON() ([]byte, error) {
	b, err := d.Delivery.MarshalJSON()
	if err != nil || d.Payload == nil {
		return b, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	m["payload"] = d.Payload
	return json.Marshal(m)
}

// payload returns job's body when it is shown, and nil otherwise: without
// Options.ShowPayload, erased, or not JSON.
func (c *console) payload(job *rivertype.JobRow) json.RawMessage {
	if !c.opts.ShowPayload {
		return nil
	}
	var a riverhook.Args
	if err := json.Unmarshal(job.EncodedArgs, &a); err != nil || a.Erased || !json.Valid(a.Body) {
		return nil
	}
	return json.RawMessage(a.Body)
}

func (c *console) apiDelivery(w http.ResponseWriter, r *http.Request, req request) {
	job, d, ok := c.job(w, r, req)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, deliveryJSON{Delivery: d, Payload: c.payload(job)})
}

// resent is a resend's outcome.
type resent struct {
	job      *rivertype.JobRow // the delivery's latest job
	inserted bool              // by this request
	// again reports that job, not inserted by this request, is the resend
	// of the same delivery the same actor made less than sameResend ago:
	// this request repeats that action, as a double click's second post
	// does.
	again bool
}

// sameResend is how long a resend of a delivery by an actor is the same
// action as the resend of it that actor made before.
const sameResend = 10 * time.Second

// resend resends the request's job; status is the answer's on error. The
// resend of the connection's delivery resent last is not rate-limited: it
// inserts nothing (riverhook resends a delivery once).
func (c *console) resend(w http.ResponseWriter, r *http.Request, req request) (res resent, status int, err error) {
	row, _, ok := c.job(w, r, req)
	if !ok {
		return resent{}, 0, nil
	}
	if !c.allowed(w, r, req, actionResend, strconv.FormatInt(row.ID, 10)) {
		return resent{}, 0, nil
	}
	reason := "resent from the console by " + c.actor(r)
	res.job, res.inserted, err = riverhook.Resend(r.Context(), c.client, c.db, row.ID, reason, c.worker.InsertOptions(nil))
	switch {
	case errors.Is(err, riverhook.ErrUnderWay):
		return resent{}, http.StatusConflict, errors.New("the delivery is still under way: it can be resent once it has ended")
	case errors.Is(err, riverhook.ErrResent):
		return resent{}, http.StatusConflict, errors.New("the delivery was resent already, and that resend's log is no longer kept: it is not sent again")
	case errors.Is(err, riverhook.ErrErased):
		return resent{}, http.StatusConflict, errors.New("the delivery's body was erased: there is nothing to resend")
	case err != nil:
		return resent{}, http.StatusInternalServerError, err
	}
	if !res.inserted {
		d, err := riverhook.DeliveryOf(res.job)
		res.again = err == nil && d.ResentFrom == row.ID && d.ResendReason == reason && time.Since(res.job.CreatedAt) < sameResend
	}
	return res, http.StatusOK, nil
}

// failed answers an action that did not succeed, and reports whether it
// did not: nothing more when status is 0 (answered already, as a rate
// limit is), a logged 500, or show with the error's own status.
func (c *console) failed(w http.ResponseWriter, r *http.Request, req request, status int, err error, show func(status int, msg string)) bool {
	switch {
	case status == 0:
	case status == http.StatusInternalServerError:
		c.fail(w, r, req, err)
	case err != nil:
		show(status, err.Error())
	default:
		return false
	}
	return true
}

func (c *console) apiResend(w http.ResponseWriter, r *http.Request, req request) {
	res, status, err := c.resend(w, r, req)
	if !c.failed(w, r, req, status, err, func(status int, msg string) { writeError(w, status, msg) }) {
		writeJSON(w, http.StatusOK, map[string]any{"job_id": res.job.ID, "inserted": res.inserted})
	}
}

// recoverResult is what a recover answers: riverhook.RecoverResult's JSON,
// and whether it was a dry run.
type recoverResult struct {
	DryRun bool `json:"dry_run"`
	riverhook.RecoverResult
}

// runRecover runs the request's recover; status is the answer's on error.
func (c *console) runRecover(w http.ResponseWriter, r *http.Request, req request) (*recoverResult, int, error) {
	since, err := timeParam(url.Values{"since": {r.FormValue("since")}}, "since", time.Now())
	switch {
	case err != nil:
		return nil, http.StatusBadRequest, err
	case since.IsZero():
		return nil, http.StatusBadRequest, errors.New("since is required: the given-up deliveries since when (RFC 3339, or a duration such as 24h)")
	}
	dry, err := boolForm(r.FormValue("dry_run"))
	if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("dry_run: %w", err)
	}
	action := actionRecover
	if dry {
		action = actionDryRun
	}
	if !c.allowed(w, r, req, action, "") {
		return nil, 0, nil
	}
	res, err := riverhook.Recover(r.Context(), c.client, c.db, req.conn, riverhook.RecoverParams{Since: since,
		Reason: "recovered from the console by " + c.actor(r), DryRun: dry}, c.worker.InsertOptions(nil))
	if err != nil {
		return nil, http.StatusInternalServerError, err
	}
	out := &recoverResult{DryRun: dry, RecoverResult: *res}
	c.mu.Lock()
	c.recovers[req.conn] = recoverNote{At: time.Now(), Since: since, DryRun: dry, More: res.More, Resent: res.Resent, GivenUp: res.GivenUp}
	c.mu.Unlock()
	if out.Jobs == nil {
		out.Jobs = []int64{}
	}
	return out, http.StatusOK, nil
}

func (c *console) apiRecover(w http.ResponseWriter, r *http.Request, req request) {
	res, status, err := c.runRecover(w, r, req)
	if !c.failed(w, r, req, status, err, func(status int, msg string) { writeError(w, status, msg) }) {
		writeJSON(w, http.StatusOK, res)
	}
}

// allowed takes the turn of action for the request's connection, on
// subject, and reports whether it may run; if not, it has answered (429,
// or 500 when the turns cannot be read).
func (c *console) allowed(w http.ResponseWriter, r *http.Request, req request, action, subject string) bool {
	_, wait, ok, err := c.limits.allow(r.Context(), action, req.conn, subject)
	switch {
	case err != nil:
		c.fail(w, r, req, err)
	case !ok:
		c.tooSoon(w, r, req, wait)
	}
	return err == nil && ok
}

// test runs the request's Send Test of its event (user.identified when it
// names none), rate-limited; ok is false once it has answered. An event
// without a sample, or that the connection does not subscribe to, is
// refused (400) before a turn is taken. A test refused as busy was not
// made: it gives its turn back, so that trying again once a place is free
// is not too soon.
func (c *console) test(w http.ResponseWriter, r *http.Request, req request) (testResult, bool) {
	event := cmp.Or(r.FormValue("event"), webhook.EventUserIdentified)
	refused, err := c.refuseTest(r.Context(), req.conn, event)
	switch {
	case err != nil:
		c.fail(w, r, req, err)
		return testResult{}, false
	case refused != "":
		c.notSent(w, r, req, refused)
		return testResult{}, false
	}
	turn, wait, ok, err := c.limits.allow(r.Context(), actionTest, req.conn, "")
	switch {
	case err != nil:
		c.fail(w, r, req, err)
		return testResult{}, false
	case !ok:
		c.tooSoon(w, r, req, wait)
		return testResult{}, false
	}
	t, err := c.sendTest(r.Context(), req.conn, event)
	if errors.Is(err, riverhook.ErrBusy) {
		if err := c.limits.giveBack(r.Context(), actionTest, req.conn, turn); err != nil {
			c.logger.WarnContext(r.Context(), "console: giving back the turn of a Send Test refused as busy", "connection_id", req.conn, "error", err.Error())
		}
		c.busy(w, r, req)
		return testResult{}, false
	}
	if err != nil {
		c.fail(w, r, req, err)
		return testResult{}, false
	}
	return t, true
}

func (c *console) apiTest(w http.ResponseWriter, r *http.Request, req request) {
	t, ok := c.test(w, r, req)
	if !ok {
		return
	}
	v := map[string]any{"event": t.Event, "delivered": t.OK, "outcome": t.Outcome, "duration_ms": t.TookMs,
		"diagnosis": t.Diagnosis, "start": webhook.NewTime(t.At)}
	if t.Status != 0 {
		v["status"] = t.Status
	}
	if t.Response != "" {
		v["response"] = t.Response
	}
	writeJSON(w, http.StatusOK, v)
}

// health is an endpoint's health, as the API serves it.
type health struct {
	Endpoint string `json:"endpoint"` // its origin
	// State is "unknown" (nothing is known of it: no mark, no failure),
	// "up" (marked up: it answered), "failing" (attempts failing without a
	// connection, not yet down), "down" (deliveries wait for the
	// endpoint's probe) or "isolated" (the connection's URL connects and
	// does not answer; it alone waits).
	State     string        `json:"state"`
	Since     *webhook.Time `json:"since,omitempty"`
	NextProbe *webhook.Time `json:"next_probe,omitempty"`
	Failures  int           `json:"failures,omitempty"`
	LastKind  string        `json:"last_failure,omitempty"`
}

// healthRank orders the states: the worst known is shown.
var healthRank = map[string]int{"unknown": 0, "up": 1, "failing": 2, "down": 3, "isolated": 4}

// health returns the health of the request's connection's endpoint: the
// worst of what the marks and the serving process's Sender know of its
// origin and of its URL. The marks are read at each call, so the health
// shown follows them whether or not this process makes attempts. What the
// Sender knows counts unless a mark of the same origin or URL changed
// later: an API tier's Sender holds the down it read at its start until
// it makes an attempt, which it may never do.
func (c *console) health(r *http.Request, req request) (health, error) {
	endpoint, key, failing, err := c.worker.EndpointHealth(r.Context(), req.conn)
	if err != nil {
		return health{}, err
	}
	h := health{Endpoint: cmp.Or(endpoint, "(unparsable URL)"), State: "unknown"} // the origin alone, printable (Connection.Endpoint)
	var marks []webhook.EndpointHealth
	if c.opts.Marks != nil && endpoint != "" {
		all, err := c.opts.Marks.Endpoint(r.Context(), endpoint)
		if err != nil {
			// What this process knows, logged: "unknown" unless it
			// knows something, never a false up.
			c.logger.WarnContext(r.Context(), "console: reading the endpoint health marks; showing this process's own", "connection_id", req.conn, "error", err.Error())
		}
		for _, m := range all {
			if !m.PerURL || m.URLKey == key {
				marks = append(marks, m)
			}
		}
	}
	known := marks
	for _, e := range failing {
		if !supersededBy(e, marks) {
			known = append(known, e)
		}
	}
	for _, e := range known {
		state := "failing"
		switch {
		case e.Down && e.PerURL:
			state = "isolated"
		case e.Down:
			state = "down"
		case !e.Changed.IsZero(): // a mark: it came up, or answered
			state = "up"
		}
		if healthRank[state] <= healthRank[h.State] {
			continue
		}
		h.State, h.Failures, h.LastKind = state, e.Failures, string(e.LastFailure.Kind)
		h.Since, h.NextProbe = nil, nil
		if state != "up" {
			since := webhook.NewTime(e.Since)
			h.Since = &since
		}
		if !e.NextProbe.IsZero() {
			next := webhook.NewTime(e.NextProbe)
			h.NextProbe = &next
		}
	}
	return h, nil
}

// supersededBy reports whether a mark of own's origin or URL changed after
// own did (after its run of failures began, for one failing, not down).
func supersededBy(own webhook.EndpointHealth, marks []webhook.EndpointHealth) bool {
	at := own.Changed
	if at.IsZero() {
		at = own.Since
	}
	for _, m := range marks {
		same := !m.PerURL && !own.PerURL || m.PerURL && own.PerURL && m.URLKey == own.URLKey // a confirmation's URLKey names the URL that answered
		if same && m.Changed.After(at) {
			return true
		}
	}
	return false
}

func (c *console) apiHealth(w http.ResponseWriter, r *http.Request, req request) {
	h, err := c.health(r, req)
	if err != nil {
		c.fail(w, r, req, err)
		return
	}
	writeJSON(w, http.StatusOK, h)
}

// boolForm reads a form's yes or no: what a button or a checkbox sends
// ("on"), or a program. Anything else is an error, so that a dry run asked
// for in words the console does not know never runs for real.
func boolForm(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "", "false", "0", "off", "no":
		return false, nil
	case "true", "1", "on", "yes":
		return true, nil
	}
	return false, fmt.Errorf("want true or false, got %.20q", v)
}
