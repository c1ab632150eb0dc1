package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/riverhook/console"
	"github.com/signedhook/webhook/riverhook/internal/testdb"
	"github.com/signedhook/webhook/webhooktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Texts no page or JSON may hold: the signing secret, a custom header's
// value, the URL's path, and the payload's personal data (without
// ShowPayload).
const (
	secret      = "whsec_console-test-secret-0123456789"
	headerValue = "Bearer hdr-T0ken-0123"
	secretPath  = "/hooks/T0kenInThePath"
	personal    = "test.user@example.com"
)

// hostile is what a hostile receiver answers: script that, were it run,
// would set the page's title and a global.
const hostile = `<script>document.title="pwned";window.pwned=1</script><img src=x onerror="window.pwned=2">`

// receiver answers each delivery by its id (the payload's
// metadata.delivery_id): the statuses scripted for it in turn, then 200.
type receiver struct {
	mu      sync.Mutex
	answers map[string][]int
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var p webhook.Payload
	body, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(body, &p)
	id, _ := p.User.Metadata["delivery_id"].(string)
	rc.mu.Lock()
	status := http.StatusOK
	if a := rc.answers[id]; len(a) > 0 {
		status, rc.answers[id] = a[0], a[1:]
	}
	rc.mu.Unlock()
	if id == "hostile" {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(status)
		w.Write([]byte(hostile))
		return
	}
	w.WriteHeader(status)
	w.Write([]byte(`{"ok":` + map[bool]string{true: "true", false: "false"}[status < 300] + `}`))
}

// fixture is a schema holding deliveries to "crm" in every status, an
// interrupted one and a hostile receiver's, and one to "erp"; and the
// console on them.
type fixture struct {
	pool    *pgxpool.Pool
	schema  string
	client  *river.Client[pgx.Tx]
	worker  *riverhook.Worker
	srv     *webhooktest.Server
	rcv     *receiver
	jobs    map[string]int64 // by delivery id
	handler http.Handler
}

// hourPolicy retries once, an hour later: what is retrying stays so.
func hourPolicy() *webhook.RetryPolicy {
	return &webhook.RetryPolicy{MaxRetries: 1, Backoff: func(int, *http.Response) time.Duration { return time.Hour }}
}

func payload(deliveryID string) webhook.Payload {
	p := webhook.SamplePayload(time.Now())
	p.User.ID = "usr_" + deliveryID
	p.User.Metadata = webhook.Metadata{"plan": "pro", "delivery_id": deliveryID}
	return p
}

// newFixture builds the deliveries, then the console with opts (nil: "crm"
// and "erp" are the request's when its X-Customer header says so, "crm"
// alone otherwise). With work, the client is started with the Worker, so
// that what the console inserts is delivered.
func newFixture(t *testing.T, opts *console.Options, work bool) *fixture {
	t.Helper()
	ctx := context.Background()
	pool, schema := testdb.Schema(t, "console", true)
	require.NoError(t, riverhook.Migrate(ctx, pool, schema)) // README's step 1
	f := &fixture{pool: pool, schema: schema, rcv: &receiver{answers: map[string][]int{
		"given-up": {500, 500}, "retrying": {503}, "hostile": {500, 500}}}, jobs: map[string]int64{}}
	f.srv = webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: f.rcv})
	t.Cleanup(f.srv.Close)
	conn := f.srv.Connection()
	conn.URL += secretPath
	conn.Headers = map[string]string{"Authorization": headerValue}
	conns := map[string]webhook.Connection{"crm": conn, "erp": conn}
	var err error
	f.worker, err = riverhook.NewWorker(f.srv.Sender(&webhook.SenderOptions{Retry: hourPolicy()}),
		func(_ context.Context, id string) (webhook.Connection, error) {
			if c, ok := conns[id]; ok {
				return c, nil
			}
			return webhook.Connection{}, riverhook.ErrConnectionGone
		}, &riverhook.WorkerOptions{Logger: testdb.Quiet()})
	require.NoError(t, err)

	insertOnly, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema, Logger: testdb.Quiet()})
	require.NoError(t, err)
	tw := rivertest.NewWorker(t, riverpgxv5.New(nil), &river.Config{Schema: schema, Logger: testdb.Quiet()}, f.worker)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	later := &river.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)}
	for _, d := range []string{"given-up", "retrying", "delivered", "interrupted", "hostile", "cancelled", "waiting"} {
		opts := f.worker.InsertOptions(nil)
		if d == "waiting" {
			opts = f.worker.InsertOptions(later)
		}
		res, err := riverhook.InsertTx(ctx, insertOnly, tx, d, []string{"crm"}, payload(d), opts)
		require.NoError(t, err)
		f.jobs[d] = res[0].Job.ID
	}
	res, err := riverhook.InsertTx(ctx, insertOnly, tx, "other", []string{"erp"}, payload("other"), f.worker.InsertOptions(nil))
	require.NoError(t, err)
	f.jobs["other"] = res[0].Job.ID
	get := func(d string) *rivertype.JobRow {
		job, err := insertOnly.JobGetTx(ctx, tx, f.jobs[d])
		require.NoError(t, err)
		return job
	}
	for _, d := range []string{"given-up", "given-up", "retrying", "delivered", "hostile", "hostile", "other"} {
		tw.WorkJob(ctx, t, tx, get(d)) //nolint:errcheck // the job's state tells
	}
	// A run of "interrupted" whose process died: River's rescuer leaves the
	// job available with one more run counted; the next run delivers it.
	_, err = tx.Exec(ctx, "UPDATE "+schema+`.river_job SET attempt = attempt + 1, attempted_at = now(),
		errors = array_append(errors, jsonb_build_object('at', now(), 'attempt', attempt + 1, 'error', 'Stuck job rescued by JobRescuer')),
		state = 'available' WHERE id = $1`, f.jobs["interrupted"])
	require.NoError(t, err)
	tw.WorkJob(ctx, t, tx, get("interrupted")) //nolint:errcheck
	_, err = insertOnly.JobCancelTx(ctx, tx, f.jobs["cancelled"])
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	f.client = insertOnly
	if work {
		config := &river.Config{Schema: schema, Logger: testdb.Quiet(), FetchCooldown: 5 * time.Millisecond,
			FetchPollInterval: 20 * time.Millisecond, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}}}
		require.NoError(t, riverhook.Register(config, f.worker))
		f.client, err = river.NewClient(riverpgxv5.New(pool), config)
		require.NoError(t, err)
		require.NoError(t, f.client.Start(ctx))
		t.Cleanup(func() {
			stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			f.client.StopAndCancel(stop) //nolint:errcheck
		})
	}
	if opts == nil {
		opts = &console.Options{Connections: customerConnections}
	}
	f.handler, err = console.New(f.client, f.pool, f.worker, opts)
	require.NoError(t, err)
	return f
}

// customerConnections is the tests' scope: "crm" for every request, and
// "erp" too for one whose X-Customer is "both".
func customerConnections(r *http.Request) ([]string, error) {
	if r.Header.Get("X-Customer") == "both" {
		return []string{"crm", "erp"}, nil
	}
	return []string{"crm"}, nil
}

// do serves one request to the console mounted under /console/, as a
// service mounts it, and returns the answer.
func (f *fixture) do(t *testing.T, method, path string, form string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	var body *strings.Reader
	if form != "" {
		body = strings.NewReader(form)
	} else {
		body = strings.NewReader("")
	}
	r := httptest.NewRequest(method, "/console"+path, body)
	if form != "" {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	mux := http.NewServeMux()
	mux.Handle("/console/", http.StripPrefix("/console", f.handler))
	mux.ServeHTTP(w, r)
	return w
}

// assertClean fails when text holds a secret, a header value, the URL's
// path or, unless payload, the payload's personal data.
func assertClean(t *testing.T, text string, payload bool) {
	t.Helper()
	tokens := []string{secret, headerValue, "hdr-T0ken", "T0kenInThePath"}
	if !payload {
		tokens = append(tokens, personal)
	}
	for _, tok := range tokens {
		if i := strings.Index(text, tok); i >= 0 {
			t.Errorf("the answer holds %q: ...%s...", tok, text[max(i-80, 0):min(i+len(tok)+40, len(text))])
		}
	}
}
