package riverhook_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/webhooktest"
)

// databaseExamples run against the PostgreSQL of TEST_DATABASE_URL; TestMain
// skips them, saying so, where there is none and CI is not set.
const databaseExamples = "^(ExampleNewWorker|ExampleInsertTx|ExampleList|ExampleRecover|ExampleResend|ExampleEraseSubject|ExampleEraseArgs|ExampleEraseBodies|ExampleNewConnectionPlaces|ExampleConnectionPlaces_Prune|ExampleEnable)$"

// exampleDatabase returns a pool on TEST_DATABASE_URL and a fresh schema for
// one Example, and a func that drops the schema and closes the pool. A
// service uses its own pool and River's tables in its search path.
func exampleDatabase(ctx context.Context) (*pgxpool.Pool, string, func()) {
	pool, err := pgxpool.New(ctx, os.Getenv("TEST_DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	var b [6]byte
	rand.Read(b[:])
	schema := "example_" + hex.EncodeToString(b[:])
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		log.Fatal(err)
	}
	return pool, schema, func() {
		pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		pool.Close()
	}
}

// migrate makes River's tables in schema, as a service does once (with
// rivermigrate, or River's CLI), and riverhook's beside them.
func migrate(ctx context.Context, pool *pgxpool.Pool, schema string) {
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		log.Fatal(err)
	}
	if err := riverhook.Migrate(ctx, pool, schema); err != nil {
		log.Fatal(err)
	}
}

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

// The outbox: the deliveries are inserted in the transaction of the change
// that caused the event, and exist exactly when it commits. A customer
// without webhooks inserts nothing, and the change commits.
func ExampleInsertTx() {
	ctx := context.Background()
	pool, schema, done := exampleDatabase(ctx)
	defer done()
	migrate(ctx, pool, schema)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema}) // insert-only
	if err != nil {
		log.Fatal(err)
	}

	for _, connections := range [][]string{{"crm", "erp"}, nil} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			log.Fatal(err)
		}
		// ... the change that identified the user, in tx ...
		res, err := riverhook.InsertTx(ctx, client, tx, "evt_42", connections, webhook.SamplePayload(time.Now()), nil)
		if err != nil {
			log.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d connection(s): %d job(s) inserted, committed\n", len(connections), len(res))
	}
	// Output:
	// 2 connection(s): 2 job(s) inserted, committed
	// 0 connection(s): 0 job(s) inserted, committed
}

// The whole setup: migrate River's schema, register the worker, start a
// client whose rescuer runs a crashed process's deliveries again within
// minutes, and enqueue in the transaction of the change. The client-wide
// JobTimeout stays River's: the worker's own Timeout bounds its jobs.
func ExampleNewWorker() {
	ctx := context.Background()
	pool, schema, done := exampleDatabase(ctx)
	defer done()
	migrate(ctx, pool, schema)
	receiver := webhooktest.NewServer("whsec_example", nil) // a customer's endpoint
	defer receiver.Close()

	sender := receiver.Sender(nil) // in a service: webhook.NewSender(nil), the 1 s, 2 s, 4 s schedule
	resolve := func(ctx context.Context, id string) (webhook.Connection, error) {
		if id != "crm" { // your table of connections
			return webhook.Connection{}, riverhook.ErrConnectionGone
		}
		return receiver.Connection(), nil
	}
	worker, err := riverhook.NewWorker(sender, resolve, &riverhook.WorkerOptions{
		MaxInFlightPerConnection: 8,
		OnAttempt: func(_ context.Context, job *river.Job[riverhook.Args], a webhook.Attempt) error {
			fmt.Printf("%s to %s: attempt %d, status %d\n", job.Args.DeliveryID, job.Args.ConnectionID, a.N, a.StatusCode)
			return nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema:               schema,
		Queues:               map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 32}},
		Workers:              workers,
		FetchCooldown:        10 * time.Millisecond,          // the default 100 ms caps a client at 32 jobs per 100 ms
		RescueStuckJobsAfter: worker.RescueStuckJobsAfter(0), // 0: the client's JobTimeout is River's default
	})
	if err != nil {
		log.Fatal(err)
	}
	completed, cancel := client.Subscribe(river.EventKindJobCompleted)
	defer cancel()
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(ctx, worker.Timeout(nil))
		defer cancel()
		if err := client.Stop(stopCtx); err != nil { // waits for the attempts in flight
			log.Fatal(err)
		}
	}()

	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// ... the change that identified the user ...
	if _, err := riverhook.InsertTx(ctx, client, tx, "evt_42", []string{"crm"}, webhook.SamplePayload(time.Now()), nil); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	select {
	case ev := <-completed:
		fmt.Println("job", ev.Job.State)
	case <-time.After(30 * time.Second):
		log.Fatal("not delivered within 30 s")
	}
	fmt.Println("rescue after", worker.RescueStuckJobsAfter(0))
	// Output:
	// evt_42 to crm: attempt 1, status 200
	// job completed
	// rescue after 1m0s
}

// The least RescueStuckJobsAfter that never rescues a delivery still
// running, for the Sender's attempt timeout and the client's JobTimeout.
func ExampleWorker_RescueStuckJobsAfter() {
	resolve := func(context.Context, string) (webhook.Connection, error) {
		return webhook.Connection{}, riverhook.ErrConnectionGone
	}
	for _, attemptTimeout := range []time.Duration{0, 2 * time.Minute} { // 0: the default, 30 s
		sender, err := webhook.NewSender(&webhook.SenderOptions{AttemptTimeout: attemptTimeout})
		if err != nil {
			log.Fatal(err)
		}
		worker, err := riverhook.NewWorker(sender, resolve, nil)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("attempt timeout %v: job timeout %v, rescue after %v; with a client JobTimeout of 5m: %v\n",
			sender.AttemptTimeout(), worker.Timeout(nil), worker.RescueStuckJobsAfter(0), worker.RescueStuckJobsAfter(5*time.Minute))
	}
	// Output:
	// attempt timeout 30s: job timeout 40s, rescue after 1m0s; with a client JobTimeout of 5m: 5m0s
	// attempt timeout 2m0s: job timeout 2m10s, rescue after 2m20s; with a client JobTimeout of 5m: 5m0s
}

// A dashboard's log of delivery attempts, or a GET
// /connections/{id}/attempts: a connection's recent deliveries, each with
// its whole attempt log, from River's jobs.
func ExampleList() {
	ctx := context.Background()
	pool, schema, done := exampleDatabase(ctx)
	defer done()
	migrate(ctx, pool, schema)
	receiver := webhooktest.NewServer("whsec_example", nil)
	defer receiver.Close()
	receiver.Script(webhooktest.Status(http.StatusServiceUnavailable)) // the first attempt
	sender := receiver.Sender(&webhook.SenderOptions{Retry: &webhook.RetryPolicy{
		MaxRetries: 3, Backoff: webhook.ExponentialBackoff(10*time.Millisecond, time.Second),
	}})
	worker, err := riverhook.NewWorker(sender, func(context.Context, string) (webhook.Connection, error) {
		return receiver.Connection(), nil
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema: schema, Workers: workers, FetchCooldown: 10 * time.Millisecond,
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}},
	})
	if err != nil {
		log.Fatal(err)
	}
	completed, cancel := client.Subscribe(river.EventKindJobCompleted)
	defer cancel()
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer client.Stop(ctx)
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := riverhook.InsertTx(ctx, client, tx, "evt_42", []string{"crm"}, webhook.SamplePayload(time.Now()), nil)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	<-completed

	page, err := riverhook.List(ctx, client, "crm", nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range page.Deliveries {
		fmt.Printf("%s %s to %s: %s\n", d.DeliveryID, d.Event, d.ConnectionID, d.State)
		for _, a := range d.Attempts {
			line := fmt.Sprintf("  attempt %d: %d %s", a.N, a.StatusCode, cmpOr(string(a.Kind), "delivered"))
			if a.Retry {
				line += ", retry in " + a.RetryIn.String()
			}
			fmt.Println(line)
		}
	}
	// Output:
	// evt_42 user.identified to crm: completed
	//   attempt 1: 503 status, retry in 10ms
	//   attempt 2: 200 delivered
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Register sets up a River client's configuration for the deliveries: the
// Worker registered, and the rescue it needs, in River's own *river.Config.
// Worker.InsertOptions inserts with the Sender's policy: River's runs and
// the Sender's attempts are one policy.
func ExampleRegister() {
	sender, err := webhook.NewSender(nil) // the spec's policy: 3 retries
	if err != nil {
		log.Fatal(err)
	}
	worker, err := riverhook.NewWorker(sender, func(context.Context, string) (webhook.Connection, error) {
		return webhook.Connection{}, riverhook.ErrConnectionGone // your connections' table
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	config := &river.Config{Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 32}}}
	if err := riverhook.Register(config, worker); err != nil {
		log.Fatal(err)
	}
	// river.NewClient(riverpgxv5.New(pool), config) ...
	params, err := riverhook.InsertParams("evt_42", []string{"crm"}, webhook.SamplePayload(time.Now()), worker.InsertOptions(nil))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("rescue after:", config.RescueStuckJobsAfter)
	fmt.Println("runs per delivery:", params[0].InsertOpts.MaxAttempts, "= 4 attempts +", riverhook.MaxInterruptedRuns, "crashes")
	// Output:
	// rescue after: 1m0s
	// runs per delivery: 9 = 4 attempts + 5 crashes
}

// A dashboard's delivery log: a page of a connection's given-up deliveries,
// the counts per status of the last day, and a recover once the customer
// fixed the endpoint, first as a dry run.
func ExampleRecover() {
	ctx := context.Background()
	receiver := webhooktest.NewServer("whsec_example", nil)
	defer receiver.Close()
	receiver.Script(webhooktest.Status(http.StatusInternalServerError)) // broken, then fixed
	pool, client, worker, ended, done := exampleClient(ctx, receiver)
	defer done()
	nextDelivery(ended)

	page, err := riverhook.List(ctx, client, "crm", &riverhook.ListParams{Statuses: []riverhook.Status{riverhook.StatusGivenUp}})
	if err != nil {
		log.Fatal(err)
	}
	counts, err := riverhook.Count(ctx, client, pool, "crm", time.Now().Add(-24*time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	d := page.Deliveries[0]
	fmt.Println(d.DeliveryID, d.Status, d.Attempts[0].Outcome(), d.Attempts[0].StatusCode, "| given up in 24 h:", counts[riverhook.StatusGivenUp])

	p := riverhook.RecoverParams{Since: time.Now().Add(-time.Hour), Reason: "ana@example.com: the customer fixed the endpoint", DryRun: true}
	res, err := riverhook.Recover(ctx, client, pool, "crm", p, worker.InsertOptions(nil))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("dry run: would resend", res.Resent)
	p.DryRun = false
	if res, err = riverhook.Recover(ctx, client, pool, "crm", p, worker.InsertOptions(nil)); err != nil {
		log.Fatal(err)
	}
	nextDelivery(ended)
	if res, err = riverhook.Recover(ctx, client, pool, "crm", p, worker.InsertOptions(nil)); err != nil {
		log.Fatal(err)
	}
	fmt.Println("again: given up and not resent", res.GivenUp, "| resent", res.Resent)
	page, err = riverhook.List(ctx, client, "crm", nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range page.Deliveries {
		fmt.Println(d.DeliveryID, d.Status, d.ResendReason)
	}
	// Output:
	// evt_42 given_up status 500 | given up in 24 h: 1
	// dry run: would resend 1
	// again: given up and not resent 0 | resent 0
	// evt_42 delivered ana@example.com: the customer fixed the endpoint
	// evt_42 given_up
}

// exampleClient starts a River client working the deliveries to receiver on
// a fresh schema, and returns it with its Worker and the events of ended
// jobs, and a func that stops it and drops the schema.
func exampleClient(ctx context.Context, receiver *webhooktest.Server) (*pgxpool.Pool, *river.Client[pgx.Tx], *riverhook.Worker, <-chan *river.Event, func()) {
	pool, schema, drop := exampleDatabase(ctx)
	migrate(ctx, pool, schema)
	sender := receiver.Sender(&webhook.SenderOptions{Retry: &webhook.RetryPolicy{}}) // one attempt, for the examples
	worker, err := riverhook.NewWorker(sender, func(context.Context, string) (webhook.Connection, error) {
		return receiver.Connection(), nil
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	config := &river.Config{Schema: schema, FetchCooldown: 10 * time.Millisecond,
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}}}
	if err := riverhook.Register(config, worker); err != nil {
		log.Fatal(err)
	}
	client, err := river.NewClient(riverpgxv5.New(pool), config)
	if err != nil {
		log.Fatal(err)
	}
	ended, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := riverhook.InsertTx(ctx, client, tx, "evt_42", []string{"crm"}, webhook.SamplePayload(time.Now()), worker.InsertOptions(nil))
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	return pool, client, worker, ended, func() {
		client.Stop(ctx)
		cancel()
		drop()
	}
}

// nextDelivery returns the job of the next delivery among ended, past the
// jobs of riverhook's maintenance, which River's leader runs at its start
// (PruneKind): which of the two ends first is up to the scheduler.
func nextDelivery(ended <-chan *river.Event) *rivertype.JobRow {
	for ev := range ended {
		if ev.Job.Kind == riverhook.Kind {
			return ev.Job
		}
	}
	log.Fatal("the subscription ended")
	return nil
}

// A dashboard's Resend button: one ended delivery sent again, with who
// asked and why; a double click sends once, and so does a click once River
// has deleted the resend.
func ExampleResend() {
	ctx := context.Background()
	receiver := webhooktest.NewServer("whsec_example", nil)
	defer receiver.Close()
	pool, client, worker, ended, done := exampleClient(ctx, receiver)
	defer done()
	first := nextDelivery(ended) // delivered

	job, inserted, err := riverhook.Resend(ctx, client, pool, first.ID, "ana@example.com: the customer lost it", worker.InsertOptions(nil))
	if err != nil {
		log.Fatal(err)
	}
	_, again, err := riverhook.Resend(ctx, client, pool, first.ID, "a double click", worker.InsertOptions(nil))
	if err != nil {
		log.Fatal(err)
	}
	d, err := riverhook.DeliveryOf(nextDelivery(ended))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("inserted:", inserted, "| again:", again, "| same job:", d.JobID == job.ID)
	fmt.Println(d.DeliveryID, d.Status, "resent from the first:", d.ResentFrom == first.ID, "|", d.ResendReason)

	// A day later River deletes the delivered resend (its
	// CompletedJobRetentionPeriod); the first job is marked, and is not
	// sent a third time.
	if _, err := client.JobDelete(ctx, job.ID); err != nil {
		log.Fatal(err)
	}
	row, err := client.JobGet(ctx, first.ID)
	if err != nil {
		log.Fatal(err)
	}
	if d, err = riverhook.DeliveryOf(row); err != nil {
		log.Fatal(err)
	}
	_, _, err = riverhook.Resend(ctx, client, pool, first.ID, "a click a day later", worker.InsertOptions(nil))
	fmt.Println("the first, resent as that job:", d.ResentAs == job.ID, "| again:", errors.Is(err, riverhook.ErrResent))
	fmt.Println("the receiver got it", len(receiver.Deliveries()), "times")
	// Output:
	// inserted: true | again: false | same job: true
	// evt_42 delivered resent from the first: true | ana@example.com: the customer lost it
	// the first, resent as that job: true | again: true
	// the receiver got it 2 times
}

// A user asked to be forgotten: every delivery about them, found by the
// subject each records (their user id, by default), leaves their email,
// name and phone nowhere in River's rows, neither in the body nor in what a
// receiver echoed of it; a delivery still under way is cancelled. The
// attempt logs keep their outcomes and statuses.
func ExampleEraseSubject() {
	ctx := context.Background()
	receiver := webhooktest.NewServer("whsec_example", &webhooktest.ServerOptions{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(w, r.Body) // a receiver that echoes the body back
		}),
	})
	defer receiver.Close()
	pool, client, worker, ended, done := exampleClient(ctx, receiver)
	defer done()
	nextDelivery(ended) // evt_42, about the user usr_test_0000, delivered
	p := webhook.SamplePayload(time.Now())
	params, err := riverhook.InsertParams("evt_43", []string{"crm"}, p, worker.InsertOptions(&river.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)}))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.InsertMany(ctx, params); err != nil {
		log.Fatal(err)
	}
	page, err := riverhook.List(ctx, client, "crm", &riverhook.ListParams{Statuses: []riverhook.Status{riverhook.StatusDelivered}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("the log quotes the email:", strings.Contains(string(page.Deliveries[0].Attempts[0].ResponseBody), p.User.Email))

	res, err := riverhook.EraseSubject(ctx, client, pool, p.User.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("erased %d, cancelled %d, under way %d\n", res.Erased, res.Cancelled, res.UnderWay)
	page, err = riverhook.List(ctx, client, "crm", nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range page.Deliveries {
		fmt.Println(d.DeliveryID, d.Status, "erased:", d.Erased)
		for _, a := range d.Attempts {
			fmt.Println("  attempt", a.N, a.Outcome(), a.StatusCode, string(a.ResponseBody))
		}
	}
	// Output:
	// the log quotes the email: true
	// erased 2, cancelled 1, under way 0
	// evt_43 cancelled erased: true
	// evt_42 delivered erased: true
	//   attempt 1 delivered 200 [erased]
}

// A user asked to be forgotten, and the request cannot wait for the
// deliveries under way to end: the service inserts a durable erasure in
// the transaction that records the request, and riverhook finishes it,
// through crashes. The job completes once nothing of the user is under
// way; its output is the totals. A subject that is not an id is refused at
// once.
func ExampleEraseArgs() {
	ctx := context.Background()
	receiver := webhooktest.NewServer("whsec_example", nil)
	defer receiver.Close()
	pool, client, _, ended, done := exampleClient(ctx, receiver)
	defer done()
	nextDelivery(ended) // evt_42, about the user usr_test_0000, delivered

	var jobID int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// ... the service records the request in its own tables ...
		res, err := client.InsertTx(ctx, tx, riverhook.EraseArgs{Subject: "usr_test_0000"}, nil)
		if err != nil {
			return err
		}
		jobID = res.Job.ID
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	for ev := range ended {
		if ev.Job.ID == jobID {
			break
		}
	}
	job, err := client.JobGet(ctx, jobID)
	if err != nil {
		log.Fatal(err)
	}
	var res riverhook.EraseResult
	if err := json.Unmarshal(job.Output(), &res); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: erased %d, cancelled %d, under way %d\n", job.State, res.Erased, res.Cancelled, res.UnderWay)

	_, err = client.Insert(ctx, riverhook.EraseArgs{Subject: "ana@example.com"}, nil)
	fmt.Println("an email as the subject:", errors.Is(err, riverhook.ErrInvalidSubject))
	// Output:
	// completed: erased 1, cancelled 0, under way 0
	// an email as the subject: true
}

// Erasing deliveries by id, for those inserted without a subject
// (InsertBytesTx without InsertOptions.Subject), or for every delivery once
// it ends: the body of an ended delivery and the texts of its log leave
// River's rows; the log's outcomes stay.
func ExampleEraseBodies() {
	ctx := context.Background()
	receiver := webhooktest.NewServer("whsec_example", nil)
	defer receiver.Close()
	pool, client, _, ended, done := exampleClient(ctx, receiver)
	defer done()
	nextDelivery(ended)

	n, err := riverhook.EraseBodies(ctx, client, pool, []string{"evt_42"}) // the user's deliveries, as the service knows them
	if err != nil {
		log.Fatal(err)
	}
	page, err := riverhook.List(ctx, client, "crm", nil)
	if err != nil {
		log.Fatal(err)
	}
	d := page.Deliveries[0]
	fmt.Println("erased:", n, d.Erased, "| log kept:", len(d.Attempts), d.Attempts[0].Outcome())
	// Output:
	// erased: 1 true | log kept: 1 delivered
}

// The fleet's bound: every worker process takes a connection's places from
// the same database, so that 1 in flight holds for the deployment, not for
// each process. Here two Workers stand for two processes: while one makes
// a Send Test to a slow endpoint, the other finds the connection busy.
func ExampleNewConnectionPlaces() {
	ctx := context.Background()
	pool, schema, done := exampleDatabase(ctx)
	defer done()
	if err := riverhook.Migrate(ctx, pool, schema); err != nil {
		log.Fatal(err)
	}
	arrived, release := make(chan struct{}), make(chan struct{})
	receiver := webhooktest.NewServer("whsec_example", &webhooktest.ServerOptions{
		Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { close(arrived); <-release }), // a slow endpoint
	})
	defer receiver.Close()
	resolve := func(context.Context, string) (webhook.Connection, error) { return receiver.Connection(), nil }
	process := func() *riverhook.Worker {
		worker, err := riverhook.NewWorker(receiver.Sender(nil), resolve, &riverhook.WorkerOptions{
			MaxInFlightPerConnection: 1,
			Places:                   riverhook.NewConnectionPlaces(pool, schema), // one session per process
		})
		if err != nil {
			log.Fatal(err)
		}
		return worker
	}
	first, second := process(), process()

	answered := make(chan int)
	go func() {
		res, err := first.SendTest(ctx, "crm")
		if err != nil {
			log.Fatal(err)
		}
		answered <- res.Attempts[0].StatusCode
	}()
	<-arrived // the first Send Test under way
	_, err := second.SendTest(ctx, "crm")
	fmt.Println("the other process:", errors.Is(err, riverhook.ErrBusy))
	close(release)
	fmt.Println("the first:", <-answered)
	// Output:
	// the other process: true
	// the first: 200
}

// A dashboard's Send Test of an event of the service's own: the sample
// body is sent byte for byte, signed as a delivery is, once, whatever
// the connection subscribes to.
func ExampleWorker_SendTestBytes() {
	receiver := webhooktest.NewServer("whsec_example", nil) // a customer's endpoint
	defer receiver.Close()
	resolve := func(ctx context.Context, id string) (webhook.Connection, error) {
		if id != "crm" { // your table of connections
			return webhook.Connection{}, riverhook.ErrConnectionGone
		}
		return receiver.Connection(), nil
	}
	worker, err := riverhook.NewWorker(receiver.Sender(nil), resolve, nil)
	if err != nil {
		log.Fatal(err)
	}
	sample := []byte(`{"event":"deal.closed","deal":{"id":"deal_test","amount":1200}}`)
	res, err := worker.SendTestBytes(context.Background(), "crm", "deal.closed", sample)
	if err != nil {
		log.Fatal(err)
	}
	got := receiver.Deliveries()[0]
	fmt.Println("answered", res.Attempts[0].StatusCode)
	fmt.Println("received", got.Header.Get(webhook.HeaderEvent), string(got.Body))
	// Output:
	// answered 200
	// received deal.closed {"event":"deal.closed","deal":{"id":"deal_test","amount":1200}}
}

// The housekeeping of riverhook's own tables by hand: Register's periodic
// job (PruneKind) does it hourly on River's leader. The marks of endpoints
// that answer again, and the paces of connections whose slots are past and
// whose last start is a year past, are made again when needed.
func ExampleConnectionPlaces_Prune() {
	ctx := context.Background()
	pool, schema, done := exampleDatabase(ctx)
	defer done()
	if err := riverhook.Migrate(ctx, pool, schema); err != nil {
		log.Fatal(err)
	}
	places := riverhook.NewConnectionPlaces(pool, schema)
	dayAgo := time.Now().Add(-24 * time.Hour)
	marks, err := riverhook.NewEndpointMarks(pool, schema).Prune(ctx, dayAgo)
	if err != nil {
		log.Fatal(err)
	}
	paces, err := places.Prune(ctx, dayAgo)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("a day on:", marks, "marks,", paces, "paces pruned")
	// Output:
	// a day on: 0 marks, 0 paces pruned
}

// A connection's life: its endpoint answers 410 Gone, so the Worker disables
// it and the service's worker of NoticeArgs is told (an e-mail, in a
// service). A delivery inserted meanwhile is kept, not sent. Enable's dry run
// counts what would go; Enable sends it, and the given-up one again.
func ExampleEnable() {
	ctx := context.Background()
	receiver := webhooktest.NewServer("whsec_example", nil)
	defer receiver.Close()
	receiver.Script(webhooktest.Status(http.StatusGone)) // then 200s
	pool, schema, drop := exampleDatabase(ctx)
	defer drop()
	migrate(ctx, pool, schema) // River's tables and riverhook's: every set-up
	sender := receiver.Sender(&webhook.SenderOptions{Retry: &webhook.RetryPolicy{MaxRetries: 1}})
	worker, err := riverhook.NewWorker(sender, func(context.Context, string) (webhook.Connection, error) {
		return receiver.Connection(), nil
	}, nil) // WorkerOptions.Life: nil, the default policy
	if err != nil {
		log.Fatal(err)
	}
	notices := make(chan riverhook.NoticeArgs, 10)
	config := &river.Config{Schema: schema, FetchCooldown: 10 * time.Millisecond, Workers: river.NewWorkers(),
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}, riverhook.NoticeQueue: {MaxWorkers: 1}}}
	river.AddWorker(config.Workers, river.WorkFunc(func(ctx context.Context, job *river.Job[riverhook.NoticeArgs]) error {
		notices <- job.Args // a service sends its e-mail here
		return nil
	}))
	if err := riverhook.Register(config, worker); err != nil {
		log.Fatal(err)
	}
	client, err := river.NewClient(riverpgxv5.New(pool), config)
	if err != nil {
		log.Fatal(err)
	}
	kept, cancel := client.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobSnoozed, river.EventKindJobCompleted}})
	defer cancel()
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer client.Stop(ctx)
	insert := func(id string) {
		params, err := riverhook.InsertParams(id, []string{"crm"}, webhook.SamplePayload(time.Now()), worker.InsertOptions(nil))
		if err == nil {
			_, err = client.InsertMany(ctx, params)
		}
		if err != nil {
			log.Fatal(err)
		}
	}
	insert("evt_1")
	n := <-notices
	fmt.Println(n.ConnectionID, n.Change, n.Reason)
	insert("evt_2") // kept: its run snoozes, an hour at a time, until the connection is enabled
	for ev := range kept {
		if ev.Kind == river.EventKindJobSnoozed && time.Until(ev.Job.ScheduledAt) > 30*time.Minute {
			break
		}
	}

	// evt_1 gave up on the 410 (never retried); IncludeGivenUp sends it again.
	p := riverhook.EnableParams{DryRun: true, IncludeGivenUp: true, Reason: "ana@example.com: the customer fixed the endpoint"}
	dry, err := riverhook.Enable(ctx, client, pool, "crm", p, worker.InsertOptions(nil))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("dry run: would send", dry.Waiting, "kept and", dry.GivenUp, "given up")
	p.DryRun = false
	res, err := riverhook.Enable(ctx, client, pool, "crm", p, worker.InsertOptions(nil))
	if err != nil {
		log.Fatal(err)
	}
	for delivered := 0; delivered < res.Waiting+res.GivenUp; {
		if ev := <-kept; ev.Kind == river.EventKindJobCompleted && ev.Job.Kind == riverhook.Kind {
			delivered++
		}
	}
	n = <-notices
	fmt.Println(n.ConnectionID, n.Change, n.Waiting)
	fmt.Println("received:", len(receiver.Deliveries()))
	history, err := riverhook.History(ctx, client, pool, "crm", 10) // newest first
	if err != nil {
		log.Fatal(err)
	}
	for _, h := range history {
		if h.Reason != "" {
			fmt.Printf("history: %s (%s)\n", h.Change, h.Reason)
		} else {
			fmt.Printf("history: %s\n", h.Change)
		}
	}
	// Output:
	// crm disabled gone
	// dry run: would send 1 kept and 1 given up
	// crm enabled 2
	// received: 3
	// history: enabled
	// history: disabled (gone)
}
