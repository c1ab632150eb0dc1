package riverhook

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook/riverhook/internal/testdb"
)

func twoProcesses(t *testing.T) (*ConnectionPlaces, *ConnectionPlaces) {
	t.Helper()
	pool, schema := testdb.Schema(t, "places", true)
	ctx := context.Background()
	require.NoError(t, Migrate(ctx, pool, schema))
	a, b := NewConnectionPlaces(pool, schema), NewConnectionPlaces(pool, schema)
	t.Cleanup(func() { a.Close(ctx); b.Close(ctx) })
	return a, b
}

// TestConnectionPlaces_TheBoundHoldsAcrossSessions: a connection's places
// are taken up to its bound whichever process takes them, each connection
// has its own, and a place given back is taken again.
func TestConnectionPlaces_TheBoundHoldsAcrossSessions(t *testing.T) {
	t.Parallel()
	a, b := twoProcesses(t)
	ctx := context.Background()
	p1, ok, err := a.take(ctx, "crm", 2)
	require.NoError(t, err)
	require.True(t, ok)
	p2, ok, err := b.take(ctx, "crm", 2)
	require.NoError(t, err)
	require.True(t, ok)
	assert.NotEqual(t, p1.n, p2.n)
	for _, p := range []*ConnectionPlaces{a, b} {
		_, ok, err = p.take(ctx, "crm", 2)
		require.NoError(t, err)
		assert.False(t, ok, "both places are held")
	}
	_, ok, err = a.take(ctx, "erp", 1)
	require.NoError(t, err)
	assert.True(t, ok, "each connection has its own")
	require.NoError(t, a.give(ctx, p1))
	a.flush() // the give's round trip, which no take of a's carried
	_, ok, err = b.take(ctx, "crm", 2)
	require.NoError(t, err)
	assert.True(t, ok, "given back: taken again, by another process")
}

// TestConnectionPlaces_AGiveRidesTheNextTake: a place given back stays
// held until a round trip carries its give: the process's next take, with
// no round trip of its own; or flush, tryEvery on, when no take comes.
func TestConnectionPlaces_AGiveRidesTheNextTake(t *testing.T) {
	t.Parallel()
	a, b := twoProcesses(t)
	a.rideFor = time.Hour // no flush but the test's
	ctx := context.Background()
	trips := func() int {
		defer a.exclusive()()
		return a.trips
	}
	p, ok, err := a.take(ctx, "crm", 1)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, a.give(ctx, p))
	_, ok, err = b.take(ctx, "crm", 1)
	require.NoError(t, err)
	assert.False(t, ok, "the give waits for a round trip")
	a.qmu.Lock()
	assert.NotNil(t, a.ride, "flush is due")
	a.qmu.Unlock()

	before := trips()
	_, ok, err = a.take(ctx, "erp", 1)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, before+1, trips(), "the give rode the take's round trip")
	_, ok, err = b.take(ctx, "crm", 1)
	require.NoError(t, err)
	assert.True(t, ok, "given back")
}

// TestConnectionPlaces_AFlushReturnsOnceTheGivesBeforeItAreMade: a flush
// that finds a round trip under way, which carries the gives queued, waits
// for it: when flush returns, every place given back before it is free.
func TestConnectionPlaces_AFlushReturnsOnceTheGivesBeforeItAreMade(t *testing.T) {
	t.Parallel()
	a, b := twoProcesses(t)
	a.rideFor = time.Hour // no flush but the test's
	ctx := context.Background()
	p, ok, err := a.take(ctx, "crm", 1)
	require.NoError(t, err)
	require.True(t, ok)
	slow := a.exclusive() // the round trip under way takes a while
	require.NoError(t, a.give(ctx, p))
	queued := func(n int) func() bool {
		return func() bool {
			a.qmu.Lock()
			defer a.qmu.Unlock()
			return a.flushing && len(a.queue) == n
		}
	}
	first := make(chan struct{})
	go func() { a.flush(); close(first) }()
	require.Eventually(t, queued(0), 10*time.Second, time.Millisecond, "the first flush took the give")
	second := make(chan struct{})
	go func() { a.flush(); close(second) }()
	require.Eventually(t, queued(1), 10*time.Second, time.Millisecond, "the second flush waits")
	slow()
	<-second
	_, ok, err = b.take(ctx, "crm", 1)
	require.NoError(t, err)
	assert.True(t, ok, "given back once a flush returned, whichever flush made it")
	<-first
}

// TestConnectionPlaces_TakeLocksOnePlace: a take holds one advisory lock,
// whatever the bound, and never takes again a place its session holds:
// also once PostgreSQL plans the statement generically (after five runs),
// when it may reorder a filter's conditions.
func TestConnectionPlaces_TakeLocksOnePlace(t *testing.T) {
	t.Parallel()
	a, _ := twoProcesses(t)
	ctx := context.Background()
	locks := func() (n int) {
		done := a.exclusive()
		pid := a.conn.PgConn().PID()
		done()
		require.NoError(t, a.pool.QueryRow(ctx, `SELECT coalesce(sum(CASE WHEN mode = 'ExclusiveLock' THEN 1 END), 0) FROM pg_locks
			WHERE locktype = 'advisory' AND granted AND pid = $1`, pid).Scan(&n))
		return n
	}
	for round := range 8 {
		var taken []place
		for range 3 {
			p, ok, err := a.take(ctx, "crm", 3)
			require.NoError(t, err)
			require.True(t, ok)
			taken = append(taken, p)
		}
		_, ok, err := a.take(ctx, "crm", 3)
		require.NoError(t, err)
		require.False(t, ok, "round %d: the session's three places are its own", round)
		assert.Equal(t, 3, locks(), "round %d", round)
		for _, p := range taken {
			require.NoError(t, a.give(ctx, p))
		}
		a.flush()
		assert.Zero(t, locks(), "round %d: every place given back frees its lock", round)
	}
}

// TestConnectionPlaces_AnEndedSessionFreesItsPlaces: a process whose
// session ends (it died, or the database ended it) frees its places at
// once; the process learns it at once too, opens a new session at its next
// take, and a place of the old one given back frees nothing of the new
// one's.
func TestConnectionPlaces_AnEndedSessionFreesItsPlaces(t *testing.T) {
	t.Parallel()
	a, b := twoProcesses(t)
	ctx := context.Background()
	old, ok, err := a.take(ctx, "crm", 1)
	require.NoError(t, err)
	require.True(t, ok)
	_, ok, err = b.take(ctx, "crm", 1)
	require.NoError(t, err)
	require.False(t, ok)
	done := a.exclusive()
	pid := a.conn.PgConn().PID()
	done()
	var ended bool
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT pg_terminate_backend($1, 10000)`, pid).Scan(&ended))
	require.True(t, ended)
	theirs, ok, err := b.take(ctx, "crm", 1)
	require.NoError(t, err)
	require.True(t, ok, "free the moment the session ended")
	require.NoError(t, b.give(ctx, theirs))
	b.flush()

	select {
	case <-old.session.Done(): // the watch read the database's word
	case <-time.After(10 * time.Second):
		t.Fatal("the process did not learn that its session ended")
	}
	mine, ok, err := a.take(ctx, "crm", 1)
	require.NoError(t, err, "a new session")
	require.True(t, ok)
	require.NoError(t, a.give(ctx, old), "a place of the ended session")
	a.flush()
	_, ok, err = b.take(ctx, "crm", 1)
	require.NoError(t, err)
	assert.False(t, ok, "giving back the old place freed nothing of the new session's")
	require.NoError(t, a.give(ctx, mine))
}

// TestConnectionPlaces_TheSearchPathsSchemaIsTheNamedOne: a process
// given "" for the schema its pool's search path makes riverhook's, and
// one given that schema's name, share riverhook_pace, and so must share a
// connection's places: otherwise each holds the bound on its own, and a
// rollout that names the schema doubles the bound across the fleet.
func TestConnectionPlaces_TheSearchPathsSchemaIsTheNamedOne(t *testing.T) {
	t.Parallel()
	pool, schema := testdb.Schema(t, "places", true)
	ctx := context.Background()
	require.NoError(t, Migrate(ctx, pool, schema))
	config, err := pgxpool.ParseConfig(testdb.URL(t))
	require.NoError(t, err)
	config.ConnConfig.RuntimeParams["search_path"] = schema
	byPath, err := pgxpool.NewWithConfig(ctx, config)
	require.NoError(t, err)
	t.Cleanup(byPath.Close)
	named, unnamed := NewConnectionPlaces(pool, schema), NewConnectionPlaces(byPath, "")
	t.Cleanup(func() { named.Close(ctx); unnamed.Close(ctx) })
	_, _, _, err = unnamed.start(ctx, "crm", time.Hour, 0, 0)
	require.NoError(t, err)
	_, _, ok, err := named.start(ctx, "crm", time.Hour, 0, 0)
	require.NoError(t, err)
	require.False(t, ok, "one riverhook_pace: the start is taken")
	_, ok, err = named.take(ctx, "crm", 1)
	require.NoError(t, err)
	require.True(t, ok)
	_, ok, err = unnamed.take(ctx, "crm", 1)
	require.NoError(t, err)
	assert.False(t, ok, "the connection's one place is held: by the process that named the schema")
}

// TestConnectionPlaces_OneStartEachEveryAcrossTheFleet: many workers of
// two processes taking a connection's start at once: one start each
// 1/rate; and a faster rate takes effect at the next start.
func TestConnectionPlaces_OneStartEachEveryAcrossTheFleet(t *testing.T) {
	t.Parallel()
	a, b := twoProcesses(t)
	ctx := context.Background()
	var started atomic.Int32
	var wg sync.WaitGroup
	for i := range 20 {
		p := a
		if i%2 == 1 {
			p = b
		}
		wg.Go(func() {
			_, _, ok, err := p.start(ctx, "hr", time.Hour, 0, 0)
			if assert.NoError(t, err) && ok {
				started.Add(1)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int32(1), started.Load(), "one start in an hour at 1 an hour")
	_, _, ok, err := a.start(ctx, "hr", time.Hour, time.Minute, 0)
	require.NoError(t, err)
	assert.False(t, ok, "the next start is an hour on")
	wait, _, ok, err := b.start(ctx, "hr", time.Microsecond, 0, 0)
	require.NoError(t, err)
	assert.True(t, ok, "a raised rate: its next start comes at once, not after the old period")
	assert.Zero(t, wait)
	wait, _, ok, err = a.start(ctx, "hr", time.Hour, 2*time.Hour, 0)
	require.NoError(t, err)
	require.True(t, ok, "taken ahead")
	assert.InDelta(t, time.Hour, wait, float64(time.Minute), "an hour after the last start")
	_, _, ok, err = b.start(ctx, "hr", time.Hour, 90*time.Minute, 0)
	require.NoError(t, err)
	assert.False(t, ok, "the start after the one taken ahead is two hours on")
}

// TestConnectionPlaces_OneChainForTheFleet: slots handed by two processes
// are one chain, a spacing apart on the database's clock; behind claims a
// chain handed slower than the endpoint's pace once, and rechain sets where
// it goes on.
func TestConnectionPlaces_OneChainForTheFleet(t *testing.T) {
	t.Parallel()
	a, b := twoProcesses(t)
	ctx := context.Background()
	var waits []time.Duration
	for i := range 6 {
		p := a
		if i%2 == 1 {
			p = b
		}
		wait, err := p.slot(ctx, "crm", time.Minute, time.Minute)
		require.NoError(t, err)
		waits = append(waits, wait)
	}
	// A wait is counted from its own statement: a minute apart, less the
	// time between the statements, which a loaded machine can stretch to
	// seconds but never to the 20 s allowed.
	for i := 1; i < len(waits); i++ {
		assert.InDelta(t, time.Minute, waits[i]-waits[i-1], float64(20*time.Second), "slot %d is a minute after slot %d", i, i-1)
	}
	behind, err := a.behind(ctx, "crm", time.Minute)
	require.NoError(t, err)
	assert.False(t, behind, "handed at the endpoint's pace")
	behind, err = a.behind(ctx, "crm", time.Second)
	require.NoError(t, err)
	assert.True(t, behind, "handed a minute apart, the endpoint takes one a second")
	behind, err = b.behind(ctx, "crm", time.Second)
	require.NoError(t, err)
	assert.False(t, behind, "claimed once, by one process")
	require.NoError(t, a.rechain(ctx, "crm", 10*time.Second, time.Second))
	wait, err := b.slot(ctx, "crm", time.Second, time.Second)
	require.NoError(t, err)
	assert.InDelta(t, 11*time.Second, wait, float64(5*time.Second), "after the moved jobs")
}

// TestConnectionPlaces_PaceOutlivesItsRow: a connection's pace row lost
// (a failover, rows pruned) is made again by the next start or slot.
func TestConnectionPlaces_PaceOutlivesItsRow(t *testing.T) {
	t.Parallel()
	a, _ := twoProcesses(t)
	ctx := context.Background()
	_, _, _, err := a.start(ctx, "crm", time.Hour, 0, 0)
	require.NoError(t, err)
	_, err = a.pool.Exec(ctx, `DELETE FROM `+a.pace)
	require.NoError(t, err)
	wait, _, ok, err := a.start(ctx, "crm", time.Hour, 0, 0)
	require.NoError(t, err)
	assert.True(t, ok, "the first start of the row made again")
	assert.Zero(t, wait)
	wait, err = a.slot(ctx, "erp", time.Hour, time.Hour)
	require.NoError(t, err)
	assert.Greater(t, wait, 59*time.Minute)
}

// TestConnectionPlaces_Prune: the pace rows whose chain is past and last
// start a year past go; a row with a slot to come, or a start within a
// year, stays.
func TestConnectionPlaces_Prune(t *testing.T) {
	t.Parallel()
	a, _ := twoProcesses(t)
	ctx := context.Background()
	_, _, _, err := a.start(ctx, "crm", time.Millisecond, 0, 0)
	require.NoError(t, err)
	_, err = a.pool.Exec(ctx, `UPDATE `+a.pace+` SET last_start = last_start - interval '366 days'`)
	require.NoError(t, err) // a start over a year ago: no rate needs it
	_, _, _, err = a.start(ctx, "erp", time.Millisecond, 0, 0)
	require.NoError(t, err)
	_, err = a.slot(ctx, "ops", time.Hour, time.Hour)
	require.NoError(t, err)
	pruned, err := a.Prune(ctx, time.Now().Add(time.Minute))
	require.NoError(t, err)
	assert.Equal(t, int64(1), pruned, "crm's, all past a minute on")
	rows, err := a.pool.Query(ctx, `SELECT connection_id FROM `+a.pace)
	require.NoError(t, err)
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"erp", "ops"}, left, "a start a rate may need, a slot to come")
}

// TestConnectionPlaces_CallsAtOnceShareARoundTrip: takes and gives made at
// once, of several connections and bounds, share round trips, and each
// connection's places are taken once each, never past its bound.
func TestConnectionPlaces_CallsAtOnceShareARoundTrip(t *testing.T) {
	t.Parallel()
	a, b := twoProcesses(t)
	ctx := context.Background()
	connections := []string{"crm", "erp", "hr", "ops"}
	const calls = 96
	var mu sync.Mutex
	held := map[string]map[int]bool{}
	var taken []place
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			id, bound := connections[i%4], 8
			if i%8 == 0 {
				bound = 6 // as a second Worker of the process might ask
			}
			p, ok, err := a.take(ctx, id, bound)
			if !assert.NoError(t, err) || !ok {
				return
			}
			assert.Less(t, p.n, 8)
			mu.Lock()
			defer mu.Unlock()
			if held[id] == nil {
				held[id] = map[int]bool{}
			}
			assert.False(t, held[id][p.n], "place %d of %s taken twice", p.n, id)
			held[id][p.n] = true
			taken = append(taken, p)
		})
	}
	wg.Wait()
	for _, id := range connections {
		assert.Len(t, held[id], 8, "%s: its places were free, each taken once", id)
		_, ok, err := b.take(ctx, id, 8)
		require.NoError(t, err)
		assert.False(t, ok, "%s: all held", id)
	}
	done := a.exclusive()
	trips := a.trips
	done()
	t.Logf("%d takes in %d round trips", calls, trips)
	assert.Less(t, trips, calls, "takes made at once share round trips")

	for _, p := range taken {
		wg.Go(func() { assert.NoError(t, a.give(ctx, p)) })
	}
	wg.Wait()
	a.flush()
	for _, id := range connections {
		for range 8 {
			_, ok, err := b.take(ctx, id, 8)
			require.NoError(t, err)
			assert.True(t, ok, "%s: every place free again", id)
		}
	}
}

// TestConnectionPlaces_AStartIsTakenOnceItsRowIsFree: a start whose
// statement waited for the connection's row (another process's start not
// yet committed, a slow commit) is taken when it gets the row, not when
// its statement began: its run starts after the wait, and a start stored
// as the wait earlier lets the next one come the wait less than every
// after it.
func TestConnectionPlaces_AStartIsTakenOnceItsRowIsFree(t *testing.T) {
	t.Parallel()
	a, b := twoProcesses(t)
	ctx := context.Background()
	const every = time.Hour
	_, _, ok, err := a.start(ctx, "crm", every, 0, 0)
	require.NoError(t, err)
	require.True(t, ok)
	_, err = a.pool.Exec(ctx, `UPDATE `+a.pace+` SET last_start = last_start - interval '2 hours'`)
	require.NoError(t, err) // the last start two hours ago: the next one is now

	blocker, err := a.pool.Begin(ctx)
	require.NoError(t, err)
	defer blocker.Rollback(ctx)
	_, err = blocker.Exec(ctx, `SELECT 1 FROM `+a.pace+` WHERE connection_id = 'crm' FOR UPDATE`)
	require.NoError(t, err)
	type started struct {
		wait time.Duration
		ok   bool
		err  error
	}
	done := make(chan started, 1)
	go func() {
		wait, _, ok, err := b.start(ctx, "crm", every, 0, 0)
		done <- started{wait, ok, err}
	}()
	require.Eventually(t, func() bool {
		var waiting bool
		err := a.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND $1::int = ANY(pg_blocking_pids(pid)))`,
			blocker.Conn().PgConn().PID()).Scan(&waiting)
		return err == nil && waiting
	}, 10*time.Second, 5*time.Millisecond, "the start waits for the row")
	var freed time.Time
	require.NoError(t, blocker.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&freed))
	require.NoError(t, blocker.Commit(ctx))
	got := <-done
	require.NoError(t, got.err)
	require.True(t, got.ok, "the start is now")
	assert.Zero(t, got.wait)
	var last time.Time
	require.NoError(t, a.pool.QueryRow(ctx, `SELECT last_start FROM `+a.pace+` WHERE connection_id = 'crm'`).Scan(&last))
	assert.False(t, last.Before(freed), "the start is stored %v before its row was free", freed.Sub(last))
}

// TestConnectionPlaces_AConnectionIDTheInsertTakesIsPaced: a connection id
// the insert accepts is one a fleet can pace. riverhook_pace is keyed by
// the id, and PostgreSQL's btree refuses an entry over a third of a page
// (about 2.7 kB): a rate-limited delivery to such an id would never be
// admitted, snoozing SnoozeFor at each run for ever, with nothing but a
// warning in the process's log. Either the insert refuses the id, saying
// why, or the run is admitted.
func TestConnectionPlaces_AConnectionIDTheInsertTakesIsPaced(t *testing.T) {
	t.Parallel()
	mine, _ := twoProcesses(t)
	var id strings.Builder // 3,200 bytes PostgreSQL cannot compress
	sum := sha256.Sum256([]byte("crm"))
	for range 50 {
		sum = sha256.Sum256(sum[:])
		id.WriteString(hex.EncodeToString(sum[:]))
	}
	if _, err := InsertBytesParams("d1", []string{id.String()}, "deal.closed", []byte(`{}`), nil); err != nil {
		assert.ErrorContains(t, err, "connection id")
		return
	}
	a, _ := testAdmission(mine)
	job := crmJob(time.Now(), 1, false)
	job.Args.ConnectionID = id.String()
	tk, wait := a.enter(context.Background(), job, limits{bound: 1, every: 100 * time.Millisecond})
	require.NotNil(t, tk, "the delivery the insert took is admitted, not snoozed %v at each run", wait)
	a.leave(context.Background(), tk)
}

// TestConnectionPlaces_AStartIsGivenBackOnlyIfNoneWasTakenSince: as one
// process's memory does, across two processes.
func TestConnectionPlaces_AStartIsGivenBackOnlyIfNoneWasTakenSince(t *testing.T) {
	t.Parallel()
	a, b := twoProcesses(t)
	testGiveStart(t, a)
	ctx, every := context.Background(), time.Hour
	_, mark, ok, err := a.start(ctx, "hr", every, 0, 0)
	require.NoError(t, err)
	require.True(t, ok)
	_, _, ok, err = b.start(ctx, "hr", every, 2*every, 0)
	require.NoError(t, err)
	require.True(t, ok, "another process's start, taken ahead")
	back, err := a.giveStart(ctx, "hr", mark, every, 0)
	require.NoError(t, err)
	assert.False(t, back, "a start followed by another process's is not given back")
}
