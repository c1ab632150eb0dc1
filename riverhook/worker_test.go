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

func TestNewWorker_RefusesAnInvalidConfiguration(t *testing.T) {
	sender, err := webhook.NewSender(nil)
	require.NoError(t, err)
	resolve := func(context.Context, string) (webhook.Connection, error) { return webhook.Connection{}, nil }
	for _, tc := range []struct {
		name    string
		sender  *webhook.Sender
		resolve riverhook.Resolver
		opts    riverhook.WorkerOptions
		wantErr string
	}{
		{"NoSender", nil, resolve, riverhook.WorkerOptions{}, "NewWorker needs a Sender and a Resolver"},
		{"NoResolver", sender, nil, riverhook.WorkerOptions{}, "NewWorker needs a Sender and a Resolver"},
		{"NegativeMaxInFlight", sender, resolve, riverhook.WorkerOptions{MaxInFlightPerConnection: -1}, "MaxInFlightPerConnection is -1"},
		{"NegativeSnoozeFor", sender, resolve, riverhook.WorkerOptions{SnoozeFor: -time.Second}, "SnoozeFor is -1s"},
		{"NegativeMaxWait", sender, resolve, riverhook.WorkerOptions{MaxWait: -time.Hour}, "MaxWait is -1h0m0s"},
		// An untyped 72 written for hours is 72 ns: every delivery to a
		// down endpoint would be given up at its first refusal.
		{"NanosecondsMaxWait", sender, resolve, riverhook.WorkerOptions{MaxWait: 72}, "MaxWait is 72ns"},
		{"NanosecondsSnoozeFor", sender, resolve, riverhook.WorkerOptions{SnoozeFor: 1}, "SnoozeFor is 1ns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := riverhook.NewWorker(tc.sender, tc.resolve, &tc.opts)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.wantErr)
			assert.Nil(t, w)
		})
	}
	w, err := riverhook.NewWorker(sender, resolve, &riverhook.WorkerOptions{})
	require.NoError(t, err, "zero selects the defaults")
	assert.NotNil(t, w)
}

// TestWorker works a Worker's jobs with rivertest, or with a River client
// where River's own part is what a case pins; each case that works jobs has
// its own receiver and schema (setupWorker).
func TestWorker(t *testing.T) {
	t.Parallel()

	t.Run("ZeroWaitIsExactlyZero", func(t *testing.T) {
		t.Parallel()
		policy := &webhook.RetryPolicy{MaxRetries: 2, Backoff: func(int, *http.Response) time.Duration { return 0 }}
		_, bundle := setupWorker(t, &workerOpts{sender: webhook.SenderOptions{Retry: policy}})
		bundle.srv.Script(webhooktest.Status(503))
		p := firstParams(t, "d0", policy)
		res, err := bundle.tw.Work(context.Background(), t, bundle.tx, p.Args.(riverhook.Args), p.InsertOpts)
		require.Error(t, err)
		after := time.Now()
		assert.Equal(t, river.EventKindJobFailed, res.EventKind)
		assert.Equal(t, rivertype.JobStateAvailable, res.Job.State, "a retry due now is available at once")
		assert.False(t, res.Job.ScheduledAt.After(after), "retry scheduled at %v, after the attempt ended (%v): not the policy's 0 wait", res.Job.ScheduledAt, after)
	})

	t.Run("InterruptedAttemptIsLoggedAndCostsNoRetry", func(t *testing.T) {
		t.Parallel()
		policy := fastPolicy(1) // two attempts: the crash must cost neither
		_, bundle := setupWorker(t, &workerOpts{sender: webhook.SenderOptions{Retry: policy}, record: true})
		bundle.srv.Script(webhooktest.Status(500))
		ctx := context.Background()

		job := insertTx(t, bundle.tx, bundle.schema, firstParams(t, "d1", policy))
		res, err := bundle.tw.WorkJob(ctx, t, bundle.tx, job) // attempt 1: 500
		require.Error(t, err)
		job = crash(t, bundle.tx, bundle.schema, res.Job) // attempt 2 is cut by a crash: its process died
		res, err = bundle.tw.WorkJob(ctx, t, bundle.tx, job)
		require.NoError(t, err)
		assert.Equal(t, river.EventKindJobCompleted, res.EventKind)

		got := bundle.rec.attempts()
		require.Len(t, got, 3, "attempt 1, the interrupted attempt 2, and attempt 2 made again")
		assert.Equal(t, "attempt 2: interrupted", got[1].String())
		assert.Equal(t, webhook.KindInterrupted, got[1].Kind)
		assert.Equal(t, 2, got[2].N, "the crash cost no attempt")
		assert.True(t, got[2].OK())
		require.Len(t, bundle.srv.Deliveries(), 2)
	})

	// A run that River ended with its own error (a process of a rolling
	// deploy without the worker registered: "job kind is not registered")
	// sent nothing and no process died. The attempt log must not call it an
	// interrupted attempt, "the receiver may have had it", and OnAttempt must
	// not be told one was cut.
	t.Run("RiversOwnRunErrorIsNotAnInterruptedAttempt", func(t *testing.T) {
		t.Parallel()
		_, bundle := setupWorker(t, &workerOpts{record: true})
		ctx := context.Background()
		job := insertTx(t, bundle.tx, bundle.schema, firstParams(t, "d1", nil))
		e, err := json.Marshal(rivertype.AttemptError{At: time.Now().UTC(), Attempt: 1,
			Error: (&rivertype.UnknownJobKindError{Kind: riverhook.Kind}).Error()})
		require.NoError(t, err)
		_, err = bundle.tx.Exec(ctx, "UPDATE "+bundle.schema+".river_job SET attempt = 1, attempted_at = now(), errors = array_append(errors, $2::jsonb) WHERE id = $1", job.ID, string(e))
		require.NoError(t, err)
		client, err := river.NewClient(riverpgxv5.New(nil), &river.Config{Schema: bundle.schema, Logger: quietLogger()})
		require.NoError(t, err)
		job, err = client.JobGetTx(ctx, bundle.tx, job.ID)
		require.NoError(t, err)

		res, err := bundle.tw.WorkJob(ctx, t, bundle.tx, job)
		require.NoError(t, err)
		for _, a := range bundle.rec.attempts() {
			assert.NotEqual(t, webhook.KindInterrupted, a.Kind, "OnAttempt told of %q", a)
		}
		d, err := riverhook.DeliveryOf(res.Job)
		require.NoError(t, err)
		for _, a := range d.Attempts {
			assert.NotEqual(t, webhook.KindInterrupted, a.Kind, "the log shows %q", a)
		}
	})

	t.Run("PolicyGivingUpDiscards", func(t *testing.T) {
		t.Parallel()
		policy := fastPolicy(1)
		_, bundle := setupWorker(t, &workerOpts{sender: webhook.SenderOptions{Retry: policy}})
		bundle.srv.Script(webhooktest.Status(500), webhooktest.Status(500))
		ctx := context.Background()
		job := insertTx(t, bundle.tx, bundle.schema, firstParams(t, "d1", policy))
		res, err := bundle.tw.WorkJob(ctx, t, bundle.tx, job)
		require.Error(t, err)
		assert.Equal(t, "riverhook: attempt 1: 500 Internal Server Error; retry in 50ms", res.Job.Errors[0].Error)
		job = crash(t, bundle.tx, bundle.schema, res.Job)
		res, err = bundle.tw.WorkJob(ctx, t, bundle.tx, job)
		require.Error(t, err)
		assert.Equal(t, rivertype.JobStateDiscarded, res.Job.State, "the policy gave up")
		assert.Equal(t, "riverhook: attempt 2: 500 Internal Server Error; the policy gives up", res.Job.Errors[2].Error)
		assert.Less(t, res.Job.Attempt, res.Job.MaxAttempts, "runs were left for interrupted attempts")
	})

	t.Run("AttemptLog", func(t *testing.T) {
		t.Parallel()
		var n atomic.Int32
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch n.Add(1) {
			case 1: // a long answer with a NUL, an escape sequence and a bidi override
				w.WriteHeader(http.StatusServiceUnavailable)
				io.WriteString(w, "busy\x00\x1b[31m\u202e<&>\"\\"+strings.Repeat("é", 3000))
			case 2:
				w.WriteHeader(http.StatusInternalServerError)
			default:
				io.WriteString(w, `{"ok":true}`)
			}
		})
		policy := fastPolicy(3)
		_, bundle := setupWorker(t, &workerOpts{handler: handler, sender: webhook.SenderOptions{Retry: policy}})
		ctx := context.Background()
		p := firstParams(t, "d1", policy)
		res, err := bundle.tw.Work(ctx, t, bundle.tx, p.Args.(riverhook.Args), p.InsertOpts)
		require.Error(t, err)
		res, err = bundle.tw.WorkJob(ctx, t, bundle.tx, res.Job)
		require.Error(t, err)
		res, err = bundle.tw.WorkJob(ctx, t, bundle.tx, res.Job)
		require.NoError(t, err)
		job := res.Job
		rows, err := bundle.tx.Query(ctx, "SELECT e::text FROM "+bundle.schema+".river_job, jsonb_array_elements(metadata->'output'->'attempts') e WHERE id = $1", job.ID)
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
	})

	// A hostile receiver answers a 3xx whose reason phrase fills the response
	// header bound (64 KiB). The attempt log's entry is cut to 1 KiB, but the
	// error River keeps for the run (river_job.errors, rewritten by every
	// update of the row and River UI's main text) holds the whole phrase: one
	// receiver makes each of its deliveries' rows carry ~60 KiB per run, over
	// up to MaxAttempts runs. The error of a run must be as bounded as its log
	// entry.
	t.Run("RunErrorIsBoundedLikeTheLogEntry", func(t *testing.T) {
		t.Parallel()
		phrase := strings.Repeat("Found ", 10_000) // 60,000 bytes
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			defer conn.Close()
			fmt.Fprintf(buf, "HTTP/1.1 302 %s\r\nLocation: https://elsewhere.example/\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", phrase)
			buf.Flush()
		})
		policy := fastPolicy(1)
		_, bundle := setupWorker(t, &workerOpts{handler: handler, sender: webhook.SenderOptions{Retry: policy}})
		p := firstParams(t, "d1", policy)
		res, err := bundle.tw.Work(context.Background(), t, bundle.tx, p.Args.(riverhook.Args), p.InsertOpts)
		require.Error(t, err)
		require.Len(t, res.Job.Errors, 1)
		d, err := riverhook.DeliveryOf(res.Job)
		require.NoError(t, err)
		require.Len(t, d.Attempts, 1)
		require.Equal(t, webhook.KindRedirect, d.Attempts[0].Kind)
		stored := res.Job.Errors[0].Error
		assert.LessOrEqual(t, len(stored), 1024, "River's error of the run has %d bytes: %.120s…", len(stored), stored)
	})

	t.Run("NoRunLeftForARetry", func(t *testing.T) {
		t.Parallel()
		policy := fastPolicy(2) // three attempts
		w, bundle := setupWorker(t, &workerOpts{sender: webhook.SenderOptions{Retry: policy}})
		bundle.srv.Script(webhooktest.Status(500), webhooktest.Status(500))
		ctx := context.Background()
		job := insertTx(t, bundle.tx, bundle.schema, firstParams(t, "d1", policy))
		require.Equal(t, 3+riverhook.MaxInterruptedRuns, job.MaxAttempts)
		res, err := bundle.tw.WorkJob(ctx, t, bundle.tx, job) // attempt 1: 500
		require.Error(t, err)
		job = res.Job
		for range riverhook.MaxInterruptedRuns + 1 { // every run cut but the last River has
			job = crash(t, bundle.tx, bundle.schema, job)
		}
		require.Equal(t, job.MaxAttempts-1, job.Attempt)
		res, err = bundle.tw.WorkJob(ctx, t, bundle.tx, job) // attempt 2 fails: the policy would retry
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
	})

	t.Run("Cancelled", func(t *testing.T) {
		t.Parallel()
		w, bundle := setupWorker(t, &workerOpts{guarded: true}) // the default transport: 127.0.0.1 is refused
		invalid := bundle.srv.Connection()
		invalid.URL = "http://plain.example"
		bundle.conns.set("loopback", bundle.srv.Connection())
		bundle.conns.set("invalid", invalid)
		ctx := context.Background()
		params, err := riverhook.InsertParams("d1", []string{"loopback", "deleted", "invalid"}, payload("d1"), nil)
		require.NoError(t, err)
		for i, want := range []struct{ kind, err string }{
			{"blocked", "JobCancelError: riverhook: attempt 1: blocked: refused to connect to https://127.0.0.1:"},
			{"", `JobCancelError: riverhook: connection "deleted" is gone`},
			{"invalid", "JobCancelError: riverhook: attempt 1: invalid: "},
		} {
			res, err := bundle.tw.Work(ctx, t, bundle.tx, params[i].Args.(riverhook.Args), params[i].InsertOpts)
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
		assert.Empty(t, bundle.srv.Deliveries(), "nothing reached the receiver")
		assert.Zero(t, riverhook.PendingRetries(w))
	})

	t.Run("ResolverFailureCostsNoAttempt", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int32
		errDown := errors.New("the database is down")
		_, bundle := setupWorker(t, &workerOpts{record: true, resolve: func(conns riverhook.Resolver) riverhook.Resolver {
			return func(ctx context.Context, id string) (webhook.Connection, error) {
				switch calls.Add(1) {
				case 1:
					return webhook.Connection{}, errDown
				case 2:
					panic("a Resolver's bug")
				}
				return conns(ctx, id)
			}
		}})
		ctx := context.Background()
		p := firstParams(t, "d1", nil)
		before := time.Now()
		res, err := bundle.tw.Work(ctx, t, bundle.tx, p.Args.(riverhook.Args), p.InsertOpts)
		require.ErrorIs(t, err, errDown, "for a river.ErrorHandler")
		assert.Equal(t, `riverhook: connection "crm" did not resolve (the Resolver's error is logged, not kept here)`, res.Job.Errors[0].Error)
		// River's default policy waits 1 s ±10% after a first error, counted
		// from the run's end: at least 0.9 s after before, however slow the
		// run. Half a second is well clear of no wait at all.
		assert.True(t, res.Job.ScheduledAt.After(before.Add(500*time.Millisecond)), "River's client retry policy waits: %v, run at %v", res.Job.ScheduledAt, before)
		res, err = bundle.tw.WorkJob(ctx, t, bundle.tx, res.Job)
		require.ErrorContains(t, err, `riverhook: connection "crm" did not resolve: the Resolver panicked`)
		assert.Equal(t, `riverhook: connection "crm" did not resolve: the Resolver panicked (logged, not kept here)`, res.Job.Errors[1].Error)
		res, err = bundle.tw.WorkJob(ctx, t, bundle.tx, res.Job)
		require.NoError(t, err)
		assert.Equal(t, 3, res.Job.Attempt)
		got := bundle.rec.attempts()
		require.Len(t, got, 1, "runs that could not attempt are not interrupted attempts")
		assert.Equal(t, 1, got[0].N, "and cost no attempt")
		assert.True(t, got[0].OK())
	})

	// A Resolver's error is the caller's text: a url.Parse error quotes the
	// whole URL, a database driver's error can quote the row, a panic's value
	// anything. None reaches the job row (River UI shows it): the row names
	// the connection by id, and the text goes to the Worker's Logger.
	t.Run("ResolverErrorTextStaysOutOfTheJobRow", func(t *testing.T) {
		t.Parallel()
		const pathToken = "PATHTOKEN5d20"
		var logged syncBuffer
		_, bundle := setupWorker(t, &workerOpts{
			worker: riverhook.WorkerOptions{Logger: slog.New(slog.NewTextHandler(&logged, nil))},
			resolve: func(riverhook.Resolver) riverhook.Resolver {
				return func(_ context.Context, id string) (webhook.Connection, error) {
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
				}
			},
		})
		params, err := riverhook.InsertParams("d1", []string{"crm", "panics", "gone"}, payload("d1"), nil)
		require.NoError(t, err)
		for i, want := range []river.EventKind{river.EventKindJobFailed, river.EventKindJobFailed, river.EventKindJobCancelled} {
			res, err := bundle.tw.Work(context.Background(), t, bundle.tx, params[i].Args.(riverhook.Args), params[i].InsertOpts)
			if want == river.EventKindJobCancelled {
				require.NoError(t, err, "a cancel is no error for rivertest")
			} else {
				require.Error(t, err)
			}
			assert.Equal(t, want, res.EventKind)
		}
		assertNoToken(t, jobRowsText(t, bundle.tx, bundle.schema), pathToken)
		assert.Equal(t, 3, strings.Count(logged.String(), pathToken), "each goes to the Logger: %s", logged.String())
	})

	// OnAttempt hands the job to user code, which may keep it past the call
	// (an attempts table written asynchronously, as the user did, so
	// that a slow table never holds a worker): "attempt 2 of 7" reads
	// job.Attempt and job.MaxAttempts. The Worker then writes job.MaxAttempts
	// when the policy gives up, racing with that goroutine (DESIGN 24: what
	// user code receives is not changed while it can still reach it). Run
	// with -race.
	t.Run("OnAttemptsJobIsNotWrittenAfterward", func(t *testing.T) {
		t.Parallel()
		policy := &webhook.RetryPolicy{MaxRetries: 0} // the first attempt is the last
		read := make(chan string, 1)
		_, bundle := setupWorker(t, &workerOpts{sender: webhook.SenderOptions{Retry: policy},
			worker: riverhook.WorkerOptions{OnAttempt: func(_ context.Context, job *river.Job[riverhook.Args], a webhook.Attempt) error {
				go func() { // the caller's asynchronous attempts table
					read <- itoa(a.N) + " of " + itoa(job.MaxAttempts)
				}()
				return nil
			}}})
		bundle.srv.Script(webhooktest.Status(500))
		p := firstParams(t, "d1", policy)
		res, err := bundle.tw.Work(context.Background(), t, bundle.tx, p.Args.(riverhook.Args), p.InsertOpts)
		require.Error(t, err)
		require.Equal(t, rivertype.JobStateDiscarded, res.Job.State)
		<-read
	})

	t.Run("OnAttemptNeverFailsTheDelivery", func(t *testing.T) {
		t.Parallel()
		_, bundle := setupWorker(t, &workerOpts{
			worker: riverhook.WorkerOptions{Logger: quietLogger(), OnAttempt: func(context.Context, *river.Job[riverhook.Args], webhook.Attempt) error {
				panic("the caller's log is down")
			}}})
		p := firstParams(t, "d1", nil)
		res, err := bundle.tw.Work(context.Background(), t, bundle.tx, p.Args.(riverhook.Args), p.InsertOpts)
		require.NoError(t, err)
		assert.Equal(t, river.EventKindJobCompleted, res.EventKind)
		assert.Len(t, bundle.srv.Deliveries(), 1, "delivered once")
	})

	t.Run("SnoozedOverThePerConnectionLimit", func(t *testing.T) {
		t.Parallel()
		arrived, release := make(chan struct{}), make(chan struct{})
		var n atomic.Int32
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				close(arrived)
				select {
				case <-release:
				case <-r.Context().Done():
					panic(http.ErrAbortHandler) // never an answer after the sender gave up
				}
			}
		})
		_, bundle := setupWorker(t, &workerOpts{handler: handler, worker: riverhook.WorkerOptions{MaxInFlightPerConnection: 1, SnoozeFor: time.Minute}})
		tx2 := testTx(t, bundle.pool) // the first delivery's, worked meanwhile
		ctx := context.Background()
		first := make(chan *rivertest.WorkResult, 1)
		go func() {
			p := firstParams(t, "d1", nil)
			res, _ := bundle.tw.Work(ctx, t, tx2, p.Args.(riverhook.Args), p.InsertOpts)
			first <- res
		}()
		select {
		case <-arrived:
		case <-time.After(30 * time.Second):
			t.Fatal("the first attempt did not arrive")
		}
		p := firstParams(t, "d2", nil)
		before := time.Now()
		res, err := bundle.tw.Work(ctx, t, bundle.tx, p.Args.(riverhook.Args), p.InsertOpts)
		after := time.Now()
		require.NoError(t, err)
		assert.Equal(t, river.EventKindJobSnoozed, res.EventKind, "one delivery to crm in flight already")
		assert.Equal(t, 0, res.Job.Attempt, "a snooze is no attempt")
		// Its slot: one attempt's time (SnoozeFor, before any has ended) over
		// the bound: 60 s from a moment during Work, between before and
		// after (the row keeps microseconds). The Worker's due makes it
		// available at that time.
		slot := time.Minute
		lo, hi := before.Add(slot).Truncate(time.Microsecond), after.Add(slot)
		assert.True(t, !res.Job.ScheduledAt.Before(lo) && !res.Job.ScheduledAt.After(hi), "%v not within [%v, %v]", res.Job.ScheduledAt, lo, hi)
		close(release)
		assert.Equal(t, river.EventKindJobCompleted, (<-first).EventKind)
		res, err = bundle.tw.WorkJob(ctx, t, bundle.tx, res.Job)
		require.NoError(t, err)
		assert.Equal(t, river.EventKindJobCompleted, res.EventKind, "worked once the first is done")
	})

	t.Run("RetriesRiverNeverAsksForAreFreed", func(t *testing.T) {
		t.Parallel()
		policy := fastPolicy(3)
		w, bundle := setupWorker(t, &workerOpts{sender: webhook.SenderOptions{Retry: policy}})
		bundle.srv.Script(webhooktest.Status(500), webhooktest.Status(500))
		var mu sync.Mutex
		now := time.Now()
		riverhook.SetClock(w, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
		workers := river.NewWorkers()
		river.AddWorker(workers, w)
		client := newClient(t, bundle.pool, bundle.schema, workers, func(c *river.Config) { c.ErrorHandler = cancelFirst{} })
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
	})

	// The Resolver failing on the job's last run: River discards the job and
	// never asks NextRetry, yet the Worker keeps the retry it stored for it
	// (with the job and its body) until a later failure sweeps it, a minute
	// on: the case TestWorker/NoRunLeftForARetry pins for a failed attempt.
	t.Run("NoRetryKeptWhenTheResolverFailsOnTheLastRun", func(t *testing.T) {
		t.Parallel()
		policy := fastPolicy(1)
		w, bundle := setupWorker(t, &workerOpts{sender: webhook.SenderOptions{Retry: policy}, resolve: func(riverhook.Resolver) riverhook.Resolver {
			return func(context.Context, string) (webhook.Connection, error) {
				return webhook.Connection{}, errors.New("the connections database is down")
			}
		}})
		ctx := context.Background()
		job := insertTx(t, bundle.tx, bundle.schema, firstParams(t, "d1", policy))
		for job.Attempt < job.MaxAttempts-1 { // every run but the last cut by a crash
			job = crash(t, bundle.tx, bundle.schema, job)
		}
		res, err := bundle.tw.WorkJob(ctx, t, bundle.tx, job)
		require.Error(t, err)
		require.Equal(t, rivertype.JobStateDiscarded, res.Job.State, "River had no run left")
		assert.Zero(t, riverhook.PendingRetries(w), "no retry kept for a NextRetry River never asks")
	})

	// The client stopping (StopAndCancel, or SoftStopTimeout) while the
	// Resolver runs: River puts the job back without asking NextRetry, yet
	// the Worker keeps a retry for it.
	t.Run("NoRetryKeptWhenTheClientStopsDuringTheResolver", func(t *testing.T) {
		t.Parallel()
		entered := make(chan struct{})
		w, bundle := setupWorker(t, &workerOpts{resolve: func(riverhook.Resolver) riverhook.Resolver {
			return func(ctx context.Context, _ string) (webhook.Connection, error) {
				close(entered)
				<-ctx.Done() // a slow connections database
				return webhook.Connection{}, ctx.Err()
			}
		}})
		client, _ := workerClient(t, bundle.pool, bundle.schema, w)
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
	})

	t.Run("NextRetryOfARescuedJobIsNow", func(t *testing.T) {
		t.Parallel()
		srv := webhooktest.NewServer(secret, nil)
		defer srv.Close()
		w := newTestWorker(t, srv, nil, nil)
		before := time.Now()
		// River's rescuer asks, in whatever process is the leader, for a job
		// whose run this Worker never saw end.
		at := w.NextRetry(&river.Job[riverhook.Args]{JobRow: &rivertype.JobRow{ID: 1, Attempt: 2, MaxAttempts: 9}})
		assert.False(t, at.Before(before), "not before the rescue")
		assert.False(t, at.After(time.Now()), "at once")
	})

	t.Run("RescueStuckJobsAfter", func(t *testing.T) {
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
			w := newWorker(t, srv.Sender(&webhook.SenderOptions{AttemptTimeout: tc.attemptTimeout}), newResolver(nil).resolve, nil)
			got := w.RescueStuckJobsAfter(tc.clientJobTimeout)
			assert.Equal(t, tc.want, got, "attempt timeout %v, client JobTimeout %v", tc.attemptTimeout, tc.clientJobTimeout)
			assert.Greater(t, got, w.Timeout(nil), "never while the job may still run")
			_, err := river.NewClient(riverpgxv5.New(nil), &river.Config{JobTimeout: tc.clientJobTimeout, RescueStuckJobsAfter: got})
			assert.NoError(t, err, "River accepts it")
		}
	})

	t.Run("JobRetryAfterThePolicyGaveUp", func(t *testing.T) {
		t.Parallel()
		policy := fastPolicy(1)
		_, bundle := setupWorker(t, &workerOpts{sender: webhook.SenderOptions{Retry: policy}})
		bundle.srv.Script(webhooktest.Status(500), webhooktest.Status(500), webhooktest.Status(500))
		ctx := context.Background()
		job := insertTx(t, bundle.tx, bundle.schema, firstParams(t, "d1", policy))
		res, err := bundle.tw.WorkJob(ctx, t, bundle.tx, job)
		require.Error(t, err)
		res, err = bundle.tw.WorkJob(ctx, t, bundle.tx, res.Job)
		require.Error(t, err)
		require.Equal(t, rivertype.JobStateDiscarded, res.Job.State, "the policy gave up after attempt 2")

		client, err := river.NewClient(riverpgxv5.New(nil), &river.Config{Schema: bundle.schema, Logger: quietLogger()})
		require.NoError(t, err)
		job, err = client.JobRetryTx(ctx, bundle.tx, res.Job.ID) // an operator resends it
		require.NoError(t, err)
		res, err = bundle.tw.WorkJob(ctx, t, bundle.tx, job)
		require.Error(t, err)
		assert.Equal(t, rivertype.JobStateDiscarded, res.Job.State)
		assert.Equal(t, "riverhook: attempt 3: 500 Internal Server Error; the policy gives up", res.Job.Errors[len(res.Job.Errors)-1].Error,
			"one more attempt, numbered on")
		job, err = client.JobRetryTx(ctx, bundle.tx, res.Job.ID)
		require.NoError(t, err)
		res, err = bundle.tw.WorkJob(ctx, t, bundle.tx, job) // a retried delivery that succeeds completes
		require.NoError(t, err)
		assert.Equal(t, rivertype.JobStateCompleted, res.Job.State)
	})

	// Express answers a POST to a path it does not route with its default 404
	// page, "Cannot POST /the/path"; many frameworks echo the path, and some
	// echo an Authorization header they reject. The receiver's text then
	// carries the URL's path (often the credential: Slack, Zapier) and the
	// connection's header values into the attempt log the job row holds and
	// River UI shows. No job row may hold them (DESIGN 23).
	t.Run("AnEchoedPathOrHeaderStaysOutOfTheJobRow", func(t *testing.T) {
		t.Parallel()
		const (
			pathToken   = "PATHTOKEN31c8"
			headerToken = "HEADERTOKEN77ab"
		)
		var n int
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n++ // rivertest works one run at a time
			if n == 1 {
				w.WriteHeader(http.StatusNotFound)
				fmt.Fprintf(w, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Error</title></head><body><pre>Cannot POST %s</pre></body></html>\n", r.URL.Path)
				return
			}
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"error":"invalid credentials %q"}`, r.Header.Get("Authorization"))
		})
		policy := fastPolicy(1)
		_, bundle := setupWorker(t, &workerOpts{handler: handler, sender: webhook.SenderOptions{Retry: policy}})
		conn := bundle.srv.Connection()
		conn.URL += "/hooks/T0001/" + pathToken
		conn.Headers = map[string]string{"Authorization": "Bearer " + headerToken}
		bundle.conns.set("crm", conn)
		ctx := context.Background()
		p := firstParams(t, "d1", policy)
		res, err := bundle.tw.Work(ctx, t, bundle.tx, p.Args.(riverhook.Args), p.InsertOpts) // 404, echoing the path
		require.Error(t, err)
		res, err = bundle.tw.WorkJob(ctx, t, bundle.tx, res.Job) // 401, echoing the header
		require.Error(t, err)
		require.Equal(t, rivertype.JobStateDiscarded, res.Job.State)

		text := jobRowsText(t, bundle.tx, bundle.schema)
		require.Contains(t, text, "Cannot POST", "the excerpt is kept")
		for _, token := range []string{pathToken, "T0001", headerToken} {
			assertNoToken(t, text, token)
		}
	})

	// No job row holds a URL's path or query, a header value or a secret: the
	// path of many webhook URLs is their credential.
	t.Run("NoSecretInAnyJobRow", func(t *testing.T) {
		t.Parallel()
		const (
			pathToken   = "PATHTOKEN7f3a"
			queryToken  = "QUERYTOKEN9c1e"
			headerToken = "HEADERTOKEN5b2d"
			secretToken = "whsec_SECRETTOKEN4e8f"
		)
		var n int
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		})
		_, bundle := setupWorker(t, &workerOpts{secret: secretToken, handler: handler,
			// 3 s: ample for the attempts that must not time out (TLS
			// included) on a slow machine; the timeout case waits it out.
			sender: webhook.SenderOptions{Retry: fastPolicy(3), AttemptTimeout: 3 * time.Second}, record: true})
		conn := bundle.srv.Connection()
		conn.URL += "/services/T0001/" + pathToken + "?key=" + queryToken
		conn.Headers = map[string]string{"Authorization": "Bearer " + headerToken}
		invalid := conn
		invalid.URL = strings.Replace(conn.URL, "https://", "http://", 1)
		bundle.conns.set("crm", conn)
		bundle.conns.set("invalid", invalid)
		ctx := context.Background()
		params, err := riverhook.InsertParams("d1", []string{"crm", "invalid"}, payload("d1"), &riverhook.InsertOptions{Retry: fastPolicy(3)})
		require.NoError(t, err)
		res, err := bundle.tw.Work(ctx, t, bundle.tx, params[0].Args.(riverhook.Args), params[0].InsertOpts)
		require.Error(t, err)
		for range 3 { // 500, redirect, timeout, delivered
			res, _ = bundle.tw.WorkJob(ctx, t, bundle.tx, res.Job)
		}
		assert.Equal(t, rivertype.JobStateCompleted, res.Job.State)
		_, err = bundle.tw.Work(ctx, t, bundle.tx, params[1].Args.(riverhook.Args), params[1].InsertOpts)
		require.NoError(t, err)

		var kinds []webhook.FailureKind
		for _, a := range bundle.rec.attempts() {
			kinds = append(kinds, a.Kind)
		}
		require.Equal(t, []webhook.FailureKind{webhook.KindStatus, webhook.KindRedirect, webhook.KindTimeout, webhook.KindNone, webhook.KindInvalid}, kinds)
		text := jobRowsText(t, bundle.tx, bundle.schema)
		require.Contains(t, text, "127.0.0.1", "the rows name the endpoint by its origin")
		require.Contains(t, text, "elsewhere.example", "and a redirect's target by its own")
		for _, token := range []string{pathToken, queryToken, headerToken, secretToken, "T0001"} {
			assert.NotContains(t, text, token)
		}
		var out json.RawMessage
		require.NoError(t, bundle.tx.QueryRow(ctx, "SELECT metadata->'output' FROM "+bundle.schema+".river_job WHERE id = $1", res.Job.ID).Scan(&out))
		assert.Contains(t, string(out), `"kind": "redirect"`)
	})
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

// TestWorker_AYearlyRateInAFleetSnoozesItsBacklog: a connection at one
// delivery a year, in a fleet (ConnectionPlaces), whose chain of slots is
// 300 years ahead, as a backlog of about 290 deliveries leaves it. The next
// delivery is snoozed to its slot, nothing sent: the wait wrapped past 292
// years to a negative one, and the Worker panicked in river.JobSnooze,
// without an attempt, run after run, until River discarded the delivery
// (review).
func TestWorker_AYearlyRateInAFleetSnoozesItsBacklog(t *testing.T) {
	pool, schema := testDB(t)
	ctx := context.Background()
	srv := webhooktest.NewServer(secret, nil)
	t.Cleanup(srv.Close)
	places := riverhook.NewConnectionPlaces(pool, schema)
	t.Cleanup(func() { places.Close(ctx) })
	conn := srv.Connection()
	w, err := riverhook.NewWorker(srv.Sender(nil), func(context.Context, string) (webhook.Connection, error) { return conn, nil },
		&riverhook.WorkerOptions{Places: places, Logger: quietLogger(), RateLimit: func(string) float64 { return 1.0 / (365 * 24 * 3600) }})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO `+schema+`.riverhook_pace (connection_id, last_start, chain, spacing)
		VALUES ('yearly', clock_timestamp(), clock_timestamp() + interval '300 years', 0)`)
	require.NoError(t, err)

	tw := rivertest.NewWorker(t, riverpgxv5.New(nil), &river.Config{Schema: schema, Logger: quietLogger()}, w)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	res, err := riverhook.InsertTx(ctx, newClient(t, pool, schema, nil, nil), tx, "d-yearly", []string{"yearly"}, payload("d-yearly"), w.InsertOptions(nil))
	require.NoError(t, err)
	worked, err := tw.WorkJob(ctx, t, tx, res[0].Job)
	require.NoError(t, err)
	assert.Equal(t, river.EventKindJobSnoozed, worked.EventKind)
	assert.Greater(t, worked.Job.ScheduledAt, time.Now().AddDate(200, 0, 0), "snoozed to its slot, centuries ahead")
	assert.Empty(t, srv.Deliveries())
}
