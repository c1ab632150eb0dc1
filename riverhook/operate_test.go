package riverhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/webhooktest"
)

// scenario is a schema holding deliveries to "crm" in every status, and
// one to "erp", committed: what a dashboard lists.
type scenario struct {
	schema string
	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx]
	worker *riverhook.Worker
	srv    *webhooktest.Server
	jobs   map[string]int64 // by delivery id
}

func newScenario(t *testing.T) *scenario {
	t.Helper()
	pool, schema := testDB(t)
	srv := webhooktest.NewServer(secret, nil)
	t.Cleanup(srv.Close)
	srv.Script(webhooktest.Status(500), webhooktest.Status(500), webhooktest.Status(503))
	policy := fastPolicy(1)
	w := newWorker(t, srv.Sender(&webhook.SenderOptions{Retry: policy}),
		newResolver(map[string]webhook.Connection{"crm": srv.Connection(), "erp": srv.Connection()}).resolve, nil)
	tw := rivertest.NewWorker(t, riverpgxv5.New(nil), &river.Config{Schema: schema, Logger: quietLogger()}, w)
	ctx := context.Background()
	client := newClient(t, pool, schema, nil, nil)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	s := &scenario{schema: schema, pool: pool, client: client, worker: w, srv: srv, jobs: map[string]int64{}}
	for _, d := range []string{"given-up", "retrying", "delivered", "waiting", "cancelled"} {
		res, err := riverhook.InsertTx(ctx, client, tx, d, []string{"crm"}, payload(d), w.InsertOptions(nil))
		require.NoError(t, err)
		s.jobs[d] = res[0].Job.ID
	}
	_, err = riverhook.InsertTx(ctx, client, tx, "other", []string{"erp"}, payload("other"), w.InsertOptions(nil))
	require.NoError(t, err)
	work := func(d string) {
		job, err := client.JobGetTx(ctx, tx, s.jobs[d])
		require.NoError(t, err)
		tw.WorkJob(ctx, t, tx, job) //nolint:errcheck // the job's state tells
	}
	work("given-up") // 500
	work("given-up") // 500: the policy's two attempts, given up
	work("retrying") // 503, a retry due
	work("delivered")
	_, err = client.JobCancelTx(ctx, tx, s.jobs["cancelled"])
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	return s
}

func (s *scenario) statuses(t *testing.T, page *riverhook.DeliveryPage) map[string]riverhook.Status {
	t.Helper()
	out := map[string]riverhook.Status{}
	for _, d := range page.Deliveries {
		out[d.DeliveryID] = d.Status
	}
	return out
}

func TestOperatingDeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ListsEveryStatusNewestFirst", func(t *testing.T) {
		t.Parallel()
		s := newScenario(t)
		page, err := riverhook.List(ctx, s.client, "crm", nil)
		require.NoError(t, err)
		var ids []string
		for _, d := range page.Deliveries {
			ids = append(ids, d.DeliveryID)
		}
		assert.Equal(t, []string{"cancelled", "waiting", "delivered", "retrying", "given-up"}, ids)
		assert.Equal(t, map[string]riverhook.Status{"cancelled": riverhook.StatusCancelled, "waiting": riverhook.StatusWaiting,
			"delivered": riverhook.StatusDelivered, "retrying": riverhook.StatusRetrying, "given-up": riverhook.StatusGivenUp}, s.statuses(t, page))
		assert.Empty(t, page.Next)
		left := map[string]int{}
		for _, d := range page.Deliveries {
			left[d.DeliveryID] = d.AttemptsLeft
		}
		assert.Equal(t, map[string]int{"cancelled": 0, "waiting": 2, "delivered": 0, "retrying": 1, "given-up": 0}, left,
			"by the policy's two attempts, not River's runs")
	})
	t.Run("FiltersByStatusEventAndTime", func(t *testing.T) {
		t.Parallel()
		s := newScenario(t)
		for _, st := range riverhook.Statuses() {
			page, err := riverhook.List(ctx, s.client, "crm", &riverhook.ListParams{Statuses: []riverhook.Status{st}})
			require.NoError(t, err)
			require.Len(t, page.Deliveries, 1, "status %s", st)
			assert.Equal(t, st, page.Deliveries[0].Status)
		}
		page, err := riverhook.List(ctx, s.client, "crm", &riverhook.ListParams{Statuses: []riverhook.Status{riverhook.StatusGivenUp, riverhook.StatusRetrying}})
		require.NoError(t, err)
		assert.Len(t, page.Deliveries, 2)
		page, err = riverhook.List(ctx, s.client, "crm", &riverhook.ListParams{Event: webhook.EventUserIdentified})
		require.NoError(t, err)
		assert.Len(t, page.Deliveries, 5)
		page, err = riverhook.List(ctx, s.client, "crm", &riverhook.ListParams{Event: "user.deleted"})
		require.NoError(t, err)
		assert.Empty(t, page.Deliveries)
		page, err = riverhook.List(ctx, s.client, "crm", &riverhook.ListParams{Since: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		assert.Empty(t, page.Deliveries)
		page, err = riverhook.List(ctx, s.client, "crm", &riverhook.ListParams{Until: time.Now().Add(time.Hour), Since: time.Now().Add(-time.Hour)})
		require.NoError(t, err)
		assert.Len(t, page.Deliveries, 5)
		_, err = riverhook.List(ctx, s.client, "crm", &riverhook.ListParams{Statuses: []riverhook.Status{"failed"}})
		assert.ErrorContains(t, err, `unknown delivery status "failed"`)
	})
	t.Run("PagesWithACursor", func(t *testing.T) {
		t.Parallel()
		s := newScenario(t)
		var ids []string
		p := &riverhook.ListParams{Limit: 2}
		for pages := 0; ; pages++ {
			require.Less(t, pages, 3)
			page, err := riverhook.List(ctx, s.client, "crm", p)
			require.NoError(t, err)
			for _, d := range page.Deliveries {
				ids = append(ids, d.DeliveryID)
			}
			if page.Next == "" {
				break
			}
			p.After = page.Next
		}
		assert.Equal(t, []string{"cancelled", "waiting", "delivered", "retrying", "given-up"}, ids)
		_, err := riverhook.List(ctx, s.client, "crm", &riverhook.ListParams{After: "x'; DROP TABLE river_job; --"})
		assert.ErrorContains(t, err, "not a cursor")
	})
	t.Run("CountsPerStatus", func(t *testing.T) {
		t.Parallel()
		s := newScenario(t)
		counts, err := riverhook.Count(ctx, s.client, s.pool, "crm", time.Now().Add(-24*time.Hour))
		require.NoError(t, err)
		assert.Equal(t, map[riverhook.Status]int{riverhook.StatusDelivered: 1, riverhook.StatusRetrying: 1, riverhook.StatusWaiting: 1,
			riverhook.StatusGivenUp: 1, riverhook.StatusCancelled: 1}, counts)
		counts, err = riverhook.Count(ctx, s.client, s.pool, "erp", time.Time{})
		require.NoError(t, err)
		assert.Equal(t, 1, counts[riverhook.StatusWaiting])
		counts, err = riverhook.Count(ctx, s.client, s.pool, "crm", time.Now().Add(time.Hour))
		require.NoError(t, err)
		assert.Zero(t, counts[riverhook.StatusDelivered])
	})
	t.Run("ResendsOnceWithItsReason", func(t *testing.T) {
		t.Parallel()
		s := newScenario(t)
		orig := s.jobs["given-up"]
		job, inserted, err := riverhook.Resend(ctx, s.client, s.pool, orig, "ana@example.com: the endpoint is fixed", s.worker.InsertOptions(nil))
		require.NoError(t, err)
		assert.True(t, inserted)
		again, inserted, err := riverhook.Resend(ctx, s.client, s.pool, orig, "a double click", s.worker.InsertOptions(nil))
		require.NoError(t, err)
		assert.False(t, inserted, "a second resend of a job while its first is under way sends nothing")
		assert.Equal(t, job.ID, again.ID)
		d, err := riverhook.DeliveryOf(job)
		require.NoError(t, err)
		assert.Equal(t, orig, d.ResentFrom)
		assert.Equal(t, "ana@example.com: the endpoint is fixed", d.ResendReason)
		assert.Equal(t, riverhook.StatusWaiting, d.Status)
		assert.Equal(t, 2, d.AttemptsLeft, "the policy's attempts again")
		assert.Equal(t, "given-up", d.DeliveryID)
		row, err := s.client.JobGet(ctx, orig)
		require.NoError(t, err)
		d, err = riverhook.DeliveryOf(row)
		require.NoError(t, err)
		assert.Equal(t, job.ID, d.ResentAs, "the original is marked")
		b, err := json.Marshal(d)
		require.NoError(t, err)
		assert.Contains(t, string(b), fmt.Sprintf(`"resent_as":%d`, job.ID))

		_, _, err = riverhook.Resend(ctx, s.client, s.pool, s.jobs["retrying"], "why", nil)
		assert.ErrorIs(t, err, riverhook.ErrUnderWay)
		_, _, err = riverhook.Resend(ctx, s.client, s.pool, s.jobs["delivered"], "", nil)
		assert.ErrorContains(t, err, "needs a reason")
		_, inserted, err = riverhook.Resend(ctx, s.client, s.pool, s.jobs["delivered"], "the customer lost it", nil)
		require.NoError(t, err)
		assert.True(t, inserted, "a delivered one can be sent again")
	})
	t.Run("ResendKeepsTheQueuePriorityAndTags", func(t *testing.T) {
		t.Parallel()
		s := newScenario(t)
		opts := s.worker.InsertOptions(nil)
		opts.InsertOpts = &river.InsertOpts{Queue: "webhooks", Priority: 2, Tags: []string{"tenant-7"}}
		params, err := riverhook.InsertParams("own-queue", []string{"crm"}, payload("own-queue"), opts)
		require.NoError(t, err)
		res, err := s.client.InsertMany(ctx, params)
		require.NoError(t, err)
		orig := res[0].Job
		_, err = s.pool.Exec(ctx, `UPDATE `+s.schema+`.river_job SET state = 'discarded', finalized_at = now() WHERE id = $1`, orig.ID)
		require.NoError(t, err)
		resent, inserted, err := riverhook.Resend(ctx, s.client, s.pool, orig.ID, "the console's Resend", s.worker.InsertOptions(nil))
		require.NoError(t, err)
		require.True(t, inserted)
		assert.Equal(t, "webhooks", resent.Queue, "where a worker of that queue works it")
		assert.Equal(t, 2, resent.Priority)
		assert.Contains(t, resent.Tags, "tenant-7")

		// Recover resends the resend the same way once it gave up in turn.
		_, err = s.pool.Exec(ctx, `UPDATE `+s.schema+`.river_job SET state = 'discarded', finalized_at = now() WHERE id = $1`, resent.ID)
		require.NoError(t, err)
		rec, err := riverhook.Recover(ctx, s.client, s.pool, "crm", riverhook.RecoverParams{Since: time.Now().Add(-time.Hour), Reason: "recover"}, s.worker.InsertOptions(nil))
		require.NoError(t, err)
		var found bool
		for _, id := range rec.Jobs {
			job, err := s.client.JobGet(ctx, id)
			require.NoError(t, err)
			if d, _ := riverhook.DeliveryOf(job); d != nil && d.DeliveryID == "own-queue" {
				found = true
				assert.Equal(t, resent.ID, d.ResentFrom)
				assert.Equal(t, "webhooks", job.Queue)
				assert.Equal(t, 2, job.Priority)
				assert.Contains(t, job.Tags, "tenant-7")
			}
		}
		assert.True(t, found, "recovered: %+v", rec)
	})
	t.Run("OutcomesPerPeriod", func(t *testing.T) {
		t.Parallel()
		s := newScenario(t)
		periods, err := riverhook.Outcomes(ctx, s.client, s.pool, "crm", time.Now().Add(-time.Hour), 10*time.Minute)
		require.NoError(t, err)
		require.Len(t, periods, 7, "an hour of 10-minute periods, and the one begun since")
		var sum riverhook.Period
		for i, p := range periods {
			assert.Equal(t, periods[0].Start.Add(time.Duration(i)*10*time.Minute), p.Start)
			sum.Delivered, sum.GivenUp, sum.Cancelled = sum.Delivered+p.Delivered, sum.GivenUp+p.GivenUp, sum.Cancelled+p.Cancelled
		}
		assert.Equal(t, riverhook.Period{Delivered: 1, GivenUp: 1, Cancelled: 1}, sum, "the scenario's ended deliveries")
		assert.Equal(t, sum, riverhook.Period{Delivered: periods[5].Delivered + periods[6].Delivered, GivenUp: periods[5].GivenUp + periods[6].GivenUp,
			Cancelled: periods[5].Cancelled + periods[6].Cancelled}, "in the last minutes")
		none, err := riverhook.Outcomes(ctx, s.client, s.pool, "erp", time.Now().Add(-time.Hour), time.Hour)
		require.NoError(t, err)
		assert.Equal(t, 0, none[0].Delivered+none[0].GivenUp, "erp's delivery is waiting")
		_, err = riverhook.Outcomes(ctx, s.client, s.pool, "crm", time.Now().Add(-24*time.Hour), time.Second)
		assert.Error(t, err, "too many periods")
	})
	t.Run("RecoversGivenUpDeliveriesOnceAndDryRunCounts", func(t *testing.T) {
		t.Parallel()
		s := newScenario(t)
		p := riverhook.RecoverParams{Since: time.Now().Add(-time.Hour), Reason: "incident 42", DryRun: true}
		res, err := riverhook.Recover(ctx, s.client, s.pool, "crm", p, s.worker.InsertOptions(nil))
		require.NoError(t, err)
		assert.Equal(t, &riverhook.RecoverResult{GivenUp: 1, Resent: 1}, res)
		page, err := riverhook.List(ctx, s.client, "crm", nil)
		require.NoError(t, err)
		assert.Len(t, page.Deliveries, 5, "a dry run inserts nothing")

		p.DryRun = false
		res, err = riverhook.Recover(ctx, s.client, s.pool, "crm", p, s.worker.InsertOptions(nil))
		require.NoError(t, err)
		assert.Equal(t, 1, res.Resent)
		require.Len(t, res.Jobs, 1)
		res, err = riverhook.Recover(ctx, s.client, s.pool, "crm", p, s.worker.InsertOptions(nil))
		require.NoError(t, err)
		assert.Equal(t, &riverhook.RecoverResult{}, res, "run twice, sent once: the resent delivery is not listed again")
		_, err = riverhook.Recover(ctx, s.client, s.pool, "crm", riverhook.RecoverParams{Reason: "x"}, nil)
		assert.ErrorContains(t, err, "Since is required")
	})
	t.Run("RecoverInTheCallersTransaction", func(t *testing.T) {
		t.Parallel()
		s := newScenario(t)
		p := riverhook.RecoverParams{Since: time.Now().Add(-time.Hour), Reason: "incident 42"}
		tx, err := s.pool.Begin(ctx)
		require.NoError(t, err)
		res, err := riverhook.RecoverTx(ctx, s.client, tx, "crm", p, s.worker.InsertOptions(nil))
		require.NoError(t, err)
		assert.Equal(t, 1, res.Resent)
		require.NoError(t, tx.Rollback(ctx))
		counts, err := riverhook.Count(ctx, s.client, s.pool, "crm", time.Time{})
		require.NoError(t, err)
		assert.Equal(t, 1, counts[riverhook.StatusWaiting], "rolled back with the caller's transaction")

		tx, err = s.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = riverhook.RecoverTx(ctx, s.client, tx, "crm", p, s.worker.InsertOptions(nil))
		require.NoError(t, err)
		page, err := riverhook.ListTx(ctx, s.client, tx, "crm", &riverhook.ListParams{Statuses: []riverhook.Status{riverhook.StatusWaiting}})
		require.NoError(t, err)
		assert.Len(t, page.Deliveries, 2, "seen in the transaction")
		require.NoError(t, tx.Commit(ctx))
		counts, err = riverhook.Count(ctx, s.client, s.pool, "crm", time.Time{})
		require.NoError(t, err)
		assert.Equal(t, 2, counts[riverhook.StatusWaiting])
	})
	t.Run("ErasesTheBodiesOfEndedDeliveriesOnly", func(t *testing.T) {
		t.Parallel()
		s := newScenario(t)
		n, err := riverhook.EraseBodies(ctx, s.client, s.pool, []string{"given-up", "delivered", "waiting", "unknown"})
		require.NoError(t, err)
		assert.Equal(t, 2, n, "the waiting delivery keeps its body: its attempt sends it")
		for d, erased := range map[string]bool{"given-up": true, "delivered": true, "waiting": false, "retrying": false} {
			job, err := s.client.JobGet(ctx, s.jobs[d])
			require.NoError(t, err)
			assert.Equal(t, erased, !strings.Contains(string(job.EncodedArgs), "payload_base64"), "%s: %s", d, job.EncodedArgs)
			got, err := riverhook.DeliveryOf(job)
			require.NoError(t, err)
			assert.Equal(t, erased, got.Erased, d)
			assert.Equal(t, d, got.DeliveryID, "the ids stay")
		}
		job, err := s.client.JobGet(ctx, s.jobs["given-up"])
		require.NoError(t, err)
		d, err := riverhook.DeliveryOf(job)
		require.NoError(t, err)
		assert.Len(t, d.Attempts, 2, "the attempt log stays")

		_, _, err = riverhook.Resend(ctx, s.client, s.pool, s.jobs["given-up"], "why", nil)
		assert.ErrorIs(t, err, riverhook.ErrErased)
		res, err := riverhook.Recover(ctx, s.client, s.pool, "crm", riverhook.RecoverParams{Since: time.Now().Add(-time.Hour), Reason: "x"}, nil)
		require.NoError(t, err)
		assert.Equal(t, &riverhook.RecoverResult{}, res, "an erased delivery is not listed: nothing to send")
		n, err = riverhook.EraseBodies(ctx, s.client, s.pool, []string{"given-up"})
		require.NoError(t, err)
		assert.Zero(t, n, "erased once")
	})
	// Calling Recover again while More says so reaches every given-up
	// delivery, each resent once: a call goes on past the jobs the last one
	// resent, which stay discarded.
	t.Run("RecoverProgressesPastMaxRecovered", func(t *testing.T) {
		t.Parallel()
		s := newScenario(t)
		var params []river.InsertManyParams
		for i := range riverhook.MaxRecovered {
			p, err := riverhook.InsertParams(fmt.Sprintf("bulk-%d", i), []string{"crm"}, payload("bulk"), s.worker.InsertOptions(nil))
			require.NoError(t, err)
			params = append(params, p...)
		}
		_, err := s.client.InsertMany(ctx, params)
		require.NoError(t, err)
		_, err = s.pool.Exec(ctx, `UPDATE `+pgIdent(s.client.Schema())+`.river_job SET state = 'discarded', attempt = 1,
			attempted_at = now(), finalized_at = now() WHERE args->>'delivery_id' LIKE 'bulk-%'`)
		require.NoError(t, err)

		p := riverhook.RecoverParams{Since: time.Now().Add(-time.Hour), Reason: "incident 43"}
		resent := 0
		for calls := 0; ; calls++ {
			require.Less(t, calls, 3, "More stays true: Recover lists the same given-up jobs again (resent %d of %d)", resent, riverhook.MaxRecovered+1)
			res, err := riverhook.Recover(ctx, s.client, s.pool, "crm", p, s.worker.InsertOptions(nil))
			require.NoError(t, err)
			resent += res.Resent
			if !res.More {
				break
			}
		}
		assert.Equal(t, riverhook.MaxRecovered+1, resent, "every given-up delivery resent once")
		res, err := riverhook.Recover(ctx, s.client, s.pool, "crm", p, s.worker.InsertOptions(nil))
		require.NoError(t, err)
		assert.Zero(t, res.Resent, "and not again")
	})

	// A Resend of an older job of a delivery (a row of the log a dashboard
	// still shows as given up) inserts nothing while a later job of the
	// same delivery is under way: the delivery is sent once.
	t.Run("ResendOfAnOlderJobWhileALaterIsUnderWaySendsNothing", func(t *testing.T) {
		t.Parallel()
		s := newScenario(t)
		opts := s.worker.InsertOptions(nil)
		x := s.jobs["given-up"]
		y, inserted, err := riverhook.Resend(ctx, s.client, s.pool, x, "first", opts)
		require.NoError(t, err)
		require.True(t, inserted)
		_, err = s.client.JobCancel(ctx, y.ID) // the resend ends without delivering
		require.NoError(t, err)
		z, inserted, err := riverhook.Resend(ctx, s.client, s.pool, y.ID, "second, from the resend", opts)
		require.NoError(t, err)
		require.True(t, inserted)

		got, inserted, err := riverhook.Resend(ctx, s.client, s.pool, x, "a click on the old row", opts)
		require.NoError(t, err)
		assert.False(t, inserted, "job %d sends the delivery already", z.ID)
		assert.Equal(t, z.ID, got.ID)
	})

	// River deletes a delivered resend after 24 hours and keeps the given-up
	// original 7 days: a Recover over the console's 7 days, or a Resend of the
	// original, must not send the delivery again.
	t.Run("ADeletedResendIsNotSentAgain", func(t *testing.T) {
		t.Parallel()
		s := newScenario(t)
		opts := s.worker.InsertOptions(nil)
		orig := s.jobs["given-up"]
		resent, inserted, err := riverhook.Resend(ctx, s.client, s.pool, orig, "the endpoint is fixed", opts)
		require.NoError(t, err)
		require.True(t, inserted)
		_, err = s.pool.Exec(ctx, `UPDATE `+pgIdent(s.schema)+`.river_job SET state = 'completed', finalized_at = now() WHERE id = $1`, resent.ID)
		require.NoError(t, err)
		_, err = s.client.JobDelete(ctx, resent.ID) // as River's CompletedJobRetentionPeriod does
		require.NoError(t, err)

		p := riverhook.RecoverParams{Since: time.Now().Add(-7 * 24 * time.Hour), Reason: "the console's Recover", DryRun: true}
		res, err := riverhook.Recover(ctx, s.client, s.pool, "crm", p, opts)
		require.NoError(t, err)
		assert.Zero(t, res.Resent, "a dry run counts no resent delivery")
		p.DryRun = false
		res, err = riverhook.Recover(ctx, s.client, s.pool, "crm", p, opts)
		require.NoError(t, err)
		assert.Equal(t, &riverhook.RecoverResult{}, res)
		_, inserted, err = riverhook.Resend(ctx, s.client, s.pool, orig, "a click on the old row", opts)
		assert.ErrorIs(t, err, riverhook.ErrResent)
		assert.ErrorContains(t, err, fmt.Sprintf("job %d was resent as job %d", orig, resent.ID))
		assert.False(t, inserted)
		assert.Equal(t, 1, s.jobsOf(t, "given-up"), "the original alone")
	})

	// The service repeating its insert of a delivery that a Recover sent is
	// skipped, however the first job ended.
	t.Run("ARepeatedInsertOfARecoveredDeliveryIsSkipped", func(t *testing.T) {
		t.Parallel()
		s := newScenario(t)
		opts := s.worker.InsertOptions(nil)
		res, err := riverhook.Recover(ctx, s.client, s.pool, "crm", riverhook.RecoverParams{Since: time.Now().Add(-time.Hour), Reason: "incident 44"}, opts)
		require.NoError(t, err)
		require.Len(t, res.Jobs, 1)
		_, err = s.pool.Exec(ctx, `UPDATE `+pgIdent(s.schema)+`.river_job SET state = 'completed', finalized_at = now() WHERE id = $1`, res.Jobs[0])
		require.NoError(t, err)
		for _, d := range []string{"given-up", "cancelled"} {
			tx, err := s.pool.Begin(ctx)
			require.NoError(t, err)
			again, err := riverhook.InsertTx(ctx, s.client, tx, d, []string{"crm"}, payload(d), opts)
			require.NoError(t, err)
			require.NoError(t, tx.Commit(ctx))
			assert.True(t, again[0].UniqueSkippedAsDuplicate, "%s: inserted again as job %d", d, again[0].Job.ID)
			assert.Equal(t, s.jobs[d], again[0].Job.ID, d)
		}
		assert.Equal(t, 2, s.jobsOf(t, "given-up"), "the original and the recovered")
	})

	// A Recover and a Resend of one delivery at the same moment insert one
	// job: whichever decides first holds its transaction open while the
	// other starts, and the other must decide after it.
	t.Run("RacingResendsAndRecoversInsertOnce", func(t *testing.T) {
		t.Parallel()
		p := riverhook.RecoverParams{Since: time.Now().Add(-time.Hour), Reason: "recover"}
		// first runs in tx; then runs on db; each returns how many jobs it says it inserted.
		type op func(s *scenario, tx pgx.Tx, db riverhook.DB, orig, newest int64) (int, error)
		recoverOp := func(s *scenario, tx pgx.Tx, db riverhook.DB, _, _ int64) (int, error) {
			var res *riverhook.RecoverResult
			var err error
			if tx != nil {
				res, err = riverhook.RecoverTx(ctx, s.client, tx, "crm", p, s.worker.InsertOptions(nil))
			} else {
				res, err = riverhook.Recover(ctx, s.client, db, "crm", p, s.worker.InsertOptions(nil))
			}
			if err != nil {
				return 0, err
			}
			return res.Resent, nil
		}
		resendOp := func(newest bool) op {
			return func(s *scenario, tx pgx.Tx, db riverhook.DB, orig, last int64) (int, error) {
				id := orig
				if newest {
					id = last
				}
				var inserted bool
				var err error
				if tx != nil {
					_, inserted, err = riverhook.ResendTx(ctx, s.client, tx, id, "resend", s.worker.InsertOptions(nil))
				} else {
					_, inserted, err = riverhook.Resend(ctx, s.client, db, id, "resend", s.worker.InsertOptions(nil))
				}
				if inserted {
					return 1, err
				}
				return 0, err
			}
		}
		for _, tc := range []struct {
			name        string
			first, then op
		}{
			{"RecoverThenResendOfTheOriginal", recoverOp, resendOp(false)},
			{"ResendOfTheOriginalThenRecover", resendOp(false), recoverOp},
			{"RecoverThenResendOfTheNewest", recoverOp, resendOp(true)},
			{"ResendOfTheNewestThenRecover", resendOp(true), recoverOp},
			{"ResendOfTheOriginalThenOfTheNewest", resendOp(false), resendOp(true)},
			{"ResendOfTheNewestThenOfTheOriginal", resendOp(true), resendOp(false)},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				s := newScenario(t)
				// The delivery's newest job is a resend that gave up in turn.
				orig := s.jobs["given-up"]
				newest, inserted, err := riverhook.Resend(ctx, s.client, s.pool, orig, "first", s.worker.InsertOptions(nil))
				require.NoError(t, err)
				require.True(t, inserted)
				_, err = s.pool.Exec(ctx, `UPDATE `+pgIdent(s.schema)+`.river_job SET state = 'discarded', finalized_at = now() WHERE id = $1`, newest.ID)
				require.NoError(t, err)
				before := s.jobsOf(t, "given-up")

				conn, err := s.pool.Acquire(ctx)
				require.NoError(t, err)
				defer conn.Release()
				tx, err := s.pool.Begin(ctx)
				require.NoError(t, err)
				defer tx.Rollback(ctx)
				n1, err := tc.first(s, tx, nil, orig, newest.ID)
				require.NoError(t, err)

				type result struct {
					n   int
					err error
				}
				done := make(chan result, 1)
				go func() {
					n, err := tc.then(s, nil, conn, orig, newest.ID)
					done <- result{n, err}
				}()
				var got *result
				require.Eventually(t, func() bool {
					select {
					case r := <-done: // decided without waiting for the first
						got = &r
						return true
					default:
					}
					var waiting bool
					err := s.pool.QueryRow(ctx, `SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1`, conn.Conn().PgConn().PID()).Scan(&waiting)
					return err == nil && waiting
				}, 10*time.Second, time.Millisecond, "the second decider neither waits nor ends")
				assert.Nil(t, got, "the second decided without waiting for the first")
				require.NoError(t, tx.Commit(ctx))
				if got == nil {
					r := <-done
					got = &r
				}
				require.NoError(t, got.err)
				assert.Equal(t, 1, n1+got.n, "inserts reported: %d, then %d", n1, got.n)
				assert.Equal(t, before+1, s.jobsOf(t, "given-up"), "one job more")
			})
		}
	})
	t.Run("MarshalsADeliveryForADashboard", func(t *testing.T) {
		t.Parallel()
		s := newScenario(t)
		page, err := riverhook.List(ctx, s.client, "crm", &riverhook.ListParams{Statuses: []riverhook.Status{riverhook.StatusGivenUp}})
		require.NoError(t, err)
		b, err := json.Marshal(page.Deliveries[0])
		require.NoError(t, err)
		var v map[string]any
		require.NoError(t, json.Unmarshal(b, &v))
		assert.Equal(t, "given_up", v["status"])
		assert.Equal(t, "discarded", v["river_state"])
		assert.Equal(t, "riverhook: the policy gave up after attempt 2", v["reason"])
		attempts := v["attempts"].([]any)
		require.Len(t, attempts, 2)
		first := attempts[0].(map[string]any)
		assert.Equal(t, float64(1), first["n"])
		assert.Equal(t, float64(1), first["run"])
		assert.Equal(t, "status", first["outcome"])
		assert.Equal(t, float64(500), first["status"])
		assert.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`, first["start"])
		assert.NotContains(t, string(b), "payload", "the body (personal data) is never in the log's JSON")
	})
}

func pgIdent(s string) string { return `"` + s + `"` }

// jobsOf returns how many jobs of delivery s's schema holds.
func (s *scenario) jobsOf(t *testing.T, delivery string) int {
	t.Helper()
	var n int
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+pgIdent(s.schema)+`.river_job WHERE args->>'delivery_id' = $1`, delivery).Scan(&n))
	return n
}

func TestStatuses_ReturnsANewSlice(t *testing.T) {
	s := riverhook.Statuses()
	s[0] = "failed"
	assert.Equal(t, []riverhook.Status{riverhook.StatusDelivered, riverhook.StatusRetrying, riverhook.StatusWaiting,
		riverhook.StatusGivenUp, riverhook.StatusCancelled}, riverhook.Statuses(), "in a dashboard's order, whatever a caller does with its copy")
}

// TestResend_RefusesAReasonTheJobCannotHold: a reason with a NUL (an
// Actor's name read from a form, a pasted text) is refused as a reason, as
// one too long is, and nothing is resent. It passed the reason's check and
// failed the insert with PostgreSQL's "unsupported Unicode escape
// sequence", which a dashboard cannot tell from an outage (a 500).
func TestResend_RefusesAReasonTheJobCannotHold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newScenario(t)
	var pgErr *pgconn.PgError
	_, _, err := riverhook.Resend(ctx, s.client, s.pool, s.jobs["given-up"], "bob\x00: fixed", s.worker.InsertOptions(nil))
	require.Error(t, err)
	assert.False(t, errors.As(err, &pgErr), "PostgreSQL's error, not the reason's: %v", err)
	assert.ErrorContains(t, err, "reason")
	_, err = riverhook.Recover(ctx, s.client, s.pool, "crm", riverhook.RecoverParams{Since: time.Now().Add(-time.Hour), Reason: "bob\x00: fixed"}, s.worker.InsertOptions(nil))
	require.Error(t, err)
	assert.False(t, errors.As(err, &pgErr), "PostgreSQL's error, not the reason's: %v", err)
	assert.ErrorContains(t, err, "reason")
	assert.Equal(t, 1, s.jobsOf(t, "given-up"), "nothing resent")
}

// TestOperating_AFilterNoDeliveryCanHave: a connection id, an event or a
// delivery id with a NUL or bytes not UTF-8, which no delivery has (the
// insert refuses them), finds nothing: an empty page, zero counts, nothing
// to recover or erase. Each was passed to PostgreSQL as it was and failed
// with "invalid byte sequence for encoding UTF8", an error a caller cannot
// tell from an outage; one such id in EraseBodies' list failed the
// erasure of all the others.
func TestOperating_AFilterNoDeliveryCanHave(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newScenario(t)
	for _, bad := range []string{"c\x00rm", "crm\xff"} {
		page, err := riverhook.List(ctx, s.client, bad, nil)
		require.NoError(t, err, "connection %q", bad)
		assert.Empty(t, page.Deliveries)
		page, err = riverhook.List(ctx, s.client, "crm", &riverhook.ListParams{Event: strings.Replace(bad, "crm", "user.identified", 1)})
		require.NoError(t, err, "event %q", bad)
		assert.Empty(t, page.Deliveries)
		counts, err := riverhook.Count(ctx, s.client, s.pool, bad, time.Time{})
		require.NoError(t, err, "connection %q", bad)
		assert.Zero(t, counts[riverhook.StatusGivenUp])
		periods, err := riverhook.Outcomes(ctx, s.client, s.pool, bad, time.Now().Add(-time.Hour), time.Minute)
		require.NoError(t, err, "connection %q", bad)
		assert.NotEmpty(t, periods)
		res, err := riverhook.Recover(ctx, s.client, s.pool, bad, riverhook.RecoverParams{Since: time.Now().Add(-time.Hour), Reason: "fixed"}, s.worker.InsertOptions(nil))
		require.NoError(t, err, "connection %q", bad)
		assert.Zero(t, res.GivenUp)
	}
	n, err := riverhook.EraseBodies(ctx, s.client, s.pool, []string{"given-up", "evt\x00", "evt\xff"})
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the ended delivery of the list is erased")
}

// TestOutcomes_AZeroSinceIsRefused: Outcomes since the zero time (a
// careless caller's unset field) by years is some 2,026 periods, over
// MaxPeriods: it fails saying so, as it does for days. time.Time.Sub
// saturates at 292 years, so the check saw 292 periods, and the count of
// periods, that span plus a step, overflowed: one period, from the year
// 1, holding every outcome. So did any span over 292 years, whatever the
// step.
func TestOutcomes_AZeroSinceIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newScenario(t)
	year := 365 * 24 * time.Hour
	periods, err := riverhook.Outcomes(ctx, s.client, s.pool, "crm", time.Time{}, year)
	require.Error(t, err, "since the year 1 by years: %d period(s), the first from %v", len(periods), func() any {
		if len(periods) > 0 {
			return periods[0].Start
		}
		return nil
	}())
	assert.Contains(t, err.Error(), "more than 1000 periods")
	since := time.Now().AddDate(-400, 0, 0)
	periods, err = riverhook.Outcomes(ctx, s.client, s.pool, "crm", since, 100*year)
	require.NoError(t, err)
	assert.Len(t, periods, 5, "400 years by centuries: four periods and the one begun since")
}
