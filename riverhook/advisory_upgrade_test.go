package riverhook_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook/webhooktest"
)

// A delivery the earlier riverhook had tried twice (its errors and its
// Outcome output as that version wrote them) is in the middle of the
// policy's schedule at the upgrade. The new worker must make attempt 3 and
// wait the policy's third wait; it numbers it 1 and starts the schedule
// over (DurableRetryPolicy: 5 s instead of 30 min, so the last retries of
// a receiver down for hours come within the hour).
func TestAdvisory_UpgradeKeepsTheAttemptNumbersOfQueuedDeliveries(t *testing.T) {
	t.Parallel()
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	srv.Script(webhooktest.Status(500))
	policy := minutes(4)
	var rec attemptRecorder
	tw, tx, schema := testWorker(t, newTestWorker(srv, policy, &rec))
	ctx := context.Background()
	job := insertLegacy(t, tx, schema, "d1", policy)

	var errs []string
	for n := 1; n <= 2; n++ {
		e, err := json.Marshal(rivertype.AttemptError{At: time.Now().UTC(), Attempt: n,
			Error: "riverhook: attempt " + itoa(n) + " failed (status, status 500): webhook: receiver answered 500 Internal Server Error"})
		require.NoError(t, err)
		errs = append(errs, string(e))
	}
	_, err := tx.Exec(ctx, "UPDATE "+schema+`.river_job SET attempt = 2, attempted_at = now(), errors = $2::jsonb[],
		metadata = metadata || '{"output": {"attempt": 2, "status_code": 500, "kind": "status", "duration_ns": 1000000, "timestamp": 1795338000125, "error": "webhook: receiver answered 500 Internal Server Error", "retry_in_ns": 120000000000}}'
		WHERE id = $1`, job.ID, errs)
	require.NoError(t, err)
	client, err := river.NewClient(riverpgxv5.New(nil), &river.Config{Schema: schema, Logger: quietLogger()})
	require.NoError(t, err)
	job, err = client.JobGetTx(ctx, tx, job.ID)
	require.NoError(t, err)

	res, err := tw.WorkJob(ctx, t, tx, job) // the third request: 500 again
	require.Error(t, err)
	got := rec.attempts()
	require.NotEmpty(t, got)
	last := got[len(got)-1]
	assert.Equal(t, 3, last.N, "the third attempt of the delivery")
	assert.Equal(t, 3*time.Minute, last.RetryIn, "the policy's third wait")
	assert.WithinDuration(t, time.Now().Add(3*time.Minute), res.Job.ScheduledAt, 30*time.Second)
}
