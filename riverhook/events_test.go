package riverhook_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
)

// TestInsertBytes delivers an event of the service's own through the
// outbox, byte for byte, and skips it for a connection that does not
// subscribe to it: the job is cancelled and its log says why.
func TestInsertBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	body := []byte(`{"event":"deal.closed","deal":{"id":"deal_7","amount":1200}}`)

	t.Run("DeliversAnyEvent", func(t *testing.T) {
		t.Parallel()
		_, bundle := setupWorker(t, nil)
		params, err := riverhook.InsertBytesParams("d1", []string{"crm"}, "deal.closed", body, nil)
		require.NoError(t, err)
		res, err := bundle.tw.Work(ctx, t, bundle.tx, params[0].Args.(riverhook.Args), params[0].InsertOpts)
		require.NoError(t, err)
		assert.Equal(t, river.EventKindJobCompleted, res.EventKind)
		d := bundle.srv.Deliveries()
		require.Len(t, d, 1)
		assert.Equal(t, "deal.closed", d[0].Header.Get(webhook.HeaderEvent))
		assert.Equal(t, body, d[0].Body)
		assert.NoError(t, d[0].Err)
	})

	t.Run("SkipsAConnectionNotSubscribed", func(t *testing.T) {
		t.Parallel()
		_, bundle := setupWorker(t, nil)
		c := bundle.srv.Connection()
		c.Events = []string{webhook.EventUserIdentified}
		bundle.conns.set("crm", c)
		params, err := riverhook.InsertBytesParams("d2", []string{"crm"}, "deal.closed", body, nil)
		require.NoError(t, err)
		res, err := bundle.tw.Work(ctx, t, bundle.tx, params[0].Args.(riverhook.Args), params[0].InsertOpts)
		require.NoError(t, err) // rivertest reports River's cancellation in the job
		assert.Equal(t, rivertype.JobStateCancelled, res.Job.State)
		require.NotEmpty(t, res.Job.Errors)
		assert.Contains(t, res.Job.Errors[len(res.Job.Errors)-1].Error, "does not subscribe")
		assert.Empty(t, bundle.srv.Deliveries(), "nothing sent")
	})

	// The outbox for any event: InsertBytesTx in the transaction of the
	// change, the body kept byte for byte, committed or rolled back with it.
	t.Run("InsertBytesTxInTheChangesTransaction", func(t *testing.T) {
		t.Parallel()
		pool, schema := testDB(t)
		client := newClient(t, pool, schema, nil, nil)
		tx := userChangeTx(t, pool, schema)
		res, err := riverhook.InsertBytesTx(ctx, client, tx, "deal_7", []string{"crm", "erp"}, "deal.closed", body,
			&riverhook.InsertOptions{Subject: "usr_1"})
		require.NoError(t, err)
		require.Len(t, res, 2)
		require.NoError(t, tx.Commit(ctx))
		for i, conn := range []string{"crm", "erp"} {
			var args riverhook.Args
			require.NoError(t, json.Unmarshal(res[i].Job.EncodedArgs, &args))
			assert.Equal(t, conn, args.ConnectionID)
			assert.Equal(t, "deal_7", args.DeliveryID)
			assert.Equal(t, "deal.closed", args.Event)
			assert.Equal(t, body, args.Body, "the body byte for byte")
			assert.Equal(t, "usr_1", args.Subject)
			assert.Contains(t, res[i].Job.Tags, riverhook.EventTag("deal.closed"))
		}
		list, err := client.JobList(ctx, river.NewJobListParams())
		require.NoError(t, err)
		assert.Len(t, list.Jobs, 2, "committed with the change")

		tx, err = pool.Begin(ctx)
		require.NoError(t, err)
		_, err = riverhook.InsertBytesTx(ctx, client, tx, "deal_8", []string{"crm"}, "deal.closed", body, nil)
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))
		list, err = client.JobList(ctx, river.NewJobListParams())
		require.NoError(t, err)
		assert.Len(t, list.Jobs, 2, "nothing of the rolled-back change")

		_, err = riverhook.InsertBytesTx(ctx, client, tx, "deal_9", []string{"crm"}, "deal.closed", []byte(`{"deal":`), nil)
		assert.ErrorIs(t, err, webhook.ErrInvalidPayload, "validated before the transaction is used")
	})

	t.Run("RefusesWhatCannotBeDelivered", func(t *testing.T) {
		t.Parallel()
		_, err := riverhook.InsertBytesParams("d3", []string{"crm"}, "", body, nil)
		assert.ErrorIs(t, err, webhook.ErrInvalidPayload)
		_, err = riverhook.InsertBytesParams("d3", []string{"crm"}, "deal.closed", []byte(`{"deal":`), nil)
		assert.ErrorIs(t, err, webhook.ErrInvalidPayload)
		_, err = riverhook.InsertBytesParams("", []string{"crm"}, "deal.closed", body, nil)
		assert.Error(t, err)
	})
}
