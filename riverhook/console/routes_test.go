package console_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A request no route takes is answered in the API's shape under /api/ (a
// JSON error, as every other error of the API), and with the console's
// own page elsewhere: 404 for a path the console does not have, 405 with
// Allow for a method its path does not take, 403 for a browser's
// cross-origin POST. Each with the pages' security headers.
// routeCase is a request no route takes, and how it is answered.
type routeCase struct {
	method, path string
	status       int
	allow        string
	header       []string
}

// do makes tc's request of f and checks what every answer to it has: its
// status, Content-Type, Allow and security headers.
func (tc routeCase) do(t *testing.T, f *fixture, contentType string) (string, *httptest.ResponseRecorder) {
	t.Helper()
	name := tc.method + " " + tc.path
	got := f.do(t, tc.method, tc.path, "", tc.header...)
	assert.Equal(t, tc.status, got.Code, name)
	assert.Equal(t, contentType, got.Header().Get("Content-Type"), name)
	assert.Equal(t, tc.allow, got.Header().Get("Allow"), name)
	assert.NotEmpty(t, got.Header().Get("Content-Security-Policy"), name)
	return name, got
}

func TestConsole_AnswersWhatNoRouteTakesInTheAPIsShapeOrAsAPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, false)
	job := strconv.FormatInt(f.jobs["given-up"], 10)
	unknown := f.do(t, "GET", "/api/connections/nope/deliveries", "") // the scope's 404
	require.Equal(t, http.StatusNotFound, unknown.Code)
	for _, tc := range []routeCase{
		{method: "GET", path: "/api/nope", status: http.StatusNotFound},
		{method: "GET", path: "/api/", status: http.StatusNotFound},
		{method: "GET", path: "/api/connections/crm", status: http.StatusNotFound},
		{method: "GET", path: "/api/connections/crm/nope", status: http.StatusNotFound},
		{method: "GET", path: "/api/connections/erp/nope", status: http.StatusNotFound}, // another's, as unknown
		{method: "POST", path: "/api/connections/crm/deliveries/" + job + "/nope", status: http.StatusNotFound},
		{method: "GET", path: "/api/connections/crm/recover", status: http.StatusMethodNotAllowed, allow: "POST"},
		{method: "GET", path: "/api/connections/crm/deliveries/" + job + "/resend", status: http.StatusMethodNotAllowed, allow: "POST"},
		{method: "DELETE", path: "/api/connections/crm/deliveries/" + job, status: http.StatusMethodNotAllowed, allow: "GET, HEAD"},
		{method: "POST", path: "/api/connections/crm/test", status: http.StatusForbidden, header: []string{"Sec-Fetch-Site", "cross-site"}},
	} {
		name, got := tc.do(t, f, "application/json; charset=utf-8")
		var e map[string]string
		if assert.NoError(t, json.Unmarshal(got.Body.Bytes(), &e), "%s: %s", name, got.Body.String()) {
			assert.NotEmpty(t, e["error"], "%s: {\"error\": ...}: %s", name, got.Body.String())
			assert.Len(t, e, 1, name)
		}
		if tc.status == http.StatusNotFound {
			assert.Equal(t, unknown.Body.String(), got.Body.String(), "%s: as an unknown connection", name)
		}
	}

	for _, tc := range []routeCase{
		{method: "GET", path: "/nope", status: http.StatusNotFound},
		{method: "GET", path: "/connections/crm/nope", status: http.StatusNotFound},
		{method: "GET", path: "/connections/crm/test", status: http.StatusMethodNotAllowed, allow: "POST"},
		{method: "POST", path: "/connections/crm", status: http.StatusMethodNotAllowed, allow: "GET, HEAD"},
		{method: "POST", path: "/connections/crm/test", status: http.StatusForbidden, header: []string{"Sec-Fetch-Site", "cross-site"}},
	} {
		name, got := tc.do(t, f, "text/html; charset=utf-8")
		assert.True(t, strings.HasPrefix(got.Body.String(), "<!doctype html>"), "%s: the console's page: %.80s", name, got.Body.String())
	}
	assert.Len(t, f.srv.Deliveries(), 8, "no test sent")
}
