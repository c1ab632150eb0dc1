package console_test

import (
	"cmp"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook/riverhook/console"
)

// A double click on a delivery's Resend button posts its form twice, the
// second post before or after the first's answer; the browser shows the
// second's. Both are the one resend: the second is not refused by the
// resend rate limit (it inserts nothing) and leads to what the first led
// to, the new delivery's page saying it was resent. The limit still holds
// for any other delivery of the connection, and another person's resend
// of the same delivery says it was resent already.
func TestConsole_ADoubleClickOnResendIsOneResend(t *testing.T) {
	t.Parallel()
	f := newFixture(t, &console.Options{Connections: customerConnections, ResendEvery: time.Hour,
		Actor: func(r *http.Request) string { return cmp.Or(r.Header.Get("X-Actor"), "ann@customer") }}, false)
	resend := func(conn, d string) string {
		return "/connections/" + conn + "/deliveries/" + strconv.FormatInt(f.jobs[d], 10) + "/resend"
	}
	count := func(conn string) int {
		return len(decode[listJSON](t, f.do(t, "GET", "/api/connections/"+conn+"/deliveries?limit=100", "", "X-Customer", "both").Body.String()).Deliveries)
	}
	follow := func(loc string) string {
		if loc == "" {
			return ""
		}
		u, err := url.Parse("https://service.example/console/connections/crm/deliveries/1/resend")
		require.NoError(t, err)
		u, err = u.Parse(loc)
		require.NoError(t, err)
		return f.do(t, "GET", strings.TrimPrefix(u.RequestURI(), "/console"), "", "X-Customer", "both").Body.String()
	}

	// One click after the other's answer.
	first := f.do(t, "POST", resend("crm", "given-up"), "")
	require.Equal(t, http.StatusSeeOther, first.Code, first.Body.String())
	second := f.do(t, "POST", resend("crm", "given-up"), "")
	assert.Equal(t, http.StatusSeeOther, second.Code, "the double click's second post: %s", second.Body.String())
	assert.Equal(t, first.Header().Get("Location"), second.Header().Get("Location"), "where the first led")
	assert.Contains(t, follow(second.Header().Get("Location")), "Resent: this is the new delivery")
	api := f.do(t, "POST", "/api"+resend("crm", "given-up"), "")
	assert.Equal(t, http.StatusOK, api.Code, "the API's repeat: %s", api.Body.String())
	assert.Contains(t, api.Body.String(), `"inserted": false`)
	other := f.do(t, "POST", resend("crm", "given-up"), "", "X-Actor", "bob@customer")
	assert.Equal(t, http.StatusSeeOther, other.Code, "another person's: %s", other.Body.String())
	assert.Contains(t, follow(other.Header().Get("Location")), "This delivery was already sent again", "another person's")
	assert.Equal(t, 8, count("crm"), "one delivery more")

	// Two posts at once: the second sent before the first was answered.
	var wg sync.WaitGroup
	var both [2]*httptest.ResponseRecorder
	for i := range both {
		wg.Go(func() { both[i] = f.do(t, "POST", resend("erp", "other"), "", "X-Customer", "both") })
	}
	wg.Wait()
	for _, got := range both {
		assert.Equal(t, http.StatusSeeOther, got.Code, got.Body.String())
		assert.Equal(t, both[0].Header().Get("Location"), got.Header().Get("Location"))
	}
	assert.Contains(t, both[0].Header().Get("Location"), "done=resent")
	assert.Equal(t, 2, count("erp"), "one delivery more")

	// The limit holds for the connection's other deliveries.
	for _, path := range []string{resend("crm", "hostile"), "/api" + resend("crm", "delivered")} {
		got := f.do(t, "POST", path, "")
		assert.Equal(t, http.StatusTooManyRequests, got.Code, path)
		assert.NotEmpty(t, got.Header().Get("Retry-After"), path)
	}
	assert.Equal(t, 8, count("crm"), "nothing resent")
}

// A page's notice says what the console did, never what a link's query
// says: a link to a connection's page claiming that a recover resent 9999
// deliveries, or to a delivery's page claiming that it is a resend just
// made, shows no such notice. After a recover its page shows what it did,
// whatever the link's query, and only on its connection's page.
func TestConsole_ALinkCannotForgeANotice(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, false)
	get := func(path string) string {
		got := f.do(t, "GET", path, "", "X-Customer", "both")
		require.Equal(t, http.StatusOK, got.Code, path)
		return got.Body.String()
	}
	assert.Empty(t, notice(get("/connections/crm?recovered=9999&given_up=9999&more=1"), "recovered"), "a forged recover")
	for _, done := range []string{"resent", "pending"} {
		page := get("/connections/crm/deliveries/" + strconv.FormatInt(f.jobs["given-up"], 10) + "?done=" + done)
		assert.Empty(t, notice(page, "done"), "a given-up delivery's page, claimed %s", done)
	}

	got := f.do(t, "POST", "/connections/crm/recover", "since=24h")
	require.Equal(t, http.StatusSeeOther, got.Code, got.Body.String())
	loc, err := url.Parse(got.Header().Get("Location"))
	require.NoError(t, err)
	assert.Empty(t, loc.RawQuery, "nothing of the notice in the link")
	assert.Contains(t, notice(get("/connections/crm"), "recovered"), "2 given-up deliveries resent")
	forged := notice(get("/connections/crm?recovered=9999&given_up=9999&dry=1"), "recovered")
	assert.Contains(t, forged, "2 given-up deliveries resent", "what the console did")
	assert.NotContains(t, forged, "9999")
	assert.NotContains(t, forged, "would be resent")
	assert.Empty(t, notice(get("/connections/erp?recovered=9999"), "recovered"), "another connection's page")
}

// notice returns the text of page's notice with id, or "" when it has none.
func notice(page, id string) string {
	m := regexp.MustCompile(`(?s)<div class="notice[^"]*" id="` + id + `">(.*?)</div>`).FindStringSubmatch(page)
	if m == nil {
		return ""
	}
	return strings.Join(strings.Fields(m[1]), " ")
}

// TestAPI_ParametersItCannotReadAreRefusedNeverRunForReal: a dry run asked
// for in a form the console cannot decode (a stray "%", as a hand-written
// curl makes), or in a body of another type (JSON), is refused with 400 and
// nothing is recovered. r.FormValue dropped what it could not read, and
// dry_run, read as absent, ran the recover for real (review).
func TestAPI_ParametersItCannotReadAreRefusedNeverRunForReal(t *testing.T) {
	t.Parallel()
	f := newFixture(t, &console.Options{Connections: customerConnections, RecoverEvery: -1}, false)
	for _, tc := range []struct{ name, body, contentType, want string }{
		{"a stray %", "since=24h&dry_run=true%", "application/x-www-form-urlencoded", "cannot be read"},
		{"JSON", `{"since":"24h","dry_run":true}`, "application/json", "application/json"},
		{"no type", "since=24h&dry_run=true", "", "the body has no Content-Type: send the parameters in the query, or as a form"},
	} {
		got := f.do(t, "POST", "/api/connections/crm/recover", tc.body, "Content-Type", tc.contentType)
		assert.Equal(t, http.StatusBadRequest, got.Code, "%s: %s", tc.name, got.Body.String())
		assert.Contains(t, got.Body.String(), tc.want, tc.name)
		assert.NotContains(t, got.Body.String(), `"resent"`, "%s: it recovered", tc.name)
	}
	got := f.do(t, "POST", "/api/connections/crm/recover?since=24h&dry_run=true", "")
	assert.Equal(t, http.StatusOK, got.Code, "the query, with no body: %s", got.Body.String())
	assert.Contains(t, got.Body.String(), `"dry_run": true`)
}

// TestAPI_ParametersItCannotReadAreRefusedWhateverReadThemFirst: the
// Connections func may read a parameter (r.FormValue) before the action
// reads its own; the parameters it could not decode are refused all the
// same. r.ParseForm reports what it could not decode only the first time
// it runs, and the recover ran for real (review).
func TestAPI_ParametersItCannotReadAreRefusedWhateverReadThemFirst(t *testing.T) {
	t.Parallel()
	f := newFixture(t, &console.Options{RecoverEvery: -1, Connections: func(r *http.Request) ([]string, error) {
		_ = r.FormValue("customer") // as a scope check may read one
		return customerConnections(r)
	}}, false)
	for _, tc := range []struct{ name, path, body string }{
		{"in the form", "/api/connections/crm/recover", "since=24h&dry_run=true%"},
		{"in the query", "/api/connections/crm/recover?since=24h&dry_run=true%", ""},
	} {
		got := f.do(t, "POST", tc.path, tc.body)
		assert.Equal(t, http.StatusBadRequest, got.Code, "%s: %s", tc.name, got.Body.String())
		assert.NotContains(t, got.Body.String(), `"resent"`, "%s: it recovered", tc.name)
	}
}
