package riverhook_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/webhooktest"
)

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

// interimArgs is Args as riverhook enqueued them for a while before this
// version: the ids named connection and delivery.
type interimArgs struct {
	ConnectionID string `json:"connection" river:"unique"`
	DeliveryID   string `json:"delivery" river:"unique"`
	Event        string `json:"event"`
	Body         []byte `json:"payload_base64"`
}

func (interimArgs) Kind() string { return riverhook.Kind }

// minutes waits retry minutes before retry number retry.
func minutes(retries int) *webhook.RetryPolicy {
	return &webhook.RetryPolicy{MaxRetries: retries, Backoff: func(retry int, _ *http.Response) time.Duration {
		return time.Duration(retry) * time.Minute
	}}
}

// TestUpgrade pins the upgrade from the earlier riverhook: its jobs' args
// named the ids connection_id and delivery_id and the body body, its errors
// read "riverhook: attempt N failed (kind, status S): ...", and its output
// held the last attempt alone.
func TestUpgrade(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		client *river.Client[pgx.Tx] // inserts only
		pool   *pgxpool.Pool
		schema string
		tx     pgx.Tx // on schema, rolled back when the test ends
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		pool, schema := testDB(t)
		return &testBundle{client: newClient(t, pool, schema, nil, nil), pool: pool, schema: schema, tx: testTx(t, pool)}
	}

	// An outbox insert retried after the upgrade (the same delivery id, the
	// same connection) while the earlier riverhook's job is still pending must
	// be skipped, as the doc promises; River's unique key hashes the args'
	// JSON names, which changed, so the delivery is made twice.
	t.Run("InsertTxIsUniqueAgainstAQueuedDelivery", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		ctx := context.Background()
		insertLegacy(t, bundle.tx, bundle.schema, "d1", webhook.DefaultRetryPolicy())
		res, err := riverhook.InsertTx(ctx, bundle.client, bundle.tx, "d1", []string{"crm"}, payload("d1"), nil)
		require.NoError(t, err)
		assert.True(t, res[0].UniqueSkippedAsDuplicate, "d1 to crm is queued already")
	})

	// A delivery the earlier riverhook had tried twice (its errors and its
	// Outcome output as that version wrote them) is in the middle of the
	// policy's schedule at the upgrade. The new worker must make attempt 3 and
	// wait the policy's third wait; it numbers it 1 and starts the schedule
	// over (DurableRetryPolicy: 5 s instead of 30 min, so the last retries of
	// a receiver down for hours come within the hour).
	t.Run("WorkerKeepsTheAttemptNumbersOfQueuedDeliveries", func(t *testing.T) {
		t.Parallel()
		policy := minutes(4)
		_, bundle := setupWorker(t, &workerOpts{sender: webhook.SenderOptions{Retry: policy}, record: true})
		bundle.srv.Script(webhooktest.Status(500))
		ctx := context.Background()
		job := insertLegacy(t, bundle.tx, bundle.schema, "d1", policy)

		var errs []string
		for n := 1; n <= 2; n++ {
			e, err := json.Marshal(rivertype.AttemptError{At: time.Now().UTC(), Attempt: n,
				Error: "riverhook: attempt " + itoa(n) + " failed (status, status 500): webhook: receiver answered 500 Internal Server Error"})
			require.NoError(t, err)
			errs = append(errs, string(e))
		}
		_, err := bundle.tx.Exec(ctx, "UPDATE "+bundle.schema+`.river_job SET attempt = 2, attempted_at = now(), errors = $2::jsonb[],
		metadata = metadata || '{"output": {"attempt": 2, "status_code": 500, "kind": "status", "duration_ns": 1000000, "timestamp": 1795338000125, "error": "webhook: receiver answered 500 Internal Server Error", "retry_in_ns": 120000000000}}'
		WHERE id = $1`, job.ID, errs)
		require.NoError(t, err)
		client, err := river.NewClient(riverpgxv5.New(nil), &river.Config{Schema: bundle.schema, Logger: quietLogger()})
		require.NoError(t, err)
		job, err = client.JobGetTx(ctx, bundle.tx, job.ID)
		require.NoError(t, err)

		res, err := bundle.tw.WorkJob(ctx, t, bundle.tx, job) // the third request: 500 again
		require.Error(t, err)
		got := bundle.rec.attempts()
		require.NotEmpty(t, got)
		last := got[len(got)-1]
		assert.Equal(t, 3, last.N, "the third attempt of the delivery")
		assert.Equal(t, 3*time.Minute, last.RetryIn, "the policy's third wait")
		assert.WithinDuration(t, time.Now().Add(3*time.Minute), res.Job.ScheduledAt, 30*time.Second)

		d, err := riverhook.DeliveryOf(res.Job)
		require.NoError(t, err)
		var log []string
		for _, a := range d.Attempts {
			log = append(log, brief(a.Attempt))
		}
		assert.Equal(t, []string{"n=1 status", "n=2 status 500 retry 2m0s", "n=3 status 500 retry 3m0s"}, log,
			"the log goes on from the earlier riverhook's attempts")
	})

	// The attempt log of a job the earlier riverhook delivered on its third
	// run: the failed attempt from its errors, the run cut by a crash, and the
	// delivered attempt from its output.
	t.Run("DeliveryOfReadsTheLogOfTheEarlierRiverhook", func(t *testing.T) {
		t.Parallel()
		at := time.Date(2026, 11, 22, 9, 0, 0, 125_000_000, time.UTC)
		job := &rivertype.JobRow{ID: 7, Kind: riverhook.Kind, State: rivertype.JobStateCompleted, Attempt: 3, MaxAttempts: 4,
			EncodedArgs: []byte(`{"connection_id": "crm", "delivery_id": "d1", "event": "user.identified", "body": "e30="}`),
			Errors: []rivertype.AttemptError{
				{At: at, Attempt: 1, Error: "riverhook: attempt 1 failed (status, status 503): webhook: receiver answered 503 Service Unavailable"},
				{At: at.Add(time.Minute), Attempt: 2, Error: "Stuck job rescued by JobRescuer"},
			},
			Metadata: []byte(`{"output": {"attempt": 3, "status_code": 200, "duration_ns": 1207000, "timestamp": 1795338091410}}`)}
		d, err := riverhook.DeliveryOf(job)
		require.NoError(t, err)
		assert.Equal(t, "crm", d.ConnectionID)
		assert.Equal(t, "d1", d.DeliveryID)
		var got []string
		for _, a := range d.Attempts {
			got = append(got, brief(a.Attempt))
		}
		assert.Equal(t, []string{"n=1 status", "n=2 interrupted", "n=2 delivered"}, got)
		require.Len(t, d.Attempts, 3)
		assert.Equal(t, 503, d.Attempts[0].StatusCode)
		assert.Equal(t, at, d.Attempts[0].Start, "the start of its run")
		assert.EqualError(t, d.Attempts[0].Err, "webhook: receiver answered 503 Service Unavailable")
		assert.Equal(t, 1207*time.Microsecond, d.Attempts[2].Duration)
		assert.Equal(t, int64(1795338091410), d.Attempts[2].Timestamp)
	})

	// Jobs of the earlier riverhook have no tags: ListDeliveries, the
	// dashboard's attempt log, never shows the deliveries in flight at an
	// upgrade (with DurableRetryPolicy, up to 17.5 hours of them), though
	// their jobs still run.
	t.Run("ListDeliveriesShowsDeliveriesQueuedBeforeTheUpgrade", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		ctx := context.Background()
		job := insertLegacy(t, bundle.tx, bundle.schema, "d1", webhook.DefaultRetryPolicy())
		require.NoError(t, bundle.tx.Commit(ctx))

		got, err := riverhook.ListDeliveries(ctx, bundle.client, "crm", 0)
		require.NoError(t, err)
		require.Len(t, got, 1, "the delivery to crm queued before the upgrade")
		assert.Equal(t, job.ID, got[0].JobID)
	})

	t.Run("ListDeliveriesShowsDeliveriesOfTheInterimFormat", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		ctx := context.Background()
		res, err := bundle.client.Insert(ctx, interimArgs{ConnectionID: "crm", DeliveryID: "d1", Event: webhook.EventUserIdentified, Body: []byte(`{}`)}, nil)
		require.NoError(t, err)
		_, err = bundle.client.Insert(ctx, interimArgs{ConnectionID: "erp", DeliveryID: "d1", Event: webhook.EventUserIdentified, Body: []byte(`{}`)}, nil)
		require.NoError(t, err)
		got, err := riverhook.ListDeliveries(ctx, bundle.client, "crm", 0)
		require.NoError(t, err)
		require.Len(t, got, 1, "the delivery to crm")
		assert.Equal(t, res.Job.ID, got[0].JobID)
		assert.Equal(t, "crm", got[0].ConnectionID)
		assert.Equal(t, "d1", got[0].DeliveryID)
	})
}
