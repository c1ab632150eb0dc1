package riverhook

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/riverqueue/river"
)

// This file holds the listing of a connection's deliveries for a dashboard:
// pages with filters, and counts per status.

// MaxPage is the most deliveries one [List] page holds.
const MaxPage = 1000

// MaxCounted is the most deliveries [Count] counts in one status, each
// status on its own; a count at MaxCounted means "that many or more". It
// bounds the cost of counting a common status on a connection with a long
// history.
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
	Deliveries []*Delivery `json:"deliveries"` // newest first

	// Next is the cursor of the next page (ListParams.After), empty when
	// this page is the last. It is opaque; it stays valid as deliveries
	// are added.
	Next string `json:"next,omitempty"`
}

// List returns one page of the deliveries to connectionID that River holds,
// newest first, each with its attempt log, filtered by p (which may be nil):
// what a dashboard's delivery log shows, page after page. It finds the jobs
// by the connection's id in their args, served by River's GIN index on
// args, and pages by job id, so that a page costs the same however deep it
// is. client is any client on the database with a pool (an insert-only one
// will do). River deletes finished jobs after its retention periods (see
// the package documentation), and with them their logs. A connection id or
// event that no delivery can have (a NUL, bytes not UTF-8: the insert
// refuses them) finds nothing; so it does for [Count], [Outcomes],
// [Recover] and [EraseBodies].
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
	if !storable(connectionID) || !storable(p.Event) {
		return &DeliveryPage{Deliveries: []*Delivery{}}, nil // no delivery has them
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

// Count returns how many deliveries to connectionID are in each status,
// among those whose job was created at or after since (a zero since counts
// every job River still holds): the dashboard's "12 given up in the last
// 24 hours". Each status is counted on its own and stops at [MaxCounted]:
// a rare status is counted however many jobs the others have. It is one
// query, served by River's indexes on args and on state, run on db:
// River's client has no API for it.
// db is on the database of client (any client will do, for its schema): a
// pool, or the caller's transaction.
func Count[TTx any](ctx context.Context, client *river.Client[TTx], db DB, connectionID string, since time.Time) (map[Status]int, error) {
	n := make([]int, len(statuses)) // none for an id no delivery has
	if storable(connectionID) {
		var err error
		if n, err = count(ctx, db, client.Schema(), connectionID, since, MaxCounted); err != nil {
			return nil, fmt.Errorf("riverhook: counting the deliveries to %q: %w", connectionID, err)
		}
	}
	out := make(map[Status]int, len(n))
	for i, s := range statuses {
		out[s] = n[i]
	}
	return out, nil
}

// MaxPeriods is the most periods [Outcomes] counts in one call.
const MaxPeriods = 1000

// Period is one period of a connection's ended deliveries, by outcome.
type Period struct {
	Start     time.Time `json:"start"`
	Delivered int       `json:"delivered"`
	GivenUp   int       `json:"given_up"`
	Cancelled int       `json:"cancelled"`
}

// Outcomes returns the deliveries to connectionID that ended in each period
// of length step from since until now, oldest first, by outcome: what a
// dashboard charts, such as 24 periods of an hour. A delivery resent is
// counted with each of its jobs. It counts the jobs River still holds (see
// the retention in the package documentation), in one query on db, as
// [Count] does. It fails for a step under a second, or more than
// [MaxPeriods] periods.
func Outcomes[TTx any](ctx context.Context, client *river.Client[TTx], db DB, connectionID string, since time.Time, step time.Duration) ([]Period, error) {
	now := time.Now()
	if step < time.Second {
		return nil, fmt.Errorf("riverhook: Outcomes: a step of %v is under a second", step)
	}
	// The periods are counted step by step, not as now.Sub(since) / step:
	// Sub saturates at 292 years, and a span plus a step overflows
	// (TestOutcomes_AZeroSinceIsRefused).
	periods := []Period{{Start: since.UTC()}}
	for start := since.Add(step); start.Before(now); start = start.Add(step) {
		if len(periods) == MaxPeriods {
			return nil, fmt.Errorf("riverhook: Outcomes: more than %d periods of %v since %v", MaxPeriods, step, since.UTC().Format(time.RFC3339))
		}
		periods = append(periods, Period{Start: start.UTC()})
	}
	if !storable(connectionID) {
		return periods, nil // no delivery has it
	}
	rows, err := outcomes(ctx, db, client.Schema(), connectionID, since, step)
	if err != nil {
		return nil, fmt.Errorf("riverhook: counting the outcomes of %q: %w", connectionID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var i, n int
		var state string
		if err := rows.Scan(&i, &state, &n); err != nil {
			return nil, fmt.Errorf("riverhook: counting the outcomes of %q: %w", connectionID, err)
		}
		if i < 0 {
			continue
		}
		i = min(i, len(periods)-1) // finalized after now, by the database's clock: the last period's
		switch state {
		case "completed":
			periods[i].Delivered += n
		case "discarded":
			periods[i].GivenUp += n
		case "cancelled":
			periods[i].Cancelled += n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("riverhook: counting the outcomes of %q: %w", connectionID, err)
	}
	return periods, nil
}
