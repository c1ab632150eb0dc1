package riverhook

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// This file holds where the admission's shared facts live: in the
// process's memory (the default), or in PostgreSQL for a fleet.

// Places is where a Worker's admission keeps the facts that every process
// delivering to a connection must agree on: the places in flight held, the
// connection's last start (for its rate), and its chain of slots (when the
// next waiting delivery may come). The admission's algorithm is the same
// whichever Places holds them ([WorkerOptions.Places]): nil keeps them in
// the process's memory, [NewConnectionPlaces] in PostgreSQL for a fleet.
// Times are the store's own clock: the database's for a fleet.
type Places interface {
	// take takes one of connectionID's bound places; ok is false when
	// every place is held.
	take(ctx context.Context, connectionID string, bound int) (p place, ok bool, err error)
	// give gives back a place take returned. The place may stay held a
	// little after it returns (ConnectionPlaces: up to tryEvery), never
	// longer than its session.
	give(ctx context.Context, p place) error
	// start takes the connection's next start, every after its last one
	// or now if later, when that is no further than within from now, and
	// returns how long until it, and its mark for giveStart; ok is false
	// when it is further. The start after it comes room later still: the
	// room kept for this one to be used late.
	start(ctx context.Context, connectionID string, every, within, room time.Duration) (wait time.Duration, mark time.Time, ok bool, err error)
	// giveStart gives back the start of mark, taken with every and room,
	// as though it had not been taken, unless another start was taken
	// since; it reports whether it did.
	giveStart(ctx context.Context, connectionID string, mark time.Time, every, room time.Duration) (bool, error)
	// slot hands the next slot of the connection's chain, at least after
	// from now and spacing after the last slot handed, and returns how
	// long until it.
	slot(ctx context.Context, connectionID string, after, spacing time.Duration) (wait time.Duration, err error)
	// behind reports whether the connection's chain reaches past two
	// spacings from now at a spacing over a third longer than spacing,
	// and claims its rewrite at spacing when it does: one process moves
	// the waiting deliveries forward (see admission.answered).
	behind(ctx context.Context, connectionID string, spacing time.Duration) (bool, error)
	// rechain makes the chain end end from now, at spacing: the waiting
	// deliveries were moved to run before it.
	rechain(ctx context.Context, connectionID string, end, spacing time.Duration) error
}

// place is a place in flight held: its connection, its number, and the
// session of the store it was taken on, done when the session ends (nil
// for a store whose places never end): a PostgreSQL session frees its
// places when it ends, so a place of an ended session is another
// process's to take, and given back to no one.
type place struct {
	connectionID string
	n            int
	session      context.Context
}

// held reports whether p is still held in its store.
func (p place) held() bool { return p.session == nil || p.session.Err() == nil }

// memoryPlaces is the default Places: the process's memory, under its own
// lock.
type memoryPlaces struct {
	now   func() time.Time
	mu    sync.Mutex
	conns map[string]*memoryConn
	swept time.Time // the last sweep of the connections with nothing to keep
}

type memoryConn struct {
	held      []bool // place -> held
	lastStart time.Time
	every     time.Duration // the longest time between starts asked: how long lastStart is kept
	chain     time.Time     // the last slot handed
	spacing   time.Duration // the longest spacing the chain was handed at since it was last rewritten
}

func newMemoryPlaces(now func() time.Time) *memoryPlaces {
	return &memoryPlaces{now: now, conns: map[string]*memoryConn{}}
}

// sweepEvery is how often the memory's places drop the connections
// with nothing to keep.
const sweepEvery = time.Minute

// conn returns id's facts, made when needed; at most once per sweepEvery,
// it first drops every connection with nothing to keep. Under m.mu.
func (m *memoryPlaces) conn(id string) *memoryConn {
	if now := m.now(); now.Sub(m.swept) >= sweepEvery {
		for id, c := range m.conns {
			m.forget(id, c, now)
		}
		m.swept = now
	}
	c := m.conns[id]
	if c == nil {
		c = &memoryConn{}
		m.conns[id] = c
	}
	return c
}

// forget drops a connection that holds nothing of the future: no place
// held, no slot to come, and its last start every ago or more.
func (m *memoryPlaces) forget(id string, c *memoryConn, now time.Time) {
	if !slices.Contains(c.held, true) && c.chain.Before(now) && now.Sub(c.lastStart) >= c.every {
		delete(m.conns, id)
	}
}

func (m *memoryPlaces) take(_ context.Context, id string, bound int) (place, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.conn(id)
	for n := range bound {
		if n == len(c.held) {
			c.held = append(c.held, false)
		}
		if !c.held[n] {
			c.held[n] = true
			return place{connectionID: id, n: n}, true, nil
		}
	}
	return place{}, false, nil
}

func (m *memoryPlaces) give(_ context.Context, p place) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.conns[p.connectionID]; c != nil && p.n < len(c.held) {
		c.held[p.n] = false
		m.forget(p.connectionID, c, m.now())
	}
	return nil
}

func (m *memoryPlaces) start(_ context.Context, id string, every, within, room time.Duration) (time.Duration, time.Time, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, now := m.conn(id), m.now()
	c.every = max(c.every, every)
	next := later(now, c.lastStart.Add(every))
	if next.Sub(now) > within {
		return 0, time.Time{}, false, nil
	}
	c.lastStart = next.Add(room)
	return next.Sub(now), c.lastStart, true, nil
}

func (m *memoryPlaces) giveStart(_ context.Context, id string, mark time.Time, every, room time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.conns[id]
	if c == nil || !c.lastStart.Equal(mark) {
		return false, nil
	}
	c.lastStart = mark.Add(-room - every)
	return true, nil
}

func (m *memoryPlaces) slot(_ context.Context, id string, after, spacing time.Duration) (time.Duration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, now := m.conn(id), m.now()
	c.chain = later(now.Add(after), c.chain.Add(spacing))
	c.spacing = max(c.spacing, spacing)
	return c.chain.Sub(now), nil
}

func (m *memoryPlaces) behind(_ context.Context, id string, spacing time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, now := m.conn(id), m.now()
	defer m.forget(id, c, now)
	if !isBehind(c.chain.Sub(now), c.spacing, spacing) {
		return false, nil
	}
	c.spacing = spacing
	return true, nil
}

func (m *memoryPlaces) rechain(_ context.Context, id string, end, spacing time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, now := m.conn(id), m.now()
	c.chain, c.spacing = now.Add(end), spacing
	return nil
}

// isBehind is the rule of Places.behind: a chain reaching ahead past two
// spacings, handed at a spacing over a third longer than the endpoint's.
func isBehind(ahead, handed, spacing time.Duration) bool {
	return spacing > 0 && ahead > 2*spacing && handed*3 > spacing*4
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// ConnectionPlaces is the [Places] of a fleet, in its PostgreSQL.
//
// A place in flight is a session-level advisory lock, held on one
// database session of the process's own, taken out of the pool: a process
// that dies, or whose session ends, frees its places at once, and there
// is no table of places. Between statements the process reads its session,
// so that it learns at once when the database ends it (pg_terminate_backend,
// a restart): it then cuts the attempts in flight on the session's places,
// which other processes may take, and their deliveries run again. A
// process cut off from the database learns nothing: it keeps its attempts
// in flight until they end, while the database frees its places when it
// finds the session gone. riverhook sets the session's TCP keepalives so
// that this takes about 11 seconds. The session cannot sit
// behind a pooler in transaction mode (PgBouncer's), which would move it
// between server connections: point the pool at PostgreSQL, or at a
// pooler in session mode.
//
// The connection's last start and chain of slots are a row per connection
// of riverhook_pace, made by [Migrate], written by one statement each on
// the database's clock. It is safe for concurrent use.
type ConnectionPlaces struct {
	pool   *pgxpool.Pool
	schema string
	pace   string
	keyOf  string // the schema the session's place keys hash: schema, or for "" the session's current_schema()

	qmu      sync.Mutex    // guards queue, flushing and ride
	queue    []*call       // the calls waiting for the next round trip
	flushing bool          // a caller is making the round trips
	ride     *time.Timer   // makes the round trip of the gives queued when no take comes (flush)
	rideFor  time.Duration // how long a give waits for a take to ride: tryEvery; tests lengthen it

	mu      sync.Mutex              // serialises the session's statements, and the watch's reads between them
	conn    *pgx.Conn               // the session; nil until the first take, and after it ends
	session context.Context         // conn's, done when it ends
	end     context.CancelCauseFunc // ends session, with why
	watched bool                    // a watch reads the session between statements
	held    map[string][]int32      // connection id -> the places the session holds: a session takes its own lock again
	trips   int                     // round trips made, for tests

	wmu     sync.Mutex    // guards wanted, reading, cut and idle
	wanted  int           // statements waiting for the session: the watch gives it up to them
	reading net.Conn      // the session's socket while the watch reads it
	cut     bool          // a statement ended the watch's read
	idle    chan struct{} // (1) the session's statements are done: its watch may read again
}

// NewConnectionPlaces returns the places in schema ("" for the search path)
// of pool's database. The first place taken opens the process's session.
func NewConnectionPlaces(pool *pgxpool.Pool, schema string) *ConnectionPlaces {
	return &ConnectionPlaces{pool: pool, schema: schema, pace: qualifier(schema) + "riverhook_pace", held: map[string][]int32{}, rideFor: tryEvery}
}

// placeKey is the advisory lock of place n of connection id: a hash of the
// schema and the id, its low 16 bits the place's number.
func placeKey(schema, id string) int64 {
	h := fnv.New64a()
	h.Write([]byte("riverhook place " + schema + "\x00" + id))
	return int64(h.Sum64() &^ 0xffff >> 1)
}

// maxBound is the most places a connection has in a fleet.
const maxBound = 1 << 15

// session returns the session, opening it when needed. Under p.mu.
func (p *ConnectionPlaces) sessionConn(ctx context.Context) (*pgx.Conn, error) {
	if p.conn != nil {
		return p.conn, nil
	}
	c, err := p.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	conn := c.Hijack()
	// The server ends the session about 11 s after its process stops
	// answering, freeing its places.
	if _, err := conn.Exec(ctx, `SET tcp_keepalives_idle = 5; SET tcp_keepalives_interval = 2; SET tcp_keepalives_count = 3`); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	// The keys hash the schema by its name, "" being the search path's
	// (as locks.go's): a process given "" and one given the name share
	// riverhook_pace, and so a connection's places
	// (TestConnectionPlaces_TheSearchPathsSchemaIsTheNamedOne).
	p.keyOf = p.schema
	if p.schema == "" {
		if err := conn.QueryRow(ctx, `SELECT coalesce(current_schema(), '')`).Scan(&p.keyOf); err != nil {
			conn.Close(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	p.conn = conn
	p.session, p.end = context.WithCancelCause(context.Background())
	p.wmu.Lock()
	p.idle = make(chan struct{}, 1)
	p.wmu.Unlock()
	return conn, nil
}

// lost ends the session after a failed statement, or the database's word
// that it ended it, cause saying which: the places it held are freed, or
// will be, and the attempts in flight on them are cut, with cause. Under
// p.mu.
func (p *ConnectionPlaces) lost(ctx context.Context, cause error) {
	if p.conn != nil {
		p.conn.Close(context.WithoutCancel(ctx))
		p.conn = nil
		p.end(cause)
	}
	p.watched = false
	clear(p.held)
}

// watch reads conn, the session, between statements while it holds
// places: the database ends a session with a word (FATAL) before it frees
// its places, and the process ends it here on reading it, cutting the
// attempts on them. A statement takes the session from the watch (see
// exclusive); the session listens to no channel, so the read ends on no
// notification. roundTrip starts it.
func (p *ConnectionPlaces) watch(conn *pgx.Conn, session context.Context, idle <-chan struct{}) {
	for {
		p.mu.Lock()
		if p.conn != conn || len(p.held) == 0 { // ended, or nothing to cut
			if p.conn == conn {
				p.watched = false
			}
			p.mu.Unlock()
			return
		}
		p.wmu.Lock()
		if p.wanted > 0 {
			p.wmu.Unlock()
			p.mu.Unlock()
			select {
			case <-idle:
			case <-session.Done():
			}
			continue
		}
		// A statement ends the read with a deadline on the socket, which
		// pgx keeps the session through; not with a context, which a
		// pool's context watcher may answer late.
		socket := conn.PgConn().Conn()
		p.reading, p.cut = socket, false
		p.wmu.Unlock()
		err := conn.PgConn().WaitForNotification(context.Background())
		p.wmu.Lock()
		cut := p.cut
		p.reading = nil
		p.wmu.Unlock()
		socket.SetReadDeadline(time.Time{})
		// Any end but a statement's is the session's: the database's word,
		// or the socket closed.
		if !cut || conn.PgConn().IsClosed() {
			p.lost(context.Background(), fmt.Errorf("the session ended between statements: %w", err))
		}
		p.mu.Unlock()
	}
}

// exclusive takes the session's lock for a statement, ending the watch's
// read first; done gives it back.
func (p *ConnectionPlaces) exclusive() (done func()) {
	p.wmu.Lock()
	p.wanted++
	if p.reading != nil {
		p.cut = true
		p.reading.SetReadDeadline(time.Now())
		p.reading = nil
	}
	p.wmu.Unlock()
	p.mu.Lock()
	return func() {
		p.mu.Unlock()
		p.wmu.Lock()
		if p.wanted--; p.wanted == 0 {
			select {
			case p.idle <- struct{}{}: // nil before the first session: no watch waits
			default:
			}
		}
		p.wmu.Unlock()
	}
}

func (p *ConnectionPlaces) take(ctx context.Context, id string, bound int) (place, bool, error) {
	if err := ctx.Err(); err != nil {
		return place{}, false, err
	}
	c := &call{id: id, bound: min(bound, maxBound), done: make(chan struct{}), turn: make(chan struct{}, 1)}
	p.do(ctx, c)
	if c.err != nil {
		return place{}, false, fmt.Errorf("riverhook: taking a place for connection %q: %w", id, c.err)
	}
	return c.got, c.ok, nil
}

// give queues pl's give for the next round trip, and returns: a give
// rides a take's round trip, so that a busy process pays about one round
// trip per attempt, not two. When no take comes within tryEvery, flush
// makes the round trip for the gives: a run of another process holding on
// for the place tries again as often, so it waits at most one try more. It
// never fails: a round trip that fails ends the session, which frees the
// place.
func (p *ConnectionPlaces) give(_ context.Context, pl place) error {
	p.qmu.Lock()
	defer p.qmu.Unlock()
	p.queue = append(p.queue, &call{id: pl.connectionID, give: true, got: pl, done: make(chan struct{})})
	p.rideLater()
	return nil
}

// rideLater has flush make the next round trip within tryEvery, unless a
// caller makes the round trips, or a flush is due. Under p.qmu.
func (p *ConnectionPlaces) rideLater() {
	if !p.flushing && p.ride == nil {
		p.ride = time.AfterFunc(p.rideFor, p.flush)
	}
}

// flush makes the gives queued, and returns once they are made: a call
// of no statement of its own, made with the next round trip, which
// carries every give queued before it.
func (p *ConnectionPlaces) flush() {
	p.qmu.Lock()
	p.ride = nil
	p.qmu.Unlock()
	p.do(context.Background(), &call{flush: true, done: make(chan struct{}), turn: make(chan struct{}, 1)})
}

// call is a take, a give or a flush on the session, and what became of
// it.
type call struct {
	id    string
	bound int   // a take's
	give  bool  // a give, of got
	flush bool  // a flush: made with the gives queued before it
	got   place // the place taken, or given back
	ok    bool  // a place was taken
	err   error
	done  chan struct{}
	turn  chan struct{} // (1) the round trips handed to a take's or a flush's caller
}

// do makes take or flush c on the session. The calls made while a round trip is
// under way share the next one, with the gives queued: their statements go
// in one pgx batch, so that a busy process pays a round trip for many
// attempts' places. The caller that finds none under way makes the round
// trips until its own call is made, then hands them to the caller of the
// longest waiting take or flush, if any: under a steady stream of calls,
// no caller makes them for ever.
// The statements run to their end, bounded by storeTimeout, whatever the
// callers' contexts: pgx closes a connection whose statement is cancelled,
// and the session's places would go with it.
func (p *ConnectionPlaces) do(ctx context.Context, c *call) {
	p.qmu.Lock()
	p.queue = append(p.queue, c)
	if p.flushing {
		p.qmu.Unlock()
		select {
		case <-c.done:
			return
		case <-c.turn: // the round trips are this caller's now
		}
		p.qmu.Lock()
	}
	p.flushing = true
	for !isDone(c) {
		calls := p.queue
		p.queue = nil
		p.qmu.Unlock()
		p.roundTrip(ctx, calls)
		p.qmu.Lock()
	}
	p.handOn()
	p.qmu.Unlock()
}

// handOn hands the round trips to the caller of the longest waiting take
// or flush, or leaves the gives queued to flush. Under p.qmu.
func (p *ConnectionPlaces) handOn() {
	if i := slices.IndexFunc(p.queue, func(c *call) bool { return !c.give }); i >= 0 {
		p.queue[i].turn <- struct{}{} // waiting in do: a call leaves the queue only for a round trip
		return
	}
	p.flushing = false
	if len(p.queue) > 0 {
		p.rideLater()
	}
}

// isDone reports whether c was made.
func isDone(c *call) bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// roundTrip makes calls in one batch: the gives in one statement, then
// the takes of each connection in one statement each, which take as many
// places as the connection has takes. A connection's takes of another
// bound wait for the next round trip: one statement per connection keeps
// the places it takes distinct.
func (p *ConnectionPlaces) roundTrip(ctx context.Context, calls []*call) {
	ctx, cancel := detached(ctx)
	defer cancel()
	defer p.exclusive()()
	var later []*call
	defer func() {
		for _, c := range calls {
			close(c.done)
		}
		if len(later) > 0 {
			p.qmu.Lock()
			p.queue = append(later, p.queue...)
			p.qmu.Unlock()
		}
	}()
	var keys []int64
	var given []int32
	takes := map[string][]*call{}
	var order []string
	for i := 0; i < len(calls); i++ {
		c := calls[i]
		switch {
		case c.flush:
			// made with the gives before it
		case c.give && (p.conn == nil || c.got.session != p.session):
			// its session ended, and the place with it
		case c.give:
			keys, given = append(keys, placeKey(p.keyOf, c.id)), append(given, int32(c.got.n))
			p.forget(c.got)
		case len(takes[c.id]) > 0 && takes[c.id][0].bound != c.bound:
			later = append(later, c)
			calls = slices.Delete(calls, i, i+1)
			i--
		default:
			if len(takes[c.id]) == 0 {
				order = append(order, c.id)
			}
			takes[c.id] = append(takes[c.id], c)
		}
	}
	if len(keys) == 0 && len(order) == 0 {
		return
	}
	fail := func(err error) {
		p.lost(ctx, err) // the database may have ended the session, and its places with it
		for _, c := range calls {
			c.err = err
		}
	}
	conn, err := p.sessionConn(ctx)
	if err != nil {
		fail(fmt.Errorf("opening the session of the places: %w", err))
		return
	}
	p.trips++
	var b pgx.Batch
	if len(keys) > 0 {
		b.Queue(`SELECT pg_advisory_unlock(k + n) FROM unnest($1::bigint[], $2::int[]) AS g(k, n)`, keys, given)
	}
	// A Limit over a filter of a function scan stops at its count of rows
	// that pass: one lock a place. The session's own places are skipped,
	// as it would take them again; in a CASE, which PostgreSQL evaluates
	// in order: a generic plan puts the lock before a plain AND's other
	// condition (TestConnectionPlaces_TakeLocksOnePlace).
	for _, id := range order {
		b.Queue(`SELECT n FROM generate_series(0, $2::int - 1) AS n
			WHERE CASE WHEN n = ANY($3::int[]) THEN false ELSE pg_try_advisory_lock($1::bigint + n) END LIMIT $4`,
			placeKey(p.keyOf, id), takes[id][0].bound, p.held[id], len(takes[id]))
	}
	results := conn.SendBatch(ctx, &b)
	defer results.Close()
	if len(keys) > 0 {
		if _, err := results.Exec(); err != nil {
			fail(err)
			return
		}
	}
	for _, id := range order {
		rows, err := results.Query()
		if err != nil {
			fail(err)
			return
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			fail(err)
			return
		}
		for i, n := range got {
			c := takes[id][i]
			c.got, c.ok = place{connectionID: id, n: int(n), session: p.session}, true
			p.held[id] = append(p.held[id], n)
		}
	}
	if len(p.held) > 0 && !p.watched {
		p.watched = true
		go p.watch(conn, p.session, p.idle)
	}
}

// forget drops pl from the session's places. Under p.mu.
func (p *ConnectionPlaces) forget(pl place) {
	held := p.held[pl.connectionID]
	if i := slices.Index(held, int32(pl.n)); i >= 0 {
		held = slices.Delete(held, i, i+1)
	}
	if len(held) == 0 {
		delete(p.held, pl.connectionID)
	} else {
		p.held[pl.connectionID] = held
	}
}

// Close ends the process's session, freeing the places it holds and
// cutting the attempts in flight on them (logged as interrupted; they run
// again). A place taken after it opens a new one.
func (p *ConnectionPlaces) Close(ctx context.Context) {
	p.qmu.Lock()
	if p.ride != nil {
		p.ride.Stop() // the gives queued are the session's: they go with it
		p.ride = nil
	}
	p.qmu.Unlock()
	defer p.exclusive()()
	p.lost(ctx, errors.New("the places were closed"))
}

func (p *ConnectionPlaces) start(ctx context.Context, id string, every, within, room time.Duration) (time.Duration, time.Time, bool, error) {
	// The update's WHERE leaves the row, and returns none, when the next
	// start is further than within. Its now is clock_timestamp(), read
	// once the statement has the row: a statement that waited for another
	// process's start to commit starts its run after the wait
	// (TestConnectionPlaces_AStartIsTakenOnceItsRowIsFree). last_start
	// keeps the start's room after it.
	var wait int64
	var mark time.Time
	err := p.pool.QueryRow(ctx, `INSERT INTO `+p.pace+` AS p (connection_id, last_start) VALUES ($1, clock_timestamp() + $4 * interval '1 microsecond')
		ON CONFLICT (connection_id) DO UPDATE
			SET last_start = greatest(p.last_start + $2 * interval '1 microsecond', clock_timestamp()) + $4 * interval '1 microsecond'
			WHERE p.last_start + $2 * interval '1 microsecond' <= clock_timestamp() + $3 * interval '1 microsecond'
		RETURNING greatest(extract(epoch FROM p.last_start - $4 * interval '1 microsecond' - clock_timestamp()) * 1e6, 0)::bigint, p.last_start`,
		id, every.Microseconds(), max(within, 0).Microseconds(), max(room, 0).Microseconds()).Scan(&wait, &mark)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, time.Time{}, false, nil
	case err != nil:
		return 0, time.Time{}, false, fmt.Errorf("riverhook: pacing connection %q: %w", id, err)
	}
	return micros(wait), mark, true, nil
}

func (p *ConnectionPlaces) giveStart(ctx context.Context, id string, mark time.Time, every, room time.Duration) (bool, error) {
	tag, err := p.pool.Exec(ctx, `UPDATE `+p.pace+` SET last_start = last_start - $3 * interval '1 microsecond'
		WHERE connection_id = $1 AND last_start = $2`, id, mark, (max(room, 0) + every).Microseconds())
	if err != nil {
		return false, fmt.Errorf("riverhook: giving back a start of connection %q: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

func (p *ConnectionPlaces) slot(ctx context.Context, id string, after, spacing time.Duration) (time.Duration, error) {
	var wait int64
	err := p.pool.QueryRow(ctx, `INSERT INTO `+p.pace+` AS p (connection_id, chain, spacing)
			VALUES ($1, statement_timestamp() + $2 * interval '1 microsecond', $3)
		ON CONFLICT (connection_id) DO UPDATE SET
			chain = greatest(statement_timestamp() + $2 * interval '1 microsecond', p.chain + $3 * interval '1 microsecond'),
			spacing = greatest(p.spacing, $3)
		RETURNING greatest(extract(epoch FROM p.chain - statement_timestamp()) * 1e6, 0)::bigint`,
		id, max(after, 0).Microseconds(), max(spacing, 0).Microseconds()).Scan(&wait)
	if err != nil {
		return 0, fmt.Errorf("riverhook: a slot for connection %q: %w", id, err)
	}
	return micros(wait), nil
}

func (p *ConnectionPlaces) behind(ctx context.Context, id string, spacing time.Duration) (bool, error) {
	if spacing <= 0 {
		return false, nil
	}
	tag, err := p.pool.Exec(ctx, `UPDATE `+p.pace+` SET spacing = $2
		WHERE connection_id = $1 AND chain > statement_timestamp() + 2 * $2 * interval '1 microsecond' AND spacing * 3 > $2 * 4`,
		id, spacing.Microseconds())
	if err != nil {
		return false, fmt.Errorf("riverhook: reading the slots of connection %q: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

func (p *ConnectionPlaces) rechain(ctx context.Context, id string, end, spacing time.Duration) error {
	if _, err := p.pool.Exec(ctx, `UPDATE `+p.pace+` SET chain = statement_timestamp() + $2 * interval '1 microsecond', spacing = $3
		WHERE connection_id = $1`, id, end.Microseconds(), spacing.Microseconds()); err != nil {
		return fmt.Errorf("riverhook: moving the slots of connection %q: %w", id, err)
	}
	return nil
}

// Prune deletes the rows of riverhook_pace whose last slot was before
// before, and whose last start was a year before it (the slowest rate's
// time between starts, which the row does not hold), and returns how many:
// a connection with nothing ahead needs no row, which its next delivery
// makes again.
func (p *ConnectionPlaces) Prune(ctx context.Context, before time.Time) (int64, error) {
	tag, err := p.pool.Exec(ctx, `DELETE FROM `+p.pace+` WHERE chain < $1 AND last_start < $1 - $2 * interval '1 microsecond'`,
		before, maxPaceEvery.Microseconds())
	if err != nil {
		return 0, fmt.Errorf("riverhook: pruning the connections' paces: %w", err)
	}
	return tag.RowsAffected(), nil
}

// maxPaceEvery is the slowest pace: a rate under one delivery a year
// (WorkerOptions.RateLimit) is one a year.
const maxPaceEvery = 365 * 24 * time.Hour

// micros is a wait PostgreSQL counted in microseconds, saturated at the
// longest Duration: a chain of a year's spacing with 292 deliveries waiting
// is past it, and wrapped it would be a negative wait, which River's
// JobSnooze refuses with a panic.
func micros(wait int64) time.Duration {
	if wait > int64(math.MaxInt64/time.Microsecond) {
		return math.MaxInt64
	}
	return time.Duration(wait) * time.Microsecond
}

// spacings is n times spacing, saturated at the longest Duration, as
// micros.
func spacings(n int, spacing time.Duration) time.Duration {
	if n > 0 && spacing > math.MaxInt64/time.Duration(n) {
		return math.MaxInt64
	}
	return time.Duration(n) * spacing
}

// paceEvery is the time between two starts at perSecond, startRoom
// longer: zero for no rate (zero, negative, NaN or infinite), at least a
// microsecond, at most maxPaceEvery.
func paceEvery(perSecond float64) time.Duration {
	if !(perSecond > 0) || math.IsInf(perSecond, 1) {
		return 0
	}
	every := float64(time.Second) / perSecond * startRoom // past int64 for a rate under one in 292 years
	if every >= float64(maxPaceEvery) {
		return maxPaceEvery
	}
	return max(time.Duration(every), time.Microsecond)
}

// startRoom is how much longer than 1/rate starts are spaced, and
// startLate how late a run may reach its start: a start reaches the wire a
// moment after its turn (a timer, a round trip, the scheduler), a
// different moment each time. Spaced exactly 1/rate, one second in two
// held one start more than the rate (fleetbench). Spaced 2% more, the
// starts of any second leave 2% of it, 20 ms, free; a start used at most
// that late never puts one more within a second. A backlog gets 0.98 of
// its rate.
const (
	startRoom = 1.02
	startLate = time.Duration((startRoom - 1) * float64(time.Second))
)

var (
	_ Places = (*ConnectionPlaces)(nil)
	_ Places = (*memoryPlaces)(nil)
)
