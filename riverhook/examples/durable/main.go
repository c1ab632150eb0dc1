// Durable is a webhook worker whose deliveries survive restarts and crashes:
// deliveries are River jobs in PostgreSQL, worked by as many processes as you
// start. Try it in a minute:
//
//	durable migrate -db postgres://localhost/app
//	durable enqueue -db postgres://localhost/app -connections conns.json -n 10
//	durable work    -db postgres://localhost/app -connections conns.json
//
// conns.json is a JSON array of connections, the example's resolver:
//
//	[{"id": "crm", "name": "CRM", "url": "https://crm.example.com/hooks",
//	  "method": "POST", "headers": {"Authorization": "Bearer ..."}, "secret": "whsec_..."}]
//
// enqueue inserts, in one transaction, n sample deliveries to every
// connection, each with its own delivery id, also written in its body as
// user.metadata.delivery_id. work runs a River client until interrupted,
// printing one line per attempt. -ca adds a root certificate to the
// library's guarded transport; -allow-private lifts the guard for local
// receivers. Kill a worker in the middle of an attempt and start another:
// once River's stuck-job rescue has run (-rescue-after, checked every 30 s
// by the leader), the other delivers what the first had started.
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
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
)

const usage = `usage:
  durable migrate -db URL
  durable enqueue -db URL -connections FILE -n N
  durable work    -db URL -connections FILE [-workers N] [-ca PEM] [-allow-private]`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "durable:", err)
		os.Exit(1)
	}
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

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	db := fs.String("db", os.Getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL)")
	schema := fs.String("schema", "", "PostgreSQL schema of River's tables (default: the search path)")
	connsFile := fs.String("connections", "", "JSON file of connections")
	n := fs.Int("n", 1, "enqueue: deliveries to every connection")
	workers := fs.Int("workers", 32, "work: deliveries in flight at once")
	caFile := fs.String("ca", "", "work: PEM file of an extra root certificate")
	allowPrivate := fs.Bool("allow-private", false, "work: allow loopback and private addresses (local receivers)")
	attemptTimeout := fs.Duration("attempt-timeout", webhook.DefaultAttemptTimeout, "work: timeout of each attempt")
	rescueAfter := fs.Duration("rescue-after", time.Hour, "work: how long a running job may go before River rescues it as stuck")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *db == "" {
		return errors.New("-db is required")
	}
	pool, err := pgxpool.New(ctx, *db)
	if err != nil {
		return err
	}
	defer pool.Close()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	switch args[0] {
	case "migrate":
		migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: *schema, Logger: logger})
		if err != nil {
			return err
		}
		res, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "migrated: %d migration(s) applied\n", len(res.Versions))
		return nil
	case "enqueue":
		conns, err := readConnections(*connsFile)
		if err != nil {
			return err
		}
		return enqueue(ctx, pool, *schema, conns, *n, out)
	case "work":
		conns, err := readConnections(*connsFile)
		if err != nil {
			return err
		}
		sender, err := newSender(*caFile, *allowPrivate, *attemptTimeout)
		if err != nil {
			return err
		}
		return work(ctx, pool, *schema, conns, sender, *workers, *rescueAfter, logger, out)
	}
	return fmt.Errorf("unknown command %q\n%s", args[0], usage)
}

func readConnections(path string) (map[string]webhook.Connection, error) {
	if path == "" {
		return nil, errors.New("-connections is required")
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
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema})
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
		params, err := riverhook.InsertParams(deliveryID, ids, p, nil)
		if err != nil {
			return err
		}
		if _, err := client.InsertManyTx(ctx, tx, params); err != nil {
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

func newSender(caFile string, allowPrivate bool, attemptTimeout time.Duration) (*webhook.Sender, error) {
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
	tr := webhook.NewTransport(&webhook.TransportOptions{TLSClientConfig: tlsConfig, AllowPrivateNetworks: allowPrivate})
	return webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr}, AttemptTimeout: attemptTimeout})
}

// work runs a River client with the delivery worker until ctx is done.
func work(ctx context.Context, pool *pgxpool.Pool, schema string, conns map[string]webhook.Connection,
	sender *webhook.Sender, workers int, rescueAfter time.Duration, logger *slog.Logger, out io.Writer) error {
	var mu sync.Mutex // one line at a time
	resolve := func(_ context.Context, id string) (webhook.Connection, error) {
		c, ok := conns[id]
		if !ok {
			return webhook.Connection{}, riverhook.ErrConnectionGone
		}
		return c, nil
	}
	worker := riverhook.NewWorker(sender, resolve, &riverhook.WorkerOptions{
		Logger: logger,
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
	registry := river.NewWorkers()
	river.AddWorker(registry, worker)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema:               schema,
		Workers:              registry,
		Queues:               map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		FetchCooldown:        10 * time.Millisecond, // the default 100 ms caps a client at MaxWorkers jobs per 100 ms
		FetchPollInterval:    100 * time.Millisecond,
		JobTimeout:           worker.Timeout(nil), // the attempt timeout and some room
		RescueStuckJobsAfter: rescueAfter,
		Logger:               logger,
	})
	if err != nil {
		return err
	}
	// Started apart from ctx: an interrupt stops the client gracefully
	// below, finishing the attempts in flight, instead of cancelling them.
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	fmt.Fprintf(out, "working with %d workers; interrupt to stop\n", workers)
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return client.Stop(stopCtx) // finishes the attempts in flight
}
