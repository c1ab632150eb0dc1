package riverhook_test

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
)

func TestInsert(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		pool   *pgxpool.Pool
		schema string
	}

	// setup returns an insert-only client on a fresh schema.
	setup := func(t *testing.T) (*river.Client[pgx.Tx], *testBundle) {
		t.Helper()
		pool, schema := testDB(t)
		return newClient(t, pool, schema, nil, nil), &testBundle{pool: pool, schema: schema}
	}

	// The README's outbox for a customer without webhooks: nothing to insert,
	// and the user's change commits.
	t.Run("NoConnectionsCommits", func(t *testing.T) {
		t.Parallel()
		client, bundle := setup(t)
		ctx := context.Background()
		tx := userChangeTx(t, bundle.pool, bundle.schema)
		res, err := riverhook.InsertTx(ctx, client, tx, "evt_1", nil, payload("evt_1"), nil)
		require.NoError(t, err, "a customer with no connections")
		assert.Empty(t, res)
		require.NoError(t, tx.Commit(ctx))
		var n int
		require.NoError(t, bundle.pool.QueryRow(ctx, "SELECT count(*) FROM "+bundle.schema+".users").Scan(&n))
		assert.Equal(t, 1, n, "the change committed")

		_, err = riverhook.InsertTx(ctx, client, tx, "evt_2", nil, webhook.Payload{}, nil)
		assert.ErrorIs(t, err, webhook.ErrInvalidPayload, "validated even with nothing to insert")
	})

	// A connection list with a repeated id (a join that returns a row twice, a
	// customer's connection listed under two events) is one delivery to that
	// connection, and InsertTx does not fail the caller's transaction, which
	// holds the user's change (River's insert of one unique job twice in one
	// statement would: ON CONFLICT cannot affect a row a second time).
	t.Run("RepeatedConnectionIDIsOneDelivery", func(t *testing.T) {
		t.Parallel()
		client, bundle := setup(t)
		ctx := context.Background()
		tx := userChangeTx(t, bundle.pool, bundle.schema)

		res, err := riverhook.InsertTx(ctx, client, tx, "evt_1", []string{"crm", "erp", "crm"}, payload("evt_1"), nil)
		require.NoError(t, err, "one delivery to crm, the repeat skipped")
		require.Len(t, res, 2, "one result per distinct connection")
		for i, conn := range []string{"crm", "erp"} {
			var args riverhook.Args
			require.NoError(t, json.Unmarshal(res[i].Job.EncodedArgs, &args))
			assert.Equal(t, conn, args.ConnectionID, "in the order of their first place")
		}
		require.NoError(t, tx.Commit(ctx), "the user's change commits")
		var n int
		require.NoError(t, bundle.pool.QueryRow(ctx, "SELECT count(*) FROM "+bundle.schema+".river_job").Scan(&n))
		assert.Equal(t, 2, n, "one job per distinct connection")
	})

	t.Run("Outbox", func(t *testing.T) {
		t.Parallel()
		client, bundle := setup(t)
		ctx := context.Background()

		tx, err := bundle.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = riverhook.InsertTx(ctx, client, tx, "d-rolled-back", []string{"crm"}, payload("d-rolled-back"), nil)
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))

		tx, err = bundle.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx)
		res, err := riverhook.InsertTx(ctx, client, tx, "d-committed", []string{"crm", "erp"}, payload("d-committed"),
			&riverhook.InsertOptions{Retry: riverhook.DurableRetryPolicy()})
		require.NoError(t, err)
		require.Len(t, res, 2)
		opts := &rivertest.RequireInsertedOpts{Schema: bundle.schema, MaxAttempts: 7 + riverhook.MaxInterruptedRuns,
			Queue: river.QueueDefault, State: rivertype.JobStateAvailable}
		jobs := rivertest.RequireManyInsertedTx[*riverpgxv5.Driver](ctx, t, tx, []rivertest.ExpectedJob{
			{Args: riverhook.Args{}, Opts: withTags(opts, "connection-crm", "event-user-identified")},
			{Args: riverhook.Args{}, Opts: withTags(opts, "connection-erp", "event-user-identified")},
		})
		for i, conn := range []string{"crm", "erp"} {
			// As PostgreSQL prints the args (jsonb orders keys by length), and
			// as River UI shows them (by name), the body comes last.
			var fields map[string]any
			require.NoError(t, json.Unmarshal(jobs[i].EncodedArgs, &fields))
			names := slices.Sorted(maps.Keys(fields))
			body := names[len(names)-1]
			assert.True(t, strings.HasSuffix(string(jobs[i].EncodedArgs), `"`+body+`": "`+fields[body].(string)+`"}`),
				"the body is last by name and as PostgreSQL prints it: %s", jobs[i].EncodedArgs)
			var args riverhook.Args
			require.NoError(t, json.Unmarshal(jobs[i].EncodedArgs, &args))
			assert.Equal(t, conn, args.ConnectionID)
			assert.Equal(t, "d-committed", args.DeliveryID)
			assert.Equal(t, webhook.EventUserIdentified, args.Event)
			assert.Equal(t, base64.StdEncoding.EncodeToString(args.Body), fields[body], "the body's field")
			p, err := webhook.ParsePayload(args.Body)
			require.NoError(t, err, "the exact body")
			assert.Equal(t, "d-committed", p.User.Metadata["delivery_id"])
		}
		again, err := riverhook.InsertTx(ctx, client, tx, "d-committed", []string{"crm", "erp"}, payload("d-committed"), nil)
		require.NoError(t, err)
		for _, r := range again {
			assert.True(t, r.UniqueSkippedAsDuplicate, "a repeated insert is skipped")
		}
		require.NoError(t, tx.Commit(ctx))
		list, err := client.JobList(ctx, river.NewJobListParams())
		require.NoError(t, err)
		assert.Len(t, list.Jobs, 2, "the committed delivery, once per connection; nothing of the rolled-back one")

		_, err = riverhook.InsertTx(ctx, client, tx, "", []string{"crm"}, payload("x"), nil)
		assert.ErrorContains(t, err, "riverhook: the delivery id must not be empty")
	})

	t.Run("RiversInsertOptsAsBase", func(t *testing.T) {
		t.Parallel()
		at := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
		base := &river.InsertOpts{Queue: "webhooks", Priority: 2, Tags: []string{"tenant-42"}, Metadata: []byte(`{"tenant":42}`),
			ScheduledAt: at, MaxAttempts: 100}
		params, err := riverhook.InsertParams("d1", []string{"crm", "erp"}, payload("d1"), &riverhook.InsertOptions{InsertOpts: base})
		require.NoError(t, err)
		assert.Equal(t, []string{"tenant-42"}, base.Tags, "the base is not modified")
		for i, conn := range []string{"crm", "erp"} {
			o := params[i].InsertOpts
			assert.Equal(t, "webhooks", o.Queue)
			assert.Equal(t, 2, o.Priority)
			assert.Equal(t, []string{"tenant-42", "connection-" + conn, "event-user-identified"}, o.Tags)
			assert.JSONEq(t, `{"tenant":42}`, string(o.Metadata))
			assert.Equal(t, at, o.ScheduledAt)
			assert.Equal(t, 4+riverhook.MaxInterruptedRuns, o.MaxAttempts, "the policy's, not the base's")
			assert.True(t, o.UniqueOpts.ByArgs)
		}

		client, bundle := setup(t)
		ctx := context.Background()
		tx, err := bundle.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx)
		_, err = client.InsertManyTx(ctx, tx, params)
		require.NoError(t, err)
		jobs := rivertest.RequireManyInsertedTx[*riverpgxv5.Driver](ctx, t, tx, []rivertest.ExpectedJob{
			{Args: riverhook.Args{}, Opts: &rivertest.RequireInsertedOpts{Schema: bundle.schema, Queue: "webhooks", Priority: 2,
				ScheduledAt: at, State: rivertype.JobStateScheduled}},
			{Args: riverhook.Args{}, Opts: &rivertest.RequireInsertedOpts{Queue: "webhooks"}},
		})
		assert.JSONEq(t, `{"tenant":42}`, string(jobs[0].Metadata))

		// UniqueOpts of the base replace the delivery's own.
		byQueue := &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByQueue: true}}
		params, err = riverhook.InsertParams("d2", []string{"crm"}, payload("d2"), &riverhook.InsertOptions{InsertOpts: byQueue})
		require.NoError(t, err)
		assert.Equal(t, river.UniqueOpts{ByQueue: true}, params[0].InsertOpts.UniqueOpts)
	})

	// A plain client.Insert of Args is unique by delivery and connection, as
	// River's own unique-job example is, and tagged.
	t.Run("PlainInsertIsUnique", func(t *testing.T) {
		t.Parallel()
		client, _ := setup(t)
		ctx := context.Background()
		args := riverhook.Args{ConnectionID: "crm", DeliveryID: "evt_1", Event: "user.identified", Body: []byte(`{}`)}
		first, err := client.Insert(ctx, args, nil)
		require.NoError(t, err)
		assert.Equal(t, []string{"connection-crm", "event-user-identified"}, first.Job.Tags)
		again, err := client.Insert(ctx, args, nil)
		require.NoError(t, err)
		assert.True(t, again.UniqueSkippedAsDuplicate, "the same delivery to the same connection")
		assert.Equal(t, first.Job.ID, again.Job.ID)
		other := args
		other.ConnectionID = "erp"
		res, err := client.Insert(ctx, other, nil)
		require.NoError(t, err)
		assert.False(t, res.UniqueSkippedAsDuplicate, "another connection")

		// Unique also once the earlier job is cancelled, which River's
		// default unique states leave out, until River deletes its row.
		_, err = client.JobCancel(ctx, first.Job.ID)
		require.NoError(t, err)
		res, err = client.Insert(ctx, args, nil)
		require.NoError(t, err)
		assert.True(t, res.UniqueSkippedAsDuplicate, "inserted again after a cancel")
		_, err = client.JobDelete(ctx, first.Job.ID)
		require.NoError(t, err)
		res, err = client.Insert(ctx, args, nil)
		require.NoError(t, err)
		assert.False(t, res.UniqueSkippedAsDuplicate, "inserted again once River deleted the first")

		list, err := client.JobList(ctx, river.NewJobListParams().States(rivertype.JobStateAvailable))
		require.NoError(t, err)
		assert.Len(t, list.Jobs, 2)
	})

	// Each job records whom it is about, an id erasure finds it by: the
	// payload's user id unless the caller says otherwise, and for a body of
	// the caller's own only what the caller says. It is not part of the
	// job's unique key.
	t.Run("RecordsTheSubject", func(t *testing.T) {
		t.Parallel()
		subjectOf := func(t *testing.T, p river.InsertManyParams) string {
			t.Helper()
			encoded, err := json.Marshal(p.Args)
			require.NoError(t, err)
			var fields map[string]any
			require.NoError(t, json.Unmarshal(encoded, &fields))
			s, _ := fields["data_subject"].(string)
			return s
		}
		p := payload("d1")
		params, err := riverhook.InsertParams("d1", []string{"crm", "erp"}, p, nil)
		require.NoError(t, err)
		for _, param := range params {
			assert.Equal(t, "usr_d1", subjectOf(t, param), "the payload's user id")
		}
		params, err = riverhook.InsertParams("d1", []string{"crm"}, p, &riverhook.InsertOptions{Subject: "acct-7"})
		require.NoError(t, err)
		assert.Equal(t, "acct-7", subjectOf(t, params[0]), "the caller's, which wins")
		params, err = riverhook.InsertBytesParams("d2", []string{"crm"}, "deal.closed", []byte(`{"deal":1}`), nil)
		require.NoError(t, err)
		assert.Empty(t, subjectOf(t, params[0]), "no subject but the caller's")
		encoded, err := json.Marshal(params[0].Args)
		require.NoError(t, err)
		assert.NotContains(t, string(encoded), "data_subject", "left out when empty")
		params, err = riverhook.InsertBytesParams("d2", []string{"crm"}, "deal.closed", []byte(`{"deal":1}`), &riverhook.InsertOptions{Subject: "usr_9"})
		require.NoError(t, err)
		assert.Equal(t, "usr_9", subjectOf(t, params[0]))

		client, _ := setup(t)
		ctx := context.Background()
		params, err = riverhook.InsertParams("d1", []string{"crm"}, p, nil)
		require.NoError(t, err)
		first, err := client.InsertMany(ctx, params)
		require.NoError(t, err)
		params, err = riverhook.InsertParams("d1", []string{"crm"}, p, &riverhook.InsertOptions{Subject: "acct-7"})
		require.NoError(t, err)
		again, err := client.InsertMany(ctx, params)
		require.NoError(t, err)
		assert.True(t, again[0].UniqueSkippedAsDuplicate, "unique by delivery and connection, whatever the subject")
		assert.Equal(t, first[0].Job.ID, again[0].Job.ID)
	})

	// A subject stays in the job once its delivery is erased: an id, never
	// text that is itself personal data or that a log shows wrongly. The
	// error never quotes it.
	t.Run("RefusesASubjectThatIsNotAnID", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name    string
			user    string // the payload's user id
			subject string // InsertOptions.Subject
		}{
			{"an email as the subject", "usr_1", "ada@example.org"},
			{"an email as the user id", "usr_ada@example.org", ""},
			{"too long", "usr_1", strings.Repeat("x", riverhook.MaxSubjectBytes+1)},
			{"a control character", "usr_1", "usr_1\n"},
			{"an invisible character", "usr_1\u200b", ""},
			{"invalid UTF-8", "usr_1", "usr_\xff"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p := payload("d1")
				p.User.ID = tc.user
				_, err := riverhook.InsertParams("d1", []string{"crm"}, p, &riverhook.InsertOptions{Subject: tc.subject})
				require.ErrorIs(t, err, riverhook.ErrInvalidSubject)
				assert.NotContains(t, err.Error(), "ada", "the error never quotes the subject")
				_, err = riverhook.InsertBytesParams("d1", []string{"crm"}, "deal.closed", []byte(`{}`), &riverhook.InsertOptions{Subject: cmp.Or(tc.subject, tc.user)})
				assert.ErrorIs(t, err, riverhook.ErrInvalidSubject)
			})
		}
		params, err := riverhook.InsertParams("d1", []string{"crm"}, payload("d1"), &riverhook.InsertOptions{Subject: strings.Repeat("x", riverhook.MaxSubjectBytes)})
		require.NoError(t, err, "at most MaxSubjectBytes")
		assert.Len(t, params, 1)
	})

	t.Run("TagsValidForRiverAndFilterable", func(t *testing.T) {
		t.Parallel()
		client, _ := setup(t)
		ctx := context.Background()
		long := strings.Repeat("x", 300)
		for _, tc := range []struct{ id, want string }{
			{"crm", "connection-crm"},
			{"conn_42-eu", "connection-conn_42-eu"},
			{"a.b/c d", "connection-a-b-c-d"},
			{"x", "connection-x"},
			{"crm.", "connection-crm"},
			{"-", "connection"},
			{"", "connection"},
			{"コネクション", "connection"},
			{long, "connection-" + long[:255-len("connection-")]},
		} {
			assert.Equal(t, tc.want, riverhook.ConnectionTag(tc.id), "id %q", tc.id)
			res, err := client.Insert(ctx, riverhook.Args{ConnectionID: tc.id, DeliveryID: "d", Event: "user.identified", Body: []byte(`{}`)}, nil)
			require.NoError(t, err, "River accepts the tags of id %q", tc.id)
			list, err := client.JobList(ctx, river.NewJobListParams().TagsAll(riverhook.ConnectionTag(tc.id), riverhook.EventTag("user.identified")))
			require.NoError(t, err)
			assert.True(t, containsJob(list.Jobs, res.Job.ID), "listed by its tags: id %q", tc.id)
		}
		assert.Equal(t, "event-user-identified", riverhook.EventTag(webhook.EventUserIdentified))
	})
}

func withTags(o *rivertest.RequireInsertedOpts, tags ...string) *rivertest.RequireInsertedOpts {
	c := *o
	c.Tags = tags
	return &c
}

func containsJob(jobs []*rivertype.JobRow, id int64) bool {
	for _, j := range jobs {
		if j.ID == id {
			return true
		}
	}
	return false
}

// TestArgs_JSON pins the job's stored args: the ids' JSON names (River's
// unique key hashes them) and the body as exact bytes, in base64.
func TestArgs_JSON(t *testing.T) {
	body := []byte(`{"event":"user.identified"}`)
	want := riverhook.Args{ConnectionID: "crm", DeliveryID: "evt_1", Event: "user.identified", Body: body}
	encoded, err := json.Marshal(want)
	require.NoError(t, err)
	assert.JSONEq(t, `{"connection_id":"crm","delivery_id":"evt_1","event":"user.identified","payload_base64":"eyJldmVudCI6InVzZXIuaWRlbnRpZmllZCJ9"}`, string(encoded))
	var again riverhook.Args
	require.NoError(t, json.Unmarshal(encoded, &again))
	assert.Equal(t, want, again)
}

// userChangeTx begins the caller's transaction of the README's outbox: a
// users table, and a user inserted in the transaction, which the test
// commits or which is rolled back when it ends.
func userChangeTx(t *testing.T, pool *pgxpool.Pool, schema string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	_, err := pool.Exec(ctx, "CREATE TABLE "+schema+".users (id text PRIMARY KEY)")
	require.NoError(t, err)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { tx.Rollback(ctx) })
	_, err = tx.Exec(ctx, "INSERT INTO "+schema+".users VALUES ('usr_1')")
	require.NoError(t, err)
	return tx
}

// TestInsert_RefusesWhatTheJobCannotHold: a connection id, delivery id or
// event that the job's args cannot hold as given is refused by the insert,
// with an error naming the field, before River's statement runs. Bytes not
// UTF-8 were stored as U+FFFD (encoding/json's), so the job resolved another
// connection than the one given (found gone: the delivery cancelled) and
// held another delivery id; a NUL failed the caller's transaction with
// PostgreSQL's "unsupported Unicode escape sequence", an error a caller
// cannot tell from an outage; an empty connection id made a job for the
// Resolver to answer "".
func TestInsert_RefusesWhatTheJobCannotHold(t *testing.T) {
	t.Parallel()
	pool, schema := testDB(t)
	client := newClient(t, pool, schema, nil, nil)
	ctx := context.Background()
	for _, c := range []struct {
		name, delivery, conn, event, field string
	}{
		{"ConnectionNotUTF8", "evt_1", "crm\xff", "deal.closed", "connection id"},
		{"ConnectionNUL", "evt_1", "c\x00rm", "deal.closed", "connection id"},
		{"ConnectionEmpty", "evt_1", "", "deal.closed", "connection id"},
		{"DeliveryNotUTF8", "evt\xff", "crm", "deal.closed", "delivery id"},
		{"DeliveryNUL", "evt\x001", "crm", "deal.closed", "delivery id"},
		{"EventNotUTF8", "evt_1", "crm", "deal\xff", "event"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx)
			res, err := riverhook.InsertBytesTx(ctx, client, tx, c.delivery, []string{c.conn}, c.event, []byte(`{"deal":1}`), nil)
			if err == nil {
				var args riverhook.Args
				require.NoError(t, json.Unmarshal(res[0].Job.EncodedArgs, &args))
				t.Fatalf("inserted, as connection %q, delivery %q, event %q (given %q, %q, %q)",
					args.ConnectionID, args.DeliveryID, args.Event, c.conn, c.delivery, c.event)
			}
			var pgErr *pgconn.PgError
			assert.False(t, errors.As(err, &pgErr), "PostgreSQL's error, not the insert's: %v", err)
			assert.ErrorContains(t, err, c.field)
			if c.field == "event" {
				assert.ErrorIs(t, err, webhook.ErrInvalidPayload)
			}
		})
	}
}
