package riverhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

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

// testWorker returns rivertest's worker for w on a fresh schema, and a
// transaction on it that is rolled back when the test ends.
func testWorker(t *testing.T, w *riverhook.Worker) (*rivertest.Worker[riverhook.Args, pgx.Tx], pgx.Tx, string) {
	t.Helper()
	pool, schema := testDB(t)
	tx, err := pool.Begin(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	return rivertest.NewWorker(t, riverpgxv5.New(nil), &river.Config{Schema: schema, Logger: quietLogger()}, w), tx, schema
}

// attemptRecorder is an OnAttempt that keeps the attempts it sees.
type attemptRecorder struct {
	mu sync.Mutex
	as []webhook.Attempt
}

func (r *attemptRecorder) onAttempt(_ context.Context, _ *river.Job[riverhook.Args], a webhook.Attempt) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.as = append(r.as, a)
	return nil
}

func (r *attemptRecorder) attempts() []webhook.Attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]webhook.Attempt(nil), r.as...)
}

func firstParams(t *testing.T, deliveryID string, policy *webhook.RetryPolicy) river.InsertManyParams {
	t.Helper()
	params, err := riverhook.InsertParams(deliveryID, []string{"crm"}, payload(deliveryID), &riverhook.InsertOptions{Retry: policy})
	require.NoError(t, err)
	return params[0]
}

func TestNewWorker_NegativeOptionPanics(t *testing.T) {
	sender, err := webhook.NewSender(nil)
	require.NoError(t, err)
	resolve := func(context.Context, string) (webhook.Connection, error) { return webhook.Connection{}, nil }
	for _, opts := range []riverhook.WorkerOptions{{MaxInFlightPerConnection: -1}, {SnoozeFor: -time.Second}, {MaxWait: -time.Hour}} {
		assert.Panics(t, func() { riverhook.NewWorker(sender, resolve, &opts) }, "%+v", opts)
	}
	assert.NotPanics(t, func() { riverhook.NewWorker(sender, resolve, &riverhook.WorkerOptions{}) }, "zero selects the defaults")
}

func TestWorker_ZeroWaitIsExactlyZero(t *testing.T) {
	t.Parallel()
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	srv.Script(webhooktest.Status(503))
	policy := &webhook.RetryPolicy{MaxRetries: 2, Backoff: func(int, *http.Response) time.Duration { return 0 }}
	w := riverhook.NewWorker(srv.Sender(&webhook.SenderOptions{Retry: policy}),
		newResolver(map[string]webhook.Connection{"crm": srv.Connection()}).resolve, nil)
	tw, tx, _ := testWorker(t, w)
	p := firstParams(t, "d0", policy)
	res, err := tw.Work(context.Background(), t, tx, p.Args.(riverhook.Args), p.InsertOpts)
	require.Error(t, err)
	after := time.Now()
	assert.Equal(t, river.EventKindJobFailed, res.EventKind)
	assert.Equal(t, rivertype.JobStateAvailable, res.Job.State, "a retry due now is available at once")
	assert.False(t, res.Job.ScheduledAt.After(after), "retry scheduled at %v, after the attempt ended (%v): not the policy's 0 wait", res.Job.ScheduledAt, after)
}

// insertTx inserts the job of p in tx without working it.
func insertTx(t *testing.T, tx pgx.Tx, schema string, p river.InsertManyParams) *rivertype.JobRow {
	t.Helper()
	client, err := river.NewClient(riverpgxv5.New(nil), &river.Config{Schema: schema, Logger: quietLogger()})
	require.NoError(t, err)
	res, err := client.InsertTx(context.Background(), tx, p.Args, p.InsertOpts)
	require.NoError(t, err)
	return res.Job
}

// crash makes the job look as River's rescuer leaves a job whose process
// died during its next run: one more run counted, the rescuer's error, and
// the job available again.
func crash(t *testing.T, tx pgx.Tx, schema string, job *rivertype.JobRow) *rivertype.JobRow {
	t.Helper()
	ctx := context.Background()
	rescue, err := json.Marshal(rivertype.AttemptError{At: time.Now().UTC(), Attempt: job.Attempt + 1, Error: "Stuck job rescued by JobRescuer"})
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "UPDATE "+schema+".river_job SET attempt = attempt + 1, attempted_at = now(), errors = array_append(errors, $2::jsonb), state = 'available' WHERE id = $1",
		job.ID, string(rescue))
	require.NoError(t, err)
	client, err := river.NewClient(riverpgxv5.New(nil), &river.Config{Schema: schema, Logger: quietLogger()})
	require.NoError(t, err)
	got, err := client.JobGetTx(ctx, tx, job.ID)
	require.NoError(t, err)
	return got
}

func TestWorker_InterruptedAttemptIsLoggedAndCostsNoRetry(t *testing.T) {
	t.Parallel()
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	srv.Script(webhooktest.Status(500))
	policy := fastPolicy(1) // two attempts: the crash must cost neither
	var rec attemptRecorder
	w := riverhook.NewWorker(srv.Sender(&webhook.SenderOptions{Retry: policy}),
		newResolver(map[string]webhook.Connection{"crm": srv.Connection()}).resolve, &riverhook.WorkerOptions{OnAttempt: rec.onAttempt})
	tw, tx, schema := testWorker(t, w)
	ctx := context.Background()

	job := insertTx(t, tx, schema, firstParams(t, "d1", policy))
	res, err := tw.WorkJob(ctx, t, tx, job) // attempt 1: 500
	require.Error(t, err)
	job = crash(t, tx, schema, res.Job) // attempt 2 is cut by a crash: its process died
	res, err = tw.WorkJob(ctx, t, tx, job)
	require.NoError(t, err)
	assert.Equal(t, river.EventKindJobCompleted, res.EventKind)

	got := rec.attempts()
	require.Len(t, got, 3, "attempt 1, the interrupted attempt 2, and attempt 2 made again")
	assert.Equal(t, "attempt 2: interrupted", got[1].String())
	assert.Equal(t, webhook.KindInterrupted, got[1].Kind)
	assert.Equal(t, 2, got[2].N, "the crash cost no attempt")
	assert.True(t, got[2].OK())
	require.Len(t, srv.Deliveries(), 2)
}

// A run that River ended with its own error (a process of a rolling
// deploy without the worker registered: "job kind is not registered")
// sent nothing and no process died. The attempt log must not call it an
// interrupted attempt, "the receiver may have had it", and OnAttempt must
// not be told one was cut.
func TestWorker_RiversOwnRunErrorIsNotAnInterruptedAttempt(t *testing.T) {
	t.Parallel()
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	var rec attemptRecorder
	tw, tx, schema := testWorker(t, newTestWorker(srv, nil, &rec))
	ctx := context.Background()
	job := insertTx(t, tx, schema, firstParams(t, "d1", nil))
	e, err := json.Marshal(rivertype.AttemptError{At: time.Now().UTC(), Attempt: 1,
		Error: (&rivertype.UnknownJobKindError{Kind: riverhook.Kind}).Error()})
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "UPDATE "+schema+".river_job SET attempt = 1, attempted_at = now(), errors = array_append(errors, $2::jsonb) WHERE id = $1", job.ID, string(e))
	require.NoError(t, err)
	client, err := river.NewClient(riverpgxv5.New(nil), &river.Config{Schema: schema, Logger: quietLogger()})
	require.NoError(t, err)
	job, err = client.JobGetTx(ctx, tx, job.ID)
	require.NoError(t, err)

	res, err := tw.WorkJob(ctx, t, tx, job)
	require.NoError(t, err)
	for _, a := range rec.attempts() {
		assert.NotEqual(t, webhook.KindInterrupted, a.Kind, "OnAttempt told of %q", a)
	}
	d, err := riverhook.DeliveryOf(res.Job)
	require.NoError(t, err)
	for _, a := range d.Attempts {
		assert.NotEqual(t, webhook.KindInterrupted, a.Kind, "the log shows %q", a)
	}
}

func TestWorker_PolicyGivingUpDiscards(t *testing.T) {
	t.Parallel()
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	srv.Script(webhooktest.Status(500), webhooktest.Status(500))
	policy := fastPolicy(1)
	w := riverhook.NewWorker(srv.Sender(&webhook.SenderOptions{Retry: policy}),
		newResolver(map[string]webhook.Connection{"crm": srv.Connection()}).resolve, nil)
	tw, tx, schema := testWorker(t, w)
	ctx := context.Background()
	job := insertTx(t, tx, schema, firstParams(t, "d1", policy))
	res, err := tw.WorkJob(ctx, t, tx, job)
	require.Error(t, err)
	assert.Equal(t, "riverhook: attempt 1: 500 Internal Server Error; retry in 50ms", res.Job.Errors[0].Error)
	job = crash(t, tx, schema, res.Job)
	res, err = tw.WorkJob(ctx, t, tx, job)
	require.Error(t, err)
	assert.Equal(t, rivertype.JobStateDiscarded, res.Job.State, "the policy gave up")
	assert.Equal(t, "riverhook: attempt 2: 500 Internal Server Error; the policy gives up", res.Job.Errors[2].Error)
	assert.Less(t, res.Job.Attempt, res.Job.MaxAttempts, "runs were left for interrupted attempts")
}

// logged is what the attempt log keeps of a: all but the exact duration and
// response bytes, and the error's type.
func logged(a webhook.Attempt) string {
	err := ""
	if a.Err != nil {
		err = a.Err.Error()
	}
	return fmt.Sprintf("n=%d start=%s status=%d kind=%q retry=%v in %v ts=%d err=%q response=%q", a.N, a.Start.UTC().Round(time.Microsecond).Format(time.RFC3339Nano),
		a.StatusCode, a.Kind, a.Retry, a.RetryIn, a.Timestamp, err, a.ResponseText())
}

// newTestWorker returns a Worker delivering to srv as connection "crm" with
// the policy, and OnAttempt recording into rec when rec is not nil.
func newTestWorker(srv *webhooktest.Server, policy *webhook.RetryPolicy, rec *attemptRecorder) *riverhook.Worker {
	opts := &riverhook.WorkerOptions{}
	if rec != nil {
		opts.OnAttempt = rec.onAttempt
	}
	return riverhook.NewWorker(srv.Sender(&webhook.SenderOptions{Retry: policy}),
		newResolver(map[string]webhook.Connection{"crm": srv.Connection()}).resolve, opts)
}

func TestWorker_AttemptLog(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1: // a long answer with a NUL, an escape sequence and a bidi override
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "busy\x00\x1b[31m\u202e<&>\"\\"+strings.Repeat("é", 3000))
		case 2:
			w.WriteHeader(http.StatusInternalServerError)
		default:
			io.WriteString(w, `{"ok":true}`)
		}
	})})
	defer srv.Close()
	policy := fastPolicy(3)
	tw, tx, schema := testWorker(t, newTestWorker(srv, policy, nil))
	ctx := context.Background()
	p := firstParams(t, "d1", policy)
	res, err := tw.Work(ctx, t, tx, p.Args.(riverhook.Args), p.InsertOpts)
	require.Error(t, err)
	res, err = tw.WorkJob(ctx, t, tx, res.Job)
	require.Error(t, err)
	res, err = tw.WorkJob(ctx, t, tx, res.Job)
	require.NoError(t, err)
	job := res.Job
	rows, err := tx.Query(ctx, "SELECT e::text FROM "+schema+".river_job, jsonb_array_elements(metadata->'output'->'attempts') e WHERE id = $1", job.ID)
	require.NoError(t, err)
	stored := 0
	for rows.Next() {
		var e string
		require.NoError(t, rows.Scan(&e))
		assert.LessOrEqual(t, len(e), 1024, "as PostgreSQL prints it, too: %s", e)
		stored++
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, 3, stored)
	assert.Equal(t, rivertype.JobStateCompleted, job.State)
	assert.Equal(t, []string{
		"riverhook: attempt 1: 503 Service Unavailable; retry in 50ms",
		"riverhook: attempt 2: 500 Internal Server Error; retry in 100ms",
	}, []string{job.Errors[0].Error, job.Errors[1].Error}, "River UI shows these")

	var out struct {
		Attempts []map[string]json.RawMessage `json:"attempts"`
	}
	require.NoError(t, json.Unmarshal(job.Output(), &out), "%s", job.Output())
	require.Len(t, out.Attempts, 3)
	for i, e := range out.Attempts {
		raw, err := json.Marshal(e)
		require.NoError(t, err)
		assert.LessOrEqual(t, len(raw), 1024, "entry %d: at most 1 KiB", i+1)
		assert.True(t, utf8.Valid(raw))
		var took string
		require.NoError(t, json.Unmarshal(e["took"], &took), "took is a readable duration")
		d, err := time.ParseDuration(took)
		require.NoError(t, err)
		assert.Positive(t, d)
		for _, key := range []string{"n", "run", "kind", "start", "status", "timestamp"} {
			assert.Contains(t, e, key, "entry %d", i+1)
		}
	}
	assert.JSONEq(t, `"status"`, string(out.Attempts[0]["kind"]))
	assert.JSONEq(t, `"50ms"`, string(out.Attempts[0]["retry_in"]))
	assert.JSONEq(t, `503`, string(out.Attempts[0]["status"]))
	assert.JSONEq(t, `"delivered"`, string(out.Attempts[2]["kind"]))
	assert.NotContains(t, out.Attempts[2], "retry_in", "no retry follows")
	assert.NotContains(t, out.Attempts[2], "error")

	d, err := riverhook.DeliveryOf(job)
	require.NoError(t, err)
	require.Len(t, d.Attempts, 3)
	excerpt := d.Attempts[0].ResponseText()
	assert.True(t, strings.HasPrefix(excerpt, "busy"), excerpt)
	assert.True(t, strings.HasSuffix(excerpt, "é…"), "cut at a rune boundary: %q", excerpt[len(excerpt)-10:])
	assert.NotContains(t, excerpt, "\x00")
	assert.NotContains(t, excerpt, "\x1b")
	assert.NotContains(t, excerpt, "\u202e")
	assert.Equal(t, `{"ok":true}`, string(d.Attempts[2].ResponseBody))
	for i, a := range d.Attempts {
		assert.Equal(t, i+1, a.N)
		assert.False(t, a.Start.IsZero())
		assert.Positive(t, a.Timestamp)
	}
	assert.Equal(t, "attempt 2: 500 status in", d.Attempts[1].String()[:len("attempt 2: 500 status in")])
	assert.True(t, d.Attempts[2].OK())
}

// A hostile receiver answers a 3xx whose reason phrase fills the response
// header bound (64 KiB). The attempt log's entry is cut to 1 KiB, but the
// error River keeps for the run (river_job.errors, rewritten by every
// update of the row and River UI's main text) holds the whole phrase: one
// receiver makes each of its deliveries' rows carry ~60 KiB per run, over
// up to MaxAttempts runs. The error of a run must be as bounded as its log
// entry.
func TestWorker_RunErrorIsBoundedLikeTheLogEntry(t *testing.T) {
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

func TestWorker_NoRunLeftForARetry(t *testing.T) {
	t.Parallel()
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	srv.Script(webhooktest.Status(500), webhooktest.Status(500))
	policy := fastPolicy(2) // three attempts
	w := newTestWorker(srv, policy, nil)
	tw, tx, schema := testWorker(t, w)
	ctx := context.Background()
	job := insertTx(t, tx, schema, firstParams(t, "d1", policy))
	require.Equal(t, 3+riverhook.MaxInterruptedRuns, job.MaxAttempts)
	res, err := tw.WorkJob(ctx, t, tx, job) // attempt 1: 500
	require.Error(t, err)
	job = res.Job
	for range riverhook.MaxInterruptedRuns + 1 { // every run cut but the last River has
		job = crash(t, tx, schema, job)
	}
	require.Equal(t, job.MaxAttempts-1, job.Attempt)
	res, err = tw.WorkJob(ctx, t, tx, job) // attempt 2 fails: the policy would retry
	require.Error(t, err)
	assert.Equal(t, rivertype.JobStateDiscarded, res.Job.State)
	last := res.Job.Errors[len(res.Job.Errors)-1].Error
	assert.Equal(t, "riverhook: attempt 2: 500 Internal Server Error; no run left for its retry: River's 8 runs are spent, 6 of them without an attempt", last)
	assert.Zero(t, riverhook.PendingRetries(w), "no retry kept for a NextRetry River never asks")

	d, err := riverhook.DeliveryOf(res.Job)
	require.NoError(t, err)
	require.Len(t, d.Attempts, 8)
	for _, a := range d.Attempts[1:7] {
		assert.Equal(t, "attempt 2: interrupted", a.String())
	}
	assert.Contains(t, d.Reason, "River ran the job 8 times")
}

func TestWorker_Cancelled(t *testing.T) {
	t.Parallel()
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	guarded, err := webhook.NewSender(nil) // the default transport: 127.0.0.1 is refused
	require.NoError(t, err)
	invalid := srv.Connection()
	invalid.URL = "http://plain.example"
	w := riverhook.NewWorker(guarded, newResolver(map[string]webhook.Connection{
		"loopback": srv.Connection(),
		"invalid":  invalid,
	}).resolve, nil)
	tw, tx, _ := testWorker(t, w)
	ctx := context.Background()
	params, err := riverhook.InsertParams("d1", []string{"loopback", "deleted", "invalid"}, payload("d1"), nil)
	require.NoError(t, err)
	for i, want := range []struct{ kind, err string }{
		{"blocked", "JobCancelError: riverhook: attempt 1: blocked: refused to connect to https://127.0.0.1:"},
		{"", `JobCancelError: riverhook: connection "deleted" is gone`},
		{"invalid", "JobCancelError: riverhook: attempt 1: invalid: "},
	} {
		res, err := tw.Work(ctx, t, tx, params[i].Args.(riverhook.Args), params[i].InsertOpts)
		require.NoError(t, err, "a cancel is no error for rivertest")
		assert.Equal(t, river.EventKindJobCancelled, res.EventKind)
		require.Len(t, res.Job.Errors, 1)
		assert.True(t, strings.HasPrefix(res.Job.Errors[0].Error, want.err), res.Job.Errors[0].Error)
		d, err := riverhook.DeliveryOf(res.Job)
		require.NoError(t, err)
		assert.Equal(t, strings.TrimPrefix(res.Job.Errors[0].Error, "JobCancelError: "), d.Reason)
		if want.kind == "" {
			assert.Empty(t, d.Attempts, "nothing was attempted")
			assert.JSONEq(t, `{"attempts": []}`, string(res.Job.Output()), "an empty log, not null")
			continue
		}
		require.Len(t, d.Attempts, 1)
		assert.Equal(t, webhook.FailureKind(want.kind), d.Attempts[0].Kind)
	}
	assert.Empty(t, srv.Deliveries(), "nothing reached the receiver")
	assert.Zero(t, riverhook.PendingRetries(w))
}

func TestWorker_ResolverFailureCostsNoAttempt(t *testing.T) {
	t.Parallel()
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	var calls atomic.Int32
	var rec attemptRecorder
	errDown := errors.New("the database is down")
	w := riverhook.NewWorker(srv.Sender(nil), func(ctx context.Context, id string) (webhook.Connection, error) {
		switch calls.Add(1) {
		case 1:
			return webhook.Connection{}, errDown
		case 2:
			panic("a Resolver's bug")
		}
		return srv.Connection(), nil
	}, &riverhook.WorkerOptions{OnAttempt: rec.onAttempt})
	tw, tx, _ := testWorker(t, w)
	ctx := context.Background()
	p := firstParams(t, "d1", nil)
	res, err := tw.Work(ctx, t, tx, p.Args.(riverhook.Args), p.InsertOpts)
	require.ErrorIs(t, err, errDown, "for a river.ErrorHandler")
	assert.Equal(t, `riverhook: connection "crm" did not resolve (the Resolver's error is logged, not kept here)`, res.Job.Errors[0].Error)
	assert.True(t, res.Job.ScheduledAt.After(time.Now()), "River's client retry policy waits")
	res, err = tw.WorkJob(ctx, t, tx, res.Job)
	require.ErrorContains(t, err, `riverhook: connection "crm" did not resolve: the Resolver panicked`)
	assert.Equal(t, `riverhook: connection "crm" did not resolve: the Resolver panicked (logged, not kept here)`, res.Job.Errors[1].Error)
	res, err = tw.WorkJob(ctx, t, tx, res.Job)
	require.NoError(t, err)
	assert.Equal(t, 3, res.Job.Attempt)
	got := rec.attempts()
	require.Len(t, got, 1, "runs that could not attempt are not interrupted attempts")
	assert.Equal(t, 1, got[0].N, "and cost no attempt")
	assert.True(t, got[0].OK())
}

// A Resolver's error is the caller's text: a url.Parse error quotes the
// whole URL, a database driver's error can quote the row, a panic's value
// anything. None reaches the job row (River UI shows it): the row names
// the connection by id, and the text goes to the Worker's Logger.
func TestWorker_ResolverErrorTextStaysOutOfTheJobRow(t *testing.T) {
	t.Parallel()
	const pathToken = "PATHTOKEN5d20"
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	var logged syncBuffer
	w := riverhook.NewWorker(srv.Sender(nil), func(_ context.Context, id string) (webhook.Connection, error) {
		switch id {
		case "panics":
			panic("no row for https://hooks.example.com/services/T0001/" + pathToken)
		case "gone":
			return webhook.Connection{}, fmt.Errorf("https://hooks.example.com/services/T0001/%s was deleted: %w", pathToken, riverhook.ErrConnectionGone)
		}
		// The stored URL got a stray control character: the Resolver
		// returns url.Parse's error, as most would.
		stored := map[string]string{"crm": "https://hooks.example.com/services/T0001/" + pathToken + "\x7f"}
		_, err := url.Parse(stored[id])
		return webhook.Connection{}, fmt.Errorf("loading connection %s: %w", id, err)
	}, &riverhook.WorkerOptions{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	tw, tx, schema := testWorker(t, w)
	params, err := riverhook.InsertParams("d1", []string{"crm", "panics", "gone"}, payload("d1"), nil)
	require.NoError(t, err)
	for i, want := range []river.EventKind{river.EventKindJobFailed, river.EventKindJobFailed, river.EventKindJobCancelled} {
		res, err := tw.Work(context.Background(), t, tx, params[i].Args.(riverhook.Args), params[i].InsertOpts)
		if want == river.EventKindJobCancelled {
			require.NoError(t, err, "a cancel is no error for rivertest")
		} else {
			require.Error(t, err)
		}
		assert.Equal(t, want, res.EventKind)
	}
	assertNoToken(t, jobRowsText(t, tx, schema), pathToken)
	assert.Equal(t, 3, strings.Count(logged.String(), pathToken), "each goes to the Logger: %s", logged.String())
}

// syncBuffer is a bytes.Buffer safe for concurrent use, for a Logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// OnAttempt hands the job to user code, which may keep it past the call
// (an attempts table written asynchronously, as the user did, so
// that a slow table never holds a worker): "attempt 2 of 7" reads
// job.Attempt and job.MaxAttempts. The Worker then writes job.MaxAttempts
// when the policy gives up, racing with that goroutine (DESIGN 24: what
// user code receives is not changed while it can still reach it). Run
// with -race.
func TestWorker_OnAttemptsJobIsNotWrittenAfterward(t *testing.T) {
	t.Parallel()
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	srv.Script(webhooktest.Status(500))
	policy := &webhook.RetryPolicy{MaxRetries: 0} // the first attempt is the last
	read := make(chan string, 1)
	w := riverhook.NewWorker(srv.Sender(&webhook.SenderOptions{Retry: policy}),
		newResolver(map[string]webhook.Connection{"crm": srv.Connection()}).resolve,
		&riverhook.WorkerOptions{OnAttempt: func(_ context.Context, job *river.Job[riverhook.Args], a webhook.Attempt) error {
			go func() { // the caller's asynchronous attempts table
				read <- itoa(a.N) + " of " + itoa(job.MaxAttempts)
			}()
			return nil
		}})
	tw, tx, _ := testWorker(t, w)
	p := firstParams(t, "d1", policy)
	res, err := tw.Work(context.Background(), t, tx, p.Args.(riverhook.Args), p.InsertOpts)
	require.Error(t, err)
	require.Equal(t, rivertype.JobStateDiscarded, res.Job.State)
	<-read
}

func TestWorker_OnAttemptNeverFailsTheDelivery(t *testing.T) {
	t.Parallel()
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	w := riverhook.NewWorker(srv.Sender(nil), newResolver(map[string]webhook.Connection{"crm": srv.Connection()}).resolve,
		&riverhook.WorkerOptions{Logger: quietLogger(), OnAttempt: func(context.Context, *river.Job[riverhook.Args], webhook.Attempt) error {
			panic("the caller's log is down")
		}})
	tw, tx, _ := testWorker(t, w)
	p := firstParams(t, "d1", nil)
	res, err := tw.Work(context.Background(), t, tx, p.Args.(riverhook.Args), p.InsertOpts)
	require.NoError(t, err)
	assert.Equal(t, river.EventKindJobCompleted, res.EventKind)
	assert.Len(t, srv.Deliveries(), 1, "delivered once")
}

func TestWorker_SnoozedOverThePerConnectionLimit(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}), make(chan struct{})
	var n atomic.Int32
	srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			close(arrived)
			select {
			case <-release:
			case <-r.Context().Done():
				panic(http.ErrAbortHandler) // never an answer after the sender gave up
			}
		}
	})})
	defer srv.Close()
	w := riverhook.NewWorker(srv.Sender(nil), newResolver(map[string]webhook.Connection{"crm": srv.Connection()}).resolve,
		&riverhook.WorkerOptions{MaxInFlightPerConnection: 1, SnoozeFor: time.Minute})
	tw, tx, _ := testWorker(t, w)
	_, tx2, _ := testWorker(t, w)
	ctx := context.Background()
	first := make(chan *rivertest.WorkResult, 1)
	go func() {
		p := firstParams(t, "d1", nil)
		res, _ := tw.Work(ctx, t, tx2, p.Args.(riverhook.Args), p.InsertOpts)
		first <- res
	}()
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the first attempt did not arrive")
	}
	p := firstParams(t, "d2", nil)
	res, err := tw.Work(ctx, t, tx, p.Args.(riverhook.Args), p.InsertOpts)
	require.NoError(t, err)
	assert.Equal(t, river.EventKindJobSnoozed, res.EventKind, "one delivery to crm in flight already")
	assert.Equal(t, 0, res.Job.Attempt, "a snooze is no attempt")
	// Its slot: one attempt's time (SnoozeFor, before any has ended) over
	// the bound, a little under; woken River's scheduler interval early.
	assert.WithinDuration(t, time.Now().Add(time.Minute*7/8-5*time.Second), res.Job.ScheduledAt, 5*time.Second)
	close(release)
	assert.Equal(t, river.EventKindJobCompleted, (<-first).EventKind)
	res, err = tw.WorkJob(ctx, t, tx, res.Job)
	require.NoError(t, err)
	assert.Equal(t, river.EventKindJobCompleted, res.EventKind, "worked once the first is done")
}

// cancelFirst is a river.ErrorHandler that cancels the failed job of
// delivery "d1", so River never asks the worker's NextRetry for it.
type cancelFirst struct{}

func (cancelFirst) HandleError(_ context.Context, job *rivertype.JobRow, _ error) *river.ErrorHandlerResult {
	var args riverhook.Args
	if json.Unmarshal(job.EncodedArgs, &args) == nil && args.DeliveryID == "d1" {
		return &river.ErrorHandlerResult{SetCancelled: true}
	}
	return nil
}

func (cancelFirst) HandlePanic(context.Context, *rivertype.JobRow, any, string) *river.ErrorHandlerResult {
	return nil
}

func TestWorker_RetriesRiverNeverAsksForAreFreed(t *testing.T) {
	t.Parallel()
	pool, schema := testDB(t)
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	srv.Script(webhooktest.Status(500), webhooktest.Status(500))
	policy := fastPolicy(3)
	w := newTestWorker(srv, policy, nil)
	var mu sync.Mutex
	now := time.Now()
	riverhook.SetClock(w, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	client := newClient(t, pool, schema, workers, func(c *river.Config) { c.ErrorHandler = cancelFirst{} })
	events := finalEvents(t, client)
	start(t, client)

	first := insert(t, client, "d1", []string{"crm"}, policy)
	job := waitFinal(t, events, 1)[first[0].Job.ID]
	assert.Equal(t, rivertype.JobStateCancelled, job.State, "the error handler cancelled it")
	d, err := riverhook.DeliveryOf(job)
	require.NoError(t, err)
	assert.Equal(t, "riverhook: cancelled by the client's ErrorHandler after run 1: riverhook: attempt 1: 500 Internal Server Error; retry in 50ms", d.Reason)
	assert.Equal(t, 1, riverhook.PendingRetries(w), "kept for a NextRetry River did not ask")

	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	second := insert(t, client, "d2", []string{"crm"}, policy) // fails once, then is delivered
	job = waitFinal(t, events, 1)[second[0].Job.ID]
	assert.Equal(t, rivertype.JobStateCompleted, job.State)
	assert.Zero(t, riverhook.PendingRetries(w), "the old entry freed, the new one taken by NextRetry")
}

// The Resolver failing on the job's last run: River discards the job and
// never asks NextRetry, yet the Worker keeps the retry it stored for it
// (with the job and its body) until a later failure sweeps it, a minute
// on: the case TestWorker_NoRunLeftForARetry pins for a failed attempt.
func TestWorker_NoRetryKeptWhenTheResolverFailsOnTheLastRun(t *testing.T) {
	t.Parallel()
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	policy := fastPolicy(1)
	w := riverhook.NewWorker(srv.Sender(&webhook.SenderOptions{Retry: policy}), func(context.Context, string) (webhook.Connection, error) {
		return webhook.Connection{}, errors.New("the connections database is down")
	}, nil)
	tw, tx, schema := testWorker(t, w)
	ctx := context.Background()
	job := insertTx(t, tx, schema, firstParams(t, "d1", policy))
	for job.Attempt < job.MaxAttempts-1 { // every run but the last cut by a crash
		job = crash(t, tx, schema, job)
	}
	res, err := tw.WorkJob(ctx, t, tx, job)
	require.Error(t, err)
	require.Equal(t, rivertype.JobStateDiscarded, res.Job.State, "River had no run left")
	assert.Zero(t, riverhook.PendingRetries(w), "no retry kept for a NextRetry River never asks")
}

// The client stopping (StopAndCancel, or SoftStopTimeout) while the
// Resolver runs: River puts the job back without asking NextRetry, yet
// the Worker keeps a retry for it.
func TestWorker_NoRetryKeptWhenTheClientStopsDuringTheResolver(t *testing.T) {
	t.Parallel()
	pool, schema := testDB(t)
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	entered := make(chan struct{})
	w := riverhook.NewWorker(srv.Sender(nil), func(ctx context.Context, _ string) (webhook.Connection, error) {
		close(entered)
		<-ctx.Done() // a slow connections database
		return webhook.Connection{}, ctx.Err()
	}, nil)
	client, _ := workerClient(t, pool, schema, w)
	require.NoError(t, client.Start(context.Background()))
	inserted := insert(t, client, "d1", []string{"crm"}, nil)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not run within 10 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, client.StopAndCancel(ctx))
	job, err := client.JobGet(ctx, inserted[0].Job.ID)
	require.NoError(t, err)
	require.Equal(t, rivertype.JobStateAvailable, job.State, "put back")
	assert.Zero(t, riverhook.PendingRetries(w), "no retry kept for a NextRetry River never asks")
}

func TestWorker_NextRetryOfARescuedJobIsNow(t *testing.T) {
	t.Parallel()
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	w := newTestWorker(srv, nil, nil)
	before := time.Now()
	// River's rescuer asks, in whatever process is the leader, for a job
	// whose run this Worker never saw end.
	at := w.NextRetry(&river.Job[riverhook.Args]{JobRow: &rivertype.JobRow{ID: 1, Attempt: 2, MaxAttempts: 9}})
	assert.False(t, at.Before(before), "not before the rescue")
	assert.False(t, at.After(time.Now()), "at once")
}

func TestWorker_RescueStuckJobsAfter(t *testing.T) {
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	for _, tc := range []struct {
		attemptTimeout, clientJobTimeout, want time.Duration
	}{
		{webhook.DefaultAttemptTimeout, 0, time.Minute},                   // 30 s + 10 s of room + River's 10 s stuck threshold < River's 1 min JobTimeout
		{webhook.DefaultAttemptTimeout, 5 * time.Minute, 5 * time.Minute}, // River requires RescueStuckJobsAfter >= JobTimeout
		{webhook.DefaultAttemptTimeout, -1, 50 * time.Second},             // no client JobTimeout
		{2 * time.Minute, 0, 2*time.Minute + 20*time.Second},              // the worker's own bound
		{3 * time.Second, 20 * time.Second, 23 * time.Second},             // tests' fast settings
	} {
		w := riverhook.NewWorker(srv.Sender(&webhook.SenderOptions{AttemptTimeout: tc.attemptTimeout}), newResolver(nil).resolve, nil)
		got := w.RescueStuckJobsAfter(tc.clientJobTimeout)
		assert.Equal(t, tc.want, got, "attempt timeout %v, client JobTimeout %v", tc.attemptTimeout, tc.clientJobTimeout)
		assert.Greater(t, got, w.Timeout(nil), "never while the job may still run")
		_, err := river.NewClient(riverpgxv5.New(nil), &river.Config{JobTimeout: tc.clientJobTimeout, RescueStuckJobsAfter: got})
		assert.NoError(t, err, "River accepts it")
	}
}

func TestWorker_JobRetryAfterThePolicyGaveUp(t *testing.T) {
	t.Parallel()
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	srv.Script(webhooktest.Status(500), webhooktest.Status(500), webhooktest.Status(500))
	policy := fastPolicy(1)
	tw, tx, schema := testWorker(t, newTestWorker(srv, policy, nil))
	ctx := context.Background()
	job := insertTx(t, tx, schema, firstParams(t, "d1", policy))
	res, err := tw.WorkJob(ctx, t, tx, job)
	require.Error(t, err)
	res, err = tw.WorkJob(ctx, t, tx, res.Job)
	require.Error(t, err)
	require.Equal(t, rivertype.JobStateDiscarded, res.Job.State, "the policy gave up after attempt 2")

	client, err := river.NewClient(riverpgxv5.New(nil), &river.Config{Schema: schema, Logger: quietLogger()})
	require.NoError(t, err)
	job, err = client.JobRetryTx(ctx, tx, res.Job.ID) // an operator resends it
	require.NoError(t, err)
	res, err = tw.WorkJob(ctx, t, tx, job)
	require.Error(t, err)
	assert.Equal(t, rivertype.JobStateDiscarded, res.Job.State)
	assert.Equal(t, "riverhook: attempt 3: 500 Internal Server Error; the policy gives up", res.Job.Errors[len(res.Job.Errors)-1].Error,
		"one more attempt, numbered on")
	job, err = client.JobRetryTx(ctx, tx, res.Job.ID)
	require.NoError(t, err)
	res, err = tw.WorkJob(ctx, t, tx, job) // a retried delivery that succeeds completes
	require.NoError(t, err)
	assert.Equal(t, rivertype.JobStateCompleted, res.Job.State)
}

// Express answers a POST to a path it does not route with its default 404
// page, "Cannot POST /the/path"; many frameworks echo the path, and some
// echo an Authorization header they reject. The receiver's text then
// carries the URL's path (often the credential: Slack, Zapier) and the
// connection's header values into the attempt log the job row holds and
// River UI shows. No job row may hold them (DESIGN 23).
func TestWorker_AnEchoedPathOrHeaderStaysOutOfTheJobRow(t *testing.T) {
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
