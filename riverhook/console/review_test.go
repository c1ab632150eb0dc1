package console_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
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
