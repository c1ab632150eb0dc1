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
			assert.ErrorIs(t, err, riverhook.ErrLockHeld)

			require.NoError(t, c.call(context.Background(), s, tx), "the call given the transaction")
			require.NoError(t, tx.Commit(context.Background()))
		})
	}
}

// TestLocks_AHolderAtWorkIsWaitedFor: a call waits for the lock of a
// transaction at work, running a statement, however long it runs (here it
// waits for a third transaction's lock), past the waits after which a
// holder idle in its transaction fails the call with ErrLockHeld: a wait
// ends (the waiter's statement starts again) and the call goes on waiting,
// then takes the lock once the holder commits.
func TestLocks_AHolderAtWorkIsWaitedFor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newScenario(t)
	blocker, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	defer blocker.Rollback(ctx) // before a failure leaves the holder waiting for it
	_, err = blocker.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, s.schema)
	require.NoError(t, err)
	holder, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	started := false
	defer func() {
		if !started {
			holder.Rollback(ctx)
		}
	}()
	_, err = riverhook.RecoverTx(ctx, s.client, holder, "crm", riverhook.RecoverParams{Since: time.Now().Add(-time.Hour), Reason: "fixed"}, s.worker.InsertOptions(nil))
	require.NoError(t, err)
	holderPID := holder.Conn().PgConn().PID()
	held := make(chan error, 1)
	started = true
	go func() { // at work: waiting for the blocker's lock, then done
		_, err := holder.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, s.schema)
		if err == nil {
			err = holder.Commit(ctx)
		} else {
			holder.Rollback(ctx)
		}
		held <- err
	}()
	require.Eventually(t, func() bool {
		var waiting bool
		err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock')`, holderPID).Scan(&waiting)
		return err == nil && waiting
	}, 10*time.Second, 5*time.Millisecond, "the holder waits for the blocker")

	resent := make(chan error, 1)
	go func() {
		_, _, err := riverhook.Resend(ctx, s.client, s.pool, s.jobs["delivered"], "support: sent again", s.worker.InsertOptions(nil))
		resent <- err
	}()
	// The Resend's wait: its statement blocked by the holder, and when it began.
	waiter := `SELECT pid, query_start FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND $1::int = ANY(pg_blocking_pids(pid))`
	var pid int32
	var began time.Time
	require.Eventually(t, func() bool {
		return s.pool.QueryRow(ctx, waiter, holderPID).Scan(&pid, &began) == nil
	}, 10*time.Second, 5*time.Millisecond, "the Resend waits for the holder's lock")
	var ended bool
	var early error
	require.Eventually(t, func() bool {
		select {
		case early = <-resent:
			ended = true
			return true
		default:
		}
		var again bool
		err := s.pool.QueryRow(ctx, `SELECT EXISTS (`+waiter+` AND pid = $2 AND query_start > $3)`, holderPID, pid, began).Scan(&again)
		return err == nil && again
	}, time.Minute, 10*time.Millisecond, "the Resend waits again after a wait ended")
	require.False(t, ended, "the Resend ended while the holder was at work: %v", early)

	require.NoError(t, blocker.Commit(ctx))
	require.NoError(t, <-held)
	require.NoError(t, <-resent, "the Resend, once the holder committed")
}
