package console_test

import (
	"cmp"
	"context"
	"encoding/json"
	"html"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/riverhook/console"
	"github.com/signedhook/webhook/riverhook/internal/testdb"
	"github.com/signedhook/webhook/webhooktest"
)

// The API's actions: Resend, Recover and Send Test, and their rate limits.

func TestConsole_APIResendsAnEndedDeliveryOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, &console.Options{Connections: customerConnections, Actor: func(*http.Request) string { return "ann@customer" },
		ResendEvery: -1}, false) // no limit: a double click reaches Resend
	path := "/api/connections/crm/deliveries/" + strconv.FormatInt(f.jobs["given-up"], 10) + "/resend"
	type resent struct {
		JobID    int64 `json:"job_id"`
		Inserted bool  `json:"inserted"`
	}
	got := f.do(t, "POST", path, "")
	require.Equal(t, http.StatusOK, got.Code, got.Body.String())
	first := decode[resent](t, got.Body.String())
	assert.True(t, first.Inserted)
	again := decode[resent](t, f.do(t, "POST", path, "").Body.String())
	assert.Equal(t, resent{first.JobID, false}, again, "a double click sends once")

	job, err := f.client.JobGet(context.Background(), first.JobID)
	require.NoError(t, err)
	d, err := riverhook.DeliveryOf(job)
	require.NoError(t, err)
	assert.Equal(t, f.jobs["given-up"], d.ResentFrom)
	assert.Equal(t, "resent from the console by ann@customer", d.ResendReason)

	got = f.do(t, "POST", "/api/connections/crm/deliveries/"+strconv.FormatInt(f.jobs["retrying"], 10)+"/resend", "")
	assert.Equal(t, http.StatusConflict, got.Code, "under way")

	page := f.do(t, "GET", "/connections/crm/deliveries/"+strconv.FormatInt(f.jobs["given-up"], 10), "").Body.String()
	assert.Contains(t, page, `<a href="`+strconv.FormatInt(first.JobID, 10)+`">as a later delivery</a>`)
	assert.NotContains(t, page, `id="resend"`, "no Resend button on a resent delivery")
	_, err = f.client.JobDelete(context.Background(), first.JobID) // as River's retention does
	require.NoError(t, err)
	got = f.do(t, "POST", path, "")
	assert.Equal(t, http.StatusConflict, got.Code, "resent already, by a job River deleted: %s", got.Body.String())
	assert.Contains(t, got.Body.String(), "resent already")
	page = f.do(t, "GET", "/connections/crm/deliveries/"+strconv.FormatInt(f.jobs["given-up"], 10), "").Body.String()
	assert.Contains(t, page, "as a later delivery, whose log is no longer kept")
}

func TestConsole_APIRecoversGivenUpDeliveriesWithADryRunAndALimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, false)
	type recovered struct {
		DryRun  bool    `json:"dry_run"`
		GivenUp int     `json:"given_up"`
		Resent  int     `json:"resent"`
		Jobs    []int64 `json:"jobs"`
	}
	got := f.do(t, "POST", "/api/connections/crm/recover", "")
	assert.Equal(t, http.StatusBadRequest, got.Code, "since is required")
	got = f.do(t, "POST", "/api/connections/crm/recover", "since=24h&dry_run=true")
	require.Equal(t, http.StatusOK, got.Code, got.Body.String())
	assert.Equal(t, recovered{DryRun: true, GivenUp: 2, Resent: 2, Jobs: []int64{}}, decode[recovered](t, got.Body.String()))

	ran := time.Now()
	got = f.do(t, "POST", "/api/connections/crm/recover", "since=24h")
	require.Equal(t, http.StatusOK, got.Code, got.Body.String())
	r := decode[recovered](t, got.Body.String())
	assert.Equal(t, 2, r.Resent)
	assert.Len(t, r.Jobs, 2)

	got = f.do(t, "POST", "/api/connections/crm/recover", "since=24h")
	assert.Equal(t, http.StatusTooManyRequests, got.Code)
	assertRetryAfter(t, got.Header(), console.DefaultRateInterval, ran)
	got = f.do(t, "POST", "/api/connections/crm/recover", "since=24h&dry_run=true")
	assert.Equal(t, http.StatusTooManyRequests, got.Code, "a dry run is limited too")
}

func TestConsole_APISendsATestThroughTheWorkerRateLimitedPerConnection(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, false)
	before := len(f.srv.Deliveries())
	ran := time.Now()
	got := f.do(t, "POST", "/api/connections/crm/test", "")
	require.Equal(t, http.StatusOK, got.Code, got.Body.String())
	v := decode[map[string]any](t, got.Body.String())
	assert.Equal(t, true, v["delivered"])
	assert.Equal(t, float64(200), v["status"])
	assert.Contains(t, v["diagnosis"], "delivered")
	assertClean(t, got.Body.String(), false)
	ds := f.srv.Deliveries()
	require.Len(t, ds, before+1)
	assert.True(t, strings.HasSuffix(ds[before].Path, secretPath), "to the connection's URL, signed: %s", ds[before].Path)
	require.NoError(t, ds[before].Err)

	got = f.do(t, "POST", "/api/connections/crm/test", "")
	assert.Equal(t, http.StatusTooManyRequests, got.Code)
	assertRetryAfter(t, got.Header(), console.DefaultRateInterval, ran)
	got = f.do(t, "POST", "/api/connections/erp/test", "", "X-Customer", "both")
	assert.Equal(t, http.StatusOK, got.Code, "per connection")
	got = f.do(t, "POST", "/connections/crm/test", "")
	assert.Equal(t, http.StatusTooManyRequests, got.Code, "the page's button shares the limit")
	assert.Len(t, f.srv.Deliveries(), before+2)

	unlimited := newFixture(t, &console.Options{Connections: customerConnections, TestEvery: -1}, false)
	for range 2 {
		assert.Equal(t, http.StatusOK, unlimited.do(t, "POST", "/api/connections/crm/test", "").Code)
	}
}

// invoicePaid is the service's sample of its event invoice.paid, as
// Options.Samples gives it.
const invoicePaid = `{"event":"invoice.paid","invoice":{"id":"in_test_0001","amount_due":4200,"currency":"eur"}}`

// TestConsole_SendsATestOfAnEventTheConnectionSubscribesTo: a connection
// subscribed to invoice.paid alone is offered a Send Test of that event
// alone, and gets it with the service's sample, signed, from the page's
// form and from the API. An event it does not subscribe to (user.identified
// by default too), or without a sample, is refused with 400 naming it: it
// sends nothing and spends no turn. A connection subscribed to every event
// is offered user.identified, built in, and each sample; one subscribed to
// events without a sample, none.
func TestConsole_SendsATestOfAnEventTheConnectionSubscribesTo(t *testing.T) {
	t.Parallel()
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	w, err := riverhook.NewWorker(srv.Sender(nil), func(_ context.Context, id string) (webhook.Connection, error) {
		conn := srv.Connection()
		switch id {
		case "billing", "books":
			conn.Events = []string{"invoice.paid"}
		case "ledger":
			conn.Events = []string{"ledger.closed"} // without a sample
		}
		return conn, nil
	}, nil)
	require.NoError(t, err)
	f := consoleWith(t, w, &console.Options{
		Connections: func(*http.Request) ([]string, error) { return []string{"billing", "books", "crm", "ledger"}, nil },
		Samples:     map[string]json.RawMessage{"invoice.paid": json.RawMessage(invoicePaid), "invoice.voided": json.RawMessage(`{}`)},
	}, false)

	page := f.do(t, "GET", "/connections/billing", "").Body.String()
	assert.Contains(t, page, `<option value="invoice.paid">invoice.paid</option>`)
	for _, not := range []string{"user.identified", "invoice.voided"} {
		assert.NotContains(t, page, not, "not subscribed")
	}

	for _, tc := range []struct{ name, path string }{
		{"the page's form", "/connections/billing/test"},
		{"the API", "/api/connections/books/test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv.Clear()
			for _, refused := range []struct{ form, named string }{
				{"", `"user.identified"`},
				{"event=user.identified", `"user.identified"`},
				{"event=invoice.voided", `"invoice.voided"`},
				{"event=deal.closed", `"deal.closed"`},
				{"event=" + url.QueryEscape(hostile), `pwned`},
			} {
				got := f.do(t, "POST", tc.path, refused.form)
				assert.Equal(t, http.StatusBadRequest, got.Code, "%s: %s", refused.form, got.Body.String())
				body := html.UnescapeString(strings.ReplaceAll(got.Body.String(), `\"`, `"`))
				assert.Contains(t, body, refused.named, "the answer names the event")
				assert.NotContains(t, got.Body.String(), "<script>", "nothing of it is markup")
			}
			assert.Empty(t, srv.Deliveries(), "nothing is sent")

			got := f.do(t, "POST", tc.path, "event=invoice.paid")
			ds := srv.Deliveries()
			require.Len(t, ds, 1, "%d: %s", got.Code, got.Body.String())
			require.NoError(t, ds[0].Err, "signed")
			assert.Equal(t, "invoice.paid", ds[0].Header.Get(webhook.HeaderEvent))
			assert.Equal(t, invoicePaid, string(ds[0].Body), "the service's sample, byte for byte")
			if strings.HasPrefix(tc.path, "/api/") {
				require.Equal(t, http.StatusOK, got.Code, got.Body.String())
				v := decode[map[string]any](t, got.Body.String())
				assert.Equal(t, "invoice.paid", v["event"])
				assert.Equal(t, true, v["delivered"])
			} else {
				require.Equal(t, http.StatusSeeOther, got.Code, got.Body.String())
				page := f.do(t, "GET", "/connections/billing", "").Body.String()
				assert.Contains(t, notice(page, "test"), "Send Test of invoice.paid at ")
			}
			got = f.do(t, "POST", tc.path, "event=invoice.paid")
			assert.Equal(t, http.StatusTooManyRequests, got.Code, "the test sent spent the turn")
		})
	}

	page = f.do(t, "GET", "/connections/crm", "").Body.String()
	var offered []string
	sel := regexp.MustCompile(`(?s)<select name="event" id="test-event">(.*?)</select>`).FindStringSubmatch(page)
	require.NotNil(t, sel, "the events to choose from")
	for _, m := range regexp.MustCompile(`<option value="([^"]*)">`).FindAllStringSubmatch(sel[1], -1) {
		offered = append(offered, m[1])
	}
	assert.Equal(t, []string{"user.identified", "invoice.paid", "invoice.voided"}, offered, "every event: the built-in first")
	srv.Clear()
	got := f.do(t, "POST", "/api/connections/crm/test", "")
	require.Equal(t, http.StatusOK, got.Code, got.Body.String())
	require.Len(t, srv.Deliveries(), 1)
	p, err := srv.Deliveries()[0].Payload()
	require.NoError(t, err)
	assert.True(t, p.IsSendTest(), "user.identified by default, built in")

	page = f.do(t, "GET", "/connections/ledger", "").Body.String()
	assert.Contains(t, page, `id="no-test"`, "no event to test")
	assert.NotContains(t, page, `id="send-test"`)
}

// assertRetryAfter asserts that h's Retry-After is the rest of a wait of
// every, rounded up to whole seconds, for a request that ran after ran:
// every itself (10) on a machine that took under a second since ran, and
// less by the whole seconds a loaded machine took, never less than 1.
func assertRetryAfter(t *testing.T, h http.Header, every time.Duration, ran time.Time) {
	t.Helper()
	least := max(int(math.Ceil((every - time.Since(ran)).Seconds())), 1)
	secs, err := strconv.Atoi(h.Get("Retry-After"))
	if assert.NoError(t, err, "Retry-After in whole seconds") {
		assert.GreaterOrEqual(t, secs, least, "the rest of the wait, rounded up")
		assert.LessOrEqual(t, secs, int(every/time.Second))
	}
}

// TestConsole_ResendIsRateLimited: one resend per connection per
// ResendEvery; another delivery's sooner is 429 with Retry-After.
func TestConsole_ResendIsRateLimited(t *testing.T) {
	t.Parallel()
	f := newFixture(t, &console.Options{Connections: customerConnections, ResendEvery: time.Hour}, false)
	path := "/api/connections/crm/deliveries/" + strconv.FormatInt(f.jobs["given-up"], 10) + "/resend"
	require.Equal(t, http.StatusOK, f.do(t, "POST", path, "").Code)
	got := f.do(t, "POST", "/api/connections/crm/deliveries/"+strconv.FormatInt(f.jobs["hostile"], 10)+"/resend", "")
	assert.Equal(t, http.StatusTooManyRequests, got.Code)
	assert.NotEmpty(t, got.Header().Get("Retry-After"))
}

// TestConsole_RecoverTakesOnlyAYesOrANo: a dry run asked for in words the
// console does not know is refused, never run for real; what a checkbox
// sends is a yes.
func TestConsole_RecoverTakesOnlyAYesOrANo(t *testing.T) {
	t.Parallel()
	f := newFixture(t, &console.Options{Connections: customerConnections, RecoverEvery: -1}, false)
	got := f.do(t, "POST", "/api/connections/crm/recover", "since=24h&dry_run=maybe")
	assert.Equal(t, http.StatusBadRequest, got.Code)
	assert.Contains(t, got.Body.String(), "dry_run")
	for _, yes := range []string{"on", "yes", "true", "1"} {
		got = f.do(t, "POST", "/api/connections/crm/recover", "since=24h&dry_run="+yes)
		require.Equal(t, http.StatusOK, got.Code, got.Body.String())
		assert.Contains(t, got.Body.String(), `"dry_run": true`, yes)
	}
}

// TestConsole_ASendTestRefusedAsBusyKeepsItsTurn: a Send Test refused
// because every place in flight is held (503, Retry-After: 5) was not
// made, so it spends no turn of TestEvery: tried again once a place is
// free, it is sent.
func TestConsole_ASendTestRefusedAsBusyKeepsItsTurn(t *testing.T) {
	t.Parallel()
	for _, shared := range []bool{false, true} {
		t.Run(map[bool]string{false: "in memory", true: "shared"}[shared], func(t *testing.T) {
			t.Parallel()
			arrived, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				first := false
				once.Do(func() { first = true })
				if first { // the first attempt holds the connection's one place
					close(arrived)
					<-release
				}
			})})
			defer srv.Close()
			conn := srv.Connection()
			w, err := riverhook.NewWorker(srv.Sender(nil), func(context.Context, string) (webhook.Connection, error) { return conn, nil },
				&riverhook.WorkerOptions{MaxInFlightPerConnection: 1})
			require.NoError(t, err)
			f := consoleOn(t, w, shared)

			held := make(chan error)
			go func() {
				_, err := w.SendTest(context.Background(), "crm")
				held <- err
			}()
			<-arrived
			got := f.do(t, "POST", "/api/connections/crm/test", "")
			require.Equal(t, http.StatusServiceUnavailable, got.Code, got.Body.String())
			assert.Equal(t, "5", got.Header().Get("Retry-After"))
			close(release)
			require.NoError(t, <-held)

			got = f.do(t, "POST", "/api/connections/crm/test", "")
			assert.Equal(t, http.StatusOK, got.Code, "the busy test spent no turn: %s", got.Body.String())
			got = f.do(t, "POST", "/api/connections/crm/test", "")
			assert.Equal(t, http.StatusTooManyRequests, got.Code, "the test sent spent it")
		})
	}
}

// consoleOn returns the console on a schema of its own, acting through w,
// for connection "crm"; with shared, its turns are in the database
// (Options.Limits).
func consoleOn(t *testing.T, w *riverhook.Worker, shared bool) *fixture {
	t.Helper()
	opts := &console.Options{Connections: func(*http.Request) ([]string, error) { return []string{"crm"}, nil }}
	return consoleWith(t, w, opts, shared)
}

// consoleWith returns the console with opts on a schema of its own, acting
// through w; with shared, its turns are in the database (Options.Limits).
func consoleWith(t *testing.T, w *riverhook.Worker, opts *console.Options, shared bool) *fixture {
	t.Helper()
	pool, schema := testdb.Schema(t, "console", true)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema, Logger: testdb.Quiet()})
	require.NoError(t, err)
	if shared {
		require.NoError(t, riverhook.Migrate(context.Background(), pool, schema))
		opts.Limits = console.NewSharedLimits(pool, schema)
	}
	h, err := console.New(client, pool, w, opts)
	require.NoError(t, err)
	return &fixture{pool: pool, schema: schema, client: client, worker: w, handler: h}
}

// TestConsole_LimitsHoldAcrossReplicas serves one database from two
// replicas of the console sharing their turns (Options.Limits): what one
// allowed, the other refuses within the interval, with the rest of its
// wait; a resend of the delivery resent last is let through on either.
func TestConsole_LimitsHoldAcrossReplicas(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, false)
	ctx := context.Background()
	require.NoError(t, riverhook.Migrate(ctx, f.pool, f.schema))
	replica := func() *fixture {
		h, err := console.New(f.client, f.pool, f.worker, &console.Options{Connections: customerConnections,
			TestEvery: time.Hour, RecoverEvery: time.Hour, ResendEvery: time.Hour, Limits: console.NewSharedLimits(f.pool, f.schema)})
		require.NoError(t, err)
		return &fixture{handler: h}
	}
	a, b := replica(), replica()
	resend := func(d string) string {
		return "/api/connections/crm/deliveries/" + strconv.FormatInt(f.jobs[d], 10) + "/resend"
	}
	for _, tc := range []struct{ name, path, form, again string }{
		{"send test", "/api/connections/crm/test", "", ""},
		{"recover", "/api/connections/crm/recover", "since=24h", ""},
		{"dry run", "/api/connections/crm/recover", "since=24h&dry_run=true", ""},
		{"resend", resend("given-up"), "", resend("hostile")},
	} {
		ran := time.Now()
		got := a.do(t, "POST", tc.path, tc.form)
		require.Equal(t, http.StatusOK, got.Code, "%s: %s", tc.name, got.Body.String())
		again := cmp.Or(tc.again, tc.path)
		got = b.do(t, "POST", again, tc.form)
		assert.Equal(t, http.StatusTooManyRequests, got.Code, "%s on the other replica: %s", tc.name, got.Body.String())
		assertRetryAfter(t, got.Header(), time.Hour, ran)
	}
	got := b.do(t, "POST", resend("given-up"), "")
	assert.Equal(t, http.StatusOK, got.Code, "the delivery resent last, again: %s", got.Body.String())
	got = a.do(t, "POST", "/api/connections/erp/test", "", "X-Customer", "both")
	assert.Equal(t, http.StatusOK, got.Code, "per connection: %s", got.Body.String())

	// At once on both replicas, the first turn of a connection: one alone.
	codes := make(chan int, 8)
	var wg sync.WaitGroup
	for i := range cap(codes) {
		wg.Go(func() {
			codes <- []*fixture{a, b}[i%2].do(t, "POST", "/api/connections/erp/recover", "since=24h&dry_run=true", "X-Customer", "both").Code
		})
	}
	wg.Wait()
	close(codes)
	counts := map[int]int{}
	for code := range codes {
		counts[code]++
	}
	assert.Equal(t, map[int]int{http.StatusOK: 1, http.StatusTooManyRequests: 7}, counts)
}
