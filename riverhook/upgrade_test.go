package riverhook_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
)

// The upgrade from the earlier riverhook: its jobs' args named the ids
// connection_id and delivery_id and the body body, its errors read
// "riverhook: attempt N failed (kind, status S): ...", and its output held
// the last attempt alone.

// legacyArgs is Args as the earlier riverhook (3a30311) enqueued them.
type legacyArgs struct {
	ConnectionID string `json:"connection_id" river:"unique"`
	DeliveryID   string `json:"delivery_id" river:"unique"`
	Event        string `json:"event"`
	Body         []byte `json:"body"`
}

func (legacyArgs) Kind() string { return riverhook.Kind }

// insertLegacy inserts in tx the job the earlier InsertParams made for the
// delivery to connection "crm": its JSON names, MaxAttempts the policy's,
// unique by args, no tags.
func insertLegacy(t *testing.T, tx pgx.Tx, schema, deliveryID string, policy *webhook.RetryPolicy) *rivertype.JobRow {
	t.Helper()
	body, err := json.Marshal(payload(deliveryID))
	require.NoError(t, err)
	client, err := river.NewClient(riverpgxv5.New(nil), &river.Config{Schema: schema, Logger: quietLogger()})
	require.NoError(t, err)
	res, err := client.InsertTx(context.Background(), tx, legacyArgs{ConnectionID: "crm", DeliveryID: deliveryID, Event: webhook.EventUserIdentified, Body: body},
		&river.InsertOpts{MaxAttempts: policy.MaxRetries + 1, UniqueOpts: river.UniqueOpts{ByArgs: true}})
	require.NoError(t, err)
	return res.Job
}

// minutes waits retry minutes before retry number retry.
func minutes(retries int) *webhook.RetryPolicy {
	return &webhook.RetryPolicy{MaxRetries: retries, Backoff: func(retry int, _ *http.Response) time.Duration {
		return time.Duration(retry) * time.Minute
	}}
}

// An outbox insert retried after the upgrade (the same delivery id, the
// same connection) while the earlier riverhook's job is still pending must
// be skipped, as the doc promises; River's unique key hashes the args'
// JSON names, which changed, so the delivery is made twice.
func TestInsertTx_AfterTheUpgradeIsUniqueAgainstAQueuedDelivery(t *testing.T) {
	t.Parallel()
	pool, schema := testDB(t)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	insertLegacy(t, tx, schema, "d1", webhook.DefaultRetryPolicy())
	res, err := riverhook.InsertTx(ctx, newClient(t, pool, schema, nil, nil), tx, "d1", []string{"crm"}, payload("d1"), nil)
	require.NoError(t, err)
	assert.True(t, res[0].UniqueSkippedAsDuplicate, "d1 to crm is queued already")
}

// Jobs of the earlier riverhook have no tags: ListDeliveries, the
// dashboard's attempt log, never shows the deliveries in flight at an
// upgrade (with DurableRetryPolicy, up to 17.5 hours of them), though
// their jobs still run.
func TestListDeliveries_ShowsDeliveriesQueuedBeforeTheUpgrade(t *testing.T) {
	t.Parallel()
	pool, schema := testDB(t)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	job := insertLegacy(t, tx, schema, "d1", webhook.DefaultRetryPolicy())
	require.NoError(t, tx.Commit(ctx))

	got, err := riverhook.ListDeliveries(ctx, newClient(t, pool, schema, nil, nil), "crm", 0)
	require.NoError(t, err)
	require.Len(t, got, 1, "the delivery to crm queued before the upgrade")
	assert.Equal(t, job.ID, got[0].JobID)
}

// interimArgs is Args as riverhook enqueued them for a while before this
// version: the ids named connection and delivery.
type interimArgs struct {
	ConnectionID string `json:"connection" river:"unique"`
	DeliveryID   string `json:"delivery" river:"unique"`
	Event        string `json:"event"`
	Body         []byte `json:"payload_base64"`
}

func (interimArgs) Kind() string { return riverhook.Kind }

func TestListDeliveries_ShowsDeliveriesOfTheInterimFormat(t *testing.T) {
	t.Parallel()
	pool, schema := testDB(t)
	client := newClient(t, pool, schema, nil, nil)
	ctx := context.Background()
	res, err := client.Insert(ctx, interimArgs{ConnectionID: "crm", DeliveryID: "d1", Event: webhook.EventUserIdentified, Body: []byte(`{}`)}, nil)
	require.NoError(t, err)
	_, err = client.Insert(ctx, interimArgs{ConnectionID: "erp", DeliveryID: "d1", Event: webhook.EventUserIdentified, Body: []byte(`{}`)}, nil)
	require.NoError(t, err)
	got, err := riverhook.ListDeliveries(ctx, client, "crm", 0)
	require.NoError(t, err)
	require.Len(t, got, 1, "the delivery to crm")
	assert.Equal(t, res.Job.ID, got[0].JobID)
	assert.Equal(t, "crm", got[0].ConnectionID)
	assert.Equal(t, "d1", got[0].DeliveryID)
}
