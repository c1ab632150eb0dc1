package riverhook_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/webhooktest"
)

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
