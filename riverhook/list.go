package riverhook

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
)

// This file holds the listing of a connection's deliveries for a dashboard:
// pages with filters, and counts per status.

// MaxPage is the most deliveries one [List] page holds.
const MaxPage = 1000

// MaxCounted is the most deliveries [Count] counts in one status; a
// count at MaxCounted means "that many or more". It bounds the query's cost
// on a connection with a long history.
const MaxCounted = 100_000

// ListParams filters and pages [List]. The zero value lists the newest 20
// deliveries to the connection, of every status.
type ListParams struct {
	// Statuses keeps the deliveries in any of these; none keeps all.
	Statuses []Status

	// Event keeps the deliveries of this event only, such as
	// "user.identified"; empty keeps all.
	Event string

	// Since and Until keep the deliveries whose job was created at or
	// after Since and before Until; a zero time does not bound.
	Since, Until time.Time

	// After is the cursor of the page to list: a DeliveryPage.Next. Empty
	// lists the first page.
	After string

	// Limit is the most deliveries of the page: zero means 20, over
	// [MaxPage] means MaxPage.
	Limit int
}

// DeliveryPage is one page of a [List].
type DeliveryPage struct {
	Deliveries []*Delivery // newest first

	// Next is the cursor of the next page (ListParams.After), empty when
	// this page is the last. It is opaque; it stays valid as deliveries
	// are added.
	Next string
}

// List returns one page of the deliveries to connectionID that River holds,
// newest first, each with its attempt log, filtered by p (which may be nil):
// what a dashboard's delivery log shows, page after page. It finds the jobs
// by the connection's id in their args, served by River's GIN index on
// args, and pages by job id, so that a page costs the same however deep it
// is. client is any client on the database with a pool (an insert-only one
// will do). River deletes finished jobs after its retention periods (see
// the package documentation), and with them their logs.
func List[TTx any](ctx context.Context, client *river.Client[TTx], connectionID string, p *ListParams) (*DeliveryPage, error) {
	return list(ctx, connectionID, p, func(params *river.JobListParams) (*river.JobListResult, error) {
		return client.JobList(ctx, params)
	})
}

// ListTx is [List] in tx.
func ListTx[TTx any](ctx context.Context, client *river.Client[TTx], tx TTx, connectionID string, p *ListParams) (*DeliveryPage, error) {
	return list(ctx, connectionID, p, func(params *river.JobListParams) (*river.JobListResult, error) {
		return client.JobListTx(ctx, tx, params)
	})
}

func list(_ context.Context, connectionID string, p *ListParams, run func(*river.JobListParams) (*river.JobListResult, error)) (*DeliveryPage, error) {
	if p == nil {
		p = &ListParams{}
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 20
	}
	limit = min(limit, MaxPage)
	where, args, err := p.where(connectionID)
	if err != nil {
		return nil, err
	}
	params := river.NewJobListParams().Kinds(Kind).Where(where, args).
		OrderBy(river.JobListOrderByID, river.SortOrderDesc).First(limit + 1)
	res, err := run(params)
	if err != nil {
		return nil, fmt.Errorf("riverhook: listing the deliveries to %q: %w", connectionID, err)
	}
	jobs := res.Jobs
	page := &DeliveryPage{}
	if len(jobs) > limit {
		jobs = jobs[:limit]
		page.Next = strconv.FormatInt(jobs[limit-1].ID, 10)
	}
	page.Deliveries = make([]*Delivery, len(jobs))
	for i, job := range jobs {
		if page.Deliveries[i], err = DeliveryOf(job); err != nil {
			return nil, err
		}
	}
	return page, nil
}

// connectionWhere finds a connection's jobs by their args.
const connectionWhere = `args @> jsonb_build_object('connection_id', @riverhook_connection_id::text)`

// underWay are the River states of a delivery that has not ended.
const underWay = `state IN ('available', 'pending', 'retryable', 'running', 'scheduled')`

// statusWhere is each status as SQL over River's job row; statusOf is the
// same in Go.
var statusWhere = map[Status]string{
	StatusDelivered: `state = 'completed'`,
	StatusGivenUp:   `state = 'discarded'`,
	StatusCancelled: `state = 'cancelled'`,
	StatusRetrying:  `(` + underWay + ` AND coalesce(cardinality(errors), 0) > 0)`,
	StatusWaiting:   `(` + underWay + ` AND coalesce(cardinality(errors), 0) = 0)`,
}

// where returns p's filter as SQL for River's JobListParams.Where.
func (p *ListParams) where(connectionID string) (string, river.NamedArgs, error) {
	conds := []string{connectionWhere}
	args := river.NamedArgs{"riverhook_connection_id": connectionID}
	if len(p.Statuses) > 0 {
		var either []string
		for _, s := range p.Statuses {
			w, ok := statusWhere[s]
			if !ok {
				return "", nil, fmt.Errorf("riverhook: unknown delivery status %q (want one of %v)", s, Statuses)
			}
			either = append(either, w)
		}
		conds = append(conds, "("+strings.Join(either, " OR ")+")")
	}
	if p.Event != "" {
		conds = append(conds, `args @> jsonb_build_object('event', @riverhook_event::text)`)
		args["riverhook_event"] = p.Event
	}
	if !p.Since.IsZero() {
		conds = append(conds, `created_at >= @riverhook_since`)
		args["riverhook_since"] = p.Since.UTC()
	}
	if !p.Until.IsZero() {
		conds = append(conds, `created_at < @riverhook_until`)
		args["riverhook_until"] = p.Until.UTC()
	}
	if p.After != "" {
		id, err := strconv.ParseInt(p.After, 10, 64)
		if err != nil || id <= 0 {
			return "", nil, errors.New("riverhook: ListParams.After is not a cursor List returned")
		}
		conds = append(conds, `id < @riverhook_after`)
		args["riverhook_after"] = id
	}
	return strings.Join(conds, " AND "), args, nil
}

// Count returns how many deliveries to connectionID are in each status,
// among those whose job was created at or after since (a zero since counts
// every job River still holds): the dashboard's "12 given up in the last
// 24 hours". Each count stops at [MaxCounted]. It is one query, served by
// River's GIN index on args. client is any client on the database.
func Count[TTx any](ctx context.Context, client *river.Client[TTx], connectionID string, since time.Time) (map[Status]int, error) {
	return count(ctx, client.Driver().GetExecutor(), client.Schema(), connectionID, since)
}

// CountTx is [Count] in tx.
func CountTx[TTx any](ctx context.Context, client *river.Client[TTx], tx TTx, connectionID string, since time.Time) (map[Status]int, error) {
	return count(ctx, client.Driver().UnwrapExecutor(tx), client.Schema(), connectionID, since)
}

func count(ctx context.Context, exec riverdriver.Executor, schema, connectionID string, since time.Time) (map[Status]int, error) {
	var cols []string
	for _, s := range Statuses {
		cols = append(cols, fmt.Sprintf("least(count(*) FILTER (WHERE %s), %d)", statusWhere[s], MaxCounted))
	}
	table := jobTable(schema)
	// At most MaxCounted rows of each status are read: the inner query
	// stops at MaxCounted times the number of statuses.
	sql := `SELECT ` + strings.Join(cols, ", ") + ` FROM (SELECT state, errors FROM ` + table +
		` WHERE kind = $1 AND args @> jsonb_build_object('connection_id', $2::text)
		AND created_at >= $3 LIMIT ` + strconv.Itoa(MaxCounted*len(Statuses)) + `) AS jobs`
	n := make([]int, len(Statuses))
	dest := make([]any, len(n))
	for i := range n {
		dest[i] = &n[i]
	}
	if err := exec.QueryRow(ctx, sql, Kind, connectionID, since.UTC()).Scan(dest...); err != nil {
		return nil, fmt.Errorf("riverhook: counting the deliveries to %q: %w", connectionID, err)
	}
	out := make(map[Status]int, len(n))
	for i, s := range Statuses {
		out[s] = n[i]
	}
	return out, nil
}
