package riverhook_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/webhooktest"
)

func TestListDeliveries(t *testing.T) {
	t.Parallel()
	pool, schema := testDB(t)
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	srv.Script(webhooktest.Status(503)) // the first attempt to crm.eu
	policy := fastPolicy(2)
	// Two ids that share a tag: the listing keeps each one's own.
	w := riverhook.NewWorker(srv.Sender(&webhook.SenderOptions{Retry: policy}),
		newResolver(map[string]webhook.Connection{"crm.eu": srv.Connection(), "crm-eu": srv.Connection()}).resolve, nil)
	require.Equal(t, riverhook.ConnectionTag("crm.eu"), riverhook.ConnectionTag("crm-eu"))
	tw := rivertest.NewWorker(t, riverpgxv5.New(nil), &river.Config{Schema: schema, Logger: quietLogger()}, w)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	client := newClient(t, pool, schema, nil, nil)
	var ids []int64
	for _, d := range []string{"d1", "d2", "d3"} {
		res, err := riverhook.InsertTx(ctx, client, tx, d, []string{"crm.eu", "crm-eu"}, payload(d), &riverhook.InsertOptions{Retry: policy})
		require.NoError(t, err)
		ids = append(ids, res[0].Job.ID)
	}
	job, err := client.JobGetTx(ctx, tx, ids[0])
	require.NoError(t, err)
	res, err := tw.WorkJob(ctx, t, tx, job) // d1: 503, then delivered
	require.Error(t, err)
	_, err = tw.WorkJob(ctx, t, tx, res.Job)
	require.NoError(t, err)
	job, err = client.JobGetTx(ctx, tx, ids[1])
	require.NoError(t, err)
	_, err = tw.WorkJob(ctx, t, tx, job) // d2: delivered; d3 waits
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	got, err := riverhook.ListDeliveries(ctx, client, "crm.eu", 0)
	require.NoError(t, err)
	require.Len(t, got, 3, "crm-eu's are not crm.eu's")
	for i, want := range []struct {
		id       string
		state    rivertype.JobState
		attempts []string
	}{
		{"d3", rivertype.JobStateAvailable, nil},
		{"d2", rivertype.JobStateCompleted, []string{"n=1 delivered"}},
		{"d1", rivertype.JobStateCompleted, []string{"n=1 status 503 retry 50ms", "n=2 delivered"}},
	} {
		d := got[i]
		assert.Equal(t, want.id, d.DeliveryID, "newest first")
		assert.Equal(t, "crm.eu", d.ConnectionID)
		assert.Equal(t, webhook.EventUserIdentified, d.Event)
		assert.Equal(t, want.state, d.State)
		assert.Empty(t, d.Reason)
		var attempts []string
		for _, a := range d.Attempts {
			attempts = append(attempts, brief(a.Attempt))
		}
		assert.Equal(t, want.attempts, attempts, "delivery %s", want.id)
	}
	assert.False(t, got[0].NextAt.IsZero(), "d3 waits for its first run")
	assert.True(t, got[1].NextAt.IsZero())

	two, err := riverhook.ListDeliveries(ctx, client, "crm.eu", 2)
	require.NoError(t, err)
	require.Len(t, two, 2, "the limit")
	assert.Equal(t, "d2", two[1].DeliveryID)
	none, err := riverhook.ListDeliveries(ctx, client, "erp", 0)
	require.NoError(t, err)
	assert.Empty(t, none)
}

// ListDeliveries serves a dashboard's GET /connections/{id}/attempts, whose
// limit often comes from the request: a limit over River's 10,000 (which
// JobListParams.First panics on) lists 10,000.
func TestListDeliveries_LargeLimitDoesNotPanic(t *testing.T) {
	t.Parallel()
	client, err := river.NewClient(riverpgxv5.New(nil), &river.Config{Logger: quietLogger()})
	require.NoError(t, err)
	assert.NotPanics(t, func() {
		riverhook.ListDeliveries(context.Background(), client, "crm", 20_000) //nolint:errcheck // no pool: only the panic matters
	})
}

// Args.InsertOpts' doc: a plain client.Insert of Args is unique and tagged
// too. A caller who adds a tag of its own (a tenant, a trace) with River's
// InsertOpts replaces the delivery's tags (River takes InsertOpts.Tags over
// the args'), and ListDeliveries, which finds deliveries by tag, never
// shows that delivery. River's JobListParams.Where can filter on the args
// themselves.
func TestListDeliveries_ShowsAPlainInsertWithTagsOfItsOwn(t *testing.T) {
	t.Parallel()
	pool, schema := testDB(t)
	client := newClient(t, pool, schema, nil, nil)
	ctx := context.Background()
	res, err := client.Insert(ctx, riverhook.Args{ConnectionID: "crm", DeliveryID: "d1", Event: webhook.EventUserIdentified, Body: []byte(`{}`)},
		&river.InsertOpts{Tags: []string{"tenant-42"}})
	require.NoError(t, err)
	got, err := riverhook.ListDeliveries(ctx, client, "crm", 0)
	require.NoError(t, err)
	require.Len(t, got, 1, "the delivery to crm")
	assert.Equal(t, res.Job.ID, got[0].JobID)
}

// brief is an attempt in a few words, for comparisons.
func brief(a webhook.Attempt) string {
	switch {
	case a.OK():
		return "n=" + itoa(a.N) + " delivered"
	case a.Retry:
		return "n=" + itoa(a.N) + " " + string(a.Kind) + " " + itoa(a.StatusCode) + " retry " + a.RetryIn.String()
	}
	return "n=" + itoa(a.N) + " " + string(a.Kind)
}

func TestDeliveryOf_DiscardedByTheRescuer(t *testing.T) {
	t.Parallel()
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	srv.Script(webhooktest.Status(500))
	policy := fastPolicy(1)
	tw, tx, schema := testWorker(t, newTestWorker(srv, policy, nil))
	ctx := context.Background()
	job := insertTx(t, tx, schema, firstParams(t, "d1", policy))
	res, err := tw.WorkJob(ctx, t, tx, job) // attempt 1: 500
	require.Error(t, err)
	job = res.Job
	for range riverhook.MaxInterruptedRuns + 1 { // every run after it dies
		job = crash(t, tx, schema, job)
	}
	require.Equal(t, job.MaxAttempts, job.Attempt)
	job.State = rivertype.JobStateDiscarded // as River's rescuer leaves a job with no run left

	d, err := riverhook.DeliveryOf(job)
	require.NoError(t, err)
	require.Len(t, d.Attempts, 1+riverhook.MaxInterruptedRuns+1)
	assert.Equal(t, "n=1 status 500 retry 50ms", brief(d.Attempts[0].Attempt))
	for _, a := range d.Attempts[1:] {
		assert.Equal(t, "attempt 2: interrupted", a.String())
		assert.Contains(t, a.Diagnosis(), "cost no retry")
	}
	assert.Equal(t, "riverhook: River ran the job 7 times, its MaxAttempts; 6 run(s) ended without an attempt (interrupted, or the connection did not resolve)", d.Reason)

	job.State = rivertype.JobStateRunning // the last run is under way: not interrupted
	d, err = riverhook.DeliveryOf(job)
	require.NoError(t, err)
	assert.Len(t, d.Attempts, 1+riverhook.MaxInterruptedRuns)

	job.Kind = "other"
	_, err = riverhook.DeliveryOf(job)
	assert.ErrorContains(t, err, `riverhook: job `+itoa(int(job.ID))+` has kind "other", not "signedhook_delivery"`)
}

// An operator cancels a delivery waiting for its retry (River UI's Cancel,
// client.JobCancel): River appends no error for a job that is not running.
// Delivery.Reason must say it was cancelled, and must not be empty (which
// the doc keeps for a delivery that succeeded or is under way) nor the
// earlier attempt's "retry in 50ms", which says a retry follows.
func TestDeliveryOf_ReasonOfADeliveryCancelledWhileWaiting(t *testing.T) {
	t.Parallel()
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	srv.Script(webhooktest.Status(500))
	policy := fastPolicy(2)
	tw, tx, schema := testWorker(t, newTestWorker(srv, policy, nil))
	ctx := context.Background()
	client, err := river.NewClient(riverpgxv5.New(nil), &river.Config{Schema: schema, Logger: quietLogger()})
	require.NoError(t, err)

	waiting := insertTx(t, tx, schema, firstParams(t, "d1", policy)) // never run
	res, err := tw.WorkJob(ctx, t, tx, insertTx(t, tx, schema, firstParams(t, "d2", policy)))
	require.Error(t, err) // 500: a retry follows
	for _, id := range []int64{waiting.ID, res.Job.ID} {
		job, err := client.JobCancelTx(ctx, tx, id)
		require.NoError(t, err)
		require.Equal(t, rivertype.JobStateCancelled, job.State)
		d, err := riverhook.DeliveryOf(job)
		require.NoError(t, err)
		assert.NotEmpty(t, d.Reason, "job %d: a cancelled delivery has a reason", id)
		assert.NotContains(t, d.Reason, "retry in", "job %d: the reason is the cancel, not the last attempt", id)
		assert.Equal(t, "riverhook: cancelled in River (client.JobCancel, or River UI's Cancel)", d.Reason, "job %d", id)
	}
}

// No job row holds a URL's path or query, a header value or a secret: the
// path of many webhook URLs is their credential.
func TestWorker_NoSecretInAnyJobRow(t *testing.T) {
	t.Parallel()
	const (
		pathToken   = "PATHTOKEN7f3a"
		queryToken  = "QUERYTOKEN9c1e"
		headerToken = "HEADERTOKEN5b2d"
		secretToken = "whsec_SECRETTOKEN4e8f"
	)
	var n int
	srv := webhooktest.NewServer(secretToken, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++ // one delivery at a time: rivertest works them in turn
		switch n {
		case 1:
			w.WriteHeader(http.StatusInternalServerError)
		case 2: // a redirect to the same secret path
			w.Header().Set("Location", "https://elsewhere.example/services/"+pathToken+"?key="+queryToken)
			w.WriteHeader(http.StatusTemporaryRedirect)
		case 3:
			<-r.Context().Done() // the sender's attempt times out
			panic(http.ErrAbortHandler)
		}
	})})
	defer srv.Close()
	conn := srv.Connection()
	conn.URL += "/services/T0001/" + pathToken + "?key=" + queryToken
	conn.Headers = map[string]string{"Authorization": "Bearer " + headerToken}
	invalid := conn
	invalid.URL = strings.Replace(conn.URL, "https://", "http://", 1)
	var rec attemptRecorder
	w := riverhook.NewWorker(srv.Sender(&webhook.SenderOptions{Retry: fastPolicy(3), AttemptTimeout: 300 * time.Millisecond}),
		newResolver(map[string]webhook.Connection{"crm": conn, "invalid": invalid}).resolve,
		&riverhook.WorkerOptions{OnAttempt: rec.onAttempt})
	tw, tx, schema := testWorker(t, w)
	ctx := context.Background()
	params, err := riverhook.InsertParams("d1", []string{"crm", "invalid"}, payload("d1"), &riverhook.InsertOptions{Retry: fastPolicy(3)})
	require.NoError(t, err)
	res, err := tw.Work(ctx, t, tx, params[0].Args.(riverhook.Args), params[0].InsertOpts)
	require.Error(t, err)
	for range 3 { // 500, redirect, timeout, delivered
		res, _ = tw.WorkJob(ctx, t, tx, res.Job)
	}
	assert.Equal(t, rivertype.JobStateCompleted, res.Job.State)
	_, err = tw.Work(ctx, t, tx, params[1].Args.(riverhook.Args), params[1].InsertOpts)
	require.NoError(t, err)

	var kinds []webhook.FailureKind
	for _, a := range rec.attempts() {
		kinds = append(kinds, a.Kind)
	}
	require.Equal(t, []webhook.FailureKind{webhook.KindStatus, webhook.KindRedirect, webhook.KindTimeout, webhook.KindNone, webhook.KindInvalid}, kinds)
	text := jobRowsText(t, tx, schema)
	require.Contains(t, text, "127.0.0.1", "the rows name the endpoint by its origin")
	require.Contains(t, text, "elsewhere.example", "and a redirect's target by its own")
	for _, token := range []string{pathToken, queryToken, headerToken, secretToken, "T0001"} {
		assert.NotContains(t, text, token)
	}
	var out json.RawMessage
	require.NoError(t, tx.QueryRow(ctx, "SELECT metadata->'output' FROM "+schema+".river_job WHERE id = $1", res.Job.ID).Scan(&out))
	assert.Contains(t, string(out), `"kind": "redirect"`)
}

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
