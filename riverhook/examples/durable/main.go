// Durable is a webhook worker whose deliveries survive restarts and crashes:
// deliveries are River jobs in PostgreSQL, worked by as many processes as you
// start. Try it in a minute:
//
//	durable migrate    -db postgres://localhost/app
//	durable enqueue    -db postgres://localhost/app -connections conns.json -n 10
//	durable work       -db postgres://localhost/app -connections conns.json -console 127.0.0.1:8081
//	durable serve      -db postgres://localhost/app -connections conns.json -console 127.0.0.1:8082
//	durable deliveries -db postgres://localhost/app -connection crm
//	durable deliveries -db postgres://localhost/app -connection crm -json -status given_up
//	durable recover    -db postgres://localhost/app -connection crm -since 24h -reason "endpoint fixed" -dry-run
//	durable resend     -db postgres://localhost/app -job 42 -reason "ana: the customer asked"
//	durable health     -db postgres://localhost/app -connections conns.json
//	durable erase      -db postgres://localhost/app -subject usr_dlv_1
//	durable erase      -db postgres://localhost/app -delivery dlv_1,dlv_2
//	durable disable    -db postgres://localhost/app -connection crm
//	durable enable     -db postgres://localhost/app -connection crm -dry-run
//	durable enable     -db postgres://localhost/app -connection crm -include-given-up -reason "ana: endpoint fixed"
//
// conns.json is a JSON array of connections, the example's resolver:
//
//	[{"id": "crm", "name": "CRM", "url": "https://crm.example.com/hooks",
//	  "method": "POST", "headers": {"Authorization": "Bearer ..."}, "secret": "whsec_..."}]
//
// enqueue inserts, in one transaction, n sample deliveries to every
// connection, each with its own delivery id, also written in its body as
// user.metadata.delivery_id. work runs a River client until interrupted,
// printing one line per entry of the attempt log; an interrupt (SIGINT,
// SIGTERM) lets the attempts in flight end (as long as -attempt-timeout
// and some room), and a second stops at once, putting them back uncounted.
// deliveries prints a connection's recent deliveries and their attempt
// logs, from River; with -json, the page and the counts per status as a
// dashboard's API serves them. recover and resend send given-up deliveries
// again; health prints each connection's endpoint marks, which work's
// endpoint health writes to riverhook's table riverhook_endpoint_mark,
// beside River's (migrate creates both); erase erases a user's personal
// data from every delivery about them (-subject, their user id: those under
// way are cancelled), or from ended deliveries by id (-delivery). disable
// stops sending to a connection, keeping its deliveries; enable sends what
// it kept (count first with -dry-run). work
// keeps the log 30 days (-retention); with -console ADDR it serves the
// customers' delivery log (riverhook/console) at http://ADDR/console/, its
// scope a demo's: every connection, without sign-in. serve is the API tier
// of a fleet: the console alone, working no delivery, with the endpoint
// marks and the places in flight the work processes share (start two work
// processes and one serve: 8 in flight to a connection hold for all three,
// Send Tests included, and the console shows what any worker found). -ca adds a root certificate to the library's guarded
// transport; -allow-private lifts the guard for local receivers. Kill a
// worker in the middle of an attempt (kill -9) and start another: once
// River's rescuer has found the job (a minute after the attempt started,
// with the default -attempt-timeout; the rescuer looks every 30 s), the
// other makes the attempt again, and logs the cut one as interrupted.
// Each command prints its flags with -h.
package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
)

const usage = `usage:
  durable migrate    -db URL
  durable enqueue    -db URL -connections FILE [-n N]
  durable work       -db URL -connections FILE [-workers N] [-attempt-timeout D] [-rescue-after D] [-retention D] [-ca PEM] [-allow-private] [-console ADDR]
  durable serve      -db URL -connections FILE -console ADDR [-attempt-timeout D] [-ca PEM] [-allow-private]
  durable deliveries -db URL -connection ID [-n N] [-json] [-status S] [-after CURSOR]
  durable recover    -db URL -connection ID -since D -reason TEXT [-dry-run]
  durable resend     -db URL -job ID -reason TEXT
  durable health     -db URL -connections FILE
  durable erase      -db URL (-subject USER_ID | -delivery ID,ID...)
  durable disable    -db URL -connection ID
  durable enable     -db URL -connection ID [-dry-run] [-include-given-up -reason TEXT]
Every command takes -schema; "durable COMMAND -h" prints its flags.`

// errUsage is a command line that is not one: its message is printed
// with the usage, unless the command's flags printed both already, and the
// exit status is 2.
type errUsage struct {
	msg     string
	printed bool
}

func (e errUsage) Error() string { return e.msg }

func main() {
	ctx, now := interrupts()
	err := run(ctx, now, os.Args[1:], os.Stdout, os.Stderr)
	var eu errUsage
	switch {
	case err == nil:
	case errors.As(err, &eu):
		if !eu.printed {
			fmt.Fprintf(os.Stderr, "durable: %v\n%s\n", err, usage)
		}
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "durable:", err)
		os.Exit(1)
	}
}

// interrupts returns a context done at the first SIGINT or SIGTERM, on
// which work stops gracefully, and one done at the second, on which it
// stops at once, as River's graceful-shutdown example escalates.
func interrupts() (first, second context.Context) {
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	first, stopFirst := context.WithCancel(context.Background())
	second, stopSecond := context.WithCancel(context.Background())
	go func() {
		<-signals
		stopFirst()
		<-signals
		stopSecond()
	}()
	return first, second
}

// connection is an entry of the connections file.
type connection struct {
	ID      string            `json:"id"`
	Name    string            `json:"name"`
	URL     string            `json:"url"`
	Method  string            `json:"method"`
	Headers map[string]string `json:"headers"`
	Secret  string            `json:"secret"`
}

// command is a command's flags.
type command struct {
	fs                       *flag.FlagSet
	db, schema, connsFile    *string
	n, workers               *int
	caFile, connectionID     *string
	allowPrivate             *bool
	attemptTimeout, rescueAt *time.Duration
	maxWait, retention       *time.Duration
	consoleAddr              *string
	ops                      opFlags
}

// newCommand returns the flags of the named command, or nil for none.
func newCommand(name string, stderr io.Writer) *command {
	c := &command{fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	fs := c.fs
	fs.SetOutput(stderr)
	c.db = fs.String("db", os.Getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL)")
	c.schema = fs.String("schema", "", "PostgreSQL schema of River's tables (default: the search path)")
	switch name {
	case "migrate":
	case "enqueue":
		c.connsFile = fs.String("connections", "", "JSON file of connections")
		c.n = fs.Int("n", 1, "deliveries to every connection")
	case "work":
		c.connsFile = fs.String("connections", "", "JSON file of connections")
		c.workers = fs.Int("workers", 32, "deliveries in flight at once")
		c.caFile = fs.String("ca", "", "PEM file of an extra root certificate")
		c.allowPrivate = fs.Bool("allow-private", false, "allow loopback and private addresses (local receivers)")
		c.attemptTimeout = fs.Duration("attempt-timeout", webhook.DefaultAttemptTimeout, "timeout of each attempt")
		c.maxWait = fs.Duration("max-wait", riverhook.DefaultMaxWait, "how long a delivery waits for an endpoint that is down or not answering before it is discarded")
		c.rescueAt = fs.Duration("rescue-after", 0, "how long a job may run before River's rescuer runs it again, as a process that died left it\n(default: derived from -attempt-timeout, 1m0s for 30s)")
		c.retention = fs.Duration("retention", 30*24*time.Hour, "how long River keeps ended deliveries, and their logs")
		c.consoleAddr = fs.String("console", "", "serve the delivery log (riverhook/console) on this address, such as 127.0.0.1:8081, under /console/;\na demo's scope: every connection, without sign-in")
	case "serve":
		c.connsFile = fs.String("connections", "", "JSON file of connections")
		c.caFile = fs.String("ca", "", "PEM file of an extra root certificate")
		c.allowPrivate = fs.Bool("allow-private", false, "allow loopback and private addresses (local receivers)")
		c.attemptTimeout = fs.Duration("attempt-timeout", webhook.DefaultAttemptTimeout, "timeout of each attempt (a Send Test's); the same as the workers'")
		c.consoleAddr = fs.String("console", "", "serve the delivery log (riverhook/console) on this address, such as 127.0.0.1:8081, under /console/;\na demo's scope: every connection, without sign-in")
	case "deliveries":
		c.connectionID = fs.String("connection", "", "id of the connection")
		c.n = fs.Int("n", 20, "deliveries to list, newest first (at most 1000)")
		c.ops.deliveries(fs)
	default:
		if !c.ops.define(name, fs) {
			return nil
		}
		c.connectionID = fs.String("connection", "", "id of the connection")
		c.connsFile = fs.String("connections", "", "JSON file of connections")
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage of durable %s:\n", name)
		fs.PrintDefaults()
	}
	return c
}

// migrate makes River's tables and riverhook's own (the endpoint marks) in
// schema.
func migrate(ctx context.Context, pool *pgxpool.Pool, schema string, logger *slog.Logger, stdout io.Writer) error {
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema, Logger: logger})
	if err != nil {
		return err
	}
	res, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return err
	}
	if err := riverhook.Migrate(ctx, pool, schema); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "migrated: %d migration(s) applied\n", len(res.Versions))
	return nil
}

// run runs the command of args until it ends or ctx is done; work stops
// gracefully when ctx is done, and at once when now is.
func run(ctx, now context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errUsage{msg: "no command"}
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, usage)
		return nil
	}
	c := newCommand(args[0], stderr)
	if c == nil {
		return errUsage{msg: fmt.Sprintf("unknown command %q", args[0])}
	}
	switch err := c.fs.Parse(args[1:]); {
	case errors.Is(err, flag.ErrHelp):
		return nil // the FlagSet printed the command's usage
	case err != nil:
		return errUsage{msg: err.Error(), printed: true} // the FlagSet printed it and the command's usage
	case c.fs.NArg() > 0:
		return errUsage{msg: fmt.Sprintf("unexpected argument %q", c.fs.Arg(0))}
	case *c.db == "":
		return errUsage{msg: "-db is required (or $DATABASE_URL)"}
	}
	pool, err := pgxpool.New(ctx, *c.db)
	if err != nil {
		return err
	}
	defer pool.Close()
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	switch args[0] {
	case "migrate":
		return migrate(ctx, pool, *c.schema, logger, stdout)
	case "enqueue":
		conns, err := readConnections(*c.connsFile)
		if err != nil {
			return err
		}
		return enqueue(ctx, pool, *c.schema, conns, *c.n, stdout)
	case "deliveries":
		if *c.connectionID == "" {
			return errUsage{msg: "-connection is required"}
		}
		if *c.ops.json {
			return deliveriesJSON(ctx, pool, *c.schema, *c.connectionID, *c.n, &c.ops, stdout)
		}
		return deliveries(ctx, pool, *c.schema, *c.connectionID, *c.n, stdout)
	case "recover", "resend", "health", "erase", "disable", "enable":
		return c.ops.run(ctx, args[0], pool, *c.schema, *c.connectionID, *c.connsFile, stdout)
	}
	conns, err := readConnections(*c.connsFile)
	if err != nil {
		return err
	}
	sender, err := newSender(*c.caFile, *c.allowPrivate, *c.attemptTimeout, riverhook.NewEndpointMarks(pool, *c.schema))
	if err != nil {
		return err
	}
	if args[0] == "serve" {
		if *c.consoleAddr == "" {
			return errUsage{msg: "-console is required"}
		}
		return serve(ctx, pool, *c.schema, conns, sender, *c.consoleAddr, logger, stdout)
	}
	err = work(ctx, now, pool, *c.schema, conns, sender, *c.workers, *c.rescueAt, *c.maxWait, *c.retention, *c.consoleAddr, logger, stdout)
	// The endpoint marks of the last attempts are written off their path:
	// let them land before the process exits.
	flushCtx, cancel := context.WithTimeout(context.Background(), webhook.OnChangeTimeout)
	defer cancel()
	if ferr := sender.Flush(flushCtx); ferr != nil {
		logger.Error("durable: endpoint marks not all written", slog.String("error", ferr.Error()))
	}
	return err
}

func readConnections(path string) (map[string]webhook.Connection, error) {
	if path == "" {
		return nil, errUsage{msg: "-connections is required"}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var list []connection
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	conns := map[string]webhook.Connection{}
	for _, c := range list {
		wc := webhook.Connection{Name: c.Name, URL: c.URL, Method: c.Method, Headers: c.Headers, Secret: c.Secret}
		if err := wc.Validate(); err != nil {
			return nil, fmt.Errorf("%s: connection %q: %w", path, c.ID, err)
		}
		conns[c.ID] = wc
	}
	return conns, nil
}

// enqueue inserts n deliveries to every connection in one transaction.
func enqueue(ctx context.Context, pool *pgxpool.Pool, schema string, conns map[string]webhook.Connection, n int, out io.Writer) error {
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema}) // insert-only
	if err != nil {
		return err
	}
	ids := make([]string, 0, len(conns))
	for id := range conns {
		ids = append(ids, id)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	for range n {
		deliveryID := newDeliveryID()
		p := webhook.SamplePayload(time.Now())
		p.User.ID = webhook.UserID(deliveryID)
		p.User.Metadata = webhook.Metadata{"plan": "demo", "source": "durable", "delivery_id": deliveryID}
		if _, err := riverhook.InsertTx(ctx, client, tx, deliveryID, ids, p, nil); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	fmt.Fprintf(out, "enqueued %d deliveries to %d connection(s)\n", n, len(ids))
	return nil
}

func newDeliveryID() string {
	var b [8]byte
	rand.Read(b[:])
	return "dlv_" + hex.EncodeToString(b[:])
}

func newSender(caFile string, allowPrivate bool, attemptTimeout time.Duration, marks webhook.HealthMarks) (*webhook.Sender, error) {
	tlsConfig := &tls.Config{}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, err
		}
		roots, err := x509.SystemCertPool()
		if err != nil {
			roots = x509.NewCertPool()
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificate", caFile)
		}
		tlsConfig.RootCAs = roots
	}
	tr, err := webhook.NewTransport(&webhook.TransportOptions{TLSClientConfig: tlsConfig, AllowPrivateNetworks: allowPrivate})
	if err != nil {
		return nil, err
	}
	// Endpoint health on: an endpoint that cannot be reached, or a URL that
	// connects and never answers, is isolated, and its deliveries wait
	// without spending attempts (at most -max-wait) while the others go on.
	// Its changes are marked in riverhook's table, which every worker
	// follows: an endpoint one worker finds down is held back by all within
	// a second, and a worker starting up starts from the marks. Each
	// confirms the endpoints it reaches every minute, so a mark left by a
	// worker that died clears, and the console shows them up.
	return webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr}, AttemptTimeout: attemptTimeout,
		Health: &webhook.HealthOptions{Marks: marks, ConfirmUpEvery: time.Minute}})
}

// work runs a River client with the delivery worker until ctx is done, then
// stops it gracefully, or at once when now is done.
func work(ctx, now context.Context, pool *pgxpool.Pool, schema string, conns map[string]webhook.Connection,
	sender *webhook.Sender, workers int, rescueAfter, maxWait, retention time.Duration, consoleAddr string, logger *slog.Logger, out io.Writer) error {
	var mu sync.Mutex // one line at a time
	worker, err := riverhook.NewWorker(sender, resolveFrom(conns), &riverhook.WorkerOptions{
		MaxInFlightPerConnection: 8,                                           // one slow endpoint never takes every worker: the rest wait in paced slots
		Places:                   riverhook.NewConnectionPlaces(pool, schema), // 8 across every worker process, not 8 each
		MaxWait:                  maxWait,
		Logger:                   logger,
		OnAttempt: func(_ context.Context, job *river.Job[riverhook.Args], a webhook.Attempt) error {
			next := "-"
			if a.Retry {
				next = a.RetryIn.String()
			}
			kind := string(a.Kind)
			if a.OK() {
				kind = "delivered"
			}
			mu.Lock()
			defer mu.Unlock()
			_, err := fmt.Fprintf(out, "connection=%s delivery=%s attempt=%d status=%s kind=%s next=%s\n",
				job.Args.ConnectionID, job.Args.DeliveryID, a.N, strconv.Itoa(a.StatusCode), kind, next)
			return err
		},
	})
	if err != nil {
		return err
	}
	config := &river.Config{
		Schema:               schema,
		Queues:               map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		FetchCooldown:        10 * time.Millisecond, // the default 100 ms caps a client at MaxWorkers jobs per 100 ms
		FetchPollInterval:    100 * time.Millisecond,
		RescueStuckJobsAfter: rescueAfter, // 0: Register sets the Worker's
		Logger:               logger,
		// The jobs are the attempt log: keep ended deliveries -retention.
		CompletedJobRetentionPeriod: retention,
		CancelledJobRetentionPeriod: retention,
		DiscardedJobRetentionPeriod: retention,
	}
	if err := riverhook.Register(config, worker); err != nil {
		return err
	}
	rescueAfter = config.RescueStuckJobsAfter
	client, err := river.NewClient(riverpgxv5.New(pool), config)
	if err != nil {
		return err
	}
	if consoleAddr != "" {
		stop, err := serveConsole(consoleAddr, client, pool, schema, worker, conns, logger, out)
		if err != nil {
			return err
		}
		defer stop()
	}
	// Started apart from ctx: an interrupt stops the client gracefully
	// below, letting the attempts in flight end, instead of cancelling them.
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	fmt.Fprintf(out, "working with %d workers, rescuing after %v; interrupt to stop\n", workers, rescueAfter)
	<-ctx.Done()
	// An attempt ends within the worker's Timeout (the attempt timeout and
	// some room): wait that long, or until a second interrupt, then put
	// back what is still running, which River does not count as a run.
	fmt.Fprintf(out, "stopping: waiting up to %v for the attempts in flight; interrupt again to stop at once\n", worker.Timeout(nil))
	stopCtx, cancel := context.WithTimeout(now, worker.Timeout(nil))
	defer cancel()
	if err := client.Stop(stopCtx); err == nil || stopCtx.Err() == nil {
		return err
	}
	hardCtx, cancelHard := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelHard()
	return client.StopAndCancel(hardCtx)
}

// deliveries prints a connection's recent deliveries with their attempt
// logs, as a dashboard shows them.
func deliveries(ctx context.Context, pool *pgxpool.Pool, schema, connectionID string, n int, out io.Writer) error {
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema})
	if err != nil {
		return err
	}
	page, err := riverhook.List(ctx, client, connectionID, &riverhook.ListParams{Limit: n})
	if err != nil {
		return err
	}
	for _, d := range page.Deliveries {
		fmt.Fprintf(out, "%s %s to %s: %s", d.DeliveryID, d.Event, d.ConnectionID, d.State)
		switch {
		case d.Reason != "":
			fmt.Fprintf(out, " (%s)", d.Reason)
		case !d.NextAt.IsZero():
			fmt.Fprintf(out, ", next attempt at %s", d.NextAt.Format(time.RFC3339))
		}
		fmt.Fprintln(out)
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		for _, a := range d.Attempts {
			fmt.Fprintf(tw, "  \t%s\t%s\n", a, a.ResponseText())
		}
		tw.Flush()
	}
	return nil
}
