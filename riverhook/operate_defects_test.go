package riverhook_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook/riverhook"
)

// Defects found in review of the operating API: each case fails on the code
// it was written against.
func TestOperatingDefects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// Recover says "call it again while More says so", but it listed the
	// same oldest MaxRecovered given-up jobs on every call (they stay
	// discarded once resent), so the deliveries past them were never
	// resent, and More stayed true.
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
			res, err := riverhook.Recover(ctx, s.client, "crm", p, s.worker.InsertOptions(nil))
			require.NoError(t, err)
			resent += res.Resent
			if !res.More {
				break
			}
		}
		assert.Equal(t, riverhook.MaxRecovered+1, resent, "every given-up delivery resent once")
		res, err := riverhook.Recover(ctx, s.client, "crm", p, s.worker.InsertOptions(nil))
		require.NoError(t, err)
		assert.Zero(t, res.Resent, "and not again")
	})

	// Resend of an older job of a delivery (a row of the log a dashboard
	// still shows as given up) inserted a job while a later job of the same
	// delivery was under way: the delivery was sent twice.
	t.Run("ResendOfAnOlderJobWhileALaterIsUnderWaySendsNothing", func(t *testing.T) {
		t.Parallel()
		s := newScenario(t)
		opts := s.worker.InsertOptions(nil)
		x := s.jobs["given-up"]
		y, inserted, err := riverhook.Resend(ctx, s.client, x, "first", opts)
		require.NoError(t, err)
		require.True(t, inserted)
		_, err = s.client.JobCancel(ctx, y.ID) // the resend ends without delivering
		require.NoError(t, err)
		z, inserted, err := riverhook.Resend(ctx, s.client, y.ID, "second, from the resend", opts)
		require.NoError(t, err)
		require.True(t, inserted)

		got, inserted, err := riverhook.Resend(ctx, s.client, x, "a click on the old row", opts)
		require.NoError(t, err)
		assert.False(t, inserted, "job %d sends the delivery already", z.ID)
		assert.Equal(t, z.ID, got.ID)
	})

	// The same through the outbox: a delivery inserted again once its first
	// job gave up is under way; a Resend of that first job sent it twice.
	t.Run("ResendWhileTheDeliveryIsInsertedAgainSendsNothing", func(t *testing.T) {
		t.Parallel()
		s := newScenario(t)
		opts := s.worker.InsertOptions(nil)
		res, err := riverhook.InsertParams("given-up", []string{"crm"}, payload("given-up"), opts)
		require.NoError(t, err)
		again, err := s.client.InsertMany(ctx, res)
		require.NoError(t, err)
		require.False(t, again[0].UniqueSkippedAsDuplicate, "River's unique states leave out discarded")

		got, inserted, err := riverhook.Resend(ctx, s.client, s.jobs["given-up"], "the endpoint is fixed", opts)
		require.NoError(t, err)
		assert.False(t, inserted, "job %d sends the delivery already", again[0].Job.ID)
		assert.Equal(t, again[0].Job.ID, got.ID)
	})
}

func pgIdent(s string) string { return `"` + s + `"` }
