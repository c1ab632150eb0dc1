package riverhook_test

import (
	"context"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/webhooktest"
)

func TestList(t *testing.T) {
	t.Parallel()

	t.Run("ListsAConnectionsDeliveriesNewestFirst", func(t *testing.T) {
		t.Parallel()
		policy := fastPolicy(2)
		_, bundle := setupWorker(t, &workerOpts{sender: webhook.SenderOptions{Retry: policy}})
		bundle.srv.Script(webhooktest.Status(503)) // the first attempt to crm.eu
		// Two ids that share a tag: the listing keeps each one's own.
		bundle.conns.set("crm.eu", bundle.srv.Connection())
		bundle.conns.set("crm-eu", bundle.srv.Connection())
		require.Equal(t, riverhook.ConnectionTag("crm.eu"), riverhook.ConnectionTag("crm-eu"))
		ctx := context.Background()
		client := newClient(t, bundle.pool, bundle.schema, nil, nil)
		var ids []int64
		for _, d := range []string{"d1", "d2", "d3"} {
			res, err := riverhook.InsertTx(ctx, client, bundle.tx, d, []string{"crm.eu", "crm-eu"}, payload(d), &riverhook.InsertOptions{Retry: policy})
			require.NoError(t, err)
			ids = append(ids, res[0].Job.ID)
		}
		job, err := client.JobGetTx(ctx, bundle.tx, ids[0])
		require.NoError(t, err)
		res, err := bundle.tw.WorkJob(ctx, t, bundle.tx, job) // d1: 503, then delivered
		require.Error(t, err)
		_, err = bundle.tw.WorkJob(ctx, t, bundle.tx, res.Job)
		require.NoError(t, err)
		job, err = client.JobGetTx(ctx, bundle.tx, ids[1])
		require.NoError(t, err)
		_, err = bundle.tw.WorkJob(ctx, t, bundle.tx, job) // d2: delivered; d3 waits
		require.NoError(t, err)
		require.NoError(t, bundle.tx.Commit(ctx))

		page, err := riverhook.List(ctx, client, "crm.eu", nil)
		require.NoError(t, err)
		got := page.Deliveries
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

		two, err := riverhook.List(ctx, client, "crm.eu", &riverhook.ListParams{Limit: 2})
		require.NoError(t, err)
		require.Len(t, two.Deliveries, 2, "the limit")
		assert.Equal(t, "d2", two.Deliveries[1].DeliveryID)
		none, err := riverhook.List(ctx, client, "erp", nil)
		require.NoError(t, err)
		assert.Empty(t, none.Deliveries)
	})

	// List serves a dashboard's GET /connections/{id}/deliveries, whose
	// limit often comes from the request: a limit over MaxPage lists
	// MaxPage, and never reaches River's bound (JobListParams.First panics
	// over 10,000).
	t.Run("LargeLimitDoesNotPanic", func(t *testing.T) {
		t.Parallel()
		client, err := river.NewClient(riverpgxv5.New(nil), &river.Config{Logger: quietLogger()})
		require.NoError(t, err)
		assert.NotPanics(t, func() {
			riverhook.List(context.Background(), client, "crm", &riverhook.ListParams{Limit: 20_000}) //nolint:errcheck // no pool: only the panic matters
		})
	})

	// Args.InsertOpts' doc: a plain client.Insert of Args is unique and tagged
	// too. A caller who adds a tag of its own (a tenant, a trace) with River's
	// InsertOpts replaces the delivery's tags (River takes InsertOpts.Tags over
	// the args'); List finds the delivery by its args, not its tags.
	t.Run("ShowsAPlainInsertWithTagsOfItsOwn", func(t *testing.T) {
		t.Parallel()
		pool, schema := testDB(t)
		client := newClient(t, pool, schema, nil, nil)
		ctx := context.Background()
		res, err := client.Insert(ctx, riverhook.Args{ConnectionID: "crm", DeliveryID: "d1", Event: webhook.EventUserIdentified, Body: []byte(`{}`)},
			&river.InsertOpts{Tags: []string{"tenant-42"}})
		require.NoError(t, err)
		got, err := riverhook.List(ctx, client, "crm", nil)
		require.NoError(t, err)
		require.Len(t, got.Deliveries, 1, "the delivery to crm")
		assert.Equal(t, res.Job.ID, got.Deliveries[0].JobID)
	})
}

func TestDeliveryOf(t *testing.T) {
	t.Parallel()

	t.Run("DiscardedByTheRescuer", func(t *testing.T) {
		t.Parallel()
		policy := fastPolicy(1)
		_, bundle := setupWorker(t, &workerOpts{sender: webhook.SenderOptions{Retry: policy}})
		bundle.srv.Script(webhooktest.Status(500))
		ctx := context.Background()
		job := insertTx(t, bundle.tx, bundle.schema, firstParams(t, "d1", policy))
		res, err := bundle.tw.WorkJob(ctx, t, bundle.tx, job) // attempt 1: 500
		require.Error(t, err)
		job = res.Job
		for range riverhook.MaxInterruptedRuns + 1 { // every run after it dies
			job = crash(t, bundle.tx, bundle.schema, job)
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
	})

	// An operator cancels a delivery waiting for its retry (River UI's Cancel,
	// client.JobCancel): River appends no error for a job that is not running.
	// Delivery.Reason must say it was cancelled, and must not be empty (which
	// the doc keeps for a delivery that succeeded or is under way) nor the
	// earlier attempt's "retry in 50ms", which says a retry follows.
	t.Run("ReasonOfADeliveryCancelledWhileWaiting", func(t *testing.T) {
		t.Parallel()
		policy := fastPolicy(2)
		_, bundle := setupWorker(t, &workerOpts{sender: webhook.SenderOptions{Retry: policy}})
		bundle.srv.Script(webhooktest.Status(500))
		ctx := context.Background()
		client, err := river.NewClient(riverpgxv5.New(nil), &river.Config{Schema: bundle.schema, Logger: quietLogger()})
		require.NoError(t, err)

		waiting := insertTx(t, bundle.tx, bundle.schema, firstParams(t, "d1", policy)) // never run
		res, err := bundle.tw.WorkJob(ctx, t, bundle.tx, insertTx(t, bundle.tx, bundle.schema, firstParams(t, "d2", policy)))
		require.Error(t, err) // 500: a retry follows
		for _, id := range []int64{waiting.ID, res.Job.ID} {
			job, err := client.JobCancelTx(ctx, bundle.tx, id)
			require.NoError(t, err)
			require.Equal(t, rivertype.JobStateCancelled, job.State)
			d, err := riverhook.DeliveryOf(job)
			require.NoError(t, err)
			assert.NotEmpty(t, d.Reason, "job %d: a cancelled delivery has a reason", id)
			assert.NotContains(t, d.Reason, "retry in", "job %d: the reason is the cancel, not the last attempt", id)
			assert.Equal(t, "riverhook: cancelled in River (client.JobCancel, River UI's Cancel, or EraseSubject)", d.Reason, "job %d", id)
		}
	})
}
