package riverhook_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook/riverhook"
)

// TestLocks_ACallOnThePoolWhileTheCallersTransactionHoldsTheLock: a caller
// whose own transaction, not ended, holds riverhook's lock of a connection
// (EraseSubject, EraseBodies, ResendTx or RecoverTx given the transaction),
// and that then calls, in the same goroutine, a Resend, Recover or erasure
// of that connection on the pool, waits for itself: PostgreSQL cannot see
// the cycle, which goes through the caller. The call fails with an error
// saying so rather than waiting for ever (until the context's deadline,
// here), and the transaction goes on: the same call given it works.
func TestLocks_ACallOnThePoolWhileTheCallersTransactionHoldsTheLock(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		hold func(context.Context, *scenario, pgx.Tx) error
		call func(context.Context, *scenario, riverhook.DB) error
	}{
		{"EraseSubjectThenResend",
			func(ctx context.Context, s *scenario, tx pgx.Tx) error {
				_, err := riverhook.EraseSubject(ctx, s.client, tx, "usr_given-up")
				return err
			},
			func(ctx context.Context, s *scenario, db riverhook.DB) error {
				_, _, err := riverhook.Resend(ctx, s.client, db, s.jobs["delivered"], "support: sent again", s.worker.InsertOptions(nil))
				return err
			}},
		{"ResendTxThenRecover",
			func(ctx context.Context, s *scenario, tx pgx.Tx) error {
				_, _, err := riverhook.ResendTx(ctx, s.client, tx, s.jobs["delivered"], "support: sent again", s.worker.InsertOptions(nil))
				return err
			},
			func(ctx context.Context, s *scenario, db riverhook.DB) error {
				_, err := riverhook.Recover(ctx, s.client, db, "crm", riverhook.RecoverParams{Since: time.Now().Add(-time.Hour), Reason: "fixed"}, s.worker.InsertOptions(nil))
				return err
			}},
		{"RecoverTxThenEraseBodies",
			func(ctx context.Context, s *scenario, tx pgx.Tx) error {
				_, err := riverhook.RecoverTx(ctx, s.client, tx, "crm", riverhook.RecoverParams{Since: time.Now().Add(-time.Hour), Reason: "fixed"}, s.worker.InsertOptions(nil))
				return err
			},
			func(ctx context.Context, s *scenario, db riverhook.DB) error {
				_, err := riverhook.EraseBodies(ctx, s.client, db, []string{"delivered"})
				return err
			}},
		{"EraseBodiesThenEraseSubject",
			func(ctx context.Context, s *scenario, tx pgx.Tx) error {
				_, err := riverhook.EraseBodies(ctx, s.client, tx, []string{"given-up"})
				return err
			},
			func(ctx context.Context, s *scenario, db riverhook.DB) error {
				_, err := riverhook.EraseSubject(ctx, s.client, db, "usr_delivered")
				return err
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newScenario(t)
			tx, err := s.pool.Begin(context.Background())
			require.NoError(t, err)
			defer tx.Rollback(context.Background())
			require.NoError(t, c.hold(context.Background(), s, tx))

			// A self-deadlock never ends: the deadline bounds the test.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err = c.call(ctx, s, s.pool)
			require.Error(t, err, "the lock is held by the caller's own transaction")
			assert.NotErrorIs(t, err, context.DeadlineExceeded, "the call waited for its caller until the deadline: %v", err)
			assert.ErrorContains(t, err, "idle")

			require.NoError(t, c.call(context.Background(), s, tx), "the call given the transaction")
			require.NoError(t, tx.Commit(context.Background()))
		})
	}
}
