package riverhook

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// This file holds the bound on attempts in flight to a connection across
// the processes of a deployment: the places of riverhook_place, taken and
// given back by the Worker around each attempt.

// Places bounds the attempts in flight to a connection across every
// process of a deployment (WorkerOptions.Places): a Worker takes one of the
// connection's MaxInFlightPerConnection places before its attempt and gives
// it back after, and a job that finds none free is snoozed to a slot, as
// over the bound in one process. *ConnectionPlaces is the PostgreSQL one.
type Places interface {
	// Take takes one of connectionID's bound places for job until hold has
	// passed, and reports which; ok is false when all are held.
	Take(ctx context.Context, connectionID string, bound int, jobID int64, hold time.Duration) (place int, ok bool, err error)

	// Give gives back the place job took.
	Give(ctx context.Context, connectionID string, place int, jobID int64) error
}

// ConnectionPlaces is the [Places] of a deployment in its PostgreSQL: the
// table riverhook_place made by [Migrate], a row per place of a connection.
// River has no bound across processes in its open-source edition, so
// riverhook keeps this one table for it.
//
// A place is held until its attempt has ended or, should the process die
// first, until its hold has passed: the Worker holds for its Timeout (the
// attempt timeout and 10 s), the most a process that died keeps a place.
// Each attempt costs two statements: an UPDATE that takes the first free
// place (FOR UPDATE SKIP LOCKED, so that processes taking at once do not
// wait on each other) and one that gives it back; a connection's rows are
// made once per process. It is safe for concurrent use.
type ConnectionPlaces struct {
	db      DB
	table   string
	mu      sync.Mutex
	ensured map[string]int // connection id -> the places its rows exist for
}

// NewConnectionPlaces returns the places in schema ("" for the search
// path) through db, a pool.
func NewConnectionPlaces(db DB, schema string) *ConnectionPlaces {
	return &ConnectionPlaces{db: db, table: qualifier(schema) + "riverhook_place", ensured: map[string]int{}}
}

// Take takes the first free place of connectionID's bound for jobID, held
// for hold.
func (p *ConnectionPlaces) Take(ctx context.Context, connectionID string, bound int, jobID int64, hold time.Duration) (int, bool, error) {
	if err := p.ensure(ctx, connectionID, bound); err != nil {
		return 0, false, err
	}
	var place int
	err := p.db.QueryRow(ctx, `UPDATE `+p.table+` AS p SET job_id = $3, until = clock_timestamp() + $4 * interval '1 microsecond'
		FROM (SELECT place FROM `+p.table+` WHERE connection_id = $1 AND place < $2 AND until < clock_timestamp()
			ORDER BY place LIMIT 1 FOR UPDATE SKIP LOCKED) AS free
		WHERE p.connection_id = $1 AND p.place = free.place
		RETURNING p.place`, connectionID, bound, jobID, hold.Microseconds()).Scan(&place)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("riverhook: taking a place for connection %q: %w", connectionID, err)
	}
	return place, true, nil
}

// Give gives back place of connectionID, if jobID still holds it.
func (p *ConnectionPlaces) Give(ctx context.Context, connectionID string, place int, jobID int64) error {
	_, err := p.db.Exec(ctx, `UPDATE `+p.table+` SET until = '-infinity' WHERE connection_id = $1 AND place = $2 AND job_id = $3`,
		connectionID, place, jobID)
	if err != nil {
		return fmt.Errorf("riverhook: giving back a place of connection %q: %w", connectionID, err)
	}
	return nil
}

// ensure makes the rows of connectionID's bound places, once per process.
func (p *ConnectionPlaces) ensure(ctx context.Context, connectionID string, bound int) error {
	p.mu.Lock()
	done := p.ensured[connectionID] >= bound
	p.mu.Unlock()
	if done {
		return nil
	}
	if _, err := p.db.Exec(ctx, `INSERT INTO `+p.table+` (connection_id, place) SELECT $1, g FROM generate_series(0, $2 - 1) AS g
		ON CONFLICT DO NOTHING`, connectionID, bound); err != nil {
		return fmt.Errorf("riverhook: making the places of connection %q: %w", connectionID, err)
	}
	p.mu.Lock()
	p.ensured[connectionID] = max(p.ensured[connectionID], bound)
	p.mu.Unlock()
	return nil
}

var _ Places = (*ConnectionPlaces)(nil)
