package console

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/signedhook/webhook/riverhook"
)

// This file holds the rate limits of the console's actions: one turn per
// connection and action per interval, kept in the process's memory or, for
// every API replica, in the database (SharedLimits).

// limiter allows one action per connection per interval. An action on the
// subject of the one allowed last (a resend of the delivery resent last)
// is allowed again within the interval, taking no turn of its own: the
// caller makes it a repeat of the first, such as a double click's second
// post.
type limiter struct {
	every map[string]time.Duration // by action; negative: no limit
	turns turns
}

// turns is where the last turn of each action and connection is kept.
type turns interface {
	// take takes action's turn for conn, on subject, when the last was
	// every ago or more, and returns it. A refusal is ok false and the
	// wait until the next turn; the last turn's own subject is ok true,
	// with no turn taken.
	take(ctx context.Context, action, conn, subject string, every time.Duration) (t turn, wait time.Duration, ok bool, err error)
	// giveBack gives back t, a turn take took, unless another was taken
	// since.
	giveBack(ctx context.Context, action, conn string, t turn) error
}

// turn is a turn take took: when, by the store's clock. Its zero value is
// no turn taken.
type turn struct{ at time.Time }

// allow reports whether action may run for conn, on subject if it is not
// empty, now; and if not, how long until it may. The turn it returns is
// given back with giveBack when the action was not done after all.
func (l *limiter) allow(ctx context.Context, action, conn, subject string) (turn, time.Duration, bool, error) {
	every := l.every[action]
	if every < 0 {
		return turn{}, 0, true, nil
	}
	return l.turns.take(ctx, action, conn, subject, every)
}

// giveBack gives back t, so that the next request for action is allowed
// as if this one had not come.
func (l *limiter) giveBack(ctx context.Context, action, conn string, t turn) error {
	if t.at.IsZero() {
		return nil
	}
	return l.turns.giveBack(ctx, action, conn, t)
}

// memoryTurns keeps the turns in the process's memory: enough for one
// process, not for replicas, each of which would allow the limit.
type memoryTurns struct {
	now  func() time.Time
	mu   sync.Mutex
	last map[[2]string]memoryTurn // action, connection -> the last turn
}

type memoryTurn struct {
	at      time.Time
	every   time.Duration
	subject string
}

func newMemoryTurns() *memoryTurns {
	return &memoryTurns{now: time.Now, last: map[[2]string]memoryTurn{}}
}

func (m *memoryTurns) take(_ context.Context, action, conn, subject string, every time.Duration) (turn, time.Duration, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	key := [2]string{action, conn}
	if last, ok := m.last[key]; ok && now.Sub(last.at) < every {
		if subject != "" && subject == last.subject {
			return turn{}, 0, true, nil // the same again, within the turn it had
		}
		return turn{}, every - now.Sub(last.at), false, nil
	}
	if len(m.last) >= 10_000 { // forget what no longer limits
		for k, t := range m.last {
			if now.Sub(t.at) >= t.every {
				delete(m.last, k)
			}
		}
	}
	m.last[key] = memoryTurn{at: now, every: every, subject: subject}
	return turn{at: now}, 0, true, nil
}

func (m *memoryTurns) giveBack(_ context.Context, action, conn string, t turn) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := [2]string{action, conn}
	if last, ok := m.last[key]; ok && last.at.Equal(t.at) {
		delete(m.last, key)
	}
	return nil
}

// SharedLimits keeps the turns of [Options.TestEvery], [Options.RecoverEvery]
// and [Options.ResendEvery] in the database, so that they hold across the
// console's API replicas: one row per connection and action in the table
// riverhook_console_turn, made by [riverhook.Migrate], on the database's
// clock. Each check is one statement. It is safe for concurrent use.
type SharedLimits struct {
	db    riverhook.DB
	table string
}

// NewSharedLimits returns the limits in schema ("" for the search path) of
// db's database, a pool. Give it to every replica as [Options.Limits].
func NewSharedLimits(db riverhook.DB, schema string) *SharedLimits {
	table := "riverhook_console_turn"
	if schema != "" {
		table = pgx.Identifier{schema, table}.Sanitize()
	}
	return &SharedLimits{db: db, table: table}
}

func (s *SharedLimits) take(ctx context.Context, action, conn, subject string, every time.Duration) (turn, time.Duration, bool, error) {
	// The turn is taken when the last one is every old; otherwise the
	// last one, as the statement's snapshot has it, says what to answer.
	// A row another replica made after the snapshot is read as none: a
	// turn just taken, a whole interval to wait.
	var (
		took   bool
		t      turn
		last   string
		waitUs int64
	)
	err := s.db.QueryRow(ctx, `WITH took AS (
		INSERT INTO `+s.table+` AS t (connection_id, action, taken, subject) VALUES ($1, $2, clock_timestamp(), $3)
		ON CONFLICT (connection_id, action) DO UPDATE SET taken = EXCLUDED.taken, subject = EXCLUDED.subject
		WHERE t.taken <= EXCLUDED.taken - $4 * interval '1 microsecond'
		RETURNING taken)
	SELECT true, taken, '', 0::bigint FROM took
	UNION ALL
	SELECT false, taken, subject, $4 - (extract(epoch FROM clock_timestamp() - taken) * 1e6)::bigint FROM `+s.table+`
	WHERE connection_id = $1 AND action = $2 AND NOT EXISTS (SELECT FROM took)`,
		conn, action, subject, every.Microseconds()).Scan(&took, &t.at, &last, &waitUs)
	none := errors.Is(err, pgx.ErrNoRows)
	if err != nil && !none {
		return turn{}, 0, false, fmt.Errorf("console: taking a turn of %s: %w", action, err)
	}
	wait := time.Duration(waitUs) * time.Microsecond
	switch {
	case took:
		return t, 0, true, nil
	case !none && subject != "" && subject == last:
		return turn{}, 0, true, nil // the same again, within the turn it had
	case none || wait <= 0 || wait > every:
		return turn{}, every, false, nil
	}
	return turn{}, wait, false, nil
}

func (s *SharedLimits) giveBack(ctx context.Context, action, conn string, t turn) error {
	_, err := s.db.Exec(ctx, `DELETE FROM `+s.table+` WHERE connection_id = $1 AND action = $2 AND taken = $3`, conn, action, t.at)
	if err != nil {
		return fmt.Errorf("console: giving back a turn of %s: %w", action, err)
	}
	return nil
}

var (
	_ turns = (*memoryTurns)(nil)
	_ turns = (*SharedLimits)(nil)
)
