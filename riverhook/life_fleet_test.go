package riverhook_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/riverhook/console"
	"github.com/signedhook/webhook/webhooktest"
)

// The policy and pace of TestFleet_AnEndpointsLife's processes: disabled
// after 4 s of failures, warned 3 s before, 10 deliveries a second.
const (
	lifeDisableAfter = 4 * time.Second
	lifeWarnBefore   = 3 * time.Second
	lifeRate         = 10.0
)

// TestLifeChild is a process of TestFleet_AnEndpointsLife: as
// "life-worker", a started River client working the deliveries and the
// notices, whose notice handler writes each notice it handles in the
// transaction that completes its job; as "life-api", the console on an
// insert-only client, served on 127.0.0.1.
func TestLifeChild(t *testing.T) {
	role := os.Getenv(fleetRole)
	if role != "life-worker" && role != "life-api" {
		t.Skip("a child process of TestFleet_AnEndpointsLife")
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("TEST_DATABASE_URL"))
	require.NoError(t, err)
	defer pool.Close()
	schema := os.Getenv(fleetSchema)
	pem, err := os.ReadFile(os.Getenv(fleetURL + "_CA"))
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(pem))
	w := lifeWorker(t, pool, schema, os.Getenv(fleetURL), roots)

	if role == "life-api" {
		h, err := console.New(newClient(t, pool, schema, nil, nil), pool, w, &console.Options{
			Connections: func(*http.Request) ([]string, error) { return []string{"crm", "gone"}, nil },
			Limits:      console.NewSharedLimits(pool, schema),
		})
		require.NoError(t, err)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		os.Stdout.WriteString("serving\n" + ln.Addr().String() + "\n")
		require.NoError(t, http.Serve(ln, h))
		return
	}

	// The service's handler of the notices: what it writes and the job's
	// completion commit together, so a notice is handled once or not at
	// all, whenever the process dies.
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[riverhook.NoticeArgs]) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		n := job.Args
		if _, err := tx.Exec(ctx, `INSERT INTO `+schema+`.handled_notice (job_id, connection_id, change, reason, at, disable_at, waiting)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, job.ID, n.ConnectionID, n.Change, n.Reason, n.At, n.DisableAt, n.Waiting); err != nil {
			return err
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}))
	client := newClient(t, pool, schema, workers, func(cfg *river.Config) {
		cfg.Queues[riverhook.NoticeQueue] = river.QueueConfig{MaxWorkers: 2}
		require.NoError(t, riverhook.Register(cfg, w))
	})
	require.NoError(t, client.Start(ctx))
	os.Stdout.WriteString("working\n")
	select {} // until the test kills it
}

// lifeWorker returns the Worker of TestFleet_AnEndpointsLife's processes,
// delivering to base with roots: a retry every 100 ms, two in flight and
// 10 a second across the fleet, disabled after 4 s of failures.
func lifeWorker(t *testing.T, pool *pgxpool.Pool, schema, base string, roots *x509.CertPool) *riverhook.Worker {
	t.Helper()
	tr, err := webhook.NewTransport(&webhook.TransportOptions{AllowPrivateNetworks: true, TLSClientConfig: &tls.Config{RootCAs: roots}})
	require.NoError(t, err)
	sender, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr},
		Retry: &webhook.RetryPolicy{MaxRetries: 1000, Backoff: func(int, *http.Response) time.Duration { return 100 * time.Millisecond }}})
	require.NoError(t, err)
	resolve := newResolver(map[string]webhook.Connection{
		"crm":  {Name: "crm", URL: base + "/crm", Secret: secret},
		"gone": {Name: "gone", URL: base + "/gone", Secret: secret},
	}).resolve
	return newWorker(t, sender, resolve, &riverhook.WorkerOptions{
		MaxInFlightPerConnection: 2,
		Places:                   riverhook.NewConnectionPlaces(pool, schema),
		RateLimit:                func(string) float64 { return lifeRate },
		Life:                     &riverhook.LifePolicy{DisableAfter: lifeDisableAfter, WarnBefore: lifeWarnBefore},
		Logger:                   quietLogger(),
	})
}

// handledNotice is a row the service's handler wrote.
type handledNotice struct {
	JobID     int64
	Change    string
	Reason    string
	At        time.Time
	DisableAt time.Time
	Waiting   int
}

// TestFleet_AnEndpointsLife runs an endpoint's life through two worker
// processes and an API process on one PostgreSQL. An endpoint that answers
// 500 passes through failing and the warning to disabled, one worker
// SIGKILLed as the warning is due (a replacement started); the console
// in the API process shows each state within 2 s of its change; deliveries
// inserted while it is disabled are kept, not dialled; Enable from the
// console sends every kept delivery once, within the bound and the rate,
// as many as its button counted; and an endpoint answering 410 is disabled
// at once, saying why. Each notice is handled once.
func TestFleet_AnEndpointsLife(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for River's rescue of a killed worker's jobs, about a minute and a half")
	}
	t.Parallel()
	pool, schema := testDB(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `CREATE TABLE `+schema+`.handled_notice (job_id bigint NOT NULL, connection_id text NOT NULL,
		change text NOT NULL, reason text NOT NULL, at timestamptz NOT NULL, disable_at timestamptz NOT NULL, waiting integer NOT NULL)`)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			dumpLife(t, pool, schema)
		}
	})

	// The endpoints: crm answers 500 until told otherwise; gone, 410.
	var status atomic.Int32
	status.Store(http.StatusInternalServerError)
	var mu sync.Mutex
	inFlight, peak := 0, 0
	srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/gone") {
			w.WriteHeader(http.StatusGone)
			return
		}
		mu.Lock()
		inFlight++
		peak = max(peak, inFlight)
		mu.Unlock()
		time.Sleep(20 * time.Millisecond) // an endpoint's time, so that attempts overlap
		mu.Lock()
		inFlight--
		mu.Unlock()
		w.WriteHeader(int(status.Load()))
	})})
	defer srv.Close()
	caFile := t.TempDir() + "/ca.pem"
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))
	env := []string{fleetSchema + "=" + schema, fleetURL + "=" + srv.URL + "/hooks", fleetURL + "_CA=" + caFile}
	startLife := func(role, ready string) (*exec.Cmd, <-chan string) {
		return startChild(t, "TestLifeChild", ready, append([]string{fleetRole + "=" + role}, env...))
	}
	crmDeliveries := func() []webhooktest.Delivery {
		var ds []webhooktest.Delivery
		for _, d := range srv.Deliveries() {
			if d.Path == "/hooks/crm" {
				ds = append(ds, d)
			}
		}
		return ds
	}

	_, lines := startLife("life-api", "serving")
	api := "http://" + <-lines
	web := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	page := func() string {
		res, err := web.Get(api + "/connections/crm")
		require.NoError(t, err)
		defer res.Body.Close()
		var b strings.Builder
		_, err = io.Copy(&b, res.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode, "%s", b.String())
		return b.String()
	}
	// A person watching the connection's page: when each state first
	// showed.
	var seenMu sync.Mutex
	seen := map[riverhook.State]time.Time{}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			res, err := web.Get(api + "/connections/crm")
			if err != nil {
				continue
			}
			var b strings.Builder
			io.Copy(&b, res.Body)
			res.Body.Close()
			at := time.Now()
			state := riverhook.StateActive
			switch {
			case strings.Contains(b.String(), "This connection is failing"):
				state = riverhook.StateFailing
			case strings.Contains(b.String(), "This connection is disabled"):
				state = riverhook.StateDisabled
			}
			seenMu.Lock()
			if _, ok := seen[state]; !ok && (state != riverhook.StateActive || !seen[riverhook.StateDisabled].IsZero()) {
				seen[state] = at // active: once it was disabled
			}
			seenMu.Unlock()
		}
	}()
	defer func() { close(stop); <-stopped }()
	shownWithin2s := func(state riverhook.State, n handledNotice) {
		t.Helper()
		deadline := n.At.Add(2 * time.Second)
		for {
			seenMu.Lock()
			at := seen[state]
			seenMu.Unlock()
			if !at.IsZero() {
				t.Logf("the console showed %s %v after the change", state, at.Sub(n.At).Round(time.Millisecond))
				assert.False(t, at.After(deadline), "the console showed %s %v after the change", state, at.Sub(n.At))
				return
			}
			if time.Now().After(deadline.Add(time.Second)) {
				t.Errorf("the console did not show %s within 2 s of the change", state)
				return
			}
			time.Sleep(10 * time.Millisecond) // the poller's next look
		}
	}

	workerA, _ := startLife("life-worker", "working")
	startLife("life-worker", "working")
	client := newClient(t, pool, schema, nil, nil)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	opts := lifeWorker(t, pool, schema, srv.URL+"/hooks", roots).InsertOptions(nil) // River's runs for the policy's retries
	insert := func(conn string, ids ...string) {
		t.Helper()
		var params []river.InsertManyParams
		for _, d := range ids {
			p, err := riverhook.InsertParams(d, []string{conn}, payload(d), opts)
			require.NoError(t, err)
			params = append(params, p...)
		}
		_, err := client.InsertMany(ctx, params)
		require.NoError(t, err)
	}
	notice := func(conn string, change riverhook.Change) handledNotice {
		t.Helper()
		// A notice job the killed worker held waits for River's rescue
		// (RescueStuckJobsAfter, a rescuer's pass, perhaps a new leader).
		deadline := time.Now().Add(3 * time.Minute)
		for {
			var n handledNotice
			err := pool.QueryRow(ctx, `SELECT job_id, change, reason, at, disable_at, waiting FROM `+schema+`.handled_notice
				WHERE connection_id = $1 AND change = $2 ORDER BY job_id LIMIT 1`, conn, change).
				Scan(&n.JobID, &n.Change, &n.Reason, &n.At, &n.DisableAt, &n.Waiting)
			if err == nil {
				return n
			}
			require.ErrorIs(t, err, pgx.ErrNoRows)
			require.True(t, time.Now().Before(deadline), "no %s notice of %s handled within 3 minutes", change, conn)
			time.Sleep(20 * time.Millisecond) // the handler's next commit
		}
	}
	// kept waits until the n deliveries to crm are kept: snoozed about an
	// hour ahead. A killed worker's runs wait for River's rescue.
	kept := func(n int) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for {
			var k int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.river_job WHERE kind = $1
				AND args->>'connection_id' = 'crm' AND state = 'scheduled' AND scheduled_at > now() + interval '50 minutes'`,
				riverhook.Kind).Scan(&k))
			if k == n {
				return
			}
			require.True(t, time.Now().Before(deadline), "%d of %d deliveries kept within 3 minutes", k, n)
			time.Sleep(100 * time.Millisecond) // the next run's snooze
		}
	}

	first := []string{"d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7"}
	insert("crm", first...)
	insert("gone", "g0")

	gone := notice("gone", riverhook.ChangeDisabled)
	assert.Equal(t, string(riverhook.ReasonGone), gone.Reason, "a 410 disables at once, saying why")

	failing := notice("crm", riverhook.ChangeFailing)
	shownWithin2s(riverhook.StateFailing, failing)
	time.Sleep(time.Until(failing.DisableAt.Add(-lifeWarnBefore))) // the warning is due: a crash now
	require.NoError(t, workerA.Process.Signal(syscall.SIGKILL))
	startLife("life-worker", "working")
	t.Log("a worker killed as the warning was due; a replacement started")

	warning := notice("crm", riverhook.ChangeWarning)
	assert.True(t, warning.DisableAt.Equal(failing.DisableAt), "the warning names the date")
	assert.LessOrEqual(t, warning.DisableAt.Sub(warning.At), lifeWarnBefore, "given at most WarnBefore ahead")
	disabled := notice("crm", riverhook.ChangeDisabled)
	assert.Equal(t, string(riverhook.ReasonFailing), disabled.Reason)
	assert.False(t, disabled.At.Before(failing.DisableAt), "not before the date the warning gave")
	shownWithin2s(riverhook.StateDisabled, disabled)

	kept(len(first))
	dialled := len(crmDeliveries())
	later := []string{"d8", "d9", "d10", "d11", "d12"}
	insert("crm", later...)
	kept(len(first) + len(later))
	assert.Equal(t, dialled, len(crmDeliveries()), "nothing dialled while disabled")

	// The Enable button counts what it will send.
	m := regexp.MustCompile(`Enable and send (\d+) kept deliver`).FindStringSubmatch(page())
	require.NotNil(t, m, "the page's Enable button")
	count, _ := strconv.Atoi(m[1])
	assert.Equal(t, len(first)+len(later), count, "every delivery kept")

	status.Store(http.StatusOK)
	mu.Lock()
	peak = 0
	mu.Unlock()
	res, err := web.Post(api+"/connections/crm/enable", "application/x-www-form-urlencoded", nil)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusSeeOther, res.StatusCode, "Enable from the console")

	deadline := time.Now().Add(60 * time.Second)
	for {
		var left int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.river_job WHERE kind = $1
			AND args->>'connection_id' = 'crm' AND state <> 'completed'`, riverhook.Kind).Scan(&left))
		if left == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "%d deliveries to crm not completed within 60 s of Enable", left)
		time.Sleep(50 * time.Millisecond) // the next completion
	}
	var sent []webhooktest.Delivery
	users := map[string]int{}
	for _, d := range crmDeliveries() {
		if d.Status != http.StatusOK {
			continue
		}
		sent = append(sent, d)
		var p struct {
			User struct{ ID string } `json:"user"`
		}
		require.NoError(t, json.Unmarshal(d.Body, &p))
		users[p.User.ID]++
	}
	assert.Len(t, sent, count, "the button's count, sent")
	for user, n := range users {
		assert.Equal(t, 1, n, "%s sent once", user)
	}
	assert.Len(t, users, len(first)+len(later), "each kept delivery sent")
	mu.Lock()
	assert.LessOrEqual(t, peak, 2, "no more in flight than the bound, across the fleet")
	mu.Unlock()
	starts := make([]time.Time, 0, len(sent))
	for _, d := range sent {
		ms, err := strconv.ParseInt(d.Header.Get(webhook.HeaderTimestamp), 10, 64)
		require.NoError(t, err)
		starts = append(starts, time.UnixMilli(ms))
	}
	slices.SortFunc(starts, time.Time.Compare)
	span := starts[len(starts)-1].Sub(starts[0])
	t.Logf("%d kept deliveries sent after Enable in %v (rate %v/s)", len(sent), span.Round(time.Millisecond), lifeRate)
	// As in TestFleet_RateHoldsAcrossProcesses: starts signed a moment
	// after the pace handed them.
	assert.GreaterOrEqual(t, span, time.Duration(float64(len(sent)-1)/lifeRate*float64(time.Second))-150*time.Millisecond,
		"at no more than the connection's rate")

	enabled := notice("crm", riverhook.ChangeEnabled)
	assert.Equal(t, count, enabled.Waiting)
	shownWithin2s(riverhook.StateActive, enabled)

	// Each notice handled once: one job each, one row each.
	var jobs, rows, dupes int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.river_job WHERE kind = $1`, riverhook.NoticeKind).Scan(&jobs))
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(*) - count(DISTINCT job_id) FROM `+schema+`.handled_notice`).Scan(&rows, &dupes))
	assert.Equal(t, 5, jobs, "crm: failing, warning, disabled, enabled; gone: disabled")
	assert.Equal(t, jobs, rows, "each notice handled")
	assert.Zero(t, dupes, "no notice handled twice")
	history, err := riverhook.History(ctx, client, pool, "crm", 10)
	require.NoError(t, err)
	var changes []riverhook.Change
	for _, h := range history {
		changes = append(changes, h.Change)
	}
	assert.Equal(t, []riverhook.Change{riverhook.ChangeEnabled, riverhook.ChangeDisabled, riverhook.ChangeWarning, riverhook.ChangeFailing}, changes)
}

// dumpLife logs the jobs and the connections' states in schema, for a
// failed test's reader.
func dumpLife(t *testing.T, pool *pgxpool.Pool, schema string) {
	ctx := context.Background()
	rows, err := pool.Query(ctx, `SELECT format('job %s %s %s, run %s, due in %s: %s', id, kind, state, attempt,
		scheduled_at - now(), left(coalesce(errors[array_length(errors, 1)]->>'error', ''), 200)) FROM `+schema+`.river_job ORDER BY id`)
	if err == nil {
		lines, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, l := range lines {
			t.Log(l)
		}
	}
	rows, err = pool.Query(ctx, `SELECT row_to_json(s)::text FROM `+schema+`.riverhook_connection_state s`)
	if err == nil {
		lines, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, l := range lines {
			t.Log(l)
		}
	}
}
