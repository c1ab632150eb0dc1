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
