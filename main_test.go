package webhook_test

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/signedhook/webhook"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// delivered is one request a receiver got.
type delivered struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

// receiver is an HTTPS server on 127.0.0.1 that records what it gets and
// answers with the statuses of script in turn (the last one repeating).
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	got    []delivered
	script []int
	handle func(w http.ResponseWriter, r *http.Request) bool // optional; true if it answered
}

func newReceiver(t *testing.T, script ...int) *receiver {
	t.Helper()
	rv := &receiver{script: script}
	rv.Server = httptest.NewUnstartedServer(http.HandlerFunc(rv.serve))
	rv.Config.ErrorLog = log.New(io.Discard, "", 0) // handshake failures are expected in some tests
	rv.StartTLS()
	t.Cleanup(rv.Close)
	return rv
}

func (rv *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	rv.mu.Lock()
	n := len(rv.got)
	rv.got = append(rv.got, delivered{r.Method, r.URL.Path, r.Header.Clone(), body})
	status := http.StatusOK
	if len(rv.script) > 0 {
		status = rv.script[min(n, len(rv.script)-1)]
	}
	handle := rv.handle
	rv.mu.Unlock()
	if handle != nil && handle(w, r) {
		return
	}
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"status":%d}`, status)
}

func (rv *receiver) deliveries() []delivered {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	return slicesClone(rv.got)
}

func slicesClone[T any](s []T) []T { return append([]T(nil), s...) }

// conn returns a valid connection to the receiver's path.
func (rv *receiver) conn(path string) webhook.Connection {
	return webhook.Connection{Name: "test", URL: rv.URL + path, Secret: testSecret}
}

// shortPolicy retries every failure up to max times, waiting 2 ms: long
// enough for millisecond timestamps to differ, short enough for sockets.
func shortPolicy(max int) *webhook.RetryPolicy {
	return &webhook.RetryPolicy{
		MaxRetries: max,
		Backoff:    func(int, *http.Response) time.Duration { return 2 * time.Millisecond },
	}
}

func newTestSender(t *testing.T, rv *receiver, opts *webhook.SenderOptions) *webhook.Sender {
	t.Helper()
	if opts == nil {
		opts = &webhook.SenderOptions{}
	}
	if opts.Client == nil && rv != nil {
		opts.Client = rv.Client()
	}
	if opts.Retry == nil {
		opts.Retry = shortPolicy(3)
	}
	s, err := webhook.NewSender(opts)
	require.NoError(t, err)
	t.Cleanup(s.CloseIdleConnections)
	return s
}

func kinds(as []webhook.Attempt) []webhook.FailureKind {
	var out []webhook.FailureKind
	for _, a := range as {
		out = append(out, a.Kind)
	}
	return out
}
