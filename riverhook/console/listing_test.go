package console_test

import (
	"context"
	"fmt"
	"html"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/riverhook/console"
)

// links returns the href and action values of page, unescaped.
func links(page string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(?:href|action)="([^"]*)"`).FindAllStringSubmatch(page, -1) {
		out = append(out, html.UnescapeString(m[1]))
	}
	return out
}

// olderLink returns the page's "Older deliveries" link, or "".
func olderLink(page string) string {
	m := regexp.MustCompile(`<a href="([^"]*)" id="older">`).FindStringSubmatch(page)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

// A connection id such as "acme:crm" (a service's ids often carry a
// namespace) is a relative link's first segment on its page: written as it
// is, the browser reads "acme:" as a URL scheme, and html/template replaces
// every such link by "#ZgotmplZ". The connection's filters, its rows and
// its older page must all link under the connection.
func TestConsole_LinksOfAConnectionWhoseIDHasAColon(t *testing.T) {
	t.Parallel()
	const conn = "acme:crm"
	f := newFixture(t, &console.Options{Connections: func(*http.Request) ([]string, error) { return []string{conn}, nil }}, false)
	ctx := context.Background()
	for i := range 3 {
		params, err := riverhook.InsertParams(fmt.Sprintf("colon-%d", i), []string{conn}, payload("colon"), f.worker.InsertOptions(nil))
		require.NoError(t, err)
		_, err = f.client.InsertMany(ctx, params)
		require.NoError(t, err)
	}
	got := f.do(t, "GET", "/connections/"+conn+"?limit=2", "")
	require.Equal(t, http.StatusOK, got.Code, got.Body.String())
	page := got.Body.String()
	assert.Zero(t, strings.Count(page, "#ZgotmplZ"), "links html/template found unsafe and replaced")
	require.NotEmpty(t, olderLink(page), "two of three deliveries: an older page")
	at, _ := url.Parse("https://service.example/console/connections/" + conn + "?limit=2")
	rows := 0
	for _, l := range links(page) {
		u, err := at.Parse(l)
		require.NoError(t, err, l)
		assert.Equal(t, "https", u.Scheme, "%q is not a link of the console's", l)
		assert.True(t, strings.HasPrefix(u.Path, "/console/"), "%q leads to %s, out of the console", l, u)
		if strings.Contains(u.Path, "/deliveries/") {
			rows++
			assert.Regexp(t, `^/console/connections/acme:crm/deliveries/\d+$`, u.Path)
		}
	}
	assert.Equal(t, 2, rows, "each row links to its delivery")

	// The delivery the first row links to opens.
	for _, l := range links(page) {
		if u, _ := at.Parse(l); u != nil && strings.Contains(u.Path, "/deliveries/") {
			got := f.do(t, "GET", strings.TrimPrefix(u.Path, "/console"), "")
			assert.Equal(t, http.StatusOK, got.Code, u.Path)
			break
		}
	}
}

// The "Older deliveries" link pages through the listing the page shows:
// the same filters (every status asked for, the event, the time range)
// and the same page size. Following it page after page shows exactly the
// deliveries the JSON API lists for those filters.
func TestConsole_OlderPagesKeepTheListingsFilters(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, false)
	ctx := context.Background()
	for i := range 2 {
		params, err := riverhook.InsertBytesParams(fmt.Sprintf("deleted-%d", i), []string{"crm"}, "user.deleted",
			[]byte(`{"event":"user.deleted","user":{"id":"usr_gone"}}`), f.worker.InsertOptions(nil))
		require.NoError(t, err)
		_, err = f.client.InsertMany(ctx, params)
		require.NoError(t, err)
	}
	jobRE := regexp.MustCompile(`<tr data-job="(\d+)"`)
	for _, query := range []string{
		"status=given_up&status=retrying",
		"event=user.deleted",
		"event=user.identified&status=delivered,given_up",
	} {
		api := decode[listJSON](t, f.do(t, "GET", "/api/connections/crm/deliveries?limit=1000&"+query, "").Body.String())
		var want []string
		for _, d := range api.Deliveries {
			want = append(want, fmt.Sprint(d.JobID))
		}
		require.NotEmpty(t, want, query)

		var shown []string
		at, _ := url.Parse("https://service.example/console/connections/crm?limit=1&" + query)
		for n := 0; at != nil && n < 20; n++ {
			got := f.do(t, "GET", strings.TrimPrefix(at.RequestURI(), "/console"), "")
			require.Equal(t, http.StatusOK, got.Code, at.String())
			page := got.Body.String()
			rows := jobRE.FindAllStringSubmatch(page, -1)
			assert.LessOrEqual(t, len(rows), 1, "%s: the page size asked for", at.RequestURI())
			for _, m := range rows {
				shown = append(shown, m[1])
			}
			next := olderLink(page)
			if next == "" {
				break
			}
			at, _ = at.Parse(next)
		}
		assert.Equal(t, want, slices.Compact(shown), "%s: the deliveries shown page after page", query)
	}
}

// An event filter no delivery can have (a NUL, bytes that are not UTF-8:
// what PostgreSQL's text refuses) is the request's error, answered 400 as
// an unknown status is; not a database error answered 500 and logged as
// the service's own, which anyone signed in could fill the error log with.
func TestConsole_AnOddEventFilterIsABadRequest(t *testing.T) {
	t.Parallel()
	var logged strings.Builder
	var mu sync.Mutex
	f := newFixture(t, &console.Options{Connections: customerConnections,
		Logger: slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return logged.Write(p)
		}), &slog.HandlerOptions{Level: slog.LevelError}))}, false)
	for _, q := range []string{"?event=%00", "?event=user%00identified", "?event=%ff", "?event=user.identified%0d%0a"} {
		got := f.do(t, "GET", "/api/connections/crm/deliveries"+q, "")
		assert.Equal(t, http.StatusBadRequest, got.Code, "%s: %s", q, got.Body.String())
		got = f.do(t, "GET", "/connections/crm"+q, "")
		assert.Equal(t, http.StatusBadRequest, got.Code, q)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, logged.String(), "nothing of the service's failed")
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// A listing's parameter the console cannot decode (a stray %, a ;
// separator) is the request's error, answered 400, as a POST's is: read as
// absent, a filter asked for is dropped, and a script that lists the
// given-up deliveries to act on them gets every delivery, the delivered
// ones included, answered 200 as if it had asked for them.
func TestConsole_AListingsParameterItCannotReadIsABadRequest(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, false)
	for _, q := range []string{"?status=given_up%", "?status=given_up;limit=1", "?status=given_up&event=user%zzidentified"} {
		got := f.do(t, "GET", "/api/connections/crm/deliveries"+q, "")
		assert.Equal(t, http.StatusBadRequest, got.Code, "%s: %.300s", q, got.Body.String())
		got = f.do(t, "GET", "/connections/crm"+q, "")
		assert.Equal(t, http.StatusBadRequest, got.Code, q)
	}
}
