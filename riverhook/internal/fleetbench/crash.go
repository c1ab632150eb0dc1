package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/signedhook/webhook/riverhook"
)

// The crash scenario's fleet, issue 43's: 2 worker processes, a bound of 4,
// an endpoint answering in 300 ms.
const (
	crashK       = 2
	crashBound   = 4
	crashLatency = 300 * time.Millisecond
)

// crash measures what a SIGKILL of one worker process costs a slow
// endpoint's backlog of -crash-n deliveries: the process holding the most
// places is killed once a quarter have arrived. From the endpoint's
// arrivals: the deliveries a second before the kill and in each second
// after it; how long until a 1 s window wholly after the kill holds 0.9x
// of what the bound allows (bound over latency); the peak in flight;
// how soon the database freed the dead process's places; and that every
// delivery arrives, the attempts the kill cut included, once River's
// rescuer has put their jobs back (Worker.RescueStuckJobsAfter).
func (b *bench) crash(ctx context.Context) (result, error) {
	n := b.cfg.CrashN
	db, err := b.newSchema(ctx, 0)
	if err != nil {
		return result{}, err
	}
	defer db.drop()
	if err := b.ep.answer(); err != nil {
		return result{}, err
	}
	b.ep.reset(crashLatency, n)
	wc := b.workerConfig(db.schema, true, b.cfg.Cooldown)
	wc.Bound = crashBound
	f, err := b.startFleet(ctx, crashK, wc)
	if err != nil {
		return result{}, err
	}
	defer f.kill()

	allows := crashBound / crashLatency.Seconds() // deliveries/s
	b.logf("crash, %d worker processes: %d deliveries to an endpoint answering in %v, bound %d; one process killed once %d arrived",
		crashK, n, crashLatency, crashBound, n/4)
	if err := insertDeliveries(ctx, db.client, "k", n, 1); err != nil {
		return result{}, err
	}
	if err := poll(ctx, time.Duration(float64(n)/allows*float64(time.Second))+time.Minute, "a quarter of the deliveries arrived", func() (bool, error) {
		return b.ep.counts().Distinct >= n/4, nil
	}); err != nil {
		return result{}, err
	}
	var victim *proc
	var held int
	if err := poll(ctx, 30*time.Second, "a worker process holds a place", func() (bool, error) {
		places, err := b.placesHeld(ctx)
		for _, p := range f {
			if h := places[appName(p.cmd.Process.Pid)]; h > held {
				victim, held = p, h
			}
		}
		return victim != nil, err
	}); err != nil {
		return result{}, err
	}
	killedAt := time.Now()
	if err := victim.cmd.Process.Kill(); err != nil { // SIGKILL
		return result{}, err
	}
	victim.kill() // waits for it
	b.logf("crash: killed worker process %d, holding %d of the %d places", victim.cmd.Process.Pid, held, crashBound)
	if err := poll(ctx, 30*time.Second, "the killed process's places freed", func() (bool, error) {
		places, err := b.placesHeld(ctx)
		return places[appName(victim.cmd.Process.Pid)] == 0, err
	}); err != nil {
		return result{}, err
	}
	freed := time.Since(killedAt)

	// River's rescuer puts back the jobs the dead process was running once
	// their attempted_at is RescueStuckJobsAfter old (a minute), at its
	// next pass (every 30 s), on River's leader (which the survivor may
	// first have to become: 15 s).
	limit := 2*time.Duration(float64(n)/allows*float64(time.Second)) + 3*time.Minute
	delivered := b.ep.waitDone(ctx, limit, "crash")
	if ctx.Err() != nil {
		return result{}, context.Cause(ctx)
	}
	if delivered != nil {
		b.logf("%v", delivered)
	}
	c := b.ep.counts()
	if delivered == nil {
		if err := poll(ctx, time.Minute, "every job completed in River", func() (bool, error) {
			t, err := tallyJobs(ctx, db.client, riverhook.Kind)
			return t.Completed == n, err
		}); err != nil {
			return result{}, err
		}
	}
	survivors := slices.DeleteFunc(slices.Clone(f), func(p *proc) bool { return p == victim })
	if _, err := survivors.stop(ctx); err != nil {
		return result{}, err
	}
	t, err := tallyJobs(ctx, db.client, riverhook.Kind)
	if err != nil {
		return result{}, err
	}

	arrivals := slices.SortedFunc(func(yield func(time.Time) bool) {
		for _, at := range b.ep.arrivals() {
			if !yield(at) {
				return
			}
		}
	}, time.Time.Compare)
	const window = time.Second
	need := int(math.Ceil(0.9*allows*window.Seconds() - 1e-9))
	back, isBack := backWithin(arrivals, killedAt, need, window)
	if !isBack && len(arrivals) > 0 {
		back = arrivals[len(arrivals)-1].Sub(killedAt) // at least
	}
	var before float64 // deliveries/s over the 2 s before the kill
	for _, s := range perSecond(arrivals, killedAt.Add(-2*time.Second), 2) {
		before += float64(s) / 2
	}
	seconds := perSecond(arrivals, killedAt, 10)
	var after int
	for _, s := range seconds {
		after += s
	}
	lost := n - c.Answered
	all := c.LastDone.Sub(killedAt)
	r := result{
		Name: fmt.Sprintf("crash-%d", crashK), N: n,
		Metrics: []metric{
			{before, "deliveries/s-before"},
			{back.Seconds(), "s-to-0.9x"},
			{float64(after) / 10 / allows, "x-bound/latency-10s-after"},
			{float64(c.Peak), "peak-in-flight"},
			{float64(freed.Milliseconds()), "ms-places-freed"},
			{float64(c.Cut), "cut"},
			{float64(t.Errors), "rescued"},
			{float64(lost), "lost"},
			{all.Seconds(), "s-to-all-delivered"},
			{float64(t.Runs) / float64(n), "runs/delivery"},
		},
		// The dead process's count of runs died with it: River's rows
		// alone count them (runs/delivery).
		sanity: sanity{Want: n, Arrived: c.Distinct, Requests: c.Requests, Resent: t.Errors, BadSig: c.BadSig, Jobs: t.Jobs, Completed: t.Completed},
	}
	backText := fmt.Sprintf("after %.1f s", back.Seconds())
	if !isBack {
		backText = fmt.Sprintf("never, to the last arrival %.1f s after it", back.Seconds())
	}
	r.Summary = fmt.Sprintf("Crash, K=%d: SIGKILL of a process holding %d of %d places, its places freed after %d ms; %.1f deliveries/s over the 2 s before, per second after: %s; back at >= 0.9x of the %.1f/s that %d at %v allow (%d within a 1 s window) %s (target <= 10 s: %s); peak %d in flight (target <= %d: %s); %d of %d delivered, %d attempts cut, %d jobs rescued by River, the last delivered %.0f s after the kill (target none lost: %s)",
		crashK, held, crashBound, freed.Milliseconds(), before, strings.Trim(fmt.Sprint(seconds), "[]"), allows, crashBound, crashLatency, need, backText,
		verdict(isBack && back <= 10*time.Second), c.Peak, crashBound, verdict(c.Peak <= crashBound), c.Answered, n, c.Cut, t.Errors, all.Seconds(), verdict(lost == 0))
	return r, nil
}

// appName is the application_name of a worker process's database
// sessions.
func appName(pid int) string { return fmt.Sprintf("fleetbench-worker-%d", pid) }

// placesHeld returns the advisory locks each process holds on the
// database, by its sessions' application_name: its places (ConnectionPlaces
// holds each as one; riverhook's other locks are a transaction's, gone
// before a process could be seen holding them).
func (b *bench) placesHeld(ctx context.Context) (map[string]int, error) {
	rows, err := b.pool.Query(ctx, `SELECT a.application_name, count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND a.datname = current_database() GROUP BY a.application_name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	held := map[string]int{}
	for rows.Next() {
		var name string
		var count int
		if err := rows.Scan(&name, &count); err != nil {
			return nil, err
		}
		held[name] = count
	}
	return held, rows.Err()
}

// poll calls cond every 10 ms until it holds or fails, for at most limit.
func poll(ctx context.Context, limit time.Duration, what string, cond func() (bool, error)) error {
	for deadline := time.Now().Add(limit); ; {
		ok, err := cond()
		if ok || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %v", what, limit)
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
}

// backWithin returns how long after from the sorted times first held need
// within a window of width wholly after from: the time of the arrival that
// completes the first such window. ok is false when none does.
func backWithin(times []time.Time, from time.Time, need int, width time.Duration) (d time.Duration, ok bool) {
	need = max(need, 1)
	first, _ := slices.BinarySearchFunc(times, from, time.Time.Compare)
	for k := first + need - 1; k < len(times); k++ {
		if times[k].Sub(times[k-need+1]) < width {
			return times[k].Sub(from), true
		}
	}
	return 0, false
}

// perSecond returns how many of the sorted times fall in each of the n
// seconds from from.
func perSecond(times []time.Time, from time.Time, n int) []int {
	counts := make([]int, n)
	for _, t := range times {
		if i := t.Sub(from) / time.Second; t.Compare(from) >= 0 && i < time.Duration(n) {
			counts[i]++
		}
	}
	return counts
}
