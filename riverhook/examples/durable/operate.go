package main

// This file holds what an operator and a dashboard do with the deliveries:
// the log as JSON, recover, resend, the endpoint marks, erasure.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
)

// marksTable returns the statement making the service's table of endpoint
// marks in schema ("" for the search path), beside River's: written by
// work's endpoint health and read by health, its key is an endpoint (an
// origin, as webhook.Connection.Endpoint names it) or a URL (its URLKey).
func marksTable(schema string) string {
	return `CREATE TABLE IF NOT EXISTS ` + marks(schema) + ` (
	key text PRIMARY KEY,
	shown text NOT NULL,
	down boolean NOT NULL,
	since timestamptz,
	changed timestamptz NOT NULL
)`
}

// marks is the table of endpoint marks in schema, quoted.
func marks(schema string) string {
	if schema == "" {
		return "durable_endpoint_health"
	}
	return pgx.Identifier{schema, "durable_endpoint_health"}.Sanitize()
}

// opFlags are the flags of the operating commands.
type opFlags struct {
	json, dryRun                 *bool
	status, after, reason, dlvrs *string
	since                        *time.Duration
	job                          *int64
}

func (o *opFlags) deliveries(fs *flag.FlagSet) {
	o.json = fs.Bool("json", false, "print the page and the counts per status as JSON, as a dashboard's API serves them")
	o.status = fs.String("status", "", "keep the deliveries in these statuses, comma-separated: "+fmt.Sprint(riverhook.Statuses()))
	o.after = fs.String("after", "", "the cursor of the page to list (the previous page's next)")
}

// define defines the flags of the operating command name, if it is one.
func (o *opFlags) define(name string, fs *flag.FlagSet) bool {
	switch name {
	case "recover":
		o.since = fs.Duration("since", 24*time.Hour, "recover the deliveries that gave up this long ago or since")
		o.dryRun = fs.Bool("dry-run", false, "count what would be resent, send nothing")
	case "resend":
		o.job = fs.Int64("job", 0, "the job of the delivery to send again")
	case "erase":
		o.dlvrs = fs.String("delivery", "", "ids of the deliveries whose bodies to erase, comma-separated")
	case "health":
	default:
		return false
	}
	if name == "recover" || name == "resend" {
		o.reason = fs.String("reason", "", "who asks, and why: recorded with each resend")
	}
	return true
}

// run runs the operating command name.
func (o *opFlags) run(ctx context.Context, name string, pool *pgxpool.Pool, schema, connectionID, connsFile string, out io.Writer) error {
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema}) // insert-only
	if err != nil {
		return err
	}
	switch name {
	case "recover":
		if connectionID == "" {
			return errUsage{msg: "-connection is required"}
		}
		res, err := riverhook.Recover(ctx, client, connectionID,
			riverhook.RecoverParams{Since: time.Now().Add(-*o.since), Reason: *o.reason, DryRun: *o.dryRun}, nil)
		if err != nil {
			return err
		}
		verb := "resent"
		if *o.dryRun {
			verb = "would resend"
		}
		fmt.Fprintf(out, "%d given up since %v and not resent: %s %d, %d resent meanwhile, more: %v\n",
			res.GivenUp, *o.since, verb, res.Resent, res.Pending, res.More)
		return nil
	case "resend":
		job, inserted, err := riverhook.Resend(ctx, client, *o.job, *o.reason, nil)
		if err != nil {
			return err
		}
		if !inserted {
			fmt.Fprintf(out, "job %d is resent already, as job %d\n", *o.job, job.ID)
			return nil
		}
		fmt.Fprintf(out, "job %d resent as job %d\n", *o.job, job.ID)
		return nil
	case "erase":
		ids := strings.FieldsFunc(*o.dlvrs, func(r rune) bool { return r == ',' })
		n, err := riverhook.EraseBodies(ctx, client, pool, ids)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "erased the bodies of %d job(s)\n", n)
		return nil
	}
	conns, err := readConnections(connsFile)
	if err != nil {
		return err
	}
	return healthMarks(ctx, pool, schema, conns, out)
}

// deliveriesJSON prints a page of a connection's deliveries and the counts
// per status of the last 24 hours, as a dashboard's API serves them.
func deliveriesJSON(ctx context.Context, pool *pgxpool.Pool, schema, connectionID string, n int, o *opFlags, out io.Writer) error {
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema})
	if err != nil {
		return err
	}
	p := &riverhook.ListParams{Limit: n, After: *o.after}
	for _, s := range strings.FieldsFunc(*o.status, func(r rune) bool { return r == ',' }) {
		p.Statuses = append(p.Statuses, riverhook.Status(s))
	}
	page, err := riverhook.List(ctx, client, connectionID, p)
	if err != nil {
		return err
	}
	counts, err := riverhook.Count(ctx, client, pool, connectionID, time.Now().Add(-24*time.Hour))
	if err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Counts     map[riverhook.Status]int `json:"counts_24h"`
		Deliveries []*riverhook.Delivery    `json:"deliveries"`
		Next       string                   `json:"next,omitempty"`
	}{counts, page.Deliveries, page.Next})
}

// markWriter returns the OnChange that marks endpoints in the table: down
// or up, by the endpoint's origin, or by the URL's key for one URL. A
// confirmation clears the marks of the origin and of the URL that
// answered, which a worker that died may have left.
func markWriter(pool *pgxpool.Pool, schema string, logger *slog.Logger) func(context.Context, webhook.EndpointHealth) {
	upsert := `INSERT INTO ` + marks(schema) + ` (key, shown, down, since, changed) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (key) DO UPDATE SET shown = $2, down = $3, since = $4, changed = $5`
	return func(ctx context.Context, h webhook.EndpointHealth) {
		var err error
		switch {
		case h.PerURL:
			_, err = pool.Exec(ctx, upsert, h.URLKey, h.Endpoint, h.Down, h.Since, h.Changed)
		case h.Confirmed: // clears a mark written before the answer, which a worker that died may have left
			_, err = pool.Exec(ctx, `UPDATE `+marks(schema)+` SET down = false, changed = $3 WHERE key IN ($1, $2) AND down AND changed < $3`,
				h.Endpoint, h.URLKey, h.Changed)
		default:
			_, err = pool.Exec(ctx, upsert, h.Endpoint, h.Endpoint, h.Down, h.Since, h.Changed)
		}
		if err != nil {
			logger.ErrorContext(ctx, "durable: marking the endpoint", slog.String("endpoint", h.Endpoint), slog.String("error", err.Error()))
		}
	}
}

// healthMarks prints each connection's endpoint marks.
func healthMarks(ctx context.Context, pool *pgxpool.Pool, schema string, conns map[string]webhook.Connection, out io.Writer) error {
	ids := make([]string, 0, len(conns))
	for id := range conns {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "connection\tendpoint\tstate\tsince")
	for _, id := range ids {
		c := conns[id]
		state, since := "up", "-"
		var down bool
		var at *time.Time
		err := pool.QueryRow(ctx, `SELECT down, since FROM `+marks(schema)+` WHERE key IN ($1, $2) ORDER BY down DESC LIMIT 1`,
			c.Endpoint(), c.URLKey()).Scan(&down, &at)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		case down:
			state = "down"
			if at != nil {
				since = at.UTC().Format(time.RFC3339)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", id, c.Endpoint(), state, since)
	}
	return tw.Flush()
}
