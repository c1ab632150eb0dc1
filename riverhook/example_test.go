package riverhook_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
)

// InsertParams turns one event for a customer's connections into one job
// per connection, for InsertManyTx in the transaction that made the change.
func ExampleInsertParams() {
	p := webhook.SamplePayload(time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC))
	params, err := riverhook.InsertParams("evt_42", []string{"crm", "erp"}, p, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, param := range params {
		args := param.Args.(riverhook.Args)
		fmt.Println(args.Kind(), args.ConnectionID, args.DeliveryID, args.Event, param.InsertOpts.MaxAttempts, param.InsertOpts.Tags)
	}
	// Output:
	// signedhook_delivery crm evt_42 user.identified 9 [connection-crm event-user-identified]
	// signedhook_delivery erp evt_42 user.identified 9 [connection-erp event-user-identified]
}

// The whole setup: migrate River's schema, register the worker, start a
// client, and enqueue in the transaction of the change.
func ExampleNewWorker() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		log.Fatal(err)
	}

	sender, err := webhook.NewSender(nil) // the service's schedule: 1 s, 2 s, 4 s
	if err != nil {
		log.Fatal(err)
	}
	resolve := func(ctx context.Context, id string) (webhook.Connection, error) {
		return loadConnection(ctx, pool, id) // your table of connections; riverhook.ErrConnectionGone when deleted
	}
	worker := riverhook.NewWorker(sender, resolve, &riverhook.WorkerOptions{MaxInFlightPerConnection: 8})
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 32}},
		Workers:       workers,
		FetchCooldown: 10 * time.Millisecond, // the default 100 ms caps a client at 32 jobs per 100 ms
		JobTimeout:    worker.Timeout(nil),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}

	// In the transaction that identified the user:
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// ... the user's change ...
	params, err := riverhook.InsertParams("evt_42", []string{"crm"}, webhook.SamplePayload(time.Now()), nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.InsertManyTx(ctx, tx, params); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil { // the delivery exists exactly when the change does
		log.Fatal(err)
	}
}

func loadConnection(context.Context, *pgxpool.Pool, string) (webhook.Connection, error) {
	return webhook.Connection{}, riverhook.ErrConnectionGone
}
