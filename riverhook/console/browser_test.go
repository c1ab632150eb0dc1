package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/chromedp"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/riverhook/console"
	"github.com/signedhook/webhook/riverhook/internal/testdb"
	"github.com/signedhook/webhook/webhooktest"
)

// browse serves handler under /console/ on a loopback server and opens
// headless Chromium at 1200 by 800 px, for at most timeout. It returns the
// browser's context and the server's URL; both end with the test.
func browse(t *testing.T, exe string, handler http.Handler, timeout time.Duration) (context.Context, string) {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/console/", http.StripPrefix("/console", handler))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1200, 800))...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(cancel)
	ctx, cancelTimeout := context.WithTimeout(ctx, timeout)
	t.Cleanup(cancelTimeout)
	return ctx, srv.URL
}

// chromium returns the path of Debian's chromium. Without it the test is
// skipped, or fails under CI, where .ci/run installs it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "/usr/bin/chromium"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed: .ci/run installs Debian's chromium package")
	}
	t.Skip("chromium is not installed (apt-get install chromium); skipping the browser test")
	return ""
}

// TestConsole_InABrowser drives headless chromium through the console: the
// service's names for the connections show instead of their ids, the
// deliveries of every status are listed, the charts are drawn with their
// accessible text, a hostile receiver's script does not run, a resend from
// the page makes a new attempt that the started River client delivers, a
// Send Test of the event chosen on the page sends that event, and
// the fleet's mark of the endpoint as down shows as a banner, a failing
// connection's warning gives the date it will be disabled, and a
// disabled connection's Enable button counts what it kept and enables it. With
// UPDATE_SCREENSHOTS=1 it writes the pages' screenshots into ../docs for
// the README.
func TestConsole_InABrowser(t *testing.T) {
	exe := chromium(t)
	f := newFixture(t, nil, true)
	bg := context.Background()
	require.NoError(t, riverhook.Migrate(bg, f.pool, f.schema))
	marks := riverhook.NewEndpointMarks(f.pool, f.schema)
	var err error
	f.handler, err = console.New(f.client, f.pool, f.worker, &console.Options{
		Connections: customerConnections,
		ConnectionNames: func(_ *http.Request, ids []string) (map[string]string, error) {
			return map[string]string{"crm": "Acme CRM", "erp": "Acme ERP"}, nil
		},
		Marks:   marks,
		Samples: map[string]json.RawMessage{"invoice.paid": json.RawMessage(invoicePaid)},
	})
	require.NoError(t, err)
	// A bound on the whole test, for a browser that hangs; a loaded machine
	// takes its time for every page.
	ctx, srvURL := browse(t, exe, f.handler, 5*time.Minute)
	shots := os.Getenv("UPDATE_SCREENSHOTS") != ""
	// shoot writes the whole page's screenshot, or with viewport the
	// window's alone.
	shoot := func(name string, viewport bool) {
		t.Helper()
		if !shots {
			return
		}
		shot := chromedp.FullScreenshot(100)
		if viewport {
			shot = chromedp.CaptureScreenshot()
		}
		png, err := chromedp.Run(ctx, shot)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join("..", "docs", "console-"+name+".png"), png, 0o644))
	}
	// accessible reports whether the page has a node of role, as the
	// browser tells assistive technology, whose accessible name is name
	// (any, for "").
	accessible := func(role, name string) bool {
		t.Helper()
		body, err := chromedp.Run(ctx, chromedp.Nodes(chromedp.CSS("body")))
		require.NoError(t, err)
		found, err := chromedp.Call(ctx, accessibility.QueryAXTree, accessibility.QueryAXTreeParams{
			BackendNodeID: body[0].BackendNodeID, AccessibleName: name, Role: role})
		require.NoError(t, err)
		for _, n := range found.Nodes {
			if !n.Ignored {
				return true
			}
		}
		return false
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		require.NoError(t, err)
		return s
	}
	// pwned reports whether the hostile receiver's script ran: it sets the
	// title and a global.
	pwned := func() (title, global string) {
		t.Helper()
		title, err := chromedp.Run(ctx, chromedp.Title())
		require.NoError(t, err)
		global, err = chromedp.Run(ctx, chromedp.Evaluate[string](`typeof window.pwned`))
		require.NoError(t, err)
		return title, global
	}
	job := func(d string) string { return strconv.FormatInt(f.jobs[d], 10) }

	// The connections, by the service's names.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srvURL+"/console/"),
		chromedp.WaitVisible(chromedp.CSS("ul.connections")),
	))
	assert.Equal(t, "Acme CRM", text("ul.connections a"), "the name, not the id, is the link")
	assert.Equal(t, "crm", text("ul.connections .conn"), "the id beside it")

	// The list: a row per delivery, in every status, the interrupted one marked.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srvURL+"/console/connections/crm"),
		chromedp.WaitVisible(chromedp.CSS("table.deliveries")),
	))
	rows := text("table.deliveries tbody")
	for _, want := range []string{"delivered", "retrying", "given up", "waiting", "cancelled", "interrupted", "503 Service Unavailable"} {
		assert.Contains(t, rows, want)
	}
	title, global := pwned()
	assert.Equal(t, "Deliveries to Acme CRM", title, "the connection's name")
	assert.Equal(t, "undefined", global)
	assert.Equal(t, "Deliveries to Acme CRM crm", text("h1"))
	assert.Equal(t, "unknown", text(".health"), "no mark yet: never a false up")
	assert.False(t, accessible("alert", ""), "no banner while nothing is known")

	// The charts: drawn, and told in words to assistive technology. The
	// fixture's deliveries ended in the last hour: 2 delivered (one after
	// an interrupted run), 2 given up, 1 cancelled.
	for id, label := range map[string]string{
		"day":  "Last 24 hours, by the hour: 2 delivered, 2 given up, 1 cancelled",
		"week": "Last 7 days, by the day: 2 delivered, 2 given up, 1 cancelled",
	} {
		svg := "#chart-" + id + " svg"
		require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(svg))))
		assert.True(t, accessible("image", label), "no image named %q", label)
		caption := strings.Join(strings.Fields(text("#chart-"+id+" figcaption")), " ")
		assert.True(t, strings.HasPrefix(caption, label+" "), "the caption says it too: %q", caption)
		bars := map[string]int{"day": 24, "week": 7}[id]
		drawn, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("`+svg+` g > title"), t => t.textContent)`))
		require.NoError(t, err)
		require.Len(t, drawn, bars, "a bar per period")
		assert.Contains(t, drawn[bars-1], ": 2 delivered, 2 given up, 1 cancelled", "the last period's bar, in its title")
		segs, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]float64](`Object.fromEntries(["delivered", "given-up", "cancelled"].map(c =>
			[c, document.querySelector("`+svg+` rect.seg-" + c).getBoundingClientRect().height]))`))
		require.NoError(t, err)
		for class, height := range segs {
			assert.Positive(t, height, "%s: the %s segment is drawn", id, class)
		}
	}
	shoot("charts", true)
	shoot("list", false)

	// A Send Test of the service's own event, chosen on the page: the
	// endpoint gets that event, with the service's sample.
	sent := len(f.srv.Deliveries())
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SetValue(chromedp.ID("test-event"), "invoice.paid"),
		chromedp.Click(chromedp.ID("send-test")),
		chromedp.WaitVisible(chromedp.ID("test")),
	))
	assert.Contains(t, text("#test"), "Send Test of invoice.paid at ")
	ds := f.srv.Deliveries()
	require.Len(t, ds, sent+1, "one test")
	assert.Equal(t, "invoice.paid", ds[sent].Header.Get(webhook.HeaderEvent))
	assert.Equal(t, invoicePaid, string(ds[sent].Body))

	// The hostile receiver's answer is shown as text, and runs nothing.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srvURL+"/console/connections/crm/deliveries/"+job("hostile")),
		chromedp.WaitVisible(chromedp.CSS("table.attempts")),
		chromedp.Sleep(200*time.Millisecond), // an onerror would have fired
	))
	assert.Contains(t, text("table.attempts .excerpt"), `<script>document.title="pwned"`, "shown as text")
	title, global = pwned()
	assert.Equal(t, "Delivery hostile", title, "the receiver's script did not set the title")
	assert.Equal(t, "undefined", global, "nor a global")

	// An interrupted run, marked as such.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srvURL+"/console/connections/crm/deliveries/"+job("interrupted")),
		chromedp.WaitVisible(chromedp.CSS("tr.interrupted")),
	))
	assert.Contains(t, text("tr.interrupted"), "cost no attempt")
	shoot("interrupted", false)

	// A delivery that gave up, resent from its page: the new job runs.
	before := len(f.srv.Deliveries())
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srvURL+"/console/connections/crm/deliveries/"+job("given-up")),
		chromedp.WaitVisible(chromedp.ID("resend")),
	))
	shoot("delivery", false)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.ID("resend")), chromedp.WaitVisible(chromedp.ID("done"))))
	assert.Contains(t, text("#done"), "Resent")
	status := ""
	for deadline := time.Now().Add(30 * time.Second); status != "delivered" && time.Now().Before(deadline); {
		require.NoError(t, chromedp.Do(ctx, chromedp.Sleep(100*time.Millisecond), chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("status"))))
		status = text("#status")
	}
	require.Equal(t, "delivered", status, "the resend's job ran")
	assert.Contains(t, text("table.attempts tbody"), "200 OK")
	url, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(url, srvURL+"/console/connections/crm/deliveries/"), url)
	assert.NotContains(t, url, "/deliveries/"+job("given-up")+"?", "the new delivery's page")
	assert.Len(t, f.srv.Deliveries(), before+1, "one new attempt")

	// The given-up delivery's page now says it was resent, and offers no
	// second Resend.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srvURL+"/console/connections/crm/deliveries/"+job("given-up")),
		chromedp.WaitVisible(chromedp.ID("resent-as")),
	))
	assert.Equal(t, "as a later delivery", text("#resent-as"))
	assert.Equal(t, "Deliveries to Acme CRM", text(".crumbs"), "the name in the crumbs")
	buttons, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#resend").length`))
	require.NoError(t, err)
	assert.Zero(t, buttons, "no Resend button")

	// A worker marks the endpoint down: the page says so at the top.
	now := time.Now()
	require.NoError(t, marks.Mark(bg, webhook.EndpointHealth{Endpoint: f.srv.Connection().Endpoint(), Down: true,
		Since: now.Add(-3 * time.Minute), Changed: now.Add(-3 * time.Minute), NextProbe: now.Add(time.Minute), Failures: 3,
		LastFailure: webhook.Attempt{Kind: webhook.KindRefused}}))
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srvURL+"/console/connections/crm"),
		chromedp.WaitVisible(chromedp.CSS(".banner.down")),
	))
	banner := text(".banner.down")
	assert.True(t, strings.HasPrefix(banner, "Your endpoint is down."), banner)
	assert.Contains(t, banner, "(3 in a row, the last: refused)")
	assert.Contains(t, banner, "Deliveries wait for it without spending their attempts")
	assert.True(t, accessible("alert", ""), "the banner is an alert to assistive technology")
	assert.Equal(t, "down", text(".health"))
	shoot("down", true)

	// The connection has been failing for an hour: its page warns of the
	// date it will be disabled.
	_, err = f.pool.Exec(bg, `INSERT INTO `+f.schema+`.riverhook_connection_state
		(connection_id, state, failing_since, last_failure, disable_at, warned_at)
		VALUES ('crm', 'failing', $1, $2, $3, $2)`, now.Add(-time.Hour), now, now.Add(time.Hour))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srvURL+"/console/connections/crm"),
		chromedp.WaitVisible(chromedp.CSS("#life.failing")),
	))
	warning := strings.Join(strings.Fields(text("#life")), " ")
	assert.True(t, strings.HasPrefix(warning, "This connection is failing since "), warning)
	assert.Regexp(t, `It will be disabled at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC unless a delivery succeeds\.$`, warning)
	assert.True(t, accessible("status", ""), "the warning is a status to assistive technology")
	shoot("failing", true)

	// The service disables the failing connection: its page says so, with the
	// reason, and its Enable button counts the kept deliveries; a click
	// enables it.
	_, err = riverhook.Disable(bg, f.client, f.pool, "crm")
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srvURL+"/console/connections/crm"),
		chromedp.WaitVisible(chromedp.ID("enable")),
	))
	life := strings.Join(strings.Fields(text("#life")), " ")
	assert.True(t, strings.HasPrefix(life, "This connection is disabled since "), life)
	assert.Contains(t, life, "disabled by the service")
	assert.Regexp(t, `^Enable and send [1-9]\d* kept deliver`, text("#enable"))
	shoot("disabled", true)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.ID("enable")), chromedp.WaitNotPresent(chromedp.ID("enable"))))
	s, err := riverhook.StateOf(bg, f.client, f.pool, "crm")
	require.NoError(t, err)
	assert.Equal(t, riverhook.StateActive, s.State, "enabled from the page")
}

// TestBrowser_HostileTextKeepsTheLayout: what a person sees in Chromium at
// 1200 px, with hostile text (review):
//   - a receiver's redirect to a 600-character host: the diagnosis is one
//     unbroken string, which the attempts' table kept on one line, and the
//     Send Test's notice did not break either: the pages scrolled sideways
//     by thousands of pixels;
//   - a connection's name with a right-to-left override: it ran on into the
//     connection's id beside it in the heading, which read reversed.
func TestBrowser_HostileTextKeepsTheLayout(t *testing.T) {
	exe := chromium(t)
	f := newFixture(t, nil, false)
	ctx := context.Background()
	var err error
	f.handler, err = console.New(f.client, f.pool, f.worker, &console.Options{
		Connections: customerConnections,
		ConnectionNames: func(_ *http.Request, ids []string) (map[string]string, error) {
			return map[string]string{"crm": "Acme \u202EPRE"}, nil
		},
	})
	require.NoError(t, err)

	long := "https://" + strings.Repeat("a", 600) + ".example/next"
	// A delivery whose one attempt is answered by the redirect.
	f.srv.Script(webhooktest.Redirect(long))
	tw := rivertest.NewWorker(t, riverpgxv5.New(nil), &river.Config{Schema: f.schema, Logger: testdb.Quiet()}, f.worker)
	tx, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	res, err := riverhook.InsertTx(ctx, f.client, tx, "redirected", []string{"crm"}, payload("redirected"), f.worker.InsertOptions(nil))
	require.NoError(t, err)
	job, err := f.client.JobGetTx(ctx, tx, res[0].Job.ID)
	require.NoError(t, err)
	tw.WorkJob(ctx, t, tx, job) //nolint:errcheck // the log tells
	require.NoError(t, tx.Commit(ctx))
	// A Send Test answered by the same redirect.
	f.srv.Script(webhooktest.Redirect(long))
	got := f.do(t, "POST", "/connections/crm/test", "event=user.identified")
	require.Equal(t, http.StatusSeeOther, got.Code, got.Body.String())

	bctx, srvURL := browse(t, exe, f.handler, 2*time.Minute)
	overflow := func() int {
		t.Helper()
		n, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth - document.documentElement.clientWidth`))
		require.NoError(t, err)
		return n
	}

	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(srvURL+"/console/connections/crm/deliveries/"+strconv.FormatInt(res[0].Job.ID, 10)),
		chromedp.WaitVisible(chromedp.CSS("table.attempts")),
	))
	assert.LessOrEqual(t, overflow(), 0, "the delivery's page scrolls sideways by this many px")

	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(srvURL+"/console/connections/crm"),
		chromedp.WaitVisible(chromedp.ID("test")),
	))
	assert.LessOrEqual(t, overflow(), 0, "the connection's page (its Send Test notice) scrolls sideways by this many px")

	// The id "crm" beside the name, as laid out: its first letter must be
	// left of its last.
	xs, err := chromedp.Run(bctx, chromedp.Evaluate[[]float64](`(() => {
		const n = document.querySelector("h1 .conn").firstChild, x = i => {
			const r = document.createRange(); r.setStart(n, i); r.setEnd(n, i + 1); return r.getBoundingClientRect().left };
		return [x(0), x(2)] })()`))
	require.NoError(t, err)
	h1, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("h1")))
	require.NoError(t, err)
	assert.Less(t, xs[0], xs[1], "the id %q reads reversed in the heading %q: 'c' at x=%v, 'm' at x=%v", "crm", h1, xs[0], xs[1])
}
