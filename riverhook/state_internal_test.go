package riverhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook/internal/testdb"
)

func TestLifePolicy_Next(t *testing.T) {
	p, err := (&LifePolicy{DisableAfter: 12 * time.Hour, Within: 72 * time.Hour, WarnBefore: 4 * time.Hour}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	at := func(h float64) time.Time { return t0.Add(time.Duration(h * float64(time.Hour))) }
	type step struct {
		h       float64 // hours after t0
		o       outcome
		state   State
		changes []Change
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"one failure never disables", []step{
			{0, outcomeFailure, StateFailing, []Change{ChangeFailing}},
		}},
		{"failures spanning the policy's time disable, warned before", []step{
			{0, outcomeFailure, StateFailing, []Change{ChangeFailing}},
			{1, outcomeFailure, StateFailing, nil},
			{8, outcomeFailure, StateFailing, []Change{ChangeWarning}},
			{9, outcomeFailure, StateFailing, nil},
			{12, outcomeFailure, StateDisabled, []Change{ChangeDisabled}},
			{13, outcomeSuccess, StateDisabled, nil},
		}},
		{"a success between starts again", []step{
			{0, outcomeFailure, StateFailing, []Change{ChangeFailing}},
			{11, outcomeSuccess, StateActive, []Change{ChangeActive}},
			{12, outcomeFailure, StateFailing, []Change{ChangeFailing}},
			{23, outcomeFailure, StateFailing, []Change{ChangeWarning}},
		}},
		{"a failure a window after the last starts a new span", []step{
			{0, outcomeFailure, StateFailing, []Change{ChangeFailing}},
			{72, outcomeFailure, StateFailing, []Change{ChangeFailing}},
			{80, outcomeFailure, StateFailing, []Change{ChangeWarning}},
			{84, outcomeFailure, StateDisabled, []Change{ChangeDisabled}},
		}},
		{"410 Gone disables at once", []step{
			{0, outcomeGone, StateDisabled, []Change{ChangeDisabled}},
		}},
		{"what is not an outcome changes nothing", []step{
			{0, outcomeNone, StateActive, nil},
			{1, outcomeSuccess, StateActive, nil},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := ConnectionState{ConnectionID: "crm", State: StateActive}
			for _, st := range tc.steps {
				var changes []Change
				s, changes = p.next(s, st.o, at(st.h))
				assert.Equal(t, st.state, s.State, "after %vh", st.h)
				assert.Equal(t, st.changes, changes, "after %vh", st.h)
			}
		})
	}
}

func TestLifePolicy_DefaultsWarnWithTheFirstFailure(t *testing.T) {
	p, _ := (*LifePolicy)(nil).withDefaults()
	now := time.Now()
	s, changes := p.next(ConnectionState{State: StateActive}, outcomeFailure, now)
	assert.Equal(t, []Change{ChangeFailing, ChangeWarning}, changes)
	assert.Equal(t, now.Add(DefaultDisableAfter), s.DisableAt)
}

func TestLifePolicy_WritesTheLastFailureAMinuteApart(t *testing.T) {
	p, _ := (*LifePolicy)(nil).withDefaults()
	t0 := time.Now()
	s, _ := p.next(ConnectionState{State: StateActive}, outcomeFailure, t0)
	assert.False(t, p.worth(s, outcomeFailure, t0.Add(30*time.Second)), "a failure within the minute")
	assert.True(t, p.worth(s, outcomeFailure, t0.Add(lastFailureEvery)), "a minute on")
	assert.True(t, p.worth(s, outcomeSuccess, t0.Add(time.Second)), "a success of a failing connection")
}

func TestOutcomeOf(t *testing.T) {
	failed := errors.New("failed")
	for _, tc := range []struct {
		a    webhook.Attempt
		want outcome
	}{
		{webhook.Attempt{StatusCode: 200}, outcomeSuccess},
		{webhook.Attempt{Kind: webhook.KindStatus, StatusCode: http.StatusGone, Err: failed}, outcomeGone},
		{webhook.Attempt{Kind: webhook.KindStatus, StatusCode: 500, Err: failed}, outcomeFailure},
		{webhook.Attempt{Kind: webhook.KindRefused, Probe: true, Err: failed}, outcomeFailure},
		{webhook.Attempt{Kind: webhook.KindTimeout, Err: failed}, outcomeFailure},
		{webhook.Attempt{Kind: webhook.KindDown, Err: failed}, outcomeNone},
		{webhook.Attempt{Kind: webhook.KindCanceled, Err: failed}, outcomeNone},
		{webhook.Attempt{Kind: webhook.KindBlocked, Err: failed}, outcomeNone},
	} {
		assert.Equal(t, tc.want, outcomeOf(tc.a), "%s %d", tc.a.Kind, tc.a.StatusCode)
	}
}

func TestLifePolicy_RefusesANegativeField(t *testing.T) {
	_, err := (&LifePolicy{KeepFor: -time.Second}).withDefaults()
	assert.ErrorContains(t, err, "KeepFor")
}

// TestWorker_StatesAreReadOnceASecondForEveryConnection: the runs of a
// thousand connections read the states in one statement, not one a
// connection, and a connection the read does not name is active; the
// statement reads only the connections not active.
func TestWorker_StatesAreReadOnceASecondForEveryConnection(t *testing.T) {
	pool, schema := testdb.Schema(t, "states", true)
	ctx := context.Background()
	require.NoError(t, Migrate(ctx, pool, schema))
	_, err := pool.Exec(ctx, `INSERT INTO `+stateTable(schema)+` (connection_id, state, reason, disabled_at) VALUES
		('gone', 'disabled', 'gone', now()), ('quiet', 'active', '', NULL)`)
	require.NoError(t, err)
	var statements int
	query := func(ctx context.Context, sql string, args ...any) interface{ Scan(...any) error } {
		statements++
		return pool.QueryRow(ctx, sql, args...)
	}
	var c stateCache
	load := func(ctx context.Context) (map[string]ConnectionState, error) { return readStates(ctx, query, schema) }
	for i := range 1000 {
		id := fmt.Sprintf("c%d", i)
		if _, fresh := c.get(id); !fresh {
			require.NoError(t, c.refresh(ctx, load))
		}
		s, fresh := c.get(id)
		require.True(t, fresh)
		assert.Equal(t, StateActive, s.State, id)
	}
	assert.Equal(t, 1, statements, "one statement for a thousand connections")
	s, _ := c.get("gone")
	assert.Equal(t, StateDisabled, s.State)
	assert.Equal(t, ReasonGone, s.Reason)
	assert.False(t, s.DisabledAt.IsZero())
	c.mu.Lock()
	assert.Len(t, c.m, 1, "only the connections not active are kept")
	c.mu.Unlock()
}

// TestStateCache_ALoadBegunBeforeAPutDoesNotUndoIt: a read of the states
// begun before the Worker wrote a connection's new state (observe's put,
// after a 410, or a first failure) must not replace it, when it ends after,
// with the state as it was before: the process would deliver to a
// connection it has just disabled, or ignore a success after a failure and
// leave the connection failing (then disabled, its span never cut).
func TestStateCache_ALoadBegunBeforeAPutDoesNotUndoIt(t *testing.T) {
	now := time.Now()
	for _, put := range []ConnectionState{
		{ConnectionID: "crm", State: StateDisabled, Reason: ReasonGone, DisabledAt: now, Changed: now},
		{ConnectionID: "crm", State: StateFailing, FailingSince: now, LastFailure: now, DisableAt: now.Add(12 * time.Hour), Changed: now},
	} {
		t.Run(string(put.State), func(t *testing.T) {
			var c stateCache
			// A first read, a second ago: the next run refreshes.
			require.NoError(t, c.refresh(context.Background(), func(context.Context) (map[string]ConnectionState, error) {
				return map[string]ConnectionState{}, nil
			}))
			c.mu.Lock()
			c.read = time.Now().Add(-2 * stateCacheFor)
			c.mu.Unlock()

			began, release := make(chan struct{}), make(chan struct{})
			done := make(chan error, 1)
			go func() { // a run's refresh: its statement read the table before the write committed
				done <- c.refresh(context.Background(), func(context.Context) (map[string]ConnectionState, error) {
					close(began)
					<-release
					return map[string]ConnectionState{}, nil // crm active, as the table was when read
				})
			}()
			<-began
			c.put("crm", put) // observe: the transition committed, then put
			close(release)
			require.NoError(t, <-done)

			s, fresh := c.get("crm")
			assert.True(t, fresh)
			assert.Equal(t, put.State, s.State, "the older read replaced the state the process had just written")
			if put.State == StateFailing {
				p, _ := (*LifePolicy)(nil).withDefaults()
				assert.True(t, p.worth(s, outcomeSuccess, time.Now()), "a success after the failure must be written (it cuts the span)")
			}
		})
	}
}

// readsCountingTx is a transaction that counts its statements reading
// River's job table.
type readsCountingTx struct {
	pgx.Tx
	reads int
}

func (tx *readsCountingTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if strings.Contains(sql, "river_job") {
		tx.reads++
	}
	return tx.Tx.QueryRow(ctx, sql, args...)
}

// TestTransition_ASpanFailingOverAMinuteReadsNoDelivery: the write of a
// failing connection's last failure, once a minute while it fails, looked
// in River's table for a delivery completed since the span began, however
// long ago: a scan of every delivery completed since, of every connection,
// under the state's row lock (283 ms at 600,000 rows, review). A success
// that a process took for no change was taken within stateCacheFor of the
// failing write, by a view read before it; it is looked for while River may
// still be completing its job, a minute, and not after.
func TestTransition_ASpanFailingOverAMinuteReadsNoDelivery(t *testing.T) {
	pool, schema := testdb.Schema(t, "unseen", true)
	ctx := context.Background()
	require.NoError(t, Migrate(ctx, pool, schema))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema})
	require.NoError(t, err)
	for _, tc := range []struct {
		failingFor string
		reads      int
	}{{"30 seconds", 1}, {"2 hours", 0}} {
		_, err := pool.Exec(ctx, `INSERT INTO `+stateTable(schema)+` (connection_id, state, failing_since, last_failure, disable_at, changed)
			VALUES ('crm', 'failing', now() - $1::interval, now() - interval '2 minutes', now() + interval '1 day', now() - $1::interval)
			ON CONFLICT (connection_id) DO UPDATE SET failing_since = EXCLUDED.failing_since, changed = EXCLUDED.changed`, tc.failingFor)
		require.NoError(t, err)
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			counting := &readsCountingTx{Tx: tx}
			_, _, err := transitionTx(ctx, client, counting, "crm", 0, func(cur ConnectionState, now time.Time) (ConnectionState, []Change) {
				cur.LastFailure = now
				return cur, nil
			})
			assert.Equal(t, tc.reads, counting.reads, "failing for %s: statements reading River's deliveries", tc.failingFor)
			return err
		}))
	}
}
