package riverhook

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

// holdingOn returns once n runs of connection id hold on in a.
func holdingOn(a *admission, id string, n int) {
	for {
		a.mu.Lock()
		l := a.lanes[id]
		got := l != nil && len(l.waiting) >= n
		a.mu.Unlock()
		if got {
			return
		}
		runtime.Gosched()
	}
}

// TestAdmission_APlaceOfAnEndedSessionIsNotHandedOn: a run's place whose
// session ended meanwhile was freed in the database, and another process
// may hold it: it is not handed to a run holding on, which would make an
// attempt over the fleet's bound.
func TestAdmission_APlaceOfAnEndedSessionIsNotHandedOn(t *testing.T) {
	t.Parallel()
	mine, theirs := twoProcesses(t)
	a, _ := testAdmission(mine)
	ctx, now, lim := context.Background(), time.Now(), limits{bound: 1}
	first, _ := a.enter(ctx, crmJob(now, 1, false), lim)
	require.NotNil(t, first)
	mine.mu.Lock()
	pid := mine.conn.PgConn().PID()
	mine.mu.Unlock()
	var ended bool
	require.NoError(t, theirs.pool.QueryRow(ctx, `SELECT pg_terminate_backend($1, 10000)`, pid).Scan(&ended))
	require.True(t, ended)
	other, ok, err := theirs.take(ctx, "crm", 1)
	require.NoError(t, err)
	require.True(t, ok, "the place freed with the session, taken by another process")
	_, _, err = mine.take(ctx, "crm", 1)
	require.Error(t, err, "the process finds its session ended")

	got := make(chan *ticket)
	go func() {
		tk, _ := a.enter(ctx, crmJob(now, 2, true), lim)
		got <- tk
	}()
	holdingOn(a, "crm", 1)
	a.leave(ctx, first)
	require.NoError(t, theirs.give(ctx, other)) // the place the run may take
	tk := <-got
	require.NotNil(t, tk)
	mine.mu.Lock()
	session := mine.session
	mine.mu.Unlock()
	assert.Equal(t, session, tk.place.session, "the run holds a place locked in the database, not the ended session's")
	a.leave(ctx, tk)
}

// TestAdmission_APlaceOverALoweredBoundIsNotHandedOn: once a connection's
// bound is lowered, a place over the new bound, freed, is not handed to a
// run holding on at the new bound: the connection comes down to it.
func TestAdmission_APlaceOverALoweredBoundIsNotHandedOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, _ := testAdmission(newMemoryPlaces(time.Now))
		ctx, now := context.Background(), time.Now()
		first, _ := a.enter(ctx, crmJob(now, 1, false), limits{bound: 2})
		second, _ := a.enter(ctx, crmJob(now, 2, false), limits{bound: 2})
		require.NotNil(t, first)
		require.NotNil(t, second)
		got := make(chan *ticket)
		go func() {
			tk, _ := a.enter(ctx, crmJob(now, 3, true), limits{bound: 1}) // the customer lowered the bound
			got <- tk
		}()
		synctest.Wait()
		a.leave(ctx, second)
		tk := <-got
		assert.Nil(t, tk, "one attempt in flight already: the bound of 1 is full")
		if tk != nil {
			a.leave(ctx, tk)
		}
		a.leave(ctx, first)
	})
}

// TestMemoryPlaces_ForgetsConnectionsWithNothingHeld: the process's places
// keep no memory of a connection whose places are all given back and that
// has no chain or start to keep, so that many connections over the
// process's life do not grow it.
func TestMemoryPlaces_ForgetsConnectionsWithNothingHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMemoryPlaces(time.Now)
		ctx := context.Background()
		for i := range 1000 {
			p, ok, err := m.take(ctx, fmt.Sprint("conn", i), 2)
			require.NoError(t, err)
			require.True(t, ok)
			require.NoError(t, m.give(ctx, p))
		}
		for i := range 1000 {
			wait, err := m.start(ctx, fmt.Sprint("rate", i), time.Second)
			require.NoError(t, err)
			require.Zero(t, wait)
		}
		time.Sleep(time.Hour)
		_, _, err := m.take(ctx, "last", 1)
		require.NoError(t, err)
		m.mu.Lock()
		defer m.mu.Unlock()
		assert.LessOrEqual(t, len(m.conns), 1, "only the connection holding a place")
	})
}

// TestAdmission_ForgetsIdleConnections: the admission keeps no lane of a
// connection no run has used for long, even once its attempts' time was
// learnt, so that many connections over the process's life do not grow it.
func TestAdmission_ForgetsIdleConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, _ := testAdmission(newMemoryPlaces(time.Now))
		ctx, now := context.Background(), time.Now()
		for i := range 1000 {
			job := crmJob(now, int64(i), false)
			job.Args.ConnectionID = fmt.Sprint("conn", i)
			tk, _ := a.enter(ctx, job, limits{bound: 2})
			require.NotNil(t, tk)
			a.ended(ctx, tk, webhook.Attempt{StatusCode: 200, Duration: time.Millisecond}, nil)
			a.leave(ctx, tk)
		}
		time.Sleep(24 * time.Hour)
		tk, _ := a.enter(ctx, crmJob(time.Now(), 1, false), limits{bound: 2})
		require.NotNil(t, tk)
		a.leave(ctx, tk)
		a.mu.Lock()
		defer a.mu.Unlock()
		assert.LessOrEqual(t, len(a.lanes), 1, "only the connection used lately")
	})
}

// TestConnectionPlaces_PruneKeepsAStartItsRateNeeds: Prune with a before
// of a day ago keeps the last start of a connection whose rate has its
// next start still to come, so that the rate is never passed.
func TestConnectionPlaces_PruneKeepsAStartItsRateNeeds(t *testing.T) {
	t.Parallel()
	a, _ := twoProcesses(t)
	ctx, week := context.Background(), 7*24*time.Hour
	wait, err := a.start(ctx, "crm", week) // one delivery a week
	require.NoError(t, err)
	require.Zero(t, wait)
	_, err = a.pool.Exec(ctx, `UPDATE `+a.pace+` SET last_start = last_start - interval '2 days'`)
	require.NoError(t, err) // the start was two days ago
	_, err = a.Prune(ctx, time.Now().Add(-24*time.Hour))
	require.NoError(t, err)
	wait, err = a.start(ctx, "crm", week)
	require.NoError(t, err)
	assert.Greater(t, wait, 4*24*time.Hour, "the next start is five days on")
}

// TestWake_LeavesARetryOfAProcessWhoseClockIsBehind: River stamps a
// failed run's error with its process's clock (the run's start), and its
// attempted_at with the database's; a process a little behind the
// database stamps its retries before attempted_at. The wake still takes
// them for retries, never moving one ahead of its policy's wait.
func TestWake_LeavesARetryOfAProcessWhoseClockIsBehind(t *testing.T) {
	client, pool := pinClient(t)
	ctx := context.Background()
	res, err := client.Insert(ctx, Args{ConnectionID: "crm", DeliveryID: "r", Event: "user.identified", Body: []byte("{}")}, nil)
	require.NoError(t, err)
	id := res.Job.ID
	// Fetched at the database's now; run by a process 50 ms behind it,
	// which failed and whose policy retries in 4 s (River makes a retry
	// that soon available at its time).
	_, err = pool.Exec(ctx, `UPDATE `+jobTable(client.Schema())+` SET attempted_at = now(), state = 'available',
		errors = ARRAY[jsonb_build_object('at', now() - interval '50 milliseconds', 'attempt', 1)],
		scheduled_at = now() + interval '4 seconds' WHERE id = $1`, id)
	require.NoError(t, err)
	before, err := client.JobGet(ctx, id)
	require.NoError(t, err)
	n, err := wake(ctx, poolQuery(pool), client.Schema(), "crm", time.Millisecond)
	require.NoError(t, err)
	assert.Zero(t, n, "a retry is no snooze to cut short")
	after, err := client.JobGet(ctx, id)
	require.NoError(t, err)
	assert.True(t, after.ScheduledAt.Equal(before.ScheduledAt), "its policy's time, %v, not %v", before.ScheduledAt, after.ScheduledAt)
}

// doAsFirst and doAsSecond make a call on p, closing returned when done:
// two functions, so that a goroutine's stack tells whose it is.
func doAsFirst(p *ConnectionPlaces, c *call, returned chan struct{}) {
	p.do(context.Background(), c)
	close(returned)
}

func doAsSecond(p *ConnectionPlaces, c *call, returned chan struct{}) {
	p.do(context.Background(), c)
	close(returned)
}

// inRoundTrip reports whether a goroutine started by fn is in a round
// trip of the places'.
func inRoundTrip(fn string) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "(*ConnectionPlaces).roundTrip") && strings.Contains(g, "riverhook."+fn+"(") {
			return true
		}
	}
	return false
}

// TestConnectionPlaces_ACallerReturnsOnceItsCallIsMade: the caller making
// the round trips returns once its own call is made, handing the round
// trips of the calls that came meanwhile to one of their callers: under a
// steady stream of calls it would otherwise make them for ever, its run
// held past its context, its attempt never made.
func TestConnectionPlaces_ACallerReturnsOnceItsCallIsMade(t *testing.T) {
	p := NewConnectionPlaces(nil, "")
	stale := func() *call { // a give of a place of no session: a round trip without a statement
		return &call{id: "crm", give: true, got: place{connectionID: "crm", session: 9}, done: make(chan struct{}), turn: make(chan struct{}, 1)}
	}
	queued := func(flushing bool, n int) {
		for {
			p.qmu.Lock()
			ok := p.flushing == flushing && len(p.queue) == n
			p.qmu.Unlock()
			if ok {
				return
			}
			runtime.Gosched()
		}
	}
	p.mu.Lock() // the round trips wait
	first, firstReturned := stale(), make(chan struct{})
	go doAsFirst(p, first, firstReturned)
	queued(true, 0) // its round trip under way
	second, secondReturned := stale(), make(chan struct{})
	go doAsSecond(p, second, secondReturned)
	queued(true, 1)
	p.qmu.Lock()
	p.mu.Unlock()
	<-first.done // its own call made
	p.mu.Lock()  // the next round trip waits
	p.qmu.Unlock()
	for {
		select {
		case <-firstReturned:
			p.mu.Unlock()
			<-secondReturned
			return
		default:
		}
		if inRoundTrip("doAsFirst") {
			p.mu.Unlock()
			t.Fatal("the first caller makes the second's round trip, its own call made")
		}
		runtime.Gosched()
	}
}
