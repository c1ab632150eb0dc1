package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/riverhook/console"
	"github.com/signedhook/webhook/riverhook/internal/testdb"
	"github.com/signedhook/webhook/webhooktest"
)

func decode[T any](t *testing.T, body string) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal([]byte(body), &v), body)
	return v
}

type listJSON struct {
	Deliveries []struct {
		JobID        int64  `json:"job_id"`
		DeliveryID   string `json:"delivery_id"`
		ConnectionID string `json:"connection_id"`
		Status       string `json:"status"`
	} `json:"deliveries"`
	Next   string         `json:"next"`
	Counts map[string]int `json:"counts"`
}

type deliveryJSON struct {
	JobID        int64  `json:"job_id"`
	Status       string `json:"status"`
	NextAt       string `json:"next_at"`
	AttemptsLeft int    `json:"attempts_left"`
	Attempts     []struct {
		N        int    `json:"n"`
		Run      int    `json:"run"`
		Outcome  string `json:"outcome"`
		Status   int    `json:"status"`
		Response string `json:"response"`
	} `json:"attempts"`
	Payload json.RawMessage `json:"payload"`
	Erased  bool            `json:"erased"`
}

func ids(l listJSON) []string {
	var out []string
	for _, d := range l.Deliveries {
		out = append(out, d.DeliveryID)
	}
	return out
}

// offline returns what console.New takes, none of it reaching a
// database: a River client without a pool, a pool that connects on first
// use (never), and a Worker sending to a test server.
func offline(t *testing.T) (*river.Client[pgx.Tx], *pgxpool.Pool, *riverhook.Worker) {
	t.Helper()
	client, err := river.NewClient(riverpgxv5.New(nil), &river.Config{})
	require.NoError(t, err)
	srv := webhooktest.NewServer(secret, nil)
	t.Cleanup(srv.Close)
	w, err := riverhook.NewWorker(srv.Sender(nil), func(context.Context, string) (webhook.Connection, error) {
		return srv.Connection(), nil
	}, nil)
	require.NoError(t, err)
	pool, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/none")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return client, pool, w
}

func TestNew_RefusesToServeWithoutAScope(t *testing.T) {
	t.Parallel()
	client, pool, w := offline(t)
	for _, opts := range []*console.Options{nil, {}, {ShowPayload: true}} {
		h, err := console.New(client, pool, w, opts)
		require.Error(t, err)
		assert.Nil(t, h)
		assert.Contains(t, err.Error(), "Connections is required")
	}
}

// TestNew_RefusesASampleItCouldNotSend: a sample of Options.Samples whose
// event has no name, or whose body is not JSON, is refused by New rather
// than at a customer's Send Test.
func TestNew_RefusesASampleItCouldNotSend(t *testing.T) {
	t.Parallel()
	client, pool, w := offline(t)
	for _, tc := range []struct {
		name    string
		samples map[string]json.RawMessage
		want    string
	}{
		{"no name", map[string]json.RawMessage{"": json.RawMessage(`{}`)}, `Samples has an event ""`},
		{"a control character", map[string]json.RawMessage{"invoice.paid\n": json.RawMessage(`{}`)}, `"invoice.paid\n"`},
		{"not JSON", map[string]json.RawMessage{"invoice.paid": json.RawMessage(`{"id":`)}, `Samples["invoice.paid"] is not JSON`},
		{"nothing", map[string]json.RawMessage{"invoice.paid": nil}, `Samples["invoice.paid"] is not JSON`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := console.New(client, pool, w, &console.Options{Connections: customerConnections, Samples: tc.samples})
			require.Error(t, err)
			assert.Nil(t, h)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestConsole_AnswersAnotherCustomersConnectionAndJobsAsUnknown(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, false)
	other := strconv.FormatInt(f.jobs["other"], 10) // erp's job: not the request's
	mine := strconv.FormatInt(f.jobs["given-up"], 10)
	unknown := f.do(t, "GET", "/api/connections/nope/deliveries", "")
	require.Equal(t, http.StatusNotFound, unknown.Code)
	for _, tc := range []struct{ method, path string }{
		{"GET", "/api/connections/erp/deliveries"},
		{"GET", "/api/connections/erp/deliveries/" + other},
		{"GET", "/api/connections/crm/deliveries/" + other}, // a guessed job id of another connection
		{"GET", "/api/connections/erp/deliveries/" + mine},  // a job of its own, under another's connection
		{"GET", "/api/connections/crm/deliveries/999999"},
		{"GET", "/api/connections/crm/deliveries/abc"},
		{"GET", "/api/connections/erp/health"},
		{"POST", "/api/connections/erp/test"},
		{"POST", "/api/connections/erp/recover"},
		{"POST", "/api/connections/crm/deliveries/" + other + "/resend"},
		{"POST", "/api/connections/erp/deliveries/" + other + "/resend"},
		{"GET", "/connections/erp"},
		{"GET", "/connections/crm/deliveries/" + other},
		{"POST", "/connections/crm/deliveries/" + other + "/resend"},
		{"POST", "/connections/erp/test"},
	} {
		got := f.do(t, tc.method, tc.path, "since=24h")
		assert.Equal(t, http.StatusNotFound, got.Code, "%s %s", tc.method, tc.path)
		if strings.HasPrefix(tc.path, "/api/") {
			assert.Equal(t, unknown.Body.String(), got.Body.String(), "%s %s: as an unknown one", tc.method, tc.path)
		}
		assert.NotContains(t, got.Body.String(), "erp")
	}
	assert.Len(t, f.srv.Deliveries(), 8, "no test sent, nothing resent")

	got := f.do(t, "GET", "/api/connections/erp/deliveries/"+other, "", "X-Customer", "both")
	require.Equal(t, http.StatusOK, got.Code, "the customer of both sees erp's")
	got = f.do(t, "GET", "/", "", "X-Customer", "both")
	require.Equal(t, http.StatusOK, got.Code)
	assert.Contains(t, got.Body.String(), `href="connections/erp"`)
}

func TestConsole_APIListsPagesFiltersAndCountsAConnectionsDeliveries(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, false)
	get := func(query string) listJSON {
		t.Helper()
		got := f.do(t, "GET", "/api/connections/crm/deliveries"+query, "")
		require.Equal(t, http.StatusOK, got.Code, got.Body.String())
		assert.Equal(t, "application/json; charset=utf-8", got.Header().Get("Content-Type"))
		assertClean(t, got.Body.String(), false)
		return decode[listJSON](t, got.Body.String())
	}
	all := get("")
	assert.Equal(t, []string{"waiting", "cancelled", "hostile", "interrupted", "delivered", "retrying", "given-up"}, ids(all))
	assert.Equal(t, map[string]int{"delivered": 2, "retrying": 1, "waiting": 1, "given_up": 2, "cancelled": 1}, all.Counts)
	assert.Empty(t, all.Next)

	assert.Equal(t, []string{"hostile", "given-up"}, ids(get("?status=given_up")))
	assert.Equal(t, []string{"hostile", "retrying", "given-up"}, ids(get("?status=given_up,retrying")))
	assert.Equal(t, []string{"hostile", "retrying", "given-up"}, ids(get("?status=given_up&status=retrying")))
	assert.Len(t, get("?event=user.identified").Deliveries, 7)
	assert.Empty(t, get("?event=user.deleted").Deliveries)
	assert.Len(t, get("?since=1h").Deliveries, 7)
	assert.Empty(t, get("?until=2000-01-01T00:00:00Z").Deliveries)

	first := get("?limit=3")
	assert.Equal(t, []string{"waiting", "cancelled", "hostile"}, ids(first))
	require.NotEmpty(t, first.Next)
	second := get("?limit=3&after=" + first.Next)
	assert.Equal(t, []string{"interrupted", "delivered", "retrying"}, ids(second))

	for _, bad := range []string{"?status=lost", "?since=yesterday", "?limit=-1", "?after=x"} {
		got := f.do(t, "GET", "/api/connections/crm/deliveries"+bad, "")
		assert.Equal(t, http.StatusBadRequest, got.Code, bad)
		assert.Contains(t, got.Body.String(), `"error"`)
	}
}

func TestConsole_APIShowsOneDeliveryWithItsAttempts(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, false)
	get := func(d string) deliveryJSON {
		t.Helper()
		got := f.do(t, "GET", "/api/connections/crm/deliveries/"+strconv.FormatInt(f.jobs[d], 10), "")
		require.Equal(t, http.StatusOK, got.Code, got.Body.String())
		assertClean(t, got.Body.String(), false)
		return decode[deliveryJSON](t, got.Body.String())
	}
	retrying := get("retrying")
	assert.Equal(t, "retrying", retrying.Status)
	assert.Equal(t, 1, retrying.AttemptsLeft, "by the policy's two attempts, not River's runs")
	assert.NotEmpty(t, retrying.NextAt)
	require.Len(t, retrying.Attempts, 1)
	assert.Equal(t, 503, retrying.Attempts[0].Status)
	assert.Nil(t, retrying.Payload, "no payload without ShowPayload")

	interrupted := get("interrupted")
	require.Len(t, interrupted.Attempts, 2)
	assert.Equal(t, "interrupted", interrupted.Attempts[0].Outcome)
	assert.Equal(t, "delivered", interrupted.Attempts[1].Outcome)
	assert.Equal(t, 1, interrupted.Attempts[1].N, "the cut run cost no attempt")
	assert.Equal(t, 2, interrupted.Attempts[1].Run)

	hostileJSON := get("hostile")
	require.Len(t, hostileJSON.Attempts, 2)
	assert.Equal(t, hostile, hostileJSON.Attempts[1].Response, "JSON carries the text, escaped by encoding/json")

	shown := newFixture(t, &console.Options{Connections: customerConnections, ShowPayload: true}, false)
	got := shown.do(t, "GET", "/api/connections/crm/deliveries/"+strconv.FormatInt(shown.jobs["delivered"], 10), "")
	require.Equal(t, http.StatusOK, got.Code)
	d := decode[deliveryJSON](t, got.Body.String())
	var p webhook.Payload
	require.NoError(t, json.Unmarshal(d.Payload, &p))
	assert.Equal(t, "usr_delivered", p.User.ID)
	assertClean(t, got.Body.String(), true)
	page := shown.do(t, "GET", "/connections/crm/deliveries/"+strconv.FormatInt(shown.jobs["delivered"], 10), "")
	assert.Contains(t, page.Body.String(), personal, "the page shows the payload with ShowPayload")
}

func TestConsole_RefusesACrossOriginPOST(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, false)
	resend := "/connections/crm/deliveries/" + strconv.FormatInt(f.jobs["given-up"], 10) + "/resend"
	for _, tc := range []struct {
		name   string
		header []string
	}{
		{"SecFetchSite", []string{"Sec-Fetch-Site", "cross-site"}},
		{"SameSiteOtherOrigin", []string{"Sec-Fetch-Site", "same-site"}},
		{"Origin", []string{"Origin", "https://evil.example"}},
	} {
		for _, path := range []string{resend, "/api" + resend, "/connections/crm/test", "/api/connections/crm/recover"} {
			got := f.do(t, "POST", path, "since=24h", tc.header...)
			assert.Equal(t, http.StatusForbidden, got.Code, "%s: %s", tc.name, path)
		}
	}
	assert.Len(t, f.srv.Deliveries(), 8, "no test sent")
	l := decode[listJSON](t, f.do(t, "GET", "/api/connections/crm/deliveries", "", "Sec-Fetch-Site", "cross-site").Body.String())
	assert.Len(t, l.Deliveries, 7, "nothing resent or recovered; a GET is served")

	got := f.do(t, "POST", resend, "", "Sec-Fetch-Site", "same-origin", "Origin", "http://example.com")
	assert.Equal(t, http.StatusSeeOther, got.Code, "the page's own form")
}

func TestConsole_PagesShowAHostileReceiversAnswerAsText(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, false)
	for _, path := range []string{"/", "/connections/crm", "/connections/crm/deliveries/" + strconv.FormatInt(f.jobs["hostile"], 10)} {
		got := f.do(t, "GET", path, "")
		require.Equal(t, http.StatusOK, got.Code, path)
		assert.Equal(t, "text/html; charset=utf-8", got.Header().Get("Content-Type"))
		assert.Contains(t, got.Header().Get("Content-Security-Policy"), "default-src 'self'")
		body := got.Body.String()
		assert.NotContains(t, body, "<script", path)
		assert.NotContains(t, body, "<img", path)
		assert.NotRegexp(t, `(src|href|action)="[a-z]+:`, body, "%s: nothing from another origin", path)
		assertClean(t, body, false)
	}
	page := f.do(t, "GET", "/connections/crm/deliveries/"+strconv.FormatInt(f.jobs["hostile"], 10), "").Body.String()
	assert.Contains(t, page, "&lt;script&gt;document.title=&#34;pwned&#34;")
}

func TestConsole_PagesListDeliveriesAndTheirAttempts(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, false)
	list := f.do(t, "GET", "/connections/crm", "").Body.String()
	for _, want := range []string{"status-given_up", "status-retrying", "status-delivered", "status-waiting", "status-cancelled",
		"503 Service Unavailable", `class="tag interrupted"`, `href="../static/console.css"`, `action="../connections/crm/test"`,
		`Endpoint <span class="origin">` + f.srv.Connection().Endpoint() + `</span>`, "given up (2)"} {
		assert.Contains(t, list, want)
	}
	assert.Equal(t, 7, strings.Count(list, "<tr data-job="))

	page := f.do(t, "GET", "/connections/crm/deliveries/"+strconv.FormatInt(f.jobs["retrying"], 10), "").Body.String()
	assert.Contains(t, page, `<dd id="left">1</dd>`, "attempts left by the policy")
	assert.Contains(t, page, `<dd id="next"><time`)
	assert.Contains(t, page, " UTC</time>", "the next attempt as an absolute time")
	page = f.do(t, "GET", "/connections/crm/deliveries/"+strconv.FormatInt(f.jobs["interrupted"], 10), "").Body.String()
	assert.Contains(t, page, `<tr class="interrupted">`)
	assert.Contains(t, page, "cost no attempt")

	got := f.do(t, "GET", "/static/console.css", "")
	assert.Equal(t, http.StatusOK, got.Code)
	assert.Contains(t, got.Header().Get("Content-Type"), "text/css")
}

// A delivery whose user asked to be forgotten shows as erased, its
// attempts' outcomes, statuses and times kept, the receiver's texts gone,
// and no Resend: there is nothing to send.
func TestConsole_ShowsAnErasedDelivery(t *testing.T) {
	t.Parallel()
	f := newFixture(t, &console.Options{Connections: customerConnections, ShowPayload: true}, false)
	res, err := riverhook.EraseSubject(context.Background(), f.client, f.pool, "usr_hostile")
	require.NoError(t, err)
	require.Equal(t, 1, res.Erased)
	path := "/connections/crm/deliveries/" + strconv.FormatInt(f.jobs["hostile"], 10)

	got := f.do(t, "GET", "/api"+path, "")
	require.Equal(t, http.StatusOK, got.Code, got.Body.String())
	d := decode[deliveryJSON](t, got.Body.String())
	assert.True(t, d.Erased)
	assert.Equal(t, "given_up", d.Status)
	assert.Nil(t, d.Payload, "no payload left to show")
	require.Len(t, d.Attempts, 2)
	for _, a := range d.Attempts {
		assert.Equal(t, 500, a.Status)
		assert.Equal(t, "[erased]", a.Response)
	}
	assert.NotContains(t, got.Body.String(), "pwned")

	got = f.do(t, "GET", path, "")
	require.Equal(t, http.StatusOK, got.Code)
	page := got.Body.String()
	assert.Contains(t, page, `<dt>Personal data</dt><dd id="erased">erased`)
	assert.Contains(t, page, "500 Internal Server Error", "the answers' statuses stay")
	assert.Contains(t, page, `<div class="excerpt">[erased]</div>`)
	assert.NotContains(t, page, "pwned")
	assert.NotContains(t, page, `id="resend"`, "nothing to resend")
	assert.NotContains(t, page, personal, "no payload")
	list := f.do(t, "GET", "/connections/crm", "")
	require.Equal(t, http.StatusOK, list.Code)
	assert.Contains(t, list.Body.String(), "data-job=\""+strconv.FormatInt(f.jobs["hostile"], 10))
}

func TestConsole_FormsRedirectBackUnderTheMount(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, false)
	base, _ := url.Parse("https://service.example/console/connections/crm/deliveries/" + strconv.FormatInt(f.jobs["given-up"], 10) + "/resend")
	got := f.do(t, "POST", strings.TrimPrefix(base.Path, "/console"), "")
	require.Equal(t, http.StatusSeeOther, got.Code, got.Body.String())
	loc, err := base.Parse(got.Header().Get("Location"))
	require.NoError(t, err)
	assert.Regexp(t, `^/console/connections/crm/deliveries/\d+$`, loc.Path)
	assert.Equal(t, "resent", loc.Query().Get("done"))
	page := f.do(t, "GET", strings.TrimPrefix(loc.RequestURI(), "/console"), "").Body.String()
	assert.Contains(t, page, `id="done"`)
	assert.Contains(t, page, "waiting")

	base, _ = url.Parse("https://service.example/console/connections/crm/recover")
	got = f.do(t, "POST", "/connections/crm/recover", "since=168h&dry_run=true")
	require.Equal(t, http.StatusSeeOther, got.Code)
	loc, err = base.Parse(got.Header().Get("Location"))
	require.NoError(t, err)
	assert.Equal(t, "/console/connections/crm", loc.Path)
	page = f.do(t, "GET", strings.TrimPrefix(loc.RequestURI(), "/console"), "").Body.String()
	assert.Contains(t, page, "1 given-up deliveries would be resent", "the given-up one resent above is pending")

	got = f.do(t, "POST", "/connections/crm/test", "")
	require.Equal(t, http.StatusSeeOther, got.Code)
	page = f.do(t, "GET", "/connections/crm", "").Body.String()
	assert.Contains(t, page, "delivered: the endpoint answered 200")
}

func TestConsole_BannerWhenTheEndpointIsDown(t *testing.T) {
	t.Parallel()
	f, sender, dead, ln := deadEndpoint(t, nil)

	health := decode[map[string]any](t, f.do(t, "GET", "/api/connections/dead/health", "").Body.String())
	assert.Equal(t, map[string]any{"endpoint": "https://" + ln.Addr().String(), "state": "unknown"}, health, "nothing known yet: never a false up")
	sender.Attempt(context.Background(), dead, webhook.EventUserIdentified, []byte(`{}`), 1)

	got := f.do(t, "GET", "/api/connections/dead/health", "")
	assertClean(t, got.Body.String(), false)
	health = decode[map[string]any](t, got.Body.String())
	assert.Equal(t, "down", health["state"])
	assert.Equal(t, "refused", health["last_failure"])
	assert.NotEmpty(t, health["next_probe"])
	page := f.do(t, "GET", "/connections/dead", "").Body.String()
	assert.Contains(t, page, `<div class="banner down" role="alert"><strong>Your endpoint is down.</strong>`)
	assertClean(t, page, false)
}

// TestConsole_HealthFromTheFleetsMarks serves the console from a process
// whose own Sender never delivered (the API tier): the health it shows is
// the marks' the workers wrote, "unknown" before any.
func TestConsole_HealthFromTheFleetsMarks(t *testing.T) {
	t.Parallel()
	pool, schema := testdb.Schema(t, "console", true)
	ctx := context.Background()
	require.NoError(t, riverhook.Migrate(ctx, pool, schema))
	marks := riverhook.NewEndpointMarks(pool, schema)
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	conn := srv.Connection()
	w, err := riverhook.NewWorker(srv.Sender(nil), func(context.Context, string) (webhook.Connection, error) { return conn, nil }, nil)
	require.NoError(t, err)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema, Logger: testdb.Quiet()})
	require.NoError(t, err)
	h, err := console.New(client, pool, w, &console.Options{
		Connections: func(*http.Request) ([]string, error) { return []string{"crm"}, nil },
		Marks:       marks,
	})
	require.NoError(t, err)
	f := &fixture{handler: h}
	state := func() string {
		return decode[map[string]any](t, f.do(t, "GET", "/api/connections/crm/health", "").Body.String())["state"].(string)
	}
	assert.Equal(t, "unknown", state())

	now := time.Now()
	require.NoError(t, marks.Mark(ctx, webhook.EndpointHealth{Endpoint: conn.Endpoint(), Down: true, Since: now.Add(-time.Minute), Changed: now,
		NextProbe: now.Add(time.Minute), Failures: 4, LastFailure: webhook.Attempt{Kind: webhook.KindRefused}}))
	assert.Equal(t, "down", state(), "a worker's mark")
	page := f.do(t, "GET", "/connections/crm", "").Body.String()
	assert.Contains(t, page, "Your endpoint is down.")

	require.NoError(t, marks.Mark(ctx, webhook.EndpointHealth{Endpoint: conn.Endpoint(), Changed: now.Add(time.Second)}))
	assert.Equal(t, "up", state(), "marked up again")
	require.NoError(t, marks.Mark(ctx, webhook.EndpointHealth{Endpoint: conn.Endpoint(), Down: true, Changed: now.Add(2 * time.Second),
		PerURL: true, URLKey: conn.URLKey()}))
	assert.Equal(t, "isolated", state(), "the connection's own URL, isolated")
}

// TestConsole_FitsTheServicesLook: the service's title, its names for the
// connections (escaped like any text), and its colours, served as a style
// sheet; a theme that is not colours is refused.
func TestConsole_FitsTheServicesLook(t *testing.T) {
	t.Parallel()
	f := newFixture(t, &console.Options{
		Connections: customerConnections,
		Title:       "Acme CRM hooks",
		ConnectionNames: func(_ *http.Request, ids []string) (map[string]string, error) {
			return map[string]string{"crm": `Sales <CRM> "prod"`}, nil
		},
		Theme: map[string]string{"ink": "#0b1f44", "wait": "rgb(11, 95, 255)"},
	}, false)
	index := f.do(t, "GET", "/", "").Body.String()
	assert.Contains(t, index, "Acme CRM hooks")
	assert.Contains(t, index, "Sales &lt;CRM&gt; &#34;prod&#34;")
	assert.NotContains(t, index, "<CRM>")
	page := f.do(t, "GET", "/connections/crm", "").Body.String()
	assert.Contains(t, page, "<title>Deliveries to Sales &lt;CRM&gt; &#34;prod&#34;</title>")
	assert.Contains(t, page, `href="../theme.css"`)
	css := f.do(t, "GET", "/theme.css", "")
	assert.Equal(t, "text/css; charset=utf-8", css.Header().Get("Content-Type"))
	assert.Contains(t, css.Body.String(), "--ink: #0b1f44;")
	assert.Contains(t, css.Body.String(), "--wait: rgb(11, 95, 255);")

	for _, theme := range []map[string]string{{"ink": "red; } body { display: none"}, {"font": "serif"}} {
		_, err := console.New(f.client, f.pool, f.worker, &console.Options{Connections: customerConnections, Theme: theme})
		assert.Error(t, err, "%v", theme)
	}
}

// TestConsole_ChartsOutcomesOverTime: the connection's page draws its
// deliveries by outcome over 24 hours and 7 days, as SVG with no script,
// the numbers in words.
func TestConsole_ChartsOutcomesOverTime(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, false)
	page := f.do(t, "GET", "/connections/crm", "").Body.String()
	for _, id := range []string{"chart-day", "chart-week"} {
		assert.Contains(t, page, `id="`+id+`"`)
	}
	assert.Regexp(t, `Last 24 hours, by the hour: 2 delivered, 2 given up, 1 cancelled`, page)
	assert.Regexp(t, `Last 7 days, by the day: 2 delivered, 2 given up, 1 cancelled`, page)
	assert.Equal(t, 24, strings.Count(page[strings.Index(page, `id="chart-day"`):strings.Index(page, `id="chart-week"`)], "<title>"), "a bar an hour")
	assert.Equal(t, 7, strings.Count(page[strings.Index(page, `id="chart-week"`):], "<title>"), "a bar a day")
	assert.Contains(t, page, `class="seg-given-up" fill="url(#hatch-day)"`)
	assert.Regexp(t, `<title>[0-9:]+–[0-9:]+ UTC: [0-9]+ delivered, [0-9]+ given up, [0-9]+ cancelled</title>`, page)
	assert.NotContains(t, page, "<script")
}

// failingMarks is a store of marks that cannot be reached.
type failingMarks struct{}

func (failingMarks) Endpoint(context.Context, string) ([]webhook.EndpointHealth, error) {
	return nil, errors.New("marks: connection refused")
}

// TestConsole_HealthWhenTheMarksFail: the fleet's marks out of reach, the
// console still shows what its own Sender knows (here: down, the banner),
// rather than no health at all and a 500 from the API.
func TestConsole_HealthWhenTheMarksFail(t *testing.T) {
	t.Parallel()
	f, sender, dead, _ := deadEndpoint(t, failingMarks{})

	got := f.do(t, "GET", "/api/connections/dead/health", "")
	require.Equal(t, http.StatusOK, got.Code)
	assert.Equal(t, "unknown", decode[map[string]any](t, got.Body.String())["state"], "nothing known: unknown")
	sender.Attempt(context.Background(), dead, webhook.EventUserIdentified, []byte(`{}`), 1)
	got = f.do(t, "GET", "/api/connections/dead/health", "")
	require.Equal(t, http.StatusOK, got.Code)
	assert.Equal(t, "down", decode[map[string]any](t, got.Body.String())["state"], "what this process knows")
	page := f.do(t, "GET", "/connections/dead", "").Body.String()
	assert.Contains(t, page, `<div class="banner down" role="alert"><strong>Your endpoint is down.</strong>`)
}

// deadEndpoint returns a console serving connection "dead", an endpoint
// that refuses connections (its listener, closed), through a Worker whose
// Sender is returned, with endpoint health down after one failure, and
// marks (nil: none).
func deadEndpoint(t *testing.T, marks console.Marks) (*fixture, *webhook.Sender, webhook.Connection, net.Listener) {
	t.Helper()
	pool, schema := testdb.Schema(t, "console", true)
	srv := webhooktest.NewServer(secret, nil)
	t.Cleanup(srv.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := srv.Connection()
	dead.URL = "https://" + ln.Addr().String() + secretPath
	require.NoError(t, ln.Close())
	sender := srv.Sender(&webhook.SenderOptions{Health: &webhook.HealthOptions{DownAfter: 1}})
	w, err := riverhook.NewWorker(sender, func(context.Context, string) (webhook.Connection, error) { return dead, nil }, nil)
	require.NoError(t, err)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema, Logger: testdb.Quiet()})
	require.NoError(t, err)
	h, err := console.New(client, pool, w, &console.Options{Connections: func(*http.Request) ([]string, error) { return []string{"dead"}, nil },
		Marks: marks})
	require.NoError(t, err)
	return &fixture{handler: h}, sender, dead, ln
}

// TestConsole_HealthFollowsTheMarksWithoutAnAttempt serves the console from
// an API tier whose own Sender shares the fleet's marks and never makes an
// attempt. It started while the endpoint was marked down, so it holds that
// down. A worker's Sender then finds the endpoint up: the console shows
// "up" at its next read, with no attempt of its own.
func TestConsole_HealthFollowsTheMarksWithoutAnAttempt(t *testing.T) {
	t.Parallel()
	pool, schema := testdb.Schema(t, "console", true)
	ctx := context.Background()
	require.NoError(t, riverhook.Migrate(ctx, pool, schema))
	marks := riverhook.NewEndpointMarks(pool, schema)
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	conn := srv.Connection()
	now := time.Now()
	require.NoError(t, marks.Mark(ctx, webhook.EndpointHealth{Endpoint: conn.Endpoint(), Down: true, Since: now.Add(-time.Minute),
		Changed: now.Add(-time.Second), NextProbe: now.Add(-time.Second), Failures: 4, LastFailure: webhook.Attempt{Kind: webhook.KindRefused}}))

	api := srv.Sender(&webhook.SenderOptions{Health: &webhook.HealthOptions{Marks: marks}})
	require.NoError(t, api.Flush(ctx)) // its first read of the marks, at NewSender
	require.Len(t, api.Health(), 1, "the API tier's Sender starts from the down mark")
	w, err := riverhook.NewWorker(api, func(context.Context, string) (webhook.Connection, error) { return conn, nil }, nil)
	require.NoError(t, err)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema, Logger: testdb.Quiet()})
	require.NoError(t, err)
	h, err := console.New(client, pool, w, &console.Options{
		Connections: func(*http.Request) ([]string, error) { return []string{"crm"}, nil },
		Marks:       marks,
	})
	require.NoError(t, err)
	f := &fixture{handler: h}
	state := func() string {
		return decode[map[string]any](t, f.do(t, "GET", "/api/connections/crm/health", "").Body.String())["state"].(string)
	}
	require.Equal(t, "down", state())
	before := len(srv.Deliveries())

	worker := srv.Sender(&webhook.SenderOptions{Health: &webhook.HealthOptions{Marks: marks, ConfirmUpEvery: time.Minute}})
	a := worker.Attempt(ctx, conn, webhook.EventUserIdentified, []byte(`{}`), 1) // its probe, answered
	require.True(t, a.OK(), "%v", a.Err)
	require.NoError(t, worker.Flush(ctx)) // its mark up, written

	assert.Equal(t, "up", state(), "the worker's mark up, read when the console renders")
	page := f.do(t, "GET", "/connections/crm", "").Body.String()
	assert.True(t, strings.Contains(page, `<span class="health health-up">up</span>`), "the page shows up")
	assert.False(t, strings.Contains(page, "Your endpoint is down."), "the page has no banner")
	assert.Len(t, srv.Deliveries(), before+1, "the worker's probe alone: the API tier made no attempt")
	assert.Len(t, api.Health(), 1, "its own Sender still holds the down it read")
}

// TestPages_ShowNoBidiOverride: what a page shows of a connection's name,
// an actor's name in a resend's reason, an event or a delivery id is made
// printable, as the JSON API makes it: a right-to-left override showed
// "Eve \u202Emoc.elgoog@nimda" as admin@google.com, and a name's spilled
// into the id beside it (review). An actor's NUL was a 500 (review).
func TestPages_ShowNoBidiOverride(t *testing.T) {
	t.Parallel()
	const rlo = "\u202E"
	f := newFixture(t, &console.Options{Connections: customerConnections,
		ConnectionNames: func(_ *http.Request, ids []string) (map[string]string, error) {
			return map[string]string{"crm": "Acme " + rlo + "PRE"}, nil
		},
		Actor: func(*http.Request) string { return "Eve\x00 " + rlo + "moc.elgoog@nimda" }}, false)
	got := f.do(t, "POST", "/api/connections/crm/deliveries/"+strconv.FormatInt(f.jobs["given-up"], 10)+"/resend", "")
	require.Equal(t, http.StatusOK, got.Code, got.Body.String())
	var resent struct {
		JobID int64 `json:"job_id"`
	}
	require.NoError(t, json.Unmarshal(got.Body.Bytes(), &resent))
	for _, path := range []string{"/", "/connections/crm", "/connections/crm/deliveries/" + strconv.FormatInt(resent.JobID, 10)} {
		page := f.do(t, "GET", path, "")
		require.Equal(t, http.StatusOK, page.Code, path)
		assert.NotContains(t, page.Body.String(), rlo, path)
		assert.NotContains(t, page.Body.String(), "\x00", path)
	}
	recovered := f.do(t, "POST", "/api/connections/crm/recover", "since=24h&dry_run=true")
	assert.Equal(t, http.StatusOK, recovered.Code, recovered.Body.String())
}

// TestPages_ShowAPayloadWithoutBidiOverride: the payload a delivery's page
// shows with ShowPayload holds what the user typed (a name, an email),
// and is made printable as every other text of the pages is: a
// right-to-left override in a user's name showed "Eve \u202Emoc.elgoog@nimda"
// as admin@google.com, and reversed the rest of its line.
func TestPages_ShowAPayloadWithoutBidiOverride(t *testing.T) {
	t.Parallel()
	const rlo = "\u202E"
	f := newFixture(t, &console.Options{Connections: customerConnections, ShowPayload: true}, false)
	p := payload("bidi")
	p.User.Name = "Eve " + rlo + "moc.elgoog@nimda"
	ctx := context.Background()
	tx, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	res, err := riverhook.InsertTx(ctx, f.client, tx, "bidi", []string{"crm"}, p, f.worker.InsertOptions(nil))
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	page := f.do(t, "GET", "/connections/crm/deliveries/"+strconv.FormatInt(res[0].Job.ID, 10), "")
	require.Equal(t, http.StatusOK, page.Code)
	require.Contains(t, page.Body.String(), "moc.elgoog@nimda", "the page shows the payload")
	assert.NotContains(t, page.Body.String(), rlo)
}

// TestAPI_AConnectionGoneIsNoFailure: a connection the customer may see,
// whose log is shown, but which the Resolver says is gone (deleted): its
// Send Test and its health are answered 410, saying so, not 500 "internal
// error", logged as the console's failure (review).
func TestAPI_AConnectionGoneIsNoFailure(t *testing.T) {
	t.Parallel()
	f := newFixture(t, &console.Options{Connections: func(*http.Request) ([]string, error) { return []string{"crm", "gone"}, nil }}, false)
	for _, r := range []struct{ method, path, form string }{
		{"POST", "/api/connections/gone/test", "event=user.identified"},
		{"GET", "/api/connections/gone/health", ""},
		{"POST", "/connections/gone/test", "event=user.identified"},
	} {
		got := f.do(t, r.method, r.path, r.form)
		assert.Equal(t, http.StatusGone, got.Code, "%s %s: %s", r.method, r.path, got.Body.String())
		assert.Contains(t, got.Body.String(), "no longer exists", r.path)
	}
}
