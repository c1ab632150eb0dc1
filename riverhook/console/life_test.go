package console_test

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook/riverhook"
)

// A disabled connection's page says so, with its reason, and offers Enable
// with the count of its kept deliveries; the button enables it, behind the
// console's cross-origin protection, and the page then shows no banner.
func TestConsole_ShowsADisabledConnectionAndEnablesIt(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, false)
	ctx := context.Background()
	page := func() string {
		got := f.do(t, "GET", "/connections/crm", "")
		require.Equal(t, http.StatusOK, got.Code)
		return got.Body.String()
	}
	assert.NotContains(t, page(), `id="life"`, "an active connection has no banner")

	_, err := riverhook.Disable(ctx, f.client, f.pool, "crm")
	require.NoError(t, err)
	banner := lifeBanner(page())
	assert.Contains(t, banner, "This connection is disabled")
	assert.Contains(t, banner, "disabled by the service")
	assert.Contains(t, banner, "Enable and send 2 kept deliveries", "the retrying and the waiting ones")

	cross := f.do(t, "POST", "/connections/crm/enable", "", "Sec-Fetch-Site", "cross-site")
	assert.Equal(t, http.StatusForbidden, cross.Code, "a cross-origin post")
	s, err := riverhook.StateOf(ctx, f.client, f.pool, "crm")
	require.NoError(t, err)
	assert.Equal(t, riverhook.StateDisabled, s.State, "still disabled")

	got := f.do(t, "POST", "/connections/crm/enable", "")
	require.Equal(t, http.StatusSeeOther, got.Code, got.Body.String())
	assert.True(t, strings.HasSuffix(got.Header().Get("Location"), "connections/crm#life"), got.Header().Get("Location"))
	s, err = riverhook.StateOf(ctx, f.client, f.pool, "crm")
	require.NoError(t, err)
	assert.Equal(t, riverhook.StateActive, s.State)
	after := page()
	assert.Empty(t, lifeBanner(after))
	history := historyRows(after)
	require.Len(t, history, 2, "the disable, then the enable")
	assert.Contains(t, history[0], "Enabled 2", "newest first, with the deliveries it sent")
	assert.Contains(t, history[1], "Disabled (by the service) 2")
	again := f.do(t, "POST", "/connections/crm/enable", "")
	assert.Equal(t, http.StatusConflict, again.Code, "not disabled: nothing to enable")
	_, err = riverhook.Disable(ctx, f.client, f.pool, "crm")
	require.NoError(t, err)
	again = f.do(t, "POST", "/connections/crm/enable", "")
	assert.Equal(t, http.StatusTooManyRequests, again.Code, "rate-limited as a recover is")
}

// lifeBanner returns the text of page's banner of the connection's life, or
// "".
func lifeBanner(page string) string {
	m := regexp.MustCompile(`(?s)<div class="banner[^"]*"[^>]*id="life">(.*?)</div>`).FindStringSubmatch(page)
	if m == nil {
		return ""
	}
	return strings.Join(strings.Fields(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(m[1], " ")), " ")
}

// historyRows returns the text of each row of page's history of the
// connection, newest first.
func historyRows(page string) []string {
	m := regexp.MustCompile(`(?s)<table class="history">.*?<tbody>(.*?)</tbody>`).FindStringSubmatch(page)
	if m == nil {
		return nil
	}
	var rows []string
	for _, tr := range regexp.MustCompile(`(?s)<tr[^>]*>(.*?)</tr>`).FindAllStringSubmatch(m[1], -1) {
		rows = append(rows, strings.Join(strings.Fields(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(tr[1], " ")), " "))
	}
	return rows
}

// A failing connection's page gives the date it will be disabled.
func TestConsole_ShowsWhenAFailingConnectionWillBeDisabled(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, false)
	_, err := f.pool.Exec(context.Background(), `INSERT INTO `+f.schema+`.riverhook_connection_state
		(connection_id, state, failing_since, last_failure, disable_at, warned_at)
		VALUES ('crm', 'failing', '2026-12-06 01:00:00Z', '2026-12-06 02:00:00Z', '2026-12-06 13:00:00Z', '2026-12-06 01:00:00Z')`)
	require.NoError(t, err)
	got := f.do(t, "GET", "/connections/crm", "")
	require.Equal(t, http.StatusOK, got.Code)
	assert.Equal(t, "This connection is failing since 2026-12-06 01:00:00 UTC. It will be disabled at 2026-12-06 13:00:00 UTC unless a delivery succeeds.",
		lifeBanner(got.Body.String()))
	assert.NotContains(t, got.Body.String(), `id="enable"`, "nothing to enable yet")
}

// A failing connection's page offers no Enable (nothing to enable yet), but
// the route enables it all the same: a customer's POST (the console is
// theirs, scoped by Options.Connections) makes it active, which cuts its
// failing span, so one POST every few hours (the rate limit allows one a
// RecoverEvery) keeps a dead endpoint from ever being disabled, and each
// one pulls every retry of the failing endpoint forward to now, past its
// backoff.
func TestConsole_EnableRefusesAConnectionNotDisabled(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, false)
	ctx := context.Background()
	_, err := f.pool.Exec(ctx, `INSERT INTO `+f.schema+`.riverhook_connection_state
		(connection_id, state, failing_since, last_failure, disable_at, changed)
		VALUES ('crm', 'failing', now() - interval '11 hours', now(), now() + interval '1 hour', now() - interval '11 hours')`)
	require.NoError(t, err)

	got := f.do(t, "POST", "/connections/crm/enable", "")
	s, err := riverhook.StateOf(ctx, f.client, f.pool, "crm")
	require.NoError(t, err)
	assert.NotEqual(t, http.StatusSeeOther, got.Code, "enabled a failing connection the page offers no Enable for")
	assert.Equal(t, riverhook.StateFailing, s.State, "the failing span was cut by the customer's POST: DisableAt moved from 1 h away to never")
}
