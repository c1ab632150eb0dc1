package riverhook_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/webhooktest"
)

// jobRowsText returns every job row of the schema as PostgreSQL prints it.
func jobRowsText(t *testing.T, tx pgx.Tx, schema string) string {
	t.Helper()
	rows, err := tx.Query(context.Background(), "SELECT j::text FROM "+schema+".river_job j")
	require.NoError(t, err)
	defer rows.Close()
	var all strings.Builder
	for rows.Next() {
		var row string
		require.NoError(t, rows.Scan(&row))
		all.WriteString(row + "\n")
	}
	require.NoError(t, rows.Err())
	return all.String()
}

// assertNoToken fails when text holds token, quoting where.
func assertNoToken(t *testing.T, text, token string) {
	t.Helper()
	if i := strings.Index(text, token); i >= 0 {
		t.Errorf("a job row holds %q: ...%s...", token, text[max(i-80, 0):min(i+len(token)+20, len(text))])
	}
}

// Express answers a POST to a path it does not route with its default 404
// page, "Cannot POST /the/path"; many frameworks echo the path, and some
// echo an Authorization header they reject. The receiver's text then
// carries the URL's path (often the credential: Slack, Zapier) and the
// connection's header values into the attempt log the job row holds and
// River UI shows. No job row may hold them (DESIGN 23).
func TestAdvisory_ResponseEchoingThePathOrAHeaderStaysOutOfTheJobRow(t *testing.T) {
	t.Parallel()
	const (
		pathToken   = "PATHTOKEN31c8"
		headerToken = "HEADERTOKEN77ab"
	)
	var n int
	srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++ // rivertest works one run at a time
		if n == 1 {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Error</title></head><body><pre>Cannot POST %s</pre></body></html>\n", r.URL.Path)
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":"invalid credentials %q"}`, r.Header.Get("Authorization"))
	})})
	defer srv.Close()
	conn := srv.Connection()
	conn.URL += "/hooks/T0001/" + pathToken
	conn.Headers = map[string]string{"Authorization": "Bearer " + headerToken}
	policy := fastPolicy(1)
	w := riverhook.NewWorker(srv.Sender(&webhook.SenderOptions{Retry: policy}),
		newResolver(map[string]webhook.Connection{"crm": conn}).resolve, nil)
	tw, tx, schema := testWorker(t, w)
	ctx := context.Background()
	p := firstParams(t, "d1", policy)
	res, err := tw.Work(ctx, t, tx, p.Args.(riverhook.Args), p.InsertOpts) // 404, echoing the path
	require.Error(t, err)
	res, err = tw.WorkJob(ctx, t, tx, res.Job) // 401, echoing the header
	require.Error(t, err)
	require.Equal(t, rivertype.JobStateDiscarded, res.Job.State)

	text := jobRowsText(t, tx, schema)
	require.Contains(t, text, "Cannot POST", "the excerpt is kept")
	for _, token := range []string{pathToken, "T0001", headerToken} {
		assertNoToken(t, text, token)
	}
}

// A Resolver's error is the caller's text: a url.Parse error quotes the
// whole URL, a database driver's error can quote the row. Work wraps it
// into the error River keeps in the job row (and River UI shows), so the
// URL's path, a credential, reaches the row. The package doc promises no
// job row holds a URL's path or query, whatever fails.
func TestAdvisory_ResolverErrorTextStaysOutOfTheJobRow(t *testing.T) {
	t.Parallel()
	const pathToken = "PATHTOKEN5d20"
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	w := riverhook.NewWorker(srv.Sender(nil), func(_ context.Context, id string) (webhook.Connection, error) {
		// The stored URL got a stray control character: the Resolver
		// returns url.Parse's error, as most would.
		if _, err := url.Parse("https://hooks.example.com/services/T0001/" + pathToken + "\x7f"); err != nil {
			return webhook.Connection{}, fmt.Errorf("loading connection %s: %w", id, err)
		}
		return webhook.Connection{}, riverhook.ErrConnectionGone
	}, nil)
	tw, tx, schema := testWorker(t, w)
	p := firstParams(t, "d1", nil)
	_, err := tw.Work(context.Background(), t, tx, p.Args.(riverhook.Args), p.InsertOpts)
	require.Error(t, err)
	assertNoToken(t, jobRowsText(t, tx, schema), pathToken)
}
