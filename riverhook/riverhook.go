// Package riverhook makes webhook deliveries durable with River, the job
// queue on PostgreSQL (github.com/riverqueue/river): a delivery is written
// in the same transaction as the change that caused it (the outbox), survives
// restarts and crashes, and is worked by as many processes as you run. It
// integrates with River rather than being a queue of its own. The module's
// README.md walks through the set-up, crashes, the attempt log and River UI.
//
// A tour of the package:
//
//   - [Args] is one delivery to one connection (kind "signedhook_delivery"):
//     the event, the delivery's id, the connection's id and the body as
//     exact bytes; never a URL, a header value or a secret.
//   - [InsertTx] and [InsertParams] enqueue a delivery in your transaction,
//     one job per connection; a repeated insert is skipped while River
//     keeps the first job, however it ended.
//   - [Worker], built by [NewWorker] from a [webhook.Sender] and a
//     [Resolver], makes one [webhook.Sender.Attempt] per run of a job and
//     hands the policy's wait to River. [Register] adds it to a River
//     client's configuration and sets the rescue it needs;
//     [Worker.InsertOptions] inserts with its Sender's retry policy, so
//     that River and the Sender count one policy.
//   - A crash costs no attempt of the policy's ([MaxInterruptedRuns] bounds
//     the runs spent on them), and a delivery cut by one runs again within
//     about a minute and a half ([Worker.RescueStuckJobsAfter]).
//   - [List] and [Count] serve a dashboard's delivery log: pages filtered
//     by [Status], event and time, and counts per status. [DeliveryOf] reads
//     one job's [Delivery], which marshals to a stable JSON shape.
//   - [Resend] sends one delivery again, [Recover] a connection's given-up
//     deliveries since a time (with a dry run); both insert new jobs with
//     the caller's reason, under one rule: a delivery is sent again by
//     resending its newest job, once, decided under a lock of the
//     delivery's, so that double clicks, a Resend racing a Recover, and a
//     resend River has deleted since send nothing more.
//   - [EraseSubject] erases a user's personal data from every delivery
//     about them, found by the subject each records ([Args.Subject]);
//     [EraseBodies] from the ended deliveries of given ids.
//   - Package console (riverhook/console) serves a connection's log to the
//     service's customers, scoped to their own connections, with the Send
//     Test ([Worker.SendTest]) and the endpoint's health
//     ([Worker.EndpointHealth]).
//   - [DurableRetryPolicy] waits hours rather than seconds.
//   - A connection has a life ([ConnectionState], [StateOf]): active,
//     failing (with the date it will be disabled), or disabled with a
//     [DisableReason]. The Worker decides it from each attempt
//     ([LifePolicy]); [Disable] and [Enable] are the service's. Each step
//     is a [NoticeArgs] job, inserted with the change, for the service's
//     own worker to turn into an e-mail.
//
// Register the Worker in every River client you start on the database, also
// in those that work other queues only: River's rescuer runs on whichever
// client is the elected leader, and it discards a stuck job of a kind its
// own client has no worker for. A client that must not register it sets
// River's LeaderElectionDisabled. Leave the client-wide JobTimeout alone:
// the Worker bounds its own jobs ([Worker.Timeout]).
//
// With the Sender's endpoint health on (webhook.SenderOptions.Health), a
// delivery to an endpoint that is down is snoozed until the endpoint's next
// probe, costing no attempt.
//
// A deployment is several processes on one PostgreSQL, or one process
// alone: both get every promise below. [Migrate] makes riverhook's own
// tables beside River's. [EndpointMarks] share an endpoint's health
// (webhook.HealthOptions.Marks: every Sender writes and follows them, the
// console reads them). [ConnectionPlaces] ([WorkerOptions.Places]) share
// what the admission must agree on across processes.
//
// # Admission
//
// Before each attempt, the Worker admits the run to its connection, or
// snoozes the job to a slot. One algorithm does it, for one process and
// for a fleet; only where its facts live differs ([Places]: the process's
// memory by default, PostgreSQL with [NewConnectionPlaces]). Its concepts:
//
//   - Place: one of the connection's MaxInFlightPerConnection attempts in
//     flight. In a fleet, a session-level advisory lock, freed the moment
//     its process's session ends. The process reads the session between
//     statements: when the database ends it, the process cuts the attempts
//     on its places at once, logged as interrupted, and they run again. A
//     delivery is cut at most once, so that a session ending under every
//     attempt (an idle_session_timeout shorter than one) cannot repeat it
//     for ever. A place given back rides the round trip of the process's
//     next take, so that a busy process pays about one round trip per
//     attempt.
//   - Start: with a RateLimit, attempts start 1/rate apart, and 2% more.
//     A job back at its slot takes the next start up to its holding on
//     ahead and waits for it, so that a backlog starts on time.
//   - Chain: a job that must wait takes the connection's next slot, one
//     spacing after the last. The spacing is the endpoint's attempt time
//     over the bound (a place frees that often), or 1/rate when longer.
//   - Holding on: a job back at its slot that finds no place or start
//     waits up to two spacings in its run, rather than losing its turn.
//   - Down: a job whose endpoint is down takes a slot after the next
//     probe, the chain then spaced at SnoozeFor over the bound, so that a
//     backlog costs one bound's worth of runs a second.
//   - Wake: an answer from an endpoint whose waiting jobs were slotted
//     slower than it takes them (after an outage, or a burst slotted before
//     any attempt had ended) moves them forward to its pace, once, and
//     again a second later for the jobs snoozed meanwhile.
//   - Due: once a second per working process, the jobs due within 2 s are
//     made available at their time, so that they run on time rather than
//     at River's next scheduler pass (every 5 s).
//   - Clock: every time one process hands another is the database's: the
//     store's for slots and starts, the marks' ([EndpointMarks]), and,
//     through [Register], River's and the Worker's for snoozes, retries and
//     errors. The process's own clock still times durations, signs
//     attempts and runs River's rescuer.
//
// Its numbers, and why:
//
//   - SnoozeFor (1 s): an attempt's time before one has ended.
//   - Starts 2% over 1/rate apart: a start reaches the wire a moment
//     after its turn, and 20 ms a second absorb that, so that no second
//     holds one more than the rate. A start used later is given up.
//   - The attempt time is a moving average, each attempt weighing 1/8:
//     it follows a change within a few attempts, not one outlier.
//   - Holding on: two spacings, at least 100 ms (River's polls bring slots
//     in batches 50 ms apart), at most a second (it holds a River worker).
//     It tries for a place every twentieth of that, at least every 5 ms.
//     A process holds on in no more of a connection's runs at once than
//     places free in that time, at least two: a burst slotted faster than
//     the endpoint then proves to take them cannot hold every River worker.
//   - A fleet's place given back waits up to 5 ms for a take to ride:
//     a run holding on elsewhere loses at most one try.
//   - Wake: a chain over two spacings ahead, handed over a third slower than
//     the endpoint's pace; a move is worth a statement only then.
//   - A write that must outlive its run (a place given back, a wake) is
//     bounded by 10 s, so that a hung database never holds a run for ever.
//   - A fleet's session has TCP keepalives of 5 s, 2 s and 3 tries: a
//     process cut off from the database loses its places in about 11 s.
//   - [DefaultFetchPollInterval] (50 ms): how late a slot's job may come.
//   - A retry's error stamped up to 1 s before its run's attempted_at is
//     still a retry, not a snooze a wake may move: River stamps the error
//     with the process's reading of the database's clock (or its own clock,
//     in a client set up without Register), attempted_at with the database's.
//   - An idle connection is forgotten by the process after an hour.
//   - The database's clock is read once a second, with the due; the most
//     precise reading stands for a minute, as a busy pool's wait blurs one.
//   - [DefaultDisableAfter] (12 h): half a day of failures is an outage,
//     not a blip, and a night's outage is seen the next morning.
//   - [DefaultFailingWithin] (3 days): failures further apart are separate
//     troubles, not one outage; three days is MaxWait's horizon too.
//   - [DefaultWarnBefore] (1 day): a working day to act. Under the 12 h
//     span, the warning comes with the first failure.
//   - [DefaultKeepFor] (30 days): a month for a customer to come back; a
//     disabled connection keeps more than River keeps a given-up job (7 days).
//   - The states of the connections not active are read in one statement
//     at most once a second per process, whatever the number of
//     connections, and a disabled one at each run: every process sees a
//     change within 2 s.
//   - A success a process took for no change (its view of the states
//     read before another's failing write) is looked for in River's table
//     among the deliveries completed in a span's first minute, until the
//     first write after it: such a view is a second old at most, and a
//     scan of the span's completed deliveries would cost each of them once
//     a minute.
//   - Its last failure is written at most a minute apart: the spans are
//     hours, and a failing connection costs a write a minute, not one per
//     attempt. A LifePolicy.Within under an hour writes it a sixtieth of
//     Within apart, so that failures closer than Within stay one span.
//   - [Enable] moves forward again, a second after it commits, the kept
//     deliveries snoozed half an hour or more ahead: a run that read the
//     connection disabled as it committed stores its snooze within
//     milliseconds.
//   - A kept delivery snoozes an hour at a time: one whose snooze came
//     after both of Enable's moves waits an hour at most. 2,000 kept
//     deliveries cost 0.56 runs a second.
//
// # An endpoint's life
//
// The Worker decides a connection's state from each attempt it makes, by
// [WorkerOptions].Life:
//
//   - A failed attempt of an active connection makes it failing, with the
//     date it is disabled (DisableAt) if its attempts fail until then.
//   - A 2xx answer makes a failing connection active again.
//   - A 410 Gone disables it at once, with reason gone.
//   - With the Sender's endpoint health, a probe that finds the endpoint
//     still down is a failed attempt: it was sent. A delivery held back as
//     its endpoint is down is none: the probes carry the outage.
//   - A cut, cancelled or refused attempt (private network, invalid
//     connection) says nothing of the endpoint.
//   - A run of a disabled connection's delivery makes no attempt and adds
//     nothing to its log: it snoozes an hour at a time, until KeepFor
//     after the disable.
//     [Enable] moves it forward. New deliveries are accepted, and wait too.
//   - Each change inserts its [NoticeArgs] in the change's transaction.
//
// The state lives in riverhook's table riverhook_connection_state, made by
// [Migrate]: every set-up needs it, one process alone too. A run that finds
// no table fails with [ErrNoStateTable]'s text.
//
// # Retention and personal data
//
// The jobs are the attempt log: River deletes them after its retention
// periods, and the log with them. River's defaults keep a completed
// delivery 24 hours, a cancelled one 24 hours and a given-up one 7 days.
// To keep the log 30 days, set them on the client that runs River's
// maintenance (the elected leader: set them alike on every client):
//
//	config.CompletedJobRetentionPeriod = 30 * 24 * time.Hour
//	config.CancelledJobRetentionPeriod = 30 * 24 * time.Hour
//	config.DiscardedJobRetentionPeriod = 30 * 24 * time.Hour
//
// A job's args hold the delivery's body, with the user's email, name and
// phone, as exact bytes (base64 in JSON); and a receiver that echoes the
// body, answering 200, 500 or a 422 that quotes the email, puts them in the
// job's attempt log too (its response excerpts and error texts, in the
// job's metadata) and in River's errors column: anyone who reads River's
// tables, their backups, River UI or the log's JSON reads them. The body is
// not sealed: the Worker must sign and send those exact bytes, and a key of
// the service's in the job options would only move the question. Keep it
// out of sight instead by ending its life early:
//
//   - Each delivery records its subject, the user it is about ([Args.Subject]:
//     the payload's user id, or [InsertOptions.Subject]; an id, never an
//     email). When a user asks to be forgotten, [EraseSubject] erases them
//     from every delivery about them, resends included: it cancels those
//     under way, and replaces the body and every text that may quote it
//     with "[erased]", keeping the log's outcomes, statuses, times,
//     durations and runs. Call it again while [EraseResult].UnderWay says
//     deliveries were still running, or insert [EraseArgs] in the
//     transaction that records the request: a job that does so by itself,
//     through crashes, and completes when nothing is left.
//   - [EraseBodies] does the same to the ended deliveries of given ids: for
//     deliveries inserted without a subject, or for every delivery once it
//     ends (an OnAttempt of the last attempt, or a periodic job).
//
// An erased delivery reads "erased" in [Delivery] and its JSON, and cannot
// be resent. Keep River UI, which shows args and the log, to operators who
// may read personal data; a customer-facing log never shows the body (the
// console shows it only with its ShowPayload). What an erasure leaves is
// yours: the subject id, what you put in a job's tags and River metadata,
// your OnAttempt hook's and Logger's copies, and the old row versions
// PostgreSQL keeps until vacuum, and in the backups taken before.
//
// No job row holds a URL's path or query, a header value or a secret.
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
	"unicode"
	"unicode/utf8"

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
// signature. The body's JSON name is the last of a delivery's fields both
// in River UI, which sorts keys by name, and in PostgreSQL, which sorts
// them by length: the connection, the delivery, the event and the subject
// read first. River's unique key hashes the ids under these JSON names.
type Args struct {
	ConnectionID string `json:"connection_id" river:"unique"`
	DeliveryID   string `json:"delivery_id" river:"unique"`
	Event        string `json:"event"`
	Body         []byte `json:"payload_base64"`

	// ResentFrom is the job this one sends again, and ResendReason the
	// reason given ([Resend], [Recover]); zero and empty in a delivery's
	// first job. A job is unique by ResentFrom too: a job has one resend
	// while River keeps it.
	ResentFrom   int64  `json:"resent_from,omitempty" river:"unique"`
	ResendReason string `json:"resend_reason,omitempty"`

	// Subject is whom the delivery is about, the data subject: the
	// payload's user id ([InsertParams]), or [InsertOptions.Subject];
	// empty for a delivery inserted without one. [EraseSubject] finds a
	// subject's deliveries by it, resends included: they copy it. It is an
	// id, never an email or a name: it stays in the job once the delivery
	// is erased (see [MaxSubjectBytes]). Not part of the job's unique key.
	Subject string `json:"data_subject,omitempty"`

	// Erased reports that the delivery's personal data was erased
	// ([EraseSubject], [EraseBodies]): Body is gone, ResendReason and the
	// texts of the attempt log read "[erased]". The Worker cancels an
	// erased job that runs again (River UI's Retry): nothing is sent.
	Erased bool `json:"erased,omitempty"`
}

// Kind returns [Kind].
func (Args) Kind() string { return Kind }

// InsertOpts returns River's insert options of every delivery job, which
// River applies to a plain client.Insert of Args too: unique by delivery
// and connection ids (ByArgs) in every state, so that a repeated insert of
// a delivery is skipped however its job ended, given up and cancelled
// included, as long as River keeps the job's row (its retention periods:
// 24 hours once delivered or cancelled, 7 days once given up, by default);
// and tagged with [ConnectionTag] and [EventTag] (unless the insert gives
// tags of its own, which River takes instead; [InsertParams] adds them to
// the delivery's). MaxAttempts is left to the client (Config.MaxAttempts,
// 25 by default); [InsertParams] sizes it for the retry policy.
func (a Args) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		Tags:       []string{ConnectionTag(a.ConnectionID), EventTag(a.Event)},
		UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: uniqueStates()},
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

	// Subject, if not empty, is whom the deliveries are about
	// ([Args.Subject]): an id of the service's, such as its user id, at
	// most [MaxSubjectBytes] of printable text without '@'. Empty means
	// the payload's user id for [InsertParams], and no subject for
	// [InsertBytesParams].
	Subject string
}

// MaxSubjectBytes bounds a delivery's subject ([Args.Subject]).
const MaxSubjectBytes = 255

// ErrInvalidSubject is matched by the error of an insert whose subject
// ([Args.Subject]) is too long, not printable text, or holds an '@': a
// subject is an id that stays in the job after its delivery is erased, and
// an email address is the very data to erase.
var ErrInvalidSubject = errors.New("riverhook: invalid subject")

// checkSubject returns an error matching ErrInvalidSubject for a subject
// that is not an id. It never quotes the subject, which may be personal
// data.
func checkSubject(subject string) error {
	switch {
	case len(subject) > MaxSubjectBytes:
		return fmt.Errorf("%w: want at most %d bytes, got %d", ErrInvalidSubject, MaxSubjectBytes, len(subject))
	case !utf8.ValidString(subject) || strings.ContainsFunc(subject, func(r rune) bool { return !unicode.IsPrint(r) }):
		return fmt.Errorf("%w: want printable UTF-8 text (an id), got control, invisible or invalid characters", ErrInvalidSubject)
	case strings.Contains(subject, "@"):
		return fmt.Errorf("%w: want an id such as the user's, got text with an '@', an email address: it would stay in the job once the delivery is erased", ErrInvalidSubject)
	}
	return nil
}

// InsertParams returns the jobs delivering p to each of connectionIDs, for
// your own client.InsertManyTx in the transaction that made the change (or
// InsertMany without one); none, and no error, for no connection ([InsertTx]
// inserts them, and nothing for no connection, which InsertManyTx refuses).
// A connection id listed more than once gets one job, in the place of its
// first: River's insert of one delivery twice in one statement would fail
// the transaction. deliveryID identifies the event; with a connection id it
// makes each job unique (see [Args.InsertOpts]). An empty id, or one that
// is not UTF-8 text or holds a NUL, which the job could not hold as given,
// or a connection id over [MaxConnectionIDBytes], gives an error naming it,
// and nothing is inserted. p is validated and
// encoded once; the error matches webhook.ErrInvalidPayload. Each job's
// subject is opts.Subject, or else p's user id; one that is not an id gives
// an error matching [ErrInvalidSubject].
func InsertParams(deliveryID string, connectionIDs []string, p webhook.Payload, opts *InsertOptions) ([]river.InsertManyParams, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	body, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot be encoded as JSON: %w", webhook.ErrInvalidPayload, err)
	}
	subject := p.User.ID
	if opts != nil && opts.Subject != "" {
		subject = opts.Subject
	}
	return insertBytesParams(deliveryID, connectionIDs, p.Event, body, subject, opts)
}

// InsertBytesParams is InsertParams for any event, with body its JSON
// encoded already, delivered byte for byte: the outbox of a service with
// events of its own, as [webhook.Sender.SendBytes] is for one process. An
// empty event, one with control characters or not UTF-8, or a body that is not JSON
// gives an error matching webhook.ErrInvalidPayload. A connection that does
// not subscribe to event (webhook.Connection.Events) is skipped when its
// job runs: the job is cancelled, its log saying why. The subject is
// opts.Subject alone: set it to the id of the user the body is about.
func InsertBytesParams(deliveryID string, connectionIDs []string, event string, body []byte, opts *InsertOptions) ([]river.InsertManyParams, error) {
	var subject string
	if opts != nil {
		subject = opts.Subject
	}
	return insertBytesParams(deliveryID, connectionIDs, event, body, subject, opts)
}

func insertBytesParams(deliveryID string, connectionIDs []string, event string, body []byte, subject string, opts *InsertOptions) ([]river.InsertManyParams, error) {
	if err := checkID("delivery id", deliveryID); err != nil {
		return nil, err
	}
	for _, id := range connectionIDs {
		if err := checkConnectionID(id); err != nil {
			return nil, err
		}
	}
	if err := checkEventBody(event, body); err != nil {
		return nil, err
	}
	if err := checkSubject(subject); err != nil {
		return nil, err
	}
	if opts == nil {
		opts = &InsertOptions{}
	}
	params := make([]river.InsertManyParams, 0, len(connectionIDs))
	seen := make(map[string]bool, len(connectionIDs))
	for _, id := range connectionIDs {
		if seen[id] {
			continue
		}
		seen[id] = true
		params = append(params, insertParams(Args{ConnectionID: id, DeliveryID: deliveryID, Event: event, Body: body, Subject: subject}, opts))
	}
	return params, nil
}

// checkID checks a delivery's or a connection's id, named field: the job's
// args must hold it as given, and PostgreSQL's jsonb holds no NUL, while
// encoding/json writes bytes that are not UTF-8 as U+FFFD (another id).
func checkID(field, id string) error {
	switch {
	case id == "":
		return fmt.Errorf("riverhook: the %s must not be empty", field)
	case !storable(id):
		return fmt.Errorf("riverhook: the %s %q must be UTF-8 text without NUL", field, id)
	}
	return nil
}

// MaxConnectionIDBytes bounds a connection's id: riverhook's tables are
// keyed by it (the fleet's pace, the connection's state), and PostgreSQL's
// btree refuses a key over a third of a page, about 2.7 kB. A delivery to
// a longer id could never be paced in a fleet.
const MaxConnectionIDBytes = 1024

// checkConnectionID checks a connection's id as checkID does, and its
// length. It quotes no id too long, which fills a log line.
func checkConnectionID(id string) error {
	if len(id) > MaxConnectionIDBytes {
		return fmt.Errorf("riverhook: the connection id must be at most %d bytes (MaxConnectionIDBytes), got %d", MaxConnectionIDBytes, len(id))
	}
	return checkID("connection id", id)
}

// storable reports whether a job's args can hold s as it is: UTF-8 text
// without NUL. No delivery has an id or event that is not (the insert
// refuses them), so a filter on one finds nothing, and PostgreSQL would
// fail its query.
func storable(s string) bool { return utf8.ValidString(s) && !strings.Contains(s, "\x00") }

// checkEventBody checks an event of the caller's own and its body: a
// non-empty event name of UTF-8 text without control characters, and a
// JSON body.
func checkEventBody(event string, body []byte) error {
	if event == "" || !utf8.ValidString(event) || strings.ContainsFunc(event, unicode.IsControl) {
		return fmt.Errorf("%w: want a non-empty event name of UTF-8 text without control characters, got %q", webhook.ErrInvalidPayload, event)
	}
	if !json.Valid(body) {
		return fmt.Errorf("%w: the body of %q is not JSON", webhook.ErrInvalidPayload, event)
	}
	return nil
}

// insertParams returns the insert of the job of args, sized for opts'
// policy.
func insertParams(args Args, opts *InsertOptions) river.InsertManyParams {
	if opts == nil {
		opts = &InsertOptions{}
	}
	policy := opts.Retry
	if policy == nil {
		policy = webhook.DefaultRetryPolicy()
	}
	var io river.InsertOpts
	if opts.InsertOpts != nil {
		io = *opts.InsertOpts
	}
	own := args.InsertOpts()
	io.MaxAttempts = policy.MaxRetries + 1 + MaxInterruptedRuns
	io.Tags = append(slices.Clip(io.Tags), own.Tags...)
	if uniqueUnset(io.UniqueOpts) {
		io.UniqueOpts = own.UniqueOpts
	}
	return river.InsertManyParams{Args: args, InsertOpts: &io}
}

func uniqueUnset(u river.UniqueOpts) bool {
	return !u.ByArgs && u.ByPeriod == 0 && !u.ByQueue && u.ByState == nil && !u.ExcludeKind
}

// InsertTx inserts the jobs delivering p to each of connectionIDs in tx, the
// transaction of the change that caused the event, with client (an insert-only
// client will do): the outbox. With no connection it validates p and
// inserts nothing, so the transaction commits. The results are River's,
// one per distinct connection id in the order of connectionIDs; a delivery
// inserted before is skipped (UniqueSkippedAsDuplicate) while River keeps
// its first job's row, however it ended (see [Args.InsertOpts]). It blocks
// on the insert. Arguments are as for [InsertParams].
func InsertTx[TTx any](ctx context.Context, client *river.Client[TTx], tx TTx, deliveryID string, connectionIDs []string,
	p webhook.Payload, opts *InsertOptions) ([]*rivertype.JobInsertResult, error) {
	params, err := InsertParams(deliveryID, connectionIDs, p, opts)
	return insertMany(ctx, client, tx, params, err)
}

// InsertBytesTx is InsertTx for any event, with body its JSON encoded
// already: see [InsertBytesParams].
func InsertBytesTx[TTx any](ctx context.Context, client *river.Client[TTx], tx TTx, deliveryID string, connectionIDs []string,
	event string, body []byte, opts *InsertOptions) ([]*rivertype.JobInsertResult, error) {
	params, err := InsertBytesParams(deliveryID, connectionIDs, event, body, opts)
	return insertMany(ctx, client, tx, params, err)
}

func insertMany[TTx any](ctx context.Context, client *river.Client[TTx], tx TTx, params []river.InsertManyParams, err error) ([]*rivertype.JobInsertResult, error) {
	if err != nil || len(params) == 0 {
		return nil, err
	}
	return client.InsertManyTx(ctx, tx, params)
}

// DurableRetryPolicy returns a schedule for deliveries that may wait hours
// for an endpoint to come back: 6 retries after 5 s, 5 min, 30 min, 2 h, 5 h
// and 10 h, about 17.5 hours in all, every failure but a 410 Gone
// retried. Use it for the Sender of the [Worker] and for
// [InsertOptions.Retry] alike.
func DurableRetryPolicy() *webhook.RetryPolicy {
	waits := []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour}
	return &webhook.RetryPolicy{
		MaxRetries: len(waits),
		Backoff: func(retry int, _ *http.Response) time.Duration {
			return waits[min(max(retry, 1), len(waits))-1]
		},
	}
}
