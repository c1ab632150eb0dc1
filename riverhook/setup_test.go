package riverhook_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/webhooktest"
)

func TestRegister(t *testing.T) {
	t.Parallel()
	sender, err := webhook.NewSender(nil)
	require.NoError(t, err)
	resolve := newResolver(nil).resolve

	t.Run("SetsTheWorkerAndTheRescue", func(t *testing.T) {
		t.Parallel()
		w := newWorker(t, sender, resolve, nil)
		var config river.Config
		require.NoError(t, riverhook.Register(&config, w))
		require.NotNil(t, config.Workers)
		assert.Equal(t, w.RescueStuckJobsAfter(0), config.RescueStuckJobsAfter)
		assert.Equal(t, time.Minute, config.RescueStuckJobsAfter, "the default Sender's, not River's hour")
		assert.Equal(t, river.FetchCooldownDefault, config.FetchPollInterval, "a snoozed delivery runs within River's fetch cooldown of its slot, not a second")
		assert.Error(t, riverhook.Register(&config, w), "a second worker of the kind")
	})
	t.Run("PollsNoFasterThanTheFetchCooldown", func(t *testing.T) {
		t.Parallel()
		pool, schema := testDB(t)
		for cooldown, want := range map[time.Duration]time.Duration{
			0:                      river.FetchCooldownDefault, // River's default cooldown, 100 ms
			10 * time.Millisecond:  riverhook.DefaultFetchPollInterval,
			200 * time.Millisecond: 200 * time.Millisecond,
		} {
			config := river.Config{FetchCooldown: cooldown, Schema: schema, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}}}
			require.NoError(t, riverhook.Register(&config, newWorker(t, sender, resolve, nil)))
			assert.Equal(t, want, config.FetchPollInterval, "a cooldown of %v", cooldown)
			_, err := river.NewClient(riverpgxv5.New(pool), &config)
			assert.NoError(t, err, "River takes the configuration, with a cooldown of %v", cooldown)
		}
	})
	t.Run("KeepsALongerRescue", func(t *testing.T) {
		t.Parallel()
		config := river.Config{RescueStuckJobsAfter: time.Hour, FetchPollInterval: time.Second}
		require.NoError(t, riverhook.Register(&config, newWorker(t, sender, resolve, nil)))
		assert.Equal(t, time.Hour, config.RescueStuckJobsAfter)
		assert.Equal(t, time.Second, config.FetchPollInterval, "the caller's")
	})
	t.Run("RefusesARescueThatWouldSendTwice", func(t *testing.T) {
		t.Parallel()
		config := river.Config{RescueStuckJobsAfter: 30 * time.Second}
		err := riverhook.Register(&config, newWorker(t, sender, resolve, nil))
		require.ErrorContains(t, err, "RescueStuckJobsAfter is 30s, under the 1m0s")
		assert.Nil(t, config.Workers, "config is unchanged on error")
	})
	t.Run("StartsAClient", func(t *testing.T) {
		t.Parallel()
		pool, schema := testDB(t)
		srv := webhooktest.NewServer(secret, nil)
		defer srv.Close()
		w := newWorker(t, srv.Sender(nil), newResolver(map[string]webhook.Connection{"crm": srv.Connection()}).resolve, nil)
		client := newClient(t, pool, schema, nil, func(config *river.Config) {
			config.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}}
			require.NoError(t, riverhook.Register(config, w))
		})
		events := finalEvents(t, client)
		start(t, client)
		insert(t, client, "d1", []string{"crm"}, nil)
		got := waitFinal(t, events, 1)
		for _, job := range got {
			assert.Equal(t, "completed", string(job.State))
		}
	})
}

func TestWorker_ReportsAJobInsertedForAnotherPolicy(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	w, b := setupWorker(t, &workerOpts{sender: webhook.SenderOptions{Retry: fastPolicy(2)},
		worker: riverhook.WorkerOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))}})
	ctx := context.Background()

	p := firstParams(t, "d1", w.InsertOptions(nil).Retry)
	_, err := b.tw.Work(ctx, t, b.tx, p.Args.(riverhook.Args), p.InsertOpts)
	require.NoError(t, err)
	assert.NotContains(t, logs.String(), "another retry policy", "inserted with Worker.InsertOptions")

	p = firstParams(t, "d2", nil) // the default policy's 3 retries, not the Sender's 2
	_, err = b.tw.Work(ctx, t, b.tx, p.Args.(riverhook.Args), p.InsertOpts)
	require.NoError(t, err)
	assert.Contains(t, logs.String(), "another retry policy")
	assert.Contains(t, logs.String(), "max_attempts=9 want_max_attempts=8")
}
