package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/signedhook/webhook/riverhook/internal/testdb"
	"github.com/signedhook/webhook/webhooktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const secret = "whsec_durable"

// fixture is a database schema, a receiver and the files durable reads.
type fixture struct {
	db, schema  string
	srv         *webhooktest.Server
	conns, cert string
}

func newFixture(t *testing.T, handler http.Handler) *fixture {
	t.Helper()
	ctx := context.Background()
	_, schema := testdb.Schema(t, "durable", false) // durable migrate makes River's tables
	f := &fixture{db: testdb.URL(t), schema: schema}

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

	var out bytes.Buffer
	require.NoError(t, run(ctx, f.args("migrate"), &out))
	assert.Contains(t, out.String(), "migrated")
	return f
}

func (f *fixture) args(cmd string, more ...string) []string {
	return append([]string{cmd, "-db", f.db, "-schema", f.schema, "-connections", f.conns}, more...)
}

func (f *fixture) workArgs(more ...string) []string {
	return f.args("work", append([]string{"-ca", f.cert, "-allow-private", "-workers", "4"}, more...)...)
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

// syncBuffer is an io.Writer safe for concurrent writes and reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func TestDurable_EnqueueAndWork(t *testing.T) {
	c := &counter{want: 5, done: make(chan struct{})}
	f := newFixture(t, c)
	ctx := context.Background()
	var out bytes.Buffer
	require.NoError(t, run(ctx, f.args("enqueue", "-n", "5"), &out))
	assert.Equal(t, "enqueued 5 deliveries to 1 connection(s)\n", out.String())

	workCtx, stop := context.WithCancel(ctx)
	var workOut syncBuffer
	done := make(chan error)
	go func() { done <- run(workCtx, f.workArgs(), &workOut) }()
	select {
	case <-c.done:
	case <-time.After(60 * time.Second):
		t.Fatal("5 deliveries did not arrive within 60 s")
	}
	stop()
	require.NoError(t, <-done)

	ids := map[string]bool{}
	for _, d := range f.srv.Deliveries() {
		require.NoError(t, d.Err)
		assert.Equal(t, "Bearer k", d.Header.Get("Authorization"))
		p, err := d.Payload()
		require.NoError(t, err)
		ids[p.User.Metadata["delivery_id"].(string)] = true
	}
	assert.Len(t, ids, 5, "each delivery has its own id in its body")
	assert.Equal(t, 5, strings.Count(workOut.String(), "attempt=1 status=200 kind=delivered next=-"), workOut.String())
	assert.Contains(t, workOut.String(), "connection=crm delivery=dlv_")
}

// buildDurable compiles this program for the tests that run it as separate
// processes.
func buildDurable(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "durable")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Run())
	return bin
}

// TestDurable_SIGKILLMidAttemptLosesNothing kills a worker process with
// SIGKILL while its attempt is on the wire. Once River's stuck-job rescue
// has run on the surviving process (every 30 s, on the elected leader), that
// process delivers the job. It takes about a minute.
func TestDurable_SIGKILLMidAttemptLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("about a minute: skipped under -short")
	}
	arrived, delivered := make(chan struct{}), make(chan struct{})
	var n atomic.Int32
	f := newFixture(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1: // the attempt the first process will not survive
			close(arrived)
			<-r.Context().Done()
		case 2:
			close(delivered)
		}
	}))
	bin := buildDurable(t)
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), f.args("enqueue", "-n", "1"), &out))

	// The job timeout is the attempt timeout (3 s) plus 10 s; the rescue
	// threshold must exceed it.
	args := f.workArgs("-attempt-timeout", "3s", "-rescue-after", "15s")
	first := exec.Command(bin, args...)
	first.Stdout, first.Stderr = io.Discard, os.Stderr
	require.NoError(t, first.Start())
	select {
	case <-arrived:
	case <-time.After(60 * time.Second):
		first.Process.Kill()
		first.Wait()
		t.Fatal("the first attempt did not arrive within 60 s")
	}
	require.NoError(t, first.Process.Signal(syscall.SIGKILL))
	err := first.Wait()
	require.Error(t, err, "killed")

	second := exec.Command(bin, args...)
	stdout, err := second.StdoutPipe()
	require.NoError(t, err)
	second.Stderr = os.Stderr
	require.NoError(t, second.Start())
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	select {
	case <-delivered:
	case <-time.After(3 * time.Minute):
		second.Process.Kill()
		second.Wait()
		t.Fatal("the job was not rescued and delivered within 3 minutes")
	}
	var attemptLine string
	for line := range lines {
		if strings.Contains(line, "kind=delivered") {
			attemptLine = line
			break
		}
	}
	require.NoError(t, second.Process.Signal(syscall.SIGINT))
	for range lines { // drain until the process closes its output
	}
	require.NoError(t, second.Wait(), "a clean stop on SIGINT")
	assert.Contains(t, attemptLine, "attempt=1 status=200 kind=delivered", "the rescued job's attempt: the crash cost none")
	got := f.srv.Deliveries()
	require.Len(t, got, 2)
	assert.Equal(t, got[0].Body, got[1].Body, "the same delivery")
	assert.NoError(t, got[1].Err)
}
