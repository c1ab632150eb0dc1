package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/riverhook/internal/testdb"
	"github.com/signedhook/webhook/webhooktest"
)

// binDir holds this program, built once (binary) for the tests that run it
// as separate processes.
var binDir string

func TestMain(m *testing.M) {
	var err error
	if binDir, err = os.MkdirTemp("", "durable"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	if err := goleak.Find(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "goleak:", err)
		code = 1
	}
	os.Exit(code)
}

const secret = "whsec_durable"

var build = sync.OnceValue(func() error {
	cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, "durable"), ".")
	cmd.Stderr = os.Stderr
	return cmd.Run()
})

// binary returns the path of this program, built.
func binary(t *testing.T) string {
	t.Helper()
	require.NoError(t, build(), "go build")
	return filepath.Join(binDir, "durable")
}

// fixture is a database schema, a receiver and the files durable reads.
type fixture struct {
	db, schema  string
	pool        *pgxpool.Pool
	srv         *webhooktest.Server
	conns, cert string
}

func newFixture(t *testing.T, handler http.Handler) *fixture {
	t.Helper()
	pool, schema := testdb.Schema(t, "durable", false) // durable migrate makes River's tables
	f := &fixture{db: testdb.URL(t), schema: schema, pool: pool}

	f.srv = webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: handler})
	t.Cleanup(f.srv.Close)
	dir := t.TempDir()
	f.cert = filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(f.cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw}), 0o600))
	conns, err := json.Marshal([]connection{{ID: "crm", Name: "CRM", URL: f.srv.Connection().URL, Method: "POST",
		Headers: map[string]string{"Authorization": "Bearer k"}, Secret: secret}})
	require.NoError(t, err)
	f.conns = filepath.Join(dir, "connections.json")
	require.NoError(t, os.WriteFile(f.conns, conns, 0o600))

	out := f.durable(t, "migrate")
	assert.Contains(t, out, "migrated")
	return f
}

func (f *fixture) args(cmd string, more ...string) []string {
	args := []string{cmd, "-db", f.db, "-schema", f.schema}
	if cmd == "enqueue" || cmd == "work" || cmd == "serve" || cmd == "health" {
		args = append(args, "-connections", f.conns)
	}
	return append(args, more...)
}

func (f *fixture) workArgs(more ...string) []string {
	return f.args("work", append([]string{"-ca", f.cert, "-allow-private", "-workers", "4"}, more...)...)
}

// durable runs the program to its end and returns its standard output.
func (f *fixture) durable(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary(t), f.args(args[0], args[1:]...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "durable %s: %s", args[0], stderr.String())
	return string(out)
}

// worker is a durable work process and the lines it prints.
type worker struct {
	cmd   *exec.Cmd
	lines chan string
}

func (f *fixture) startWorker(t *testing.T, more ...string) *worker {
	t.Helper()
	return f.startProcess(t, f.workArgs(more...)...)
}

// startProcess starts durable with args, a long-running command (work,
// serve), killed when the test ends.
func (f *fixture) startProcess(t *testing.T, args ...string) *worker {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	w := &worker{cmd: cmd, lines: make(chan string, 64)}
	go func() {
		defer close(w.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return w
}

// waitLine returns the first line containing s, within a minute.
func (w *worker) waitLine(t *testing.T, s string) string {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case line, ok := <-w.lines:
			require.True(t, ok, "durable work ended before printing %q", s)
			if strings.Contains(line, s) {
				return line
			}
		case <-timeout:
			t.Fatalf("durable work printed no %q within a minute", s)
		}
	}
}

// interrupt sends SIGINT and returns the process's error once it has
// ended, within bound; the rest of its lines are drained.
func (w *worker) interrupt(t *testing.T, bound time.Duration) error {
	t.Helper()
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGINT))
	done := make(chan error, 1)
	go func() {
		for range w.lines { // until the process closes its output
		}
		done <- w.cmd.Wait()
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(bound):
		t.Fatalf("durable work did not stop within %v of SIGINT", bound)
		return nil
	}
}

// counter counts deliveries and closes done when it reaches want.
type counter struct {
	n    atomic.Int32
	want int32
	done chan struct{}
}

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c.n.Add(1) == c.want {
		close(c.done)
	}
}

func TestDurable_EnqueueAndWork(t *testing.T) {
	t.Parallel()
	c := &counter{want: 5, done: make(chan struct{})}
	f := newFixture(t, c)
	assert.Equal(t, "enqueued 5 deliveries to 1 connection(s)\n", f.durable(t, "enqueue", "-n", "5"))

	// A down mark a worker left as it died: the next worker's first answer
	// from the endpoint clears it.
	endpoint := f.srv.Connection().Endpoint()
	hourAgo := time.Now().Add(-time.Hour)
	err := riverhook.NewEndpointMarks(f.pool, f.schema).Mark(context.Background(),
		webhook.EndpointHealth{Endpoint: endpoint, Down: true, Since: hourAgo, Changed: hourAgo, NextProbe: hourAgo.Add(time.Minute)})
	require.NoError(t, err)
	assert.Contains(t, f.durable(t, "health"), endpoint+"  down")

	w := f.startWorker(t)
	select {
	case <-c.done:
	case <-time.After(60 * time.Second):
		t.Fatal("5 deliveries did not arrive within 60 s")
	}
	var delivered []string
	for len(delivered) < 5 {
		delivered = append(delivered, w.waitLine(t, "kind=delivered"))
	}
	require.NoError(t, w.interrupt(t, time.Minute))

	ids := map[string]bool{}
	for _, d := range f.srv.Deliveries() {
		require.NoError(t, d.Err)
		assert.Equal(t, "Bearer k", d.Header.Get("Authorization"))
		p, err := d.Payload()
		require.NoError(t, err)
		ids[p.User.Metadata["delivery_id"].(string)] = true
	}
	assert.Len(t, ids, 5, "each delivery has its own id in its body")
	for _, line := range delivered {
		assert.Contains(t, line, "connection=crm delivery=dlv_")
		assert.Contains(t, line, "attempt=1 status=200 kind=delivered next=-")
	}
	out := f.durable(t, "deliveries", "-connection", "crm")
	assert.Equal(t, 5, strings.Count(out, "completed"), out)
	assert.Equal(t, 5, strings.Count(out, "200 delivered"), out)

	var page struct {
		Counts     map[string]int `json:"counts_24h"`
		Deliveries []struct {
			JobID    int64  `json:"job_id"`
			Status   string `json:"status"`
			Attempts []struct {
				Outcome string `json:"outcome"`
				Run     int    `json:"run"`
			} `json:"attempts"`
		} `json:"deliveries"`
		Next string `json:"next"`
	}
	require.NoError(t, json.Unmarshal([]byte(f.durable(t, "deliveries", "-connection", "crm", "-json", "-n", "3")), &page))
	assert.Equal(t, 5, page.Counts["delivered"])
	require.Len(t, page.Deliveries, 3)
	assert.NotEmpty(t, page.Next, "two more on the next page")
	assert.Equal(t, "delivered", page.Deliveries[0].Status)
	assert.Equal(t, "delivered", page.Deliveries[0].Attempts[0].Outcome)
	assert.Equal(t, 1, page.Deliveries[0].Attempts[0].Run)

	assert.Contains(t, f.durable(t, "health"), endpoint+"  up", "the dead worker's mark cleared")
	job := fmt.Sprint(page.Deliveries[0].JobID)
	assert.Contains(t, f.durable(t, "resend", "-job", job, "-reason", "test: the customer asked"), "job "+job+" resent as job ")
	assert.Contains(t, f.durable(t, "resend", "-job", job, "-reason", "a double click"), "resent already")
	assert.Equal(t, "0 given up since 24h0m0s and not resent: would resend 0, 0 resent meanwhile, more: false\n",
		f.durable(t, "recover", "-connection", "crm", "-reason", "x", "-dry-run"))
	assert.Equal(t, "erased 1 job(s)\n", f.durable(t, "erase", "-delivery", "nope,"+deliveryIDOf(t, f, page.Deliveries[1].JobID)))
	assert.Equal(t, "erased 1 job(s), cancelled 0, 0 under way\n",
		f.durable(t, "erase", "-subject", webhook.UserID(deliveryIDOf(t, f, page.Deliveries[2].JobID))))

	assert.Contains(t, f.durable(t, "disable", "-connection", "crm"), "crm is disabled (service) since ")
	// The resend above waits: no worker runs.
	assert.Equal(t, "crm was disabled: would send 1 kept and 0 given up\n", f.durable(t, "enable", "-connection", "crm", "-dry-run"))
	assert.Equal(t, "crm was disabled: sent 1 kept and 0 given up\n", f.durable(t, "enable", "-connection", "crm"))
	assert.Equal(t, "crm is active: nothing to enable\n", f.durable(t, "enable", "-connection", "crm"))
}

// deliveryIDOf returns the delivery id of job id.
func deliveryIDOf(t *testing.T, f *fixture, id int64) string {
	t.Helper()
	var d string
	require.NoError(t, f.pool.QueryRow(context.Background(), "SELECT args->>'delivery_id' FROM "+f.schema+".river_job WHERE id = $1", id).Scan(&d))
	return d
}

func TestDurable_Help(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	for _, tc := range []struct {
		args      []string
		want, not string
	}{
		{[]string{"-h"}, "usage:\n  durable migrate", "-attempt-timeout duration"},
		{[]string{"help"}, "usage:\n  durable migrate", "-attempt-timeout duration"},
		{[]string{"work", "-h"}, "-attempt-timeout", "-n int"},
		{[]string{"enqueue", "-help"}, "-n int", "-attempt-timeout"},
		{[]string{"migrate", "-h"}, "-schema", "-connections"},
		{[]string{"deliveries", "-h"}, "-connection string", "-attempt-timeout"},
	} {
		cmd := exec.Command(bin, tc.args...)
		cmd.Env = append(os.Environ(), "DATABASE_URL=")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "durable %v exits 0: %s", tc.args, out)
		assert.Contains(t, string(out), tc.want, "durable %v", tc.args)
		assert.NotContains(t, string(out), tc.not, "durable %v prints its own usage", tc.args)
		assert.NotContains(t, string(out), "required", "durable %v", tc.args)
	}
	out, err := exec.Command(bin, "nope").CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 2, exit.ExitCode(), "a usage error")
	assert.Contains(t, string(out), `unknown command "nope"`)

	out, err = exec.Command(bin, "work", "-bogus").CombinedOutput()
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 2, exit.ExitCode(), "a usage error")
	assert.Equal(t, 1, strings.Count(string(out), "flag provided but not defined: -bogus"), "%s", out)
	assert.Equal(t, 1, strings.Count(string(out), "usage"), "the command's usage, once: %s", out)
}

// TestDurable_InterruptWaitsForTheAttempt interrupts a worker whose attempt
// the receiver answers after 31 s, within its -attempt-timeout of a
// minute: the worker waits for it, as long as the attempt may take.
func TestDurable_InterruptWaitsForTheAttempt(t *testing.T) {
	if testing.Short() {
		t.Skip("31 s: skipped under -short")
	}
	t.Parallel()
	arrived, interrupted := make(chan struct{}), make(chan struct{})
	var n atomic.Int32
	f := newFixture(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) > 1 {
			return
		}
		close(arrived)
		<-interrupted
		slow := time.NewTimer(31 * time.Second) // past 30 s: the interrupt waits for the attempt, not a fixed time
		defer slow.Stop()
		select {
		case <-slow.C:
		case <-r.Context().Done():
			panic(http.ErrAbortHandler) // the sender gave up: no answer
		}
	}))
	f.durable(t, "enqueue", "-n", "1")
	w := f.startWorker(t, "-attempt-timeout", "1m")
	select {
	case <-arrived:
	case <-time.After(time.Minute):
		t.Fatal("the attempt did not arrive within a minute")
	}
	close(interrupted)
	err := w.interrupt(t, 2*time.Minute)
	require.NoError(t, err, "a clean stop: the attempt in flight ended")
	assert.Equal(t, int32(1), n.Load(), "delivered by the interrupted worker, not again")
	jobs := f.jobs(t)
	require.Len(t, jobs, 1)
	assert.Equal(t, rivertype.JobStateCompleted, jobs[0].State)
}

// An operator who interrupts a worker waits as long as an attempt may take
// (40 s with the defaults). Pressing Ctrl-C again, the usual way to say
// "now", must stop it at once, with the attempts in flight put back
// uncounted (River's StopAndCancel), as River's own graceful-shutdown
// example escalates; not kill -9, which leaves the jobs to the rescuer (a
// minute and more, and an interrupted attempt each).
func TestDurable_SecondInterruptStopsAtOnce(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	f := newFixture(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-arrived:
		default:
			close(arrived)
		}
		<-r.Context().Done() // never answers: the attempt takes its whole timeout
		panic(http.ErrAbortHandler)
	}))
	f.durable(t, "enqueue", "-n", "1")
	w := f.startWorker(t) // the default -attempt-timeout: 30 s
	select {
	case <-arrived:
	case <-time.After(time.Minute):
		t.Fatal("the attempt did not arrive within a minute")
	}

	done := make(chan error, 1)
	go func() {
		for range w.lines {
		}
		done <- w.cmd.Wait()
	}()
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGINT))
	again := time.NewTicker(250 * time.Millisecond) // Ctrl-C, again and again
	defer again.Stop()
	deadline := time.After(10 * time.Second)
	for stopped := false; !stopped; {
		select {
		case <-again.C:
			w.cmd.Process.Signal(syscall.SIGINT)
		case <-done:
			stopped = true
		case <-deadline:
			t.Fatal("durable work still runs 10 s after repeated interrupts")
		}
	}
	jobs := f.jobs(t)
	require.Len(t, jobs, 1)
	assert.Equal(t, rivertype.JobStateAvailable, jobs[0].State, "put back")
	assert.Equal(t, 0, jobs[0].Attempt, "uncounted")
}

// jobs returns the fixture's delivery jobs.
func (f *fixture) jobs(t *testing.T) []*rivertype.JobRow {
	t.Helper()
	client, err := river.NewClient(riverpgxv5.New(f.pool), &river.Config{Schema: f.schema})
	require.NoError(t, err)
	res, err := client.JobList(context.Background(), river.NewJobListParams().Kinds(riverhook.Kind))
	require.NoError(t, err)
	return res.Jobs
}

// TestDurable_SIGKILLDuringTheLastAttemptLosesNothing kills a worker process
// with SIGKILL while the delivery's last attempt (the fourth of the default
// policy) is on the wire, and starts another with the documented settings:
// the rescue threshold derived from the attempt timeout (one minute).
// Once River's rescuer (every 30 s, on the surviving leader) finds the job,
// the other process makes attempt 4 again, and delivers, within 2 minutes
// of the kill.
func TestDurable_SIGKILLDuringTheLastAttemptLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("about a minute and a half: skipped under -short")
	}
	t.Parallel()
	arrived, delivered := make(chan struct{}), make(chan struct{})
	var n atomic.Int32
	f := newFixture(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1, 2, 3:
			w.WriteHeader(http.StatusInternalServerError)
		case 4: // the last attempt, which its process will not survive
			close(arrived)
			<-r.Context().Done()
			panic(http.ErrAbortHandler)
		case 5:
			close(delivered)
		}
	}))
	f.durable(t, "enqueue", "-n", "1")

	first := f.startWorker(t)
	select {
	case <-arrived:
	case <-time.After(time.Minute):
		t.Fatal("the fourth attempt did not arrive within a minute")
	}
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	var exit *exec.ExitError
	require.True(t, errors.As(first.cmd.Wait(), &exit), "killed")
	for range first.lines {
	}

	second := f.startWorker(t)
	select {
	case <-delivered:
		t.Logf("delivered %v after the kill", time.Since(killed).Round(time.Second))
	case <-time.After(2 * time.Minute):
		t.Fatal("the job was not rescued and delivered within 2 minutes of the kill")
	}
	assert.Contains(t, second.waitLine(t, "kind=interrupted"), "attempt=4 status=0 kind=interrupted", "the cut attempt, logged when the job ran again")
	assert.Contains(t, second.waitLine(t, "kind=delivered"), "attempt=4 status=200 kind=delivered", "attempt 4 again: the crash cost none")
	require.NoError(t, second.interrupt(t, time.Minute), "a clean stop on SIGINT")

	got := f.srv.Deliveries()
	require.Len(t, got, 5)
	for _, d := range got {
		assert.Equal(t, got[0].Body, d.Body, "the same delivery")
		assert.NoError(t, d.Err)
	}
	jobs := f.jobs(t)
	require.Len(t, jobs, 1)
	job := jobs[0]
	assert.Equal(t, rivertype.JobStateCompleted, job.State)
	assert.Equal(t, 5, job.Attempt, "River's five runs")
	assert.Equal(t, 4+riverhook.MaxInterruptedRuns, job.MaxAttempts)
	d, err := riverhook.DeliveryOf(job)
	require.NoError(t, err)
	var log []string
	for _, a := range d.Attempts {
		log = append(log, strings.SplitN(a.String(), " in ", 2)[0])
	}
	assert.Equal(t, []string{
		"attempt 1: 500 status", "attempt 2: 500 status", "attempt 3: 500 status",
		"attempt 4: interrupted", "attempt 4: 200 delivered",
	}, log)
}

func TestDurable_WorkServesTheConsole(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.durable(t, "enqueue", "-n", "2")
	w := f.startWorker(t, "-console", "127.0.0.1:0")
	line := w.waitLine(t, "console on http://")
	url := strings.Fields(strings.TrimPrefix(line, "console on "))[0]
	w.waitLine(t, "kind=delivered")
	w.waitLine(t, "kind=delivered")

	var body []byte
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) { // the jobs complete after OnAttempt
		res, err := http.Get(url + "connections/crm")
		require.NoError(t, err)
		body, err = io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode)
		if strings.Count(string(body), "status-delivered") == 2 || time.Now().After(deadline) {
			break
		}
	}
	assert.Equal(t, 2, strings.Count(string(body), "status-delivered"), "%s", body)
	assert.NotContains(t, string(body), "Bearer k")
	res, err := http.Get(url + "connections/erp")
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusNotFound, res.StatusCode)
	require.NoError(t, w.interrupt(t, time.Minute))
}

// TestDurable_AFleetOfTwoWorkersAndAnAPIProcess runs the example as a
// deployment runs it: two work processes and a serve process (the API
// tier's console) on one PostgreSQL. The bound of 8 in flight to a
// connection holds for the fleet, not for each worker; an endpoint one
// worker found refusing shows down in the API process's console, which
// delivered nothing itself; and a Send Test from that console is one of
// the 8.
func TestDurable_AFleetOfTwoWorkersAndAnAPIProcess(t *testing.T) {
	t.Parallel()
	const deliveries = 40
	var mu sync.Mutex
	inFlight, peak := 0, 0
	arrived := &counter{want: deliveries, done: make(chan struct{})}
	f := newFixture(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inFlight++
		peak = max(peak, inFlight)
		mu.Unlock()
		time.Sleep(150 * time.Millisecond) // a slow endpoint: the bound is what limits the fleet
		mu.Lock()
		inFlight--
		mu.Unlock()
		arrived.ServeHTTP(w, r)
	}))
	// A second connection, whose endpoint refuses every connection.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadURL := "https://" + ln.Addr().String() + "/hooks"
	require.NoError(t, ln.Close())
	conns, err := json.Marshal([]connection{
		{ID: "crm", Name: "CRM", URL: f.srv.Connection().URL, Method: "POST", Secret: secret},
		{ID: "dead", Name: "Dead", URL: deadURL, Method: "POST", Secret: secret},
	})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(f.conns, conns, 0o600))

	f.durable(t, "enqueue", "-n", strconv.Itoa(deliveries))
	w1 := f.startWorker(t, "-workers", "16")
	w2 := f.startWorker(t, "-workers", "16")
	api := f.startProcess(t, f.args("serve", "-ca", f.cert, "-allow-private", "-console", "127.0.0.1:0")...)
	line := api.waitLine(t, "console on http://")
	consoleURL := strings.Fields(strings.TrimPrefix(line, "console on "))[0]

	select {
	case <-arrived.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("%d of %d deliveries arrived within 2 minutes", arrived.n.Load(), deliveries)
	}
	mu.Lock()
	assert.LessOrEqual(t, peak, 8, "8 in flight to the connection across the fleet, not 8 per worker")
	t.Logf("%d deliveries through 2 workers, peak %d in flight (bound 8)", deliveries, peak)
	mu.Unlock()

	// The API process's console shows the dead endpoint down: the workers'
	// marks, since its own Sender never dialled it.
	var page string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		res, err := http.Get(consoleURL + "connections/dead")
		require.NoError(t, err)
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		if page = string(b); strings.Contains(page, "Your endpoint is down.") {
			break
		}
	}
	assert.Contains(t, page, "Your endpoint is down.", "the workers' mark, in the API tier's console")

	// A Send Test from the API tier while the workers hold every place
	// would pass the bound: it is refused, not sent.
	// The 8 places are advisory locks keyed by the schema and the
	// connection (riverhook's placeKey): taken here on a session of the
	// test's, as a busy worker holds them.
	session, err := f.pool.Acquire(context.Background())
	require.NoError(t, err)
	defer session.Release()
	h := fnv.New64a()
	h.Write([]byte("riverhook place " + f.schema + "\x00crm"))
	key := int64(h.Sum64() &^ 0xffff >> 1)
	for n := range int64(8) {
		var ok bool
		require.NoError(t, session.QueryRow(context.Background(), `SELECT pg_try_advisory_lock($1)`, key+n).Scan(&ok))
		require.True(t, ok, "place %d", n)
	}
	defer session.Exec(context.Background(), `SELECT pg_advisory_unlock_all()`)
	before := arrived.n.Load()
	res, err := http.Post(consoleURL+"api/connections/crm/test", "application/x-www-form-urlencoded", nil)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, res.StatusCode, "every place held: the Send Test waits its turn")
	assert.Equal(t, before, arrived.n.Load(), "nothing sent")

	for _, w := range []*worker{w1, w2, api} {
		require.NoError(t, w.interrupt(t, time.Minute))
	}
}

// docCommandLines returns the durable command lines that the package doc
// (main.go) and riverhook's README show, in their order, the README's
// after the doc's.
func docCommandLines(t *testing.T) []string {
	t.Helper()
	var lines []string
	src, err := os.ReadFile("main.go")
	require.NoError(t, err)
	for _, m := range regexp.MustCompile(`(?m)^//\t(durable .*)$`).FindAllStringSubmatch(string(src), -1) {
		lines = append(lines, m[1])
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	for _, m := range regexp.MustCompile("`(durable [^`]* -db [^`]*)`").FindAllStringSubmatch(string(readme), -1) {
		lines = append(lines, m[1])
	}
	return lines
}

// words splits a command line as sh does for the doc's lines: at spaces,
// a double-quoted word kept whole.
func words(line string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`"([^"]*)"|(\S+)`).FindAllStringSubmatch(line, -1) {
		out = append(out, m[1]+m[2])
	}
	return out
}

// TestDurable_DocCommandLinesRun runs every command line the package doc
// and riverhook's README show, as written, on the fixture's database and
// schema: their database is the test's, conns.json the fixture's
// connections, their console addresses a free port, the job resent the
// first one enqueued, and work trusts the test receiver (-ca,
// -allow-private). Each exits 0; work delivers what enqueue inserted and
// serves the console, as serve does, until interrupted.
func TestDurable_DocCommandLinesRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	lines := docCommandLines(t)
	covered := map[string]bool{}
	for _, line := range lines {
		covered[words(line)[1]] = true
	}
	for _, cmd := range []string{"migrate", "enqueue", "work", "serve", "deliveries", "recover", "resend", "health", "erase", "disable", "enable"} {
		assert.True(t, covered[cmd], "the doc shows no %s command line", cmd)
	}
	enqueued := 0
	for _, line := range lines {
		t.Logf("running %s", line)
		var args []string
		for i, w := range words(line)[1:] {
			switch {
			case w == "postgres://localhost/app" || w == "$DATABASE_URL":
				args = append(args, f.db, "-schema", f.schema)
				continue
			case w == "conns.json":
				w = f.conns
			case strings.HasPrefix(w, "127.0.0.1:"):
				w = "127.0.0.1:0"
			case i > 0 && words(line)[i] == "-job":
				jobs := f.jobs(t)
				require.NotEmpty(t, jobs, "no job to resend")
				w = strconv.FormatInt(jobs[0].ID, 10)
			case i > 0 && words(line)[i] == "-n":
				n, err := strconv.Atoi(w)
				require.NoError(t, err)
				enqueued += n
			}
			args = append(args, w)
		}
		switch args[0] {
		case "work", "serve":
			if args[0] == "work" {
				args = append(args, "-ca", f.cert, "-allow-private")
			}
			p := f.startProcess(t, args...)
			p.waitLine(t, "console on http://")
			if args[0] == "work" {
				for range enqueued {
					p.waitLine(t, "kind=delivered")
				}
				enqueued = 0
			}
			require.NoError(t, p.interrupt(t, time.Minute), "%s", line)
		default:
			cmd := exec.Command(binary(t), args...)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s:\n%s", line, out)
		}
	}
}
