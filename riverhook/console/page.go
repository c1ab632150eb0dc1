package console

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf16"

	"github.com/riverqueue/river"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/riverhook/internal/human"
)

// This file holds the HTML pages, server-rendered with html/template (which
// escapes what receivers answered), and the forms' redirects.

// common is what every page's layout reads.
type common struct {
	Base  string // the relative path back to where the console is mounted, such as "../../"
	Title string
	Brand string // Options.Title: the bar's
}

type errorPage struct {
	common
	Text string
	Back string // the page to go back to, under the mount; empty for none
}

func (c *console) errorPage(w http.ResponseWriter, r *http.Request, status int, title, text, back string) {
	c.render(w, r, status, "error.html", errorPage{common: c.common(r, title), Text: text, Back: back})
}

type indexPage struct {
	common
	Connections []connLink
}

// connLink is a connection as a page links to it: its id, the name the
// service gives it (Options.ConnectionNames), if any, and its page.
type connLink struct{ ID, Name, Path string }

// Shown is the connection's name, or its id when it has none.
func (l connLink) Shown() string { return cmp.Or(l.Name, l.ID) }

// common returns what every page of r shows, titled title.
func (c *console) common(r *http.Request, title string) common {
	return common{Base: base(r), Title: human.Printable(title), Brand: c.title()}
}

func (c *console) title() string { return cmp.Or(c.opts.Title, DefaultTitle) }

// names returns the names the service gives ids, none when it gives none
// or fails (logged: the ids show instead).
func (c *console) names(r *http.Request, ids []string) map[string]string {
	if c.opts.ConnectionNames == nil || len(ids) == 0 {
		return nil
	}
	names, err := c.opts.ConnectionNames(r, ids)
	if err != nil {
		c.logger.WarnContext(r.Context(), "console: the connections' names", "error", err.Error())
		return nil
	}
	return names
}

// named returns the link of connection id, with its name.
func (c *console) named(r *http.Request, id string) connLink {
	l := connOf(id)
	l.Name = c.names(r, []string{id})[id]
	return l
}

type connectionPage struct {
	common
	Conn      connLink
	Health    health
	HealthOK  bool
	Rows      []row
	Counts    []count
	Filters   []filter // by status
	Periods   []filter // by time
	Older     string   // the next page's link, or empty
	Tests     []string // the events a Send Test may send
	Test      *testResult
	Recovered *recoverNote
	Charts    []chart
	Life      *riverhook.ConnectionState // nil when it cannot be read
	Kept      *riverhook.EnableResult    // a failing or disabled connection's Enable, counted
	History   []riverhook.NoticeArgs     // the latest changes of its state, newest first
}

type count struct {
	Status riverhook.Status
	N      int
}

type filter struct {
	Label, Link string
	On          bool
}

// row is a delivery in its connection's list.
type row struct {
	JobID       int64
	Link        string
	Status      riverhook.Status
	Event       string
	Created     time.Time
	LastAnswer  string
	LastAt      time.Time
	Attempts    int
	Interrupted bool
	NextAt      time.Time
}

type deliveryPage struct {
	common
	Conn     connLink
	D        *riverhook.Delivery
	Attempts []attemptRow
	Payload  string // indented JSON, with Options.ShowPayload
	Done     string // the resend just made: "resent" or "pending"

	// ResendKept reports that the job D was resent as (D.ResentAs) is still
	// kept: its page can be linked.
	ResendKept bool
}

type attemptRow struct {
	N, Run      int
	Outcome     string
	Answer      string
	Start       time.Time
	Took        time.Duration
	Response    string
	Diagnosis   string
	RetryIn     time.Duration
	Retry       bool
	Interrupted bool
	Probe       bool // a probe of the down endpoint that found it still down
}

var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"jt": func(t *webhook.Time) time.Time {
		if t == nil {
			return time.Time{}
		}
		return t.Time
	},
	"iso":  func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
	"took": func(d time.Duration) string { return human.Duration(d).String() },
	"wait": func(d time.Duration) string {
		s := d.Round(time.Second).String()
		if d >= time.Minute {
			s = strings.TrimSuffix(strings.TrimSuffix(s, "0s"), "0m")
		}
		return s
	},
	"plain": func(s string) string { return human.Printable(strings.TrimPrefix(s, "riverhook: ")) },
	// text is what a page shows of a text the service, a customer or a
	// receiver chose (a name, an id, an event): printable, as the JSON API
	// makes it, with no control character nor bidi override to reorder what
	// a person reads.
	"text": human.Printable,
	"word": func(s riverhook.Status) string { return strings.ReplaceAll(string(s), "_", " ") },
}

// base returns the relative path from r's page to where the console is
// mounted: it works under any prefix http.StripPrefix took away.
func base(r *http.Request) string {
	return strings.Repeat("../", max(strings.Count(r.URL.EscapedPath(), "/")-1, 0))
}

// relative returns the link, relative to a connection's page, to
// connection id's page: "./" first, so that an id such as "acme:crm" is
// not read as a URL's scheme (which html/template would replace by
// "#ZgotmplZ", and a browser follow elsewhere).
func relative(id string) string { return "./" + url.PathEscape(id) }

func connOf(id string) connLink {
	return connLink{ID: id, Path: "connections/" + url.PathEscape(id)}
}

func (c *console) render(w http.ResponseWriter, r *http.Request, status int, name string, data any) {
	var buf bytes.Buffer
	if err := c.pages.ExecuteTemplate(&buf, name, data); err != nil {
		c.logger.ErrorContext(r.Context(), "console: rendering a page", "page", name, "error", err.Error())
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes()) //nolint:errcheck // the client went away
}

// seeOther redirects, after a form's POST, to path under the console's mount.
func seeOther(w http.ResponseWriter, r *http.Request, path string) {
	w.Header().Set("Location", base(r)+path)
	w.WriteHeader(http.StatusSeeOther)
}

func (c *console) index(w http.ResponseWriter, r *http.Request) {
	req := request{}
	ids, err := c.opts.Connections(r)
	if err != nil {
		c.fail(w, r, req, err)
		return
	}
	p := indexPage{common: c.common(r, c.title())}
	names := c.names(r, ids)
	for _, id := range ids {
		l := connOf(id)
		l.Name = names[id]
		p.Connections = append(p.Connections, l)
	}
	c.render(w, r, http.StatusOK, "index.html", p)
}

// periods are the connection page's time filters.
var periods = []struct{ label, since string }{{"24 hours", "24h"}, {"7 days", "168h"}, {"30 days", "720h"}, {"all", ""}}

func (c *console) connectionPage(w http.ResponseWriter, r *http.Request, req request) {
	l, err := c.list(r, req)
	if err != nil {
		if bad, ok := err.(*badRequest); ok {
			c.errorPage(w, r, http.StatusBadRequest, "Bad request", bad.Error(), connOf(req.conn).Path)
			return
		}
		c.fail(w, r, req, err)
		return
	}
	q := r.URL.Query()
	conn := c.named(r, req.conn)
	p := connectionPage{common: c.common(r, "Deliveries to "+conn.Shown()), Conn: conn}
	if p.Charts, err = c.charts(r.Context(), req.conn); err != nil {
		c.logger.WarnContext(r.Context(), "console: the connection's charts", "connection_id", req.conn, "error", err.Error())
	}
	p.Health, err = c.health(r, req)
	p.HealthOK = err == nil
	if err != nil {
		c.logger.WarnContext(r.Context(), "console: the connection's health", "connection_id", req.conn, "error", err.Error())
	}
	// link returns the page's link with set's changes: the listing's
	// filters and page size kept (every status asked for, the event, the
	// time range), so that its older pages are of the same listing.
	link := func(set map[string]string) string {
		v := url.Values{}
		for _, k := range []string{"status", "event", "since", "until", "limit"} {
			for _, s := range q[k] {
				if s != "" {
					v.Add(k, s)
				}
			}
		}
		for k, s := range set {
			if s == "" {
				v.Del(k)
			} else {
				v.Set(k, s)
			}
		}
		if len(v) == 0 {
			return relative(req.conn)
		}
		return relative(req.conn) + "?" + v.Encode()
	}
	status := q.Get("status")
	p.Filters = append(p.Filters, filter{Label: "all", Link: link(map[string]string{"status": ""}), On: status == ""})
	for _, s := range riverhook.Statuses() {
		p.Counts = append(p.Counts, count{s, l.Counts[s]})
		p.Filters = append(p.Filters, filter{Label: fmt.Sprintf("%s (%d)", strings.ReplaceAll(string(s), "_", " "), l.Counts[s]),
			Link: link(map[string]string{"status": string(s)}), On: status == string(s)})
	}
	for _, per := range periods {
		p.Periods = append(p.Periods, filter{Label: per.label, Link: link(map[string]string{"since": per.since}), On: q.Get("since") == per.since})
	}
	if l.Next != "" {
		p.Older = link(map[string]string{"after": l.Next})
	}
	for _, d := range l.Deliveries {
		p.Rows = append(p.Rows, rowOf(req.conn, d))
	}
	p.Life, p.Kept = c.life(r, req)
	if p.History, err = riverhook.History(r.Context(), c.client, c.db, req.conn, historyShown); err != nil {
		c.logger.WarnContext(r.Context(), "console: the connection's history", "connection_id", req.conn, "error", err.Error())
	}
	subscribed, err := c.worker.Events(r.Context(), req.conn)
	if err != nil { // offered as to every event: a test answers as it can
		c.logger.WarnContext(r.Context(), "console: the connection's events", "connection_id", req.conn, "error", err.Error())
	}
	p.Tests = c.testEvents(subscribed)
	if t, ok := c.lastTest(req.conn); ok {
		p.Test = &t
	}
	if n, ok := c.lastRecover(req.conn); ok {
		p.Recovered = &n
	}
	c.render(w, r, http.StatusOK, "connection.html", p)
}

func rowOf(conn string, d *riverhook.Delivery) row {
	rw := row{JobID: d.JobID, Status: d.Status, Event: d.Event, Created: d.CreatedAt, NextAt: d.NextAt,
		Link: relative(conn) + "/deliveries/" + strconv.FormatInt(d.JobID, 10), LastAnswer: "no attempt yet"}
	for _, a := range d.Attempts {
		switch {
		case a.Kind == webhook.KindInterrupted:
			rw.Interrupted = true
		case !a.Probe && a.Kind != webhook.KindDown: // neither a probe that found the endpoint down nor a refusal to send is an attempt
			rw.Attempts++
		}
	}
	if n := len(d.Attempts); n > 0 {
		last := d.Attempts[n-1]
		rw.LastAnswer, rw.LastAt = answer(last.Attempt), last.Start
	}
	return rw
}

// answer says in a few words what an attempt got.
func answer(a webhook.Attempt) string {
	switch {
	case a.Kind == webhook.KindInterrupted:
		return "interrupted"
	case a.StatusCode != 0:
		return strings.TrimSpace(fmt.Sprintf("%d %s", a.StatusCode, http.StatusText(a.StatusCode)))
	}
	return string(a.Outcome())
}

func (c *console) deliveryPage(w http.ResponseWriter, r *http.Request, req request) {
	job, d, ok := c.job(w, r, req)
	if !ok {
		return
	}
	p := deliveryPage{common: c.common(r, "Delivery "+d.DeliveryID), Conn: c.named(r, req.conn), D: d,
		Done: r.URL.Query().Get("done")}
	if p.Done != "resent" && p.Done != "pending" || d.ResentFrom == 0 || d.ResentAs != 0 {
		p.Done = "" // a link's claim: only a resend, the latest, is shown as one
	}
	if d.ResentAs != 0 {
		_, err := c.client.JobGet(r.Context(), d.ResentAs)
		if err != nil && !errors.Is(err, river.ErrNotFound) {
			c.fail(w, r, req, err)
			return
		}
		p.ResendKept = err == nil
	}
	for _, a := range d.Attempts {
		p.Attempts = append(p.Attempts, attemptRow{N: a.N, Run: a.Run, Outcome: string(a.Outcome()), Answer: answer(a.Attempt),
			Start: a.Start, Took: a.Duration, Response: a.ResponseText(), Diagnosis: a.Diagnosis(), Retry: a.Retry,
			RetryIn: a.RetryIn, Interrupted: a.Kind == webhook.KindInterrupted, Probe: a.Probe})
	}
	if body := c.payload(job); body != nil {
		var buf bytes.Buffer
		if json.Indent(&buf, body, "", "  ") == nil {
			p.Payload = printableJSON(buf.String())
		}
	}
	c.render(w, r, http.StatusOK, "delivery.html", p)
}

// printableJSON returns the indented JSON js with each character a page
// would not show as itself (a control, a format character such as a bidi
// override, an invisible one) written as its \u escape: the same JSON, in
// which what the user typed cannot reorder or hide what a person reads.
func printableJSON(js string) string {
	var b strings.Builder
	b.Grow(len(js))
	for _, r := range js {
		// A space separator (U+3000, U+00A0, ...) shows as the blank it
		// is; human.Printable, for one line of text, trims it.
		if r == '\n' || unicode.Is(unicode.Zs, r) || human.Printable(string(r)) == string(r) {
			b.WriteRune(r)
			continue
		}
		for _, u := range utf16.Encode([]rune{r}) {
			fmt.Fprintf(&b, `\u%04x`, u)
		}
	}
	return b.String()
}

func (c *console) resendForm(w http.ResponseWriter, r *http.Request, req request) {
	res, status, err := c.resend(w, r, req)
	if !c.failed(w, r, req, status, err, func(status int, msg string) {
		c.errorPage(w, r, status, "Not resent", msg, connOf(req.conn).Path)
	}) {
		done := "resent" // by this post, or by the first of a double click
		if !res.inserted && !res.again {
			done = "pending"
		}
		seeOther(w, r, connOf(req.conn).Path+"/deliveries/"+strconv.FormatInt(res.job.ID, 10)+"?done="+done)
	}
}

func (c *console) recoverForm(w http.ResponseWriter, r *http.Request, req request) {
	_, status, err := c.runRecover(w, r, req)
	if !c.failed(w, r, req, status, err, func(status int, msg string) {
		c.errorPage(w, r, status, "Not recovered", msg, connOf(req.conn).Path)
	}) {
		seeOther(w, r, connOf(req.conn).Path+"#recovered") // its page shows the recover, kept
	}
}

// historyShown is how many of a connection's latest changes its page
// shows.
const historyShown = 20

// life returns the connection's state, and, for one failing or disabled,
// what its Enable would send (a dry run); nil for what cannot be read,
// logged.
func (c *console) life(r *http.Request, req request) (*riverhook.ConnectionState, *riverhook.EnableResult) {
	s, err := riverhook.StateOf(r.Context(), c.client, c.db, req.conn)
	if err != nil {
		c.logger.WarnContext(r.Context(), "console: the connection's state", "connection_id", req.conn, "error", err.Error())
		return nil, nil
	}
	if s.State == riverhook.StateActive {
		return s, nil
	}
	kept, err := riverhook.Enable(r.Context(), c.client, c.db, req.conn, riverhook.EnableParams{DryRun: true}, nil)
	if err != nil {
		c.logger.WarnContext(r.Context(), "console: the connection's kept deliveries", "connection_id", req.conn, "error", err.Error())
		return s, nil
	}
	return s, kept
}

// enableForm enables the request's connection (riverhook.Enable),
// rate-limited as a recover is, and shows its page. A connection not
// disabled is refused with 409: enabling a failing one would cut its
// failing span, and a customer could keep a dead endpoint from ever being
// disabled.
func (c *console) enableForm(w http.ResponseWriter, r *http.Request, req request) {
	s, err := riverhook.StateOf(r.Context(), c.client, c.db, req.conn)
	if err != nil {
		c.fail(w, r, req, err)
		return
	}
	if s.State != riverhook.StateDisabled {
		c.errorPage(w, r, http.StatusConflict, "Not disabled", "This connection is not disabled: there is nothing to enable.", connOf(req.conn).Path)
		return
	}
	if !c.allowed(w, r, req, actionEnable, "") {
		return
	}
	if _, err := riverhook.Enable(r.Context(), c.client, c.db, req.conn, riverhook.EnableParams{}, c.worker.InsertOptions(nil)); err != nil {
		c.fail(w, r, req, err)
		return
	}
	seeOther(w, r, connOf(req.conn).Path+"#life")
}

func (c *console) testForm(w http.ResponseWriter, r *http.Request, req request) {
	if _, ok := c.test(w, r, req); ok {
		seeOther(w, r, connOf(req.conn).Path+"#test")
	}
}
