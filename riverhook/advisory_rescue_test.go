package riverhook_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook/webhooktest"
)

type otherArgs struct{}

func (otherArgs) Kind() string { return "other_work" }

type otherWorker struct {
	river.WorkerDefaults[otherArgs]
}

func (otherWorker) Work(context.Context, *river.Job[otherArgs]) error { return nil }

// A service that already runs River for other work (the README's common
// case) has clients without riverhook's worker, any of which may be the
// elected leader, whose rescuer handles every stuck job. River's rescuer
// discards a stuck job of a kind its own client has no worker for: a
// worker process killed mid-attempt loses the delivery for good, though
// another process works deliveries. This pins River's behaviour (it
// passes); TestAdvisory_DocsSayEveryClientRegistersTheWorker is the
// finding.
func TestAdvisory_LeaderWithoutTheWorkerDiscardsACrashedDelivery(t *testing.T) {
	t.Parallel()
	pool, schema := testDB(t)
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	ctx := context.Background()

	// The delivery whose worker process died 5 minutes into its first
	// attempt: running, as River's executor left it.
	inserted := insert(t, newClient(t, pool, schema, nil, nil), "d1", []string{"crm"}, nil)
	id := inserted[0].Job.ID
	_, err := pool.Exec(ctx, "UPDATE "+schema+".river_job SET state = 'running', attempt = 1, attempted_at = now() - interval '5 minutes', attempted_by = '{dead-worker}' WHERE id = $1", id)
	require.NoError(t, err)

	w := newTestWorker(srv, nil, nil)
	delivering := newClient(t, pool, schema, func() *river.Workers {
		ws := river.NewWorkers()
		river.AddWorker(ws, w)
		return ws
	}(), func(c *river.Config) { c.LeaderElectionDisabled = true })
	start(t, delivering)

	// The service's other River client, elected leader, with the
	// documented rescue threshold.
	others := river.NewWorkers()
	river.AddWorker(others, &otherWorker{})
	leader := newClient(t, pool, schema, others, func(c *river.Config) { c.RescueStuckJobsAfter = w.RescueStuckJobsAfter(0) })
	start(t, leader)

	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case <-poll.C: // River's rescuer emits no event
			job, err := leader.JobGet(ctx, id)
			require.NoError(t, err)
			require.NotEqual(t, rivertype.JobStateCompleted, job.State, "rescued and delivered: River's rescuer changed")
			if job.State == rivertype.JobStateDiscarded {
				assert.Empty(t, srv.Deliveries(), "lost: never attempted again")
				return
			}
		case <-timeout:
			t.Fatal("the stuck delivery was neither discarded nor delivered within 10 s")
		}
	}
}

// The setup the README and the package doc give must say that every River
// client on the database that works queues (any may be the elected
// leader, whose rescuer runs the jobs of dead processes) registers the
// Worker: River's rescuer discards a stuck job of a kind its client has no
// worker for, and "a crash loses no delivery" fails in a service whose
// other River clients do other work.
func TestAdvisory_DocsSayEveryClientRegistersTheWorker(t *testing.T) {
	readme := mustRead(t, "../README.md")
	start := strings.Index(readme, "## Durable deliveries")
	require.GreaterOrEqual(t, start, 0)
	durable := readme[start:]
	durable = durable[:strings.Index(durable[3:], "\n## ")+3]
	// "every client", "each River client", "all clients" ... with "leader"
	// or "rescu" nearby, in either order.
	says := regexp.MustCompile(`(?is)\b(every|each|all)\b[^.:;]{0,80}\bclients?\b[^.]{0,200}\b(registers?|worker)\b[^.]{0,300}(leader|rescu)|\bregister[^.]{0,40}\bworker\b[^.]{0,80}\b(every|each|all)\b[^.]{0,40}\bclients?\b|\bleader[^.]{0,150}(discard|no worker|without the worker)`)
	for name, text := range map[string]string{"README's durable section": durable, "riverhook.go": mustRead(t, "riverhook.go")} {
		assert.True(t, says.MatchString(text), "%s does not say that every client must register the Worker, or River's leader discards crashed deliveries", name)
	}
}
