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

// An operator cancels a delivery waiting for its retry (River UI's Cancel,
// client.JobCancel): River appends no error for a job that is not running.
// Delivery.Reason must say it was cancelled, and must not be empty (which
// the doc keeps for a delivery that succeeded or is under way) nor the
// earlier attempt's "retry in 50ms", which says a retry follows.
func TestAdvisory_ReasonOfADeliveryCancelledWhileWaiting(t *testing.T) {
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
	}
}

// Args.InsertOpts' doc: a plain client.Insert of Args is unique and tagged
// too. A caller who adds a tag of its own (a tenant, a trace) with River's
// InsertOpts replaces the delivery's tags (River takes InsertOpts.Tags over
// the args'), and ListDeliveries, which finds deliveries by tag, never
// shows that delivery. River's JobListParams.Where can filter on the args
// themselves.
func TestAdvisory_ListDeliveriesShowsAPlainInsertWithTagsOfItsOwn(t *testing.T) {
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
