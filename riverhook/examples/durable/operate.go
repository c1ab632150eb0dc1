package main

// This file holds what an operator and a dashboard do with the deliveries:
// the log as JSON, recover, resend, the endpoint marks, erasure, and a
// connection's life: disable and enable.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
)

// opFlags are the flags of the operating commands.
type opFlags struct {
	json, dryRun, givenUp                 *bool
	status, after, reason, dlvrs, subject *string
	since                                 *time.Duration
	job                                   *int64
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
		o.dlvrs = fs.String("delivery", "", "ids of the ended deliveries to erase, comma-separated")
		o.subject = fs.String("subject", "", "the user id whose deliveries to erase, every one (those under way are cancelled)")
	case "enable":
		o.dryRun = fs.Bool("dry-run", false, "count what would be sent, change nothing")
		o.givenUp = fs.Bool("include-given-up", false, "send again too what gave up since the connection began failing")
		o.reason = fs.String("reason", "", "who enables it, and why: recorded with each resend of -include-given-up")
	case "health", "disable":
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
		res, err := riverhook.Recover(ctx, client, pool, connectionID,
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
	case "disable", "enable":
		if connectionID == "" {
			return errUsage{msg: "-connection is required"}
		}
		if name == "disable" {
			s, err := riverhook.Disable(ctx, client, pool, connectionID)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "%s is disabled (%s) since %s: its deliveries are kept\n", connectionID, s.Reason, s.DisabledAt.UTC().Format(time.RFC3339))
			return nil
		}
		res, err := riverhook.Enable(ctx, client, pool, connectionID,
			riverhook.EnableParams{DryRun: *o.dryRun, IncludeGivenUp: *o.givenUp, Reason: *o.reason}, nil)
		if err != nil {
			return err
		}
		verb := "sent"
		switch {
		case res.State == riverhook.StateActive:
			fmt.Fprintf(out, "%s is active: nothing to enable\n", connectionID)
			return nil
		case *o.dryRun:
			verb = "would send"
		}
		fmt.Fprintf(out, "%s was %s: %s %d kept and %d given up\n", connectionID, res.State, verb, res.Waiting, res.GivenUp)
		return nil
	case "resend":
		job, inserted, err := riverhook.Resend(ctx, client, pool, *o.job, *o.reason, nil)
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
		if (*o.subject == "") == (*o.dlvrs == "") {
			return errUsage{msg: "one of -subject and -delivery is required"}
		}
		if *o.subject != "" {
			res, err := riverhook.EraseSubject(ctx, client, pool, *o.subject)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "erased %d job(s), cancelled %d, %d under way", res.Erased, res.Cancelled, res.UnderWay)
			if res.UnderWay > 0 {
				fmt.Fprint(out, ": run erase again once they end (within the attempt timeout and 10 s)")
			}
			fmt.Fprintln(out)
			return nil
		}
		ids := strings.FieldsFunc(*o.dlvrs, func(r rune) bool { return r == ',' })
		n, err := riverhook.EraseBodies(ctx, client, pool, ids)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "erased %d job(s)\n", n)
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

// healthMarks prints each connection's endpoint marks, as every worker
// follows them: the worst of its origin's and its URL's, "unknown" when no
// worker has marked it.
func healthMarks(ctx context.Context, pool *pgxpool.Pool, schema string, conns map[string]webhook.Connection, out io.Writer) error {
	ids := make([]string, 0, len(conns))
	for id := range conns {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	marks := riverhook.NewEndpointMarks(pool, schema)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "connection\tendpoint\tstate\tsince")
	for _, id := range ids {
		c := conns[id]
		got, err := marks.Endpoint(ctx, c.Endpoint())
		if err != nil {
			return err
		}
		state, since := "unknown", "-"
		for _, m := range got {
			if m.PerURL && m.URLKey != c.URLKey() {
				continue
			}
			switch {
			case m.Down:
				state, since = "down", m.Since.UTC().Format(time.RFC3339)
			case state == "unknown":
				state = "up"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", id, c.Endpoint(), state, since)
	}
	return tw.Flush()
}
