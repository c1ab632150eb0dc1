package riverhook_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/webhooktest"
)

// TestWorker_AnInterruptedRunIsToldOnceWhenTheRunWaitsToSign: a delivery
// whose run was cut by a crash, rescued by a process whose clock is behind
// the one that signed its last attempt, waits (snoozed) until its
// timestamp can pass that one. The interrupted run is told to OnAttempt,
// and logged, once: not again by the run after the wait.
func TestWorker_AnInterruptedRunIsToldOnceWhenTheRunWaitsToSign(t *testing.T) {
	t.Parallel()
	policy := fastPolicy(1)
	_, bundle := setupWorker(t, &workerOpts{sender: webhook.SenderOptions{Retry: policy}, record: true})
	bundle.srv.Script(webhooktest.Status(500))
	ctx := context.Background()

	job := insertTx(t, bundle.tx, bundle.schema, firstParams(t, "d1", policy))
	res, err := bundle.tw.WorkJob(ctx, t, bundle.tx, job) // attempt 1: 500
	require.Error(t, err)
	job = crash(t, bundle.tx, bundle.schema, res.Job) // attempt 2 cut by a crash
	setTimestamp := func(ms int64) *rivertype.JobRow {
		_, err := bundle.tx.Exec(ctx, `UPDATE `+bundle.schema+`.river_job
			SET metadata = jsonb_set(metadata, '{output,attempts,0,timestamp}', to_jsonb($2::bigint)) WHERE id = $1`, job.ID, ms)
		require.NoError(t, err)
		client, err := river.NewClient(riverpgxv5.New(nil), &river.Config{Schema: bundle.schema, Logger: quietLogger()})
		require.NoError(t, err)
		got, err := client.JobGetTx(ctx, bundle.tx, job.ID)
		require.NoError(t, err)
		return got
	}
	// Signed by a clock a minute ahead: still ahead when the run below
	// signs, however slow the statements between.
	job = setTimestamp(time.Now().Add(time.Minute).UnixMilli())
	res, err = bundle.tw.WorkJob(ctx, t, bundle.tx, job)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobSnoozed, res.EventKind, "waits to sign after the last attempt")
	job = res.Job
	_, err = bundle.tx.Exec(ctx, `UPDATE `+bundle.schema+`.river_job SET state = 'available', scheduled_at = now() WHERE id = $1`, job.ID)
	require.NoError(t, err)
	time.Sleep(time.Until(time.UnixMilli(time.Now().Add(time.Second).UnixMilli())) + 10*time.Millisecond)
	job = setTimestamp(time.Now().Add(-time.Second).UnixMilli())
	res, err = bundle.tw.WorkJob(ctx, t, bundle.tx, job)
	require.NoError(t, err)
	assert.Equal(t, river.EventKindJobCompleted, res.EventKind)

	var interrupted int
	for _, a := range bundle.rec.attempts() {
		if a.Kind == webhook.KindInterrupted {
			interrupted++
		}
	}
	assert.Equal(t, 1, interrupted, "the interrupted run told once: %v", bundle.rec.attempts())
}
