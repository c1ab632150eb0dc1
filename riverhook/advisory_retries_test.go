package riverhook_test

import (
	"context"
	"errors"
	"testing"

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
