package riverhook

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// This file holds the bound on attempts in flight to a connection across
// the processes of a deployment: the places of riverhook_place, taken and
// given back by the Worker around each attempt.

// Places holds, across every process of a deployment, what a Worker
// promises about a connection (WorkerOptions.Places): the bound of
// attempts in flight to it (MaxInFlightPerConnection), the pace of its
// deliveries (RateLimit), and the wake-up of its backlog when its endpoint
// answers again. A Worker takes one of the connection's places before its
// attempt and gives it back after, and a job that finds none free, or
// comes before the connection's next start, is snoozed to a slot, as over
// the bound in one process. *ConnectionPlaces is the PostgreSQL one.
type Places interface {
	// Take takes one of connectionID's bound places for the hold numbered
	// holder until hold has passed, and reports which; ok is false when all
	// are held. The Worker numbers each hold anew (not by River's job id),
	// so that an ended hold is never taken for a later one.
	Take(ctx context.Context, connectionID string, bound int, holder int64, hold time.Duration) (place int, ok bool, err error)

	// Give gives back place, if the hold numbered holder still has it.
	Give(ctx context.Context, connectionID string, place int, holder int64) error

	// Keep passes place from the hold numbered holder to one numbered
	// newHolder, held for hold from now, and reports whether it did: ok is
	// false when holder no longer has it (its hold ended). A Worker keeps
	// a place it hands from a run whose attempt ended to one holding on
	// for it in the process, when what is left of its hold might not
	// cover the new run.
	Keep(ctx context.Context, connectionID string, place int, holder, newHolder int64, hold time.Duration) (ok bool, err error)

	// Pace takes connectionID's next start at perSecond deliveries a
	// second: zero when a delivery may begin now (the start is then
	// taken), or how long until the connection's next start is free.
	Pace(ctx context.Context, connectionID string, perSecond float64) (wait time.Duration, err error)

	// Wake makes connectionID's deliveries that are waiting (snoozed for
	// its endpoint or its bound) run from now on, one each every, but
	// never later than each was due; it returns how many it moved. A
	// delivery that has not run yet, scheduled for later by its insert
	// (InsertOpts.ScheduledAt), keeps its time.
	Wake(ctx context.Context, connectionID string, every time.Duration) (int, error)

	// Slot hands a job waiting for connectionID (over its bound, or early
	// for its rate) the connection's next slot, spacing after the last one
	// handed by any process, and returns how long until it: the fleet's
	// waiting jobs of a connection wake one per spacing, however many
	// processes snooze them.
	Slot(ctx context.Context, connectionID string, spacing time.Duration) (time.Duration, error)

	// Due makes the deliveries whose snooze or retry ends within ahead
	// ready to run at their time, so that they run on time rather than at
	// River's next scheduler pass (every 5 s).
	Due(ctx context.Context, ahead time.Duration) (int, error)
}

// ConnectionPlaces is the [Places] of a deployment in its PostgreSQL: the
// tables riverhook_place, a row per place of a connection, and
// riverhook_pace, a row per connection with a rate limit, made by
// [Migrate]. River has no bound or rate across processes in its
// open-source edition, so riverhook keeps these tables for them.
//
// A place is held until its attempt has ended or, should the process die
// first, until its hold has passed: the Worker holds for its Timeout (the
// attempt timeout and 10 s) and 20 s more, the most a process that died
// keeps a place (a minute with the default Sender). An attempt that takes a
// place costs a share of two statements: an UPDATE that takes the first
// free place (FOR UPDATE SKIP LOCKED, so that processes taking at once do
// not wait on each other) and one that gives it back. The Takes a process
// makes while one of its Takes runs share the next statement, up to 64 (as
// do its Gives), so that a busy Worker makes one statement of many
// attempts' Takes; a Take that has waited 5 ms behind a statement that is
// slow runs the waiting ones in a statement of their own, up to 4 at once.
// A call waits for the statements ahead of it and its own, each bounded by
// 10 s whatever the call's context. A place freed while a
// run of the same connection holds on for one in the process is handed to
// it at no statement, or at one (Keep) when what is left of its hold might
// not cover the new run, once per 20 s of a busy connection. A
// connection's rows are
// made by a process when it first delivers to it, and again after ten
// minutes, or when it finds every place held a minute after making them
// (rows lost to a restore are made again). A connection with a rate limit costs one
// statement more per delivery (and one SELECT when it must wait), on its
// one row, which that statement makes when it is missing (an upsert): its
// deliveries begin at most perSecond a second across the fleet, spaced
// evenly (no burst). A job that must wait costs one upsert for its slot,
// on the same row. Wake is one UPDATE of River's jobs, once per outage; Due
// one per process a second while it works deliveries. It is safe for
// concurrent use.
type ConnectionPlaces struct {
	db      DB
	schema  string
	table   string
	pace    string
	mu      sync.Mutex
	ensured map[string]ensured // connection id -> the places its rows were made for, and when
	swept   time.Time          // the last sweep of ensured
	now     func() time.Time   // tests move it
	takes   batcher[takeReq, int]
	gives   batcher[giveReq, struct{}]
}

// NewConnectionPlaces returns the places in schema ("" for the search
// path) through db, a pool.
func NewConnectionPlaces(db DB, schema string) *ConnectionPlaces {
	p := &ConnectionPlaces{db: db, schema: schema, table: qualifier(schema) + "riverhook_place",
		pace: qualifier(schema) + "riverhook_pace", ensured: map[string]ensured{}, now: time.Now}
	p.takes = batcher[takeReq, int]{run: p.take, max: maxBatch, lanes: batchLanes, stallAfter: batchStall}
	p.gives = batcher[giveReq, struct{}]{run: p.give, max: maxBatch, lanes: batchLanes, stallAfter: batchStall}
	return p
}

// maxBatch is the most Takes, or Gives, one statement carries;
// batchLanes how many such statements a process runs at once; batchStall
// how long a call waits behind a running one before it opens another lane
// (a statement on the places takes a millisecond or two).
const (
	maxBatch   = 64
	batchLanes = 4
	batchStall = 5 * time.Millisecond
)

// Take takes the first free place of connectionID's bound for holder, held
// for hold. Takes made at once in a process share one statement.
func (p *ConnectionPlaces) Take(ctx context.Context, connectionID string, bound int, holder int64, hold time.Duration) (int, bool, error) {
	if err := p.ensure(ctx, connectionID, bound); err != nil {
		return 0, false, err
	}
	place, err := p.takes.do(ctx, takeReq{connectionID, bound, holder, hold.Microseconds()})
	if err != nil {
		return 0, false, fmt.Errorf("riverhook: taking a place for connection %q: %w", connectionID, err)
	}
	if place < 0 {
		// Every place held, or the rows gone (a table restored or pruned,
		// a failover): made again at the next Take, a minute after they
		// were last made, so that a connection never stays full for want
		// of its rows.
		p.mu.Lock()
		if e := p.ensured[connectionID]; p.now().Sub(e.at) >= time.Minute {
			delete(p.ensured, connectionID)
		}
		p.mu.Unlock()
		return 0, false, nil
	}
	return place, true, nil
}

// takeReq is a Take's request; its result is the place, or -1 for none.
type takeReq struct {
	connectionID string
	bound        int
	holder       int64
	holdMicros   int64
}

// take takes a place for each of reqs in one statement: for each
// connection (and bound and hold) of reqs, as many of its first free
// places as it has requests, handed in their order. The places are locked
// FOR UPDATE SKIP LOCKED, so that processes taking at once never wait on
// each other. A statement takes one group of places per connection: the
// groups of a statement may all pick their places before it updates any
// (PostgreSQL's plan decides), and two groups of a connection would pick
// the same. Requests of a connection that differ in bound or hold are
// taken by a statement each, in one transaction.
func (p *ConnectionPlaces) take(ctx context.Context, reqs []takeReq) ([]int, error) {
	type group struct {
		connectionID string
		bound        int
		holdMicros   int64
	}
	statement := map[group]int{} // the statement of a group
	groups := map[string]int{}   // a connection's groups
	var statements [][]int       // the indexes of reqs each statement takes
	for i, r := range reqs {
		g := group{r.connectionID, r.bound, r.holdMicros}
		n, ok := statement[g]
		if !ok {
			n = groups[r.connectionID]
			groups[r.connectionID]++
			statement[g] = n
		}
		if n == len(statements) {
			statements = append(statements, nil)
		}
		statements[n] = append(statements[n], i)
	}
	places := make([]int, len(reqs))
	if len(statements) == 1 {
		return places, p.takeIn(ctx, p.db, reqs, statements[0], places)
	}
	tx, err := p.db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // after Commit, a no-op
	for _, idx := range statements {
		if err := p.takeIn(ctx, tx, reqs, idx, places); err != nil {
			return nil, err
		}
	}
	return places, tx.Commit(ctx)
}

// takeIn takes, in one statement through q, a place for each request of
// reqs indexed by idx (one group per connection), and sets places.
func (p *ConnectionPlaces) takeIn(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, reqs []takeReq, idx []int, places []int) error {
	ids := make([]string, len(idx))
	bounds := make([]int32, len(idx))
	holders := make([]int64, len(idx))
	holds := make([]int64, len(idx))
	for j, i := range idx {
		r := reqs[i]
		ids[j], bounds[j], holders[j], holds[j] = r.connectionID, int32(min(r.bound, math.MaxInt32)), r.holder, r.holdMicros
		places[i] = -1
	}
	rows, err := q.Query(ctx, `WITH wanted AS (
			SELECT connection_id, bound, hold, array_agg(holder ORDER BY i) AS holders, array_agg(i ORDER BY i) AS idx
			FROM unnest($1::text[], $2::int[], $3::bigint[], $4::bigint[]) WITH ORDINALITY AS r(connection_id, bound, holder, hold, i)
			GROUP BY connection_id, bound, hold
		), free AS (
			SELECT w.connection_id, f.place, w.holders[f.n] AS holder, w.idx[f.n] AS i, w.hold
			FROM wanted AS w, LATERAL (
				SELECT place, row_number() OVER (ORDER BY place) AS n FROM (
					SELECT place FROM `+p.table+`
					WHERE connection_id = w.connection_id AND place < w.bound AND until < clock_timestamp()
					ORDER BY place LIMIT cardinality(w.holders) FOR UPDATE SKIP LOCKED) AS s
			) AS f
		)
		UPDATE `+p.table+` AS p SET holder = free.holder, until = clock_timestamp() + free.hold * interval '1 microsecond'
		FROM free WHERE p.connection_id = free.connection_id AND p.place = free.place
		RETURNING free.i, p.place`, ids, bounds, holders, holds)
	if err != nil {
		return err
	}
	var i int64
	var place int
	_, err = pgx.ForEachRow(rows, []any{&i, &place}, func() error {
		if i < 1 || int(i) > len(idx) {
			return fmt.Errorf("a place taken for request %d of %d", i, len(idx))
		}
		places[idx[i-1]] = place
		return nil
	})
	return err
}

// ensured is when a connection's place rows were made, and for which bound.
type ensured struct {
	bound int
	at    time.Time
}

// ensureAgain is how long a connection's place rows are taken as made: a
// connection not delivered to for that long is forgotten (and its rows
// made again, at no cost but a statement, when it comes back), so that
// what a process keeps follows the connections it delivers to now.
const ensureAgain = 10 * time.Minute

// Give gives back place of connectionID, if holder still has it. Gives
// made at once in a process share one statement.
func (p *ConnectionPlaces) Give(ctx context.Context, connectionID string, place int, holder int64) error {
	if _, err := p.gives.do(ctx, giveReq{connectionID, place, holder}); err != nil {
		return fmt.Errorf("riverhook: giving back a place of connection %q: %w", connectionID, err)
	}
	return nil
}

// giveReq is a Give's request.
type giveReq struct {
	connectionID string
	place        int
	holder       int64
}

// give gives back the places of reqs in one statement.
func (p *ConnectionPlaces) give(ctx context.Context, reqs []giveReq) ([]struct{}, error) {
	ids := make([]string, len(reqs))
	places := make([]int32, len(reqs))
	holders := make([]int64, len(reqs))
	for i, r := range reqs {
		ids[i], places[i], holders[i] = r.connectionID, int32(min(r.place, math.MaxInt32)), r.holder
	}
	_, err := p.db.Exec(ctx, `UPDATE `+p.table+` AS p SET until = '-infinity'
		FROM unnest($1::text[], $2::int[], $3::bigint[]) AS g(connection_id, place, holder)
		WHERE p.connection_id = g.connection_id AND p.place = g.place AND p.holder = g.holder`, ids, places, holders)
	if err != nil {
		return nil, err
	}
	return make([]struct{}, len(reqs)), nil
}

// Keep passes place of connectionID from holder to newHolder, held for
// hold.
func (p *ConnectionPlaces) Keep(ctx context.Context, connectionID string, place int, holder, newHolder int64, hold time.Duration) (bool, error) {
	tag, err := p.db.Exec(ctx, `UPDATE `+p.table+` SET holder = $4, until = clock_timestamp() + $5 * interval '1 microsecond'
		WHERE connection_id = $1 AND place = $2 AND holder = $3 AND until > clock_timestamp()`,
		connectionID, place, holder, newHolder, hold.Microseconds())
	if err != nil {
		return false, fmt.Errorf("riverhook: keeping a place of connection %q: %w", connectionID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// ensure makes the rows of connectionID's bound places, once per process.
func (p *ConnectionPlaces) ensure(ctx context.Context, connectionID string, bound int) error {
	p.mu.Lock()
	now := p.now()
	e, ok := p.ensured[connectionID]
	done := ok && e.bound >= bound && now.Sub(e.at) < ensureAgain
	if now.Sub(p.swept) >= time.Minute {
		p.swept = now
		for id, e := range p.ensured {
			if now.Sub(e.at) >= ensureAgain {
				delete(p.ensured, id)
			}
		}
	}
	p.mu.Unlock()
	if done {
		return nil
	}
	if _, err := p.db.Exec(ctx, `INSERT INTO `+p.table+` (connection_id, place) SELECT $1, g FROM generate_series(0, $2 - 1) AS g
		ON CONFLICT DO NOTHING`, connectionID, bound); err != nil {
		return fmt.Errorf("riverhook: making the places of connection %q: %w", connectionID, err)
	}
	p.mu.Lock()
	p.ensured[connectionID] = ensured{bound: bound, at: now}
	p.mu.Unlock()
	return nil
}

// Pace takes connectionID's next start at perSecond, or says how long
// until it is free.
func (p *ConnectionPlaces) Pace(ctx context.Context, connectionID string, perSecond float64) (time.Duration, error) {
	every := paceEvery(perSecond)
	if every <= 0 {
		return 0, nil
	}
	// The start is now's when the connection's next start has come: the
	// one after is then every later, so that starts are every apart
	// however many processes take them. The row is made by the first
	// start, and made again should it be lost (a failover, a prune).
	tag, err := p.db.Exec(ctx, `INSERT INTO `+p.pace+` AS p (connection_id, next) VALUES ($1, clock_timestamp() + $2 * interval '1 microsecond')
		ON CONFLICT (connection_id) DO UPDATE SET next = greatest(p.next, clock_timestamp()) + $2 * interval '1 microsecond'
		WHERE p.next <= clock_timestamp()`, connectionID, every.Microseconds())
	if err != nil {
		return 0, fmt.Errorf("riverhook: pacing connection %q: %w", connectionID, err)
	}
	if tag.RowsAffected() == 1 {
		return 0, nil
	}
	var wait int64
	if err := p.db.QueryRow(ctx, `SELECT greatest(extract(epoch FROM next - clock_timestamp()) * 1e6, 1)::bigint FROM `+p.pace+`
		WHERE connection_id = $1`, connectionID).Scan(&wait); err != nil {
		return 0, fmt.Errorf("riverhook: pacing connection %q: %w", connectionID, err)
	}
	return time.Duration(wait) * time.Microsecond, nil
}

// Wake moves connectionID's waiting deliveries forward, every apart, and
// the connection's slots with them.
func (p *ConnectionPlaces) Wake(ctx context.Context, connectionID string, every time.Duration) (int, error) {
	n, err := p.wake(ctx, connectionID, every)
	if err != nil {
		return 0, fmt.Errorf("riverhook: waking the deliveries to connection %q: %w", connectionID, err)
	}
	return n, nil
}

// wake is Wake in one transaction, under a lock of the connection's: the
// processes that find its endpoint answering at once wake its deliveries
// one after the other, the later ones finding them in line already, rather
// than each lining up the jobs the others had not locked, from now.
func (p *ConnectionPlaces) wake(ctx context.Context, connectionID string, every time.Duration) (int, error) {
	tx, err := p.db.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // after Commit, a no-op
	h := fnv.New64a()
	h.Write([]byte("riverhook wake " + p.schema + "\x00" + connectionID))
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(h.Sum64()>>1)); err != nil {
		return 0, err
	}
	// The connection's slots go on after the last delivery waiting, as
	// it is now; from now when none waits.
	var end time.Time
	n, err := wake(ctx, tx, p.schema, connectionID, every, &end)
	if err != nil {
		return 0, err
	}
	var last *time.Time
	if !end.IsZero() {
		last = &end
	}
	if _, err := tx.Exec(ctx, `UPDATE `+p.pace+` SET slot = coalesce($2, clock_timestamp()) WHERE connection_id = $1`, connectionID, last); err != nil {
		return 0, err
	}
	return n, tx.Commit(ctx)
}

// Slot hands the connection's next waiting slot.
func (p *ConnectionPlaces) Slot(ctx context.Context, connectionID string, spacing time.Duration) (time.Duration, error) {
	var wait int64
	err := p.db.QueryRow(ctx, `INSERT INTO `+p.pace+` AS p (connection_id, slot) VALUES ($1, clock_timestamp() + $2 * interval '1 microsecond')
		ON CONFLICT (connection_id) DO UPDATE SET slot = greatest(p.slot, clock_timestamp()) + $2 * interval '1 microsecond'
		RETURNING greatest(extract(epoch FROM p.slot - clock_timestamp()) * 1e6, 0)::bigint`,
		connectionID, max(spacing, 0).Microseconds()).Scan(&wait)
	if err != nil {
		return 0, fmt.Errorf("riverhook: a slot for connection %q: %w", connectionID, err)
	}
	return time.Duration(wait) * time.Microsecond, nil
}

// Due makes the deliveries due within ahead ready at their time.
func (p *ConnectionPlaces) Due(ctx context.Context, ahead time.Duration) (int, error) {
	n, err := due(ctx, p.db, p.schema, ahead)
	if err != nil {
		return 0, fmt.Errorf("riverhook: making the deliveries due ready: %w", err)
	}
	return n, nil
}

// Prune deletes the rows of riverhook_pace whose next start and last slot
// were both before before, and returns how many: a connection whose rate
// and slots are all in the past needs no row, which its next delivery
// makes again as it would have updated it. Run it now and then, such as
// daily with a before of a day ago, beside EndpointMarks.Prune, so that
// the table follows the connections delivered to, not every connection
// that ever was. The places (riverhook_place, a row per place of a
// connection delivered to) are not pruned: a process that made a
// connection's rows counts on them, and would find the connection full for
// up to a minute before making them again.
func (p *ConnectionPlaces) Prune(ctx context.Context, before time.Time) (int64, error) {
	tag, err := p.db.Exec(ctx, `DELETE FROM `+p.pace+` WHERE next < $1 AND slot < $1`, before)
	if err != nil {
		return 0, fmt.Errorf("riverhook: pruning the connections' paces: %w", err)
	}
	return tag.RowsAffected(), nil
}

// maxPaceEvery is the slowest pace: a rate under one delivery a year
// (WorkerOptions.RateLimit) is one a year.
const maxPaceEvery = 365 * 24 * time.Hour

// paceEvery is the time between two starts at perSecond: zero for no
// rate (zero, negative, NaN or infinite), at least a microsecond, at most
// maxPaceEvery.
func paceEvery(perSecond float64) time.Duration {
	if !(perSecond > 0) || math.IsInf(perSecond, 1) {
		return 0
	}
	every := float64(time.Second) / perSecond // past int64 for a rate under one in 292 years
	if every >= float64(maxPaceEvery) {
		return maxPaceEvery
	}
	return max(time.Duration(every), time.Microsecond)
}

var _ Places = (*ConnectionPlaces)(nil)
