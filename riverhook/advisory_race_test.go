package riverhook_test

import (
	"context"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/webhooktest"
)

// OnAttempt hands the job to user code, which may keep it past the call
// (an attempts table written asynchronously, as the user did, so
// that a slow table never holds a worker): "attempt 2 of 7" reads
// job.Attempt and job.MaxAttempts. The Worker then writes job.MaxAttempts
// when the policy gives up, racing with that goroutine (DESIGN 24: what
// user code receives is not changed while it can still reach it). Run
// with -race.
func TestAdvisory_OnAttemptsJobIsNotWrittenAfterward(t *testing.T) {
	t.Parallel()
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	srv.Script(webhooktest.Status(500))
	policy := &webhook.RetryPolicy{MaxRetries: 0} // the first attempt is the last
	read := make(chan string, 1)
	w := riverhook.NewWorker(srv.Sender(&webhook.SenderOptions{Retry: policy}),
		newResolver(map[string]webhook.Connection{"crm": srv.Connection()}).resolve,
		&riverhook.WorkerOptions{OnAttempt: func(_ context.Context, job *river.Job[riverhook.Args], a webhook.Attempt) error {
			go func() { // the caller's asynchronous attempts table
				read <- itoa(a.N) + " of " + itoa(job.MaxAttempts)
			}()
			return nil
		}})
	tw, tx, _ := testWorker(t, w)
	p := firstParams(t, "d1", policy)
	res, err := tw.Work(context.Background(), t, tx, p.Args.(riverhook.Args), p.InsertOpts)
	require.Error(t, err)
	require.Equal(t, rivertype.JobStateDiscarded, res.Job.State)
	<-read
}
