package riverhook_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/webhooktest"
)

// The Resolver failing on the job's last run: River discards the job and
// never asks NextRetry, yet the Worker keeps the retry it stored for it
// (with the job and its body) until a later failure sweeps it, a minute
// on: the case TestWorker_NoRunLeftForARetry pins for a failed attempt.
func TestAdvisory_NoRetryKeptWhenTheResolverFailsOnTheLastRun(t *testing.T) {
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
func TestAdvisory_NoRetryKeptWhenTheClientStopsDuringTheResolver(t *testing.T) {
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
