// Package console is a delivery log a service mounts for its customers: an
// [http.Handler] with a JSON API and server-rendered pages on the
// deliveries riverhook keeps in River, scoped to the connections each
// request may see.
//
// Mount it under a path of its own, behind the service's authentication:
//
//	h, err := console.New(riverClient, pool, worker, &console.Options{
//		Connections: func(r *http.Request) ([]string, error) {
//			return connectionsOf(r.Context(), userFrom(r)) // the customer's own
//		},
//		Actor: func(r *http.Request) string { return userFrom(r).Email },
//	})
//	mux.Handle("/webhooks/log/", requireLogin(http.StripPrefix("/webhooks/log", h)))
//
// # Pages
//
//   - GET / lists the connections the request may see.
//   - GET /connections/{id} lists a connection's deliveries, newest first: a
//     row per delivery with its status, last answer and time, filters by
//     status and time, counts per status, a banner when the endpoint is down
//     or isolated, and the Send Test and Recover buttons. Send Test offers
//     each event the connection subscribes to that has a sample
//     ([Options.Samples]), user.identified's built in. A failing connection
//     shows the date it will be disabled; a disabled one its reason, and an
//     Enable button with the count of its kept deliveries
//     ([riverhook.Enable]'s dry run): POST /connections/{id}/enable,
//     rate-limited as Recover.
//   - GET /connections/{id}/deliveries/{job} shows one delivery: its
//     attempts with status, time taken and response excerpt, interrupted
//     runs marked, the next attempt as a time, the attempts the policy has
//     left, and the Resend button.
//
// The buttons are forms that POST to the routes below without /api and
// redirect back (303). A connection's page shows its last Send Test and
// its last recover (or count), with their times, as the serving process
// ran them (from the page or the API); what a page says was done never
// comes from a link's query, which anyone can write.
//
// # JSON API
//
//   - GET /api/connections/{id}/deliveries: a page of deliveries, each in
//     [riverhook.Delivery.MarshalJSON]'s shape, with "next" (the cursor for
//     after=) and "counts" per status. Query: status (repeated or
//     comma-separated), event, since and until (RFC 3339, or a duration such
//     as 24h meaning that long ago), after, limit.
//   - GET /api/connections/{id}/deliveries/{job}: one delivery.
//   - POST /api/connections/{id}/deliveries/{job}/resend: [riverhook.Resend].
//   - POST /api/connections/{id}/recover: [riverhook.Recover] of the
//     given-up deliveries since (required), a dry run with dry_run=true.
//   - POST /api/connections/{id}/test: a Send Test of event (a form field or
//     the query; empty means user.identified) with its sample:
//     [riverhook.Worker.SendTest], or SendTestBytes with the body
//     [Options.Samples] gives. An event without a sample, or that the
//     connection does not subscribe to, is answered 400, naming it, and
//     never sent.
//   - GET /api/connections/{id}/health: the endpoint's health, read from
//     [Options.Marks] at each request.
//
// Every error of the API is {"error": "..."}, a path or a method it does
// not have included: 400, 403 (a browser's cross-origin POST), 404, 405
// (with Allow), 409 (a resend of a delivery under way, erased, or resent
// already by a resend no longer kept), 429 (with Retry-After), 500 or 503
// (a Send Test the endpoint's bound in flight has no room for, with
// Retry-After). Elsewhere an error is a page of the console's.
//
// # Security
//
//   - Scope: [Options.Connections] is required; a connection the request may
//     not see is answered 404, exactly like one that does not exist, and so
//     is a job of another connection, however its id was guessed.
//   - Cross-site request forgery: every state-changing request goes through
//     net/http's [http.CrossOriginProtection], which refuses a browser's
//     cross-origin POST (by Sec-Fetch-Site, or Origin against Host). A
//     request without either header (curl, a server) is let through: it
//     carries no browser's cookies unless its author put them there.
//   - What receivers answered is shown as text: html/template escapes it, and
//     the pages send Content-Security-Policy: default-src 'self', load
//     nothing from another origin and run no script.
//   - No secret, header value or URL path appears in a page or the JSON: an
//     endpoint is named by its origin. The payload, which holds a user's
//     personal data, is shown only with [Options.ShowPayload].
//   - Send Test, Recover and Resend are rate-limited per connection: in
//     the serving process, or across API replicas with [Options.Limits].
//     A resend of the delivery resent last is let through: it inserts
//     nothing, as riverhook resends a delivery once. The second post of a
//     double click on Resend leads where the first led, the new
//     delivery's page, not to an error. A Send Test refused as busy (503),
//     or refused for its event (400), made no attempt, and spends no turn.
package console

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/riverhook/internal/human"
)

// DefaultRateInterval is the default of [Options.TestEvery] and
// [Options.RecoverEvery].
const DefaultRateInterval = 10 * time.Second

// Options configures [New]. Connections is required; every other zero field
// selects its documented default.
type Options struct {
	// Connections returns the ids of the connections the request may see
	// and act on: the customer's own, as the service's authentication
	// knows them. Required: without it New returns an error, and nothing
	// is served. Any other connection, and any job of one, is answered 404.
	// An error is answered 500 (and logged). It is called once per request,
	// concurrently.
	Connections func(r *http.Request) ([]string, error)

	// Actor names who acts in a request, for the reason recorded with a
	// resend or a recover ("resent from the console by ..."). Nil means
	// "a customer".
	Actor func(r *http.Request) string

	// ShowPayload shows each delivery's body (the JSON sent, with the
	// user's email, name and phone) in the delivery's page and JSON. False,
	// the default, never shows it.
	ShowPayload bool

	// Samples are the service's sample bodies for a Send Test, by event:
	// each a JSON body such as a real delivery of that event carries,
	// sent byte for byte and signed ([riverhook.Worker.SendTestBytes]).
	// A connection's page offers a Send Test of each event the connection
	// subscribes to ([riverhook.Worker.Events]) that has a sample: here,
	// or built in for "user.identified" ([riverhook.Worker.SendTest],
	// whose metadata "source" tells a receiver it is a test; mark yours
	// if receivers must tell too). Another event is refused (400), never
	// sent. New refuses an event name that is empty or has control
	// characters, and a body that is not JSON; it keeps a copy. Nil
	// offers user.identified alone.
	Samples map[string]json.RawMessage

	// TestEvery is how often a connection may be sent a test, and
	// RecoverEvery how often its recover (and, apart, its dry run) may
	// run: a request sooner is answered 429 with Retry-After. Zero means
	// [DefaultRateInterval]; a negative value, no limit.
	TestEvery, RecoverEvery time.Duration

	// ResendEvery is how often a delivery of a connection may be resent
	// (one resend per ResendEvery per connection): a request sooner is
	// answered 429 with Retry-After, so that a customer's script cannot
	// resend the whole log at once. Zero means DefaultResendInterval; a
	// negative value, no limit. A resend of the delivery the connection
	// resent last is not refused: it inserts nothing, and the page's
	// Resend, posted again within 10 s by the same Actor (a double
	// click), is answered as its first post was.
	ResendEvery time.Duration

	// Limits, if not nil, keeps the turns of TestEvery, RecoverEvery and
	// ResendEvery in the database ([NewSharedLimits]), so that they hold
	// across the console's API replicas. Nil keeps them in the serving
	// process's memory: enough for one process, while N replicas would
	// each allow the limit.
	Limits *SharedLimits

	// Title names the console in its bar and on its first page, such as
	// your service's name. Empty means DefaultTitle.
	Title string

	// ConnectionNames, if not nil, returns the names the service gives the
	// connections ids, shown beside their ids (a connection without a name
	// shows its id). It is called per page, concurrently; an error is
	// logged and the ids show.
	ConnectionNames func(r *http.Request, ids []string) (map[string]string, error)

	// Theme sets the pages' colours, to fit the service's look: CSS
	// custom properties of the console's style sheet by name ("ink", the
	// text and bar; "bg", "card", "line", "muted", "wait" for links and
	// waiting; "ok", "bad", "warn", "off" and their "-bg"), each a colour
	// such as "#0b5fff" or "rgb(11, 95, 255)". It is served as a style
	// sheet of its own, within the pages' Content-Security-Policy. New
	// refuses another name, or a value with other characters than a
	// colour's.
	Theme map[string]string

	// Marks are the endpoint health marks the deployment's Senders share
	// (riverhook.EndpointMarks, given to each as HealthOptions.Marks): the
	// connection's health is read there at each page and health request,
	// one indexed read, so that a console served by the API tier shows
	// what the workers found as soon as they mark it. What the serving
	// process's own Sender knows counts too, unless a mark changed later.
	// Set it in an API tier: its Sender follows the marks only while it
	// makes attempts. Nil means the serving process's own Sender alone, as
	// when the marks cannot be read (logged). Either way, an endpoint
	// nothing is known of is shown "unknown", never "up": set
	// HealthOptions.ConfirmUpEvery for endpoints that answer to be marked
	// up.
	Marks Marks

	// Logger receives the errors answered 500, as they are. Nil means no
	// logging.
	Logger *slog.Logger
}

// Marks reads the endpoint health marks of a deployment;
// *riverhook.EndpointMarks is one.
type Marks interface {
	// Endpoint returns the marks of an origin and of its isolated URLs.
	Endpoint(ctx context.Context, endpoint string) ([]webhook.EndpointHealth, error)
}

//go:embed templates/*.html static/*
var assets embed.FS

// console is the handler New returns.
type console struct {
	client *river.Client[pgx.Tx]
	db     riverhook.DB
	worker *riverhook.Worker
	opts   Options
	logger *slog.Logger
	pages  *template.Template
	limits *limiter

	samples  map[string]json.RawMessage // Options.Samples, copied
	testable []string                   // the events a Send Test may send: user.identified, then the samples' sorted

	mu       sync.Mutex
	tests    map[string]testResult  // connection id -> its last Send Test, for its page
	recovers map[string]recoverNote // connection id -> its last recover or count, for its page
}

// New returns the console on the deliveries of client, a River client on the
// database through River's pgx driver (an insert-only one will do), and db, a
// pool on the same database for the counts per status ([riverhook.Count])
// and the transactions of resends ([riverhook.Resend]), acting through
// worker: its Sender
// and Resolver make the Send Test and tell the endpoint's health, and its
// policy sizes resends. opts.Connections is required. The handler serves
// the routes of the package documentation relative to where it is mounted
// (use [http.StripPrefix]), guarded by [http.CrossOriginProtection]. It is
// safe for concurrent use. A POST's parameters that it cannot decode are
// refused with 400, never read as absent: leave a POST's body to the
// console, for a handler in front of it that parses the form
// (r.FormValue) hides what it could not decode.
func New(client *river.Client[pgx.Tx], db riverhook.DB, worker *riverhook.Worker, opts *Options) (http.Handler, error) {
	if client == nil || db == nil || worker == nil {
		return nil, errors.New("console: New needs a River client, a pool on its database and the riverhook Worker")
	}
	if opts == nil || opts.Connections == nil {
		return nil, errors.New("console: Options.Connections is required: it says which connections a request may see")
	}
	pages, err := template.New("").Funcs(funcs).ParseFS(assets, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("console: parsing the templates: %w", err)
	}
	c := &console{client: client, db: db, worker: worker, opts: *opts, pages: pages, tests: map[string]testResult{},
		recovers: map[string]recoverNote{}, logger: opts.Logger}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	c.limits = &limiter{every: map[string]time.Duration{
		actionTest:    rateOf(opts.TestEvery),
		actionRecover: rateOf(opts.RecoverEvery),
		actionDryRun:  rateOf(opts.RecoverEvery),
		actionEnable:  rateOf(opts.RecoverEvery),
		actionResend:  cmp.Or(opts.ResendEvery, DefaultResendInterval),
	}, turns: newMemoryTurns()}
	if opts.Limits != nil {
		c.limits.turns = opts.Limits
	}
	theme, err := themeCSS(opts.Theme)
	if err != nil {
		return nil, err
	}
	if c.samples, c.testable, err = samplesOf(opts.Samples); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	static := http.FileServerFS(assets)
	mux.Handle("GET /static/", static)
	mux.HandleFunc("GET /theme.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		w.Write(theme)
	})
	mux.HandleFunc("GET /{$}", c.index)
	mux.HandleFunc("GET /connections/{conn}", c.scoped(c.connectionPage))
	mux.HandleFunc("GET /connections/{conn}/deliveries/{job}", c.scoped(c.deliveryPage))
	mux.HandleFunc("POST /connections/{conn}/deliveries/{job}/resend", c.scoped(c.resendForm))
	mux.HandleFunc("POST /connections/{conn}/recover", c.scoped(c.recoverForm))
	mux.HandleFunc("POST /connections/{conn}/test", c.scoped(c.testForm))
	mux.HandleFunc("POST /connections/{conn}/enable", c.scoped(c.enableForm))
	mux.HandleFunc("GET /api/connections/{conn}/deliveries", c.scoped(c.apiList))
	mux.HandleFunc("GET /api/connections/{conn}/deliveries/{job}", c.scoped(c.apiDelivery))
	mux.HandleFunc("POST /api/connections/{conn}/deliveries/{job}/resend", c.scoped(c.apiResend))
	mux.HandleFunc("POST /api/connections/{conn}/recover", c.scoped(c.apiRecover))
	mux.HandleFunc("POST /api/connections/{conn}/test", c.scoped(c.apiTest))
	mux.HandleFunc("GET /api/connections/{conn}/health", c.scoped(c.apiHealth))
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(c.crossOrigin))
	return secureHeaders(cop.Handler(c.routed(mux))), nil
}

func rateOf(d time.Duration) time.Duration { return cmp.Or(d, DefaultRateInterval) }

// secureHeaders sets the headers of every answer: nothing from another
// origin, no framing by one, no sniffing, no referrer elsewhere.
func secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'self'; form-action 'self'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// request is one scoped request: its connection, allowed.
type request struct {
	conn string
	api  bool
}

// scoped answers 404 to a request for a connection it may not see, and
// hands the others on.
func (c *console) scoped(next func(http.ResponseWriter, *http.Request, request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		req := request{conn: r.PathValue("conn"), api: isAPI(r)}
		// The form first, before Connections may read a value of it: only
		// the first parse reports what it could not decode.
		if r.Method == http.MethodPost {
			if msg := formError(r); msg != "" {
				c.badRequest(w, r, req, msg)
				return
			}
		}
		allowed, err := c.opts.Connections(r)
		if err != nil {
			c.fail(w, r, req, err)
			return
		}
		if !slices.Contains(allowed, req.conn) {
			c.notFound(w, r, req)
			return
		}
		next(w, r, req)
	}
}

// formError reads a POST's parameters, and says why it cannot: they come in
// the query, or in a body that is a form (application/x-www-form-urlencoded,
// as the pages send). A parameter it could not decode, or a body of another
// type, would be read as absent: a dry run asked for so would run for real.
// The query is checked whoever parsed it before; the body, read once, only
// if nothing in front of the console parsed it (see New).
func formError(r *http.Request) string {
	if r.ContentLength != 0 {
		mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if mt != "application/x-www-form-urlencoded" {
			what := fmt.Sprintf("is %.60q", mt)
			if mt == "" {
				what = "has no Content-Type"
			}
			return "the body " + what + ": send the parameters in the query, or as a form (application/x-www-form-urlencoded)"
		}
	}
	_, err := url.ParseQuery(r.URL.RawQuery)
	if err == nil {
		err = r.ParseForm()
	}
	if err != nil {
		return fmt.Sprintf("the parameters cannot be read: %.200s", err)
	}
	return ""
}

// job returns the delivery of the request's job, and false, having answered
// 404, when there is none of the request's connection.
func (c *console) job(w http.ResponseWriter, r *http.Request, req request) (*rivertype.JobRow, *riverhook.Delivery, bool) {
	id, err := strconv.ParseInt(r.PathValue("job"), 10, 64)
	if err != nil || id <= 0 {
		c.notFound(w, r, req)
		return nil, nil, false
	}
	row, err := c.client.JobGet(r.Context(), id)
	if errors.Is(err, river.ErrNotFound) || err == nil && row.Kind != riverhook.Kind {
		c.notFound(w, r, req)
		return nil, nil, false
	}
	if err != nil {
		c.fail(w, r, req, err)
		return nil, nil, false
	}
	d, err := riverhook.DeliveryOf(row)
	if err != nil {
		c.fail(w, r, req, err)
		return nil, nil, false
	}
	if d.ConnectionID != req.conn {
		c.notFound(w, r, req) // another's, exactly as a job that does not exist
		return nil, nil, false
	}
	return row, d, true
}

func (c *console) actor(r *http.Request) string {
	who := "a customer"
	if c.opts.Actor != nil {
		who = cmp.Or(c.opts.Actor(r), who)
	}
	return cut(human.Printable(who), 200) // a resend's reason: no NUL, which PostgreSQL refuses, nor bidi override
}

// printable reports whether s is UTF-8 text without control characters,
// as an event's name is.
func printable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, unicode.IsControl)
}

// cut returns s as valid UTF-8 cut to at most n bytes at a rune boundary:
// a rune the cut splits is dropped.
func cut(s string, n int) string {
	return human.Cut(strings.ToValidUTF8(s, "\uFFFD"), n, utf8.RuneLen, "")
}

// Actions that are rate-limited per connection.
const (
	actionTest    = "test"
	actionRecover = "recover"
	actionDryRun  = "dry-run"
	actionResend  = "resend"
	actionEnable  = "enable"
)

// DefaultTitle is the default of [Options.Title].
const DefaultTitle = "Webhook deliveries"

// DefaultResendInterval is the default of [Options.ResendEvery]: one
// resend per connection a second.
const DefaultResendInterval = time.Second

// testResult is a connection's last Send Test, shown on its page.
type testResult struct {
	Event     string
	At        time.Time
	OK        bool
	Status    int
	Outcome   string
	Took      time.Duration
	TookMs    float64 // Took as the attempt log's JSON writes it
	Diagnosis string
	Response  string
}

// samplesOf checks and copies samples (Options.Samples), and returns the
// events a Send Test may send: user.identified, built in, then the
// samples' events in order.
func samplesOf(samples map[string]json.RawMessage) (map[string]json.RawMessage, []string, error) {
	copied := make(map[string]json.RawMessage, len(samples))
	testable := []string{webhook.EventUserIdentified}
	for _, event := range slices.Sorted(maps.Keys(samples)) {
		if event == "" || !printable(event) {
			return nil, nil, fmt.Errorf("console: Options.Samples has an event %.40q: want a name of UTF-8 text without control characters", event)
		}
		if !json.Valid(samples[event]) {
			return nil, nil, fmt.Errorf("console: Options.Samples[%.40q] is not JSON", event)
		}
		copied[event] = slices.Clone(samples[event])
		if event != webhook.EventUserIdentified {
			testable = append(testable, event)
		}
	}
	return copied, testable, nil
}

// testEvents returns the events a Send Test to a connection subscribed to
// subscribed (none: every event, as webhook.Connection.Subscribes reads
// it) may send, in the page's order.
func (c *console) testEvents(subscribed []string) []string {
	conn := webhook.Connection{Events: subscribed}
	var out []string
	for _, event := range c.testable {
		if conn.Subscribes(event) {
			out = append(out, event)
		}
	}
	return out
}

// refuseTest returns why a Send Test of event to conn is not sent, or ""
// when it may be: an event without a sample, or one the connection does not
// subscribe to (as its Resolver says now; it is resolved again to be sent).
func (c *console) refuseTest(ctx context.Context, conn, event string) (string, error) {
	if !slices.Contains(c.testable, event) {
		return fmt.Sprintf("no Send Test of %.40q: the service gives no sample of this event", event), nil
	}
	subscribed, err := c.worker.Events(ctx, conn)
	if err != nil {
		return "", err
	}
	if !slices.Contains(c.testEvents(subscribed), event) {
		return fmt.Sprintf("no Send Test of %.40q: connection %.60q does not subscribe to this event", event, conn), nil
	}
	return "", nil
}

// sendTest runs the connection's Send Test of event, with its sample, and
// keeps its result.
func (c *console) sendTest(ctx context.Context, conn, event string) (testResult, error) {
	var res *webhook.Result
	var err error
	if body, ok := c.samples[event]; ok {
		res, err = c.worker.SendTestBytes(ctx, conn, event, body)
	} else { // user.identified, built in
		res, err = c.worker.SendTest(ctx, conn)
	}
	if res == nil || len(res.Attempts) == 0 {
		if err == nil {
			err = errors.New("console: Send Test made no attempt")
		}
		return testResult{}, err
	}
	a := res.Attempts[0]
	t := testResult{Event: event, At: a.Start, OK: a.OK(), Status: a.StatusCode, Outcome: string(a.Outcome()), Took: a.Duration,
		TookMs: a.JSON().DurationMs, Diagnosis: a.Diagnosis(), Response: a.ResponseText()}
	c.mu.Lock()
	c.tests[conn] = t
	c.mu.Unlock()
	return t, nil
}

func (c *console) lastTest(conn string) (testResult, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.tests[conn]
	return t, ok
}

// recoverNote is a connection's last recover, or count (a dry run), shown
// on its page: what the console did, never what a link's query says.
type recoverNote struct {
	At, Since       time.Time
	DryRun, More    bool
	Resent, GivenUp int
}

func (c *console) lastRecover(conn string) (recoverNote, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.recovers[conn]
	return n, ok
}

// themeVars are the custom properties of the style sheet a theme may set.
var themeVars = []string{"ink", "muted", "line", "bg", "card", "ok", "ok-bg", "bad", "bad-bg", "warn", "warn-bg", "wait", "wait-bg", "off", "off-bg"}

// themeCSS returns the style sheet of theme (Options.Theme), refusing a
// name the console's style sheet does not have and a value that is not a
// colour's characters: nothing of it can close the rule.
func themeCSS(theme map[string]string) ([]byte, error) {
	var b strings.Builder
	b.WriteString("/* Options.Theme */\n:root {")
	for _, name := range slices.Sorted(maps.Keys(theme)) {
		v := theme[name]
		if !slices.Contains(themeVars, name) {
			return nil, fmt.Errorf("console: Options.Theme has %.40q: want one of %s", name, strings.Join(themeVars, ", "))
		}
		if !colour(v) {
			return nil, fmt.Errorf("console: Options.Theme[%q] is %.40q: want a colour, such as #0b5fff or rgb(11, 95, 255)", name, v)
		}
		fmt.Fprintf(&b, " --%s: %s;", name, v)
	}
	b.WriteString(" }\n")
	return []byte(b.String()), nil
}

// colour reports whether v has only what a CSS colour is written with.
func colour(v string) bool {
	if v == "" || len(v) > 64 {
		return false
	}
	for _, c := range v {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.ContainsRune("#(),.% ", c):
		default:
			return false
		}
	}
	return true
}
