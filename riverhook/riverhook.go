// Package riverhook makes webhook deliveries durable with River, the job
// queue on PostgreSQL (github.com/riverqueue/river): a delivery is written
// in the same transaction as the change that caused it (the outbox), survives
// restarts and crashes, and is worked by as many processes as you run. It
// integrates with River rather than being a queue of its own.
//
// Each delivery to a connection is one job ([Args], kind
// "signedhook_delivery") holding the event, the delivery's id, the
// connection's id and the body as exact bytes; never a URL, a header value
// or a secret, which the [Worker] resolves when each attempt runs, so a
// rotated secret or a changed URL applies to pending retries. Each run of
// the job is one [webhook.Sender.Attempt]; the Sender's retry policy decides
// whether and when the next attempt runs, and River schedules it.
//
// # Setting up
//
// Migrate River's schema once (rivermigrate, or the river CLI), register
// the worker, and start a client:
//
//	worker := riverhook.NewWorker(sender, resolve, nil)
//	workers := river.NewWorkers()
//	river.AddWorker(workers, worker)
//	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
//		Queues:               map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 32}},
//		Workers:              workers,
//		FetchCooldown:        10 * time.Millisecond, // the default 100 ms caps a client at MaxWorkers jobs per 100 ms
//		RescueStuckJobsAfter: worker.RescueStuckJobsAfter(0), // 1 min; River's default is 1 h
//	})
//
// Client settings that matter: RescueStuckJobsAfter, after which River's
// rescuer (every 30 s, on the elected leader) runs again the job of a
// process that died: [Worker.RescueStuckJobsAfter] derives the least safe
// value from the Sender's attempt timeout, so a killed worker's deliveries
// run again within about a minute and a half instead of River's hour.
// FetchCooldown (above). MaxWorkers, the deliveries in flight per client.
// Leave the client-wide JobTimeout alone: it is every job kind's, and the
// Worker bounds its own jobs ([Worker.Timeout], which River prefers).
//
// Register the Worker in every River client you start on the database
// (and schema), also in those that work other queues only, and give them
// the same RescueStuckJobsAfter: River's rescuer runs on whichever client
// is the elected leader, with that client's settings, and it discards a
// stuck job of a kind its own client has no worker for, so a delivery cut
// by a crash is lost whenever a client without the Worker leads. A client
// that must not register it sets River's LeaderElectionDisabled. A queue
// of the deliveries' own ([InsertOptions].InsertOpts' Queue), worked by the
// clients you choose, keeps deliveries off the other clients' workers (as
// their FetchOnlyKnownKinds does): a client working that queue without the
// Worker fails each delivery it fetches, costing one of the job's runs. It
// does not keep them from the leader's rescuer.
//
// # Enqueueing in your transaction
//
//	_, err := riverhook.InsertTx(ctx, client, tx, deliveryID, connectionIDs, payload, nil)
//	... // commit: the deliveries exist exactly when your change does
//
// A customer with no connections inserts nothing and the transaction
// commits. A rolled-back transaction leaves no job. A repeated insert of the
// same delivery to the same connection is skipped (unique by both ids, with
// River's unique options in [Args.InsertOpts], so a plain client.Insert of
// Args is unique too, also against a job of the earlier riverhook), as long
// as the earlier job is not cancelled or discarded: River's default unique
// states leave those out. To resend a delivery that ended, retry its job
// (client.JobRetry: its attempt numbers go on, so one that the policy gave
// up on gets one more attempt), or insert it under a new delivery id.
// Receivers must tolerate duplicates: a worker killed after the receiver
// answered runs the attempt again.
//
// # Crashes
//
// The attempt number the Sender's policy sees counts the attempts that
// reached an outcome: an attempt cut by a crash (a SIGKILL, a lost machine),
// the last one included, costs neither the delivery nor one of the policy's
// attempts. River counts every run, so [InsertParams] gives each job River
// attempts for the policy's plus [MaxInterruptedRuns]: a job whose worker
// dies every time still ends. A job ends completed when delivered, discarded
// when the policy gave up (or River ran out of runs: [Delivery].Reason says
// which), cancelled when its connection is gone, invalid or refused by the
// private-network guard.
//
// # Dead endpoints
//
// With the Sender's endpoint health on (webhook.SenderOptions.Health), a
// delivery to an endpoint that is down is not sent: its job is snoozed until
// the endpoint's next probe, costing no attempt, River's or the policy's,
// and goes out once a probe finds the endpoint up. Each worker process
// keeps its own view and probes on its own.
//
// # The attempt log
//
// Each job holds its delivery's whole attempt log as its River output
// (river.RecordOutput, in the job's metadata under "output"), written with
// the outcome of each run, with no table of riverhook's own and no write of
// its own: at most one entry per run River makes (MaxAttempts), each at
// most 1 KiB of JSON, such as
//
//	{"attempts": [
//	  {"n": 1, "run": 1, "kind": "status", "start": "2026-11-22T09:00:00.125Z", "status": 503,
//	   "took": "3.214ms", "timestamp": 1795338000125, "retry_in": "1s",
//	   "error": "webhook: receiver answered 503 Service Unavailable", "response": "{\"error\":\"busy\"}"},
//	  {"n": 2, "run": 2, "kind": "interrupted"},
//	  {"n": 2, "run": 3, "kind": "delivered", "start": "2026-11-22T09:01:31.410Z", "status": 200,
//	   "took": "1.207ms", "timestamp": 1795338091410}]}
//
// n is the policy's attempt number, run River's; kind is "delivered", a
// [webhook.FailureKind], or "interrupted" for an attempt cut by a crash,
// added when River runs the rescued job again ([WorkerOptions.OnAttempt]
// sees it then); retry_in is present when a retry follows (0s included);
// response is the printable start of the answer's body. [ListDeliveries]
// returns a connection's recent deliveries with their logs, and
// [DeliveryOf] reads one job. The log, the job's errors ("riverhook: attempt
// 1: 503 Service Unavailable; retry in 1s") and its tags ([ConnectionTag],
// [EventTag]) read as a delivery in River's web UI (riverui), where the
// tags filter the job list.
//
// No job row holds a URL's path or query, a header value or a secret: the
// errors name an endpoint by its origin alone, and a connection by its id
// (the [Resolver]'s own error text goes to the Worker's Logger).
//
// # Upgrading from the earlier riverhook
//
// The deliveries the earlier riverhook queued run after an upgrade, numbered
// on: their failed attempts, read from the job's errors, count for the
// policy, which goes on with its next attempt and wait, and start the job's
// attempt log. A new insert of the same delivery is skipped against them,
// and [ListDeliveries] lists them. They keep the MaxAttempts they were
// inserted with, the policy's attempts alone, with no runs for
// interrupted ones: each of their runs cut by a crash, or whose Resolver
// fails, leaves River one attempt fewer to make.
package riverhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/signedhook/webhook"
)

// Kind is the River job kind of a delivery.
const Kind = "signedhook_delivery"

// MaxInterruptedRuns is how many runs of a delivery's job River may make
// beyond the policy's attempts when [InsertParams] sizes its MaxAttempts:
// runs cut by a crash, or whose [Resolver] failed, which cost the policy no
// attempt. Five: a crash interrupts only the attempts in flight, so a
// delivery cut more often than that is one whose attempts kill the worker,
// and River then discards it instead of running it forever.
const MaxInterruptedRuns = 5

// Args is one delivery to one connection, as stored in the job. The body is
// kept as exact bytes (base64 in the job's JSON, "payload_base64"):
// PostgreSQL's jsonb would reorder a JSON object and break every
// signature. The body's JSON name is the last of the four both in River
// UI, which sorts keys by name, and in PostgreSQL, which sorts them by
// length: the connection, the delivery and the event read first. The ids'
// JSON names are those of the earlier riverhook, since River's unique key
// hashes them: an insert after an upgrade is unique against the same
// delivery queued before it.
type Args struct {
	ConnectionID string `json:"connection_id" river:"unique"`
	DeliveryID   string `json:"delivery_id" river:"unique"`
	Event        string `json:"event"`
	Body         []byte `json:"payload_base64"`
}

// Kind returns [Kind].
func (Args) Kind() string { return Kind }

// UnmarshalJSON decodes a job's args, also those of a job enqueued by an
// earlier riverhook, whose body's JSON name was body (and, for a while,
// the ids' connection and delivery): the deliveries queued before an
// upgrade still run after it.
func (a *Args) UnmarshalJSON(b []byte) error {
	type args Args // without this method
	var v struct {
		args
		Body       []byte `json:"body"`
		Connection string `json:"connection"`
		Delivery   string `json:"delivery"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*a = Args(v.args)
	if a.Body == nil {
		a.Body = v.Body
	}
	if a.ConnectionID == "" && a.DeliveryID == "" {
		a.ConnectionID, a.DeliveryID = v.Connection, v.Delivery
	}
	return nil
}

// InsertOpts returns River's insert options of every delivery job, which
// River applies to a plain client.Insert of Args too: unique by delivery
// and connection ids (ByArgs, in River's default unique states), and
// tagged with [ConnectionTag] and [EventTag] (unless the insert gives tags
// of its own, which River takes instead; [InsertParams] adds them to the
// delivery's). MaxAttempts is left to the client (Config.MaxAttempts, 25
// by default); [InsertParams] sizes it for the retry policy.
func (a Args) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		Tags:       []string{ConnectionTag(a.ConnectionID), EventTag(a.Event)},
		UniqueOpts: river.UniqueOpts{ByArgs: true},
	}
}

// ConnectionTag returns the River tag of the deliveries to the connection
// with the given id: "connection-" and the id, in which every character
// but ASCII letters, digits, '_' and '-' becomes '-', cut to River's 255
// characters. Filter River UI's job list or river.JobListParams.TagsAll by
// it. Ids that differ only in other characters share a tag.
func ConnectionTag(connectionID string) string { return tag("connection-", connectionID) }

// EventTag returns the River tag of the deliveries of an event kind, as
// [ConnectionTag] does for a connection: "event-user-identified" for
// "user.identified".
func EventTag(event string) string { return tag("event-", event) }

// tag returns prefix+v as a valid River tag (\A[\w][\w\-]+[\w]\z, at most
// 255 characters).
func tag(prefix, v string) string {
	var b strings.Builder
	b.WriteString(prefix)
	for _, r := range v {
		if b.Len() == 255 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	return strings.TrimRight(b.String(), "-")
}

// InsertOptions configures [InsertParams] and [InsertTx]. A nil
// *InsertOptions selects the defaults.
type InsertOptions struct {
	// Retry is the retry policy of the Sender that works the jobs: each
	// job may run its MaxRetries+1 attempts, plus [MaxInterruptedRuns].
	// Nil means webhook.DefaultRetryPolicy().
	Retry *webhook.RetryPolicy

	// InsertOpts, if not nil, is the base of every job's River insert
	// options: its Queue, Priority, Metadata, ScheduledAt and Pending
	// apply as they are, and its Tags are added to the delivery's own. Its
	// UniqueOpts replace [Args.InsertOpts]' when set. MaxAttempts is the
	// policy's, and is ignored. InsertParams does not modify it.
	InsertOpts *river.InsertOpts
}

// InsertParams returns the jobs delivering p to each of connectionIDs, for
// your own client.InsertManyTx in the transaction that made the change (or
// InsertMany without one); none, and no error, for no connection ([InsertTx]
// inserts them, and nothing for no connection, which InsertManyTx refuses).
// A connection id listed more than once gets one job, in the place of its
// first: River's insert of one delivery twice in one statement would fail
// the transaction. deliveryID identifies the event; with a connection id it
// makes each job unique (see [Args.InsertOpts]). p is validated and
// encoded once; the error matches webhook.ErrInvalidPayload.
func InsertParams(deliveryID string, connectionIDs []string, p webhook.Payload, opts *InsertOptions) ([]river.InsertManyParams, error) {
	if deliveryID == "" {
		return nil, errors.New("riverhook: the delivery id must not be empty")
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	body, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot be encoded as JSON: %w", webhook.ErrInvalidPayload, err)
	}
	if opts == nil {
		opts = &InsertOptions{}
	}
	policy := opts.Retry
	if policy == nil {
		policy = webhook.DefaultRetryPolicy()
	}
	var base river.InsertOpts
	if opts.InsertOpts != nil {
		base = *opts.InsertOpts
	}
	params := make([]river.InsertManyParams, 0, len(connectionIDs))
	seen := make(map[string]bool, len(connectionIDs))
	for _, id := range connectionIDs {
		if seen[id] {
			continue
		}
		seen[id] = true
		args := Args{ConnectionID: id, DeliveryID: deliveryID, Event: p.Event, Body: body}
		own := args.InsertOpts()
		io := base
		io.MaxAttempts = policy.MaxRetries + 1 + MaxInterruptedRuns
		io.Tags = append(slices.Clip(base.Tags), own.Tags...)
		if uniqueUnset(base.UniqueOpts) {
			io.UniqueOpts = own.UniqueOpts
		}
		params = append(params, river.InsertManyParams{Args: args, InsertOpts: &io})
	}
	return params, nil
}

func uniqueUnset(u river.UniqueOpts) bool {
	return !u.ByArgs && u.ByPeriod == 0 && !u.ByQueue && u.ByState == nil && !u.ExcludeKind
}

// InsertTx inserts the jobs delivering p to each of connectionIDs in tx, the
// transaction of the change that caused the event, with client (an insert-only
// client will do): the outbox. With no connection it validates p and
// inserts nothing, so the transaction commits. The results are River's,
// one per distinct connection id in the order of connectionIDs; a delivery
// inserted before is skipped (UniqueSkippedAsDuplicate). It blocks on the
// insert. Arguments are as for [InsertParams].
func InsertTx[TTx any](ctx context.Context, client *river.Client[TTx], tx TTx, deliveryID string, connectionIDs []string,
	p webhook.Payload, opts *InsertOptions) ([]*rivertype.JobInsertResult, error) {
	params, err := InsertParams(deliveryID, connectionIDs, p, opts)
	if err != nil || len(params) == 0 {
		return nil, err
	}
	return client.InsertManyTx(ctx, tx, params)
}

// DurableRetryPolicy returns a schedule for deliveries that may wait hours
// for an endpoint to come back: 6 retries after 5 s, 5 min, 30 min, 2 h, 5 h
// and 10 h, about 17.5 hours in all, every failure retried. Use it for the
// Sender of the [Worker] and for [InsertOptions.Retry] alike.
func DurableRetryPolicy() *webhook.RetryPolicy {
	waits := []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour}
	return &webhook.RetryPolicy{
		MaxRetries: len(waits),
		Backoff: func(retry int, _ *http.Response) time.Duration {
			return waits[min(max(retry, 1), len(waits))-1]
		},
	}
}
