package riverhook_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/webhooktest"
)

// A hostile receiver answers a 3xx whose reason phrase fills the response
// header bound (64 KiB). The attempt log's entry is cut to 1 KiB, but the
// error River keeps for the run (river_job.errors, rewritten by every
// update of the row and River UI's main text) holds the whole phrase: one
// receiver makes each of its deliveries' rows carry ~60 KiB per run, over
// up to MaxAttempts runs. The error of a run must be as bounded as its log
// entry.
func TestAdvisory_RunErrorIsBoundedLikeTheLogEntry(t *testing.T) {
	t.Parallel()
	phrase := strings.Repeat("Found ", 10_000) // 60,000 bytes
	srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		defer conn.Close()
		fmt.Fprintf(buf, "HTTP/1.1 302 %s\r\nLocation: https://elsewhere.example/\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", phrase)
		buf.Flush()
	})})
	defer srv.Close()
	policy := fastPolicy(1)
	tw, tx, _ := testWorker(t, newTestWorker(srv, policy, nil))
	p := firstParams(t, "d1", policy)
	res, err := tw.Work(context.Background(), t, tx, p.Args.(riverhook.Args), p.InsertOpts)
	require.Error(t, err)
	require.Len(t, res.Job.Errors, 1)
	d, err := riverhook.DeliveryOf(res.Job)
	require.NoError(t, err)
	require.Len(t, d.Attempts, 1)
	require.Equal(t, webhook.KindRedirect, d.Attempts[0].Kind)
	stored := res.Job.Errors[0].Error
	assert.LessOrEqual(t, len(stored), 1024, "River's error of the run has %d bytes: %.120s…", len(stored), stored)
}
