package webhook_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

const bodyStressEnv = "WEBHOOK_BODY_STRESS_CHILD"

// TestMiddleware_BodyIsOnlyEverItsOwnRequests pins that r.Body, whoever
// reads it and whenever, gives a prefix of its own request's bytes or an
// error: never another request's bytes, never a crash. Handlers hand r.Body,
// r.Clone(ctx).Body and io.Copy to goroutines that race the handler's
// return (the spec's "answer quickly, work in the background", done
// naively) while other requests reuse the middleware's buffers. It runs in
// a child process: a torn read can kill a process with a fault that no
// recover catches, and that must fail this test, not end the suite. Under
// -race (as in CI) the child also fails on any data race.
func TestMiddleware_BodyIsOnlyEverItsOwnRequests(t *testing.T) {
	if os.Getenv(bodyStressEnv) == "1" {
		bodyStress(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMiddleware_BodyIsOnlyEverItsOwnRequests$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), bodyStressEnv+"=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the child failed:\n%s", out)
	require.Contains(t, string(out), "bodyStress: ", "the child ran the stress:\n%s", out)
}

func bodyStress(t *testing.T) {
	const clients, perClient = 8, 200
	v, err := webhook.NewVerifier([]string{testSecret}, nil)
	require.NoError(t, err)
	var (
		late     sync.WaitGroup // the handlers' goroutines
		foreign  atomic.Int32
		whole    atomic.Int32
		refused  atomic.Int32
		failures = make(chan string, clients*perClient)
	)
	check := func(want []byte, got []byte, err error) {
		switch {
		case !bytes.HasPrefix(want, got):
			foreign.Add(1)
			failures <- fmt.Sprintf("read %q, not a prefix of its own body %q", got, want)
		case err == nil && len(got) != len(want):
			failures <- fmt.Sprintf("read %d of %d bytes and no error", len(got), len(want))
		case err == nil:
			whole.Add(1)
		default:
			refused.Add(1)
		}
	}
	handler := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		want := []byte(r.Header.Get("X-Want")) // the body this request was sent with
		body := r.Body
		late.Add(1)
		switch n, _ := strconv.Atoi(r.Header.Get("X-N")); n % 5 {
		case 0:
			go func() { defer late.Done(); got, err := io.ReadAll(body); check(want, got, err) }()
		case 1:
			clone := r.Clone(r.Context())
			go func() { defer late.Done(); got, err := io.ReadAll(clone.Body); check(want, got, err) }()
		case 2:
			go func() {
				defer late.Done()
				var buf bytes.Buffer
				_, err := io.Copy(&buf, body)
				check(want, buf.Bytes(), err)
			}()
		case 3: // half now, the rest in the background
			head := make([]byte, len(want)/2)
			_, err := io.ReadFull(body, head)
			go func() {
				defer late.Done()
				if err != nil {
					check(want, nil, err)
					return
				}
				rest, err := io.ReadAll(body)
				check(want, append(head, rest...), err)
			}()
		case 4: // a reader already under way when the handler returns
			started := make(chan struct{})
			go func() {
				defer late.Done()
				var got []byte
				b := make([]byte, 7)
				for first := true; ; first = false {
					n, err := body.Read(b)
					got = append(got, b[:n]...)
					if first {
						close(started)
					}
					if err == io.EOF {
						err = nil
					}
					if err != nil || n == 0 {
						check(want, got, err)
						return
					}
					runtime.Gosched()
				}
			}()
			<-started
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	srv := httptest.NewServer(handler)
	defer srv.Close()

	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perClient {
				n := c*perClient + i
				// Bodies of many sizes, so that buffers of one length are
				// refilled with another request's bytes.
				body := fmt.Sprintf(`{"event":"user.identified","n":%d,"pad":%q}`, n, strings.Repeat(strconv.Itoa(n%10), n%3000))
				req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
				ts := time.Now().UnixMilli()
				req.Header.Set(webhook.HeaderEvent, webhook.EventUserIdentified)
				req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts, 10))
				req.Header.Set(webhook.HeaderSignature, webhook.Sign(testSecret, ts, []byte(body)))
				req.Header.Set("X-Want", body)
				req.Header.Set("X-N", strconv.Itoa(n))
				resp, err := srv.Client().Do(req)
				if err != nil {
					failures <- err.Error()
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					failures <- "status " + resp.Status
				}
			}
		}()
	}
	wg.Wait()
	late.Wait()
	close(failures)
	for f := range failures {
		t.Error(f)
	}
	t.Logf("bodyStress: %d requests; %d late readers read their whole body, %d got an error, %d read foreign bytes",
		clients*perClient, whole.Load(), refused.Load(), foreign.Load())
}
