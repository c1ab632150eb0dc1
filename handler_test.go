package webhook_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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

	"github.com/signedhook/webhook"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newSignedRequest returns a request as the service sends it.
func newSignedRequest(secret string, ts int64, body []byte) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/webhooks", bytes.NewReader(body))
	for k, v := range signedHeader(secret, ts, body) {
		r.Header[k] = v
	}
	return r
}

func TestVerifyRequest_RestoresIdenticalBody(t *testing.T) {
	body := readTestdata(t, "body_user_identified.json")
	r := newSignedRequest(testSecret, testNow.UnixMilli(), body)
	got, err := newTestVerifier(t).VerifyRequest(r)
	require.NoError(t, err)
	assert.Equal(t, body, got)
	again, err := io.ReadAll(r.Body)
	require.NoError(t, err)
	assert.Equal(t, body, again, "r.Body after VerifyRequest")
}

func TestVerifyRequest_BodyOverLimitWithoutContentLength(t *testing.T) {
	body := bytes.Repeat([]byte("a"), 5000)
	r := newSignedRequest(testSecret, testNow.UnixMilli(), body)
	r.ContentLength = -1
	r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body))) // hides the length
	_, err := newTestVerifier(t).VerifyRequest(r)
	assert.ErrorIs(t, err, webhook.ErrBodyTooLarge)
}

func TestMiddleware(t *testing.T) {
	body := readTestdata(t, "body_user_identified.json")
	now := testNow.UnixMilli()
	tests := []struct {
		name       string
		req        func() *http.Request
		wantStatus int
	}{
		{"valid", func() *http.Request { return newSignedRequest(testSecret, now, body) }, http.StatusOK},
		{"tampered body", func() *http.Request {
			r := newSignedRequest(testSecret, now, body)
			r.Body = io.NopCloser(bytes.NewReader(flipLastByte(body)))
			return r
		}, http.StatusUnauthorized},
		{"expired", func() *http.Request { return newSignedRequest(testSecret, now-301_000, body) }, http.StatusUnauthorized},
		{"unsigned", func() *http.Request {
			return httptest.NewRequest(http.MethodPost, "/webhooks", bytes.NewReader(body))
		}, http.StatusUnauthorized},
		{"too large", func() *http.Request {
			big := bytes.Repeat([]byte("x"), 5000)
			return newSignedRequest(testSecret, now, big)
		}, http.StatusRequestEntityTooLarge},
		{"body read fails", func() *http.Request {
			r := newSignedRequest(testSecret, now, body)
			r.Body = io.NopCloser(&failingReader{})
			r.ContentLength = -1
			return r
		}, http.StatusBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{
				Now:          func() time.Time { return testNow },
				MaxBodyBytes: 4096,
				Logger:       slog.New(slog.NewTextHandler(&logs, nil)),
			})
			require.NoError(t, err)
			var seen []byte
			next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen, _ = io.ReadAll(r.Body)
				w.WriteHeader(http.StatusOK)
			})
			rec := httptest.NewRecorder()
			v.Middleware(next).ServeHTTP(rec, tc.req())
			assert.Equal(t, tc.wantStatus, rec.Code, "status")
			if tc.wantStatus == http.StatusOK {
				assert.Equal(t, body, seen, "body seen by next")
				assert.Empty(t, logs.String())
				return
			}
			assert.Nil(t, seen, "next must not be called")
			assert.Contains(t, logs.String(), "request refused")
			assert.NotContains(t, rec.Body.String(), "webhook:", "the reason must not reach the client")
		})
	}
}

type failingReader struct{}

func (*failingReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

func TestMiddleware_ErrorHandler(t *testing.T) {
	var got error
	v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			got = err
			http.Error(w, "nope", http.StatusForbidden)
		},
	})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	v.Middleware(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}")))
	assert.Equal(t, http.StatusForbidden, rec.Code)
	assert.ErrorIs(t, got, webhook.ErrMissingHeader)
}

func TestNewHandler(t *testing.T) {
	now := testNow.UnixMilli()
	body := readTestdata(t, "body_user_identified.json")
	errBoom := errors.New("database down")
	tests := []struct {
		name       string
		req        func() *http.Request
		onErr      error
		wantStatus int
		wantCalled bool
		wantLog    string
	}{
		{"delivered", func() *http.Request { return newSignedRequest(testSecret, now, body) }, nil, http.StatusOK, true, ""},
		{"function fails", func() *http.Request { return newSignedRequest(testSecret, now, body) }, errBoom, http.StatusInternalServerError, true, "database down"},
		{"bad signature", func() *http.Request { return newSignedRequest("whsec_other", now, body) }, nil, http.StatusUnauthorized, false, ""},
		{"unknown event", func() *http.Request {
			return newSignedRequest(testSecret, now, []byte(`{"event":"user.deleted","user":{"id":"usr_1"}}`))
		}, nil, http.StatusOK, false, "user.deleted"},
		{"unknown event with another shape", func() *http.Request {
			return newSignedRequest(testSecret, now, []byte(`{"event":"app.renamed","user":"not an object"}`))
		}, nil, http.StatusOK, false, "app.renamed"},
		{"signed body is not JSON", func() *http.Request { return newSignedRequest(testSecret, now, []byte(`hello`)) }, nil, http.StatusBadRequest, false, "not a payload"},
		{"signed body has no event", func() *http.Request { return newSignedRequest(testSecret, now, []byte(`{"user":{}}`)) }, nil, http.StatusBadRequest, false, "not a payload"},
		{"signed body has a wrong type", func() *http.Request {
			return newSignedRequest(testSecret, now, []byte(`{"event":"user.identified","user":"ada"}`))
		}, nil, http.StatusBadRequest, false, "not a payload"},
		{"event header disagrees with body", func() *http.Request {
			r := newSignedRequest(testSecret, now, body)
			r.Header.Set(webhook.HeaderEvent, "user.deleted")
			return r
		}, nil, http.StatusOK, true, "disagrees"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			var called bool
			h := webhook.NewHandler(newTestVerifier(t), func(ctx context.Context, p webhook.Payload) error {
				called = true
				assert.Equal(t, "usr_8f3a2b", p.User.ID)
				return tc.onErr
			}, &webhook.HandlerOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, tc.req())
			assert.Equal(t, tc.wantStatus, rec.Code)
			assert.Equal(t, tc.wantCalled, called, "function called")
			assert.Contains(t, logs.String(), tc.wantLog)
			if tc.wantStatus == http.StatusOK {
				assert.JSONEq(t, `{"ok":true}`, rec.Body.String())
				assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			}
		})
	}
}

func TestNewHandler_PanicsOnNil(t *testing.T) {
	v := newTestVerifier(t)
	assert.Panics(t, func() { webhook.NewHandler(nil, func(context.Context, webhook.Payload) error { return nil }, nil) })
	assert.Panics(t, func() { webhook.NewHandler(v, nil, nil) })
}

func TestMiddleware_ErrorHandlerGetsUnreadableBody(t *testing.T) {
	var got error
	v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			got = err
			http.Error(w, "nope", http.StatusBadRequest)
		},
	})
	require.NoError(t, err)
	r := httptest.NewRequest(http.MethodPost, "/", io.NopCloser(&failingReader{}))
	v.Middleware(http.NotFoundHandler()).ServeHTTP(httptest.NewRecorder(), r)
	require.Error(t, got)
	assert.ErrorIs(t, got, webhook.ErrUnreadableBody, "the documented sentinel")
	assert.NotErrorIs(t, got, webhook.ErrVerification, "nothing was verified: the body never came")
	assert.Contains(t, got.Error(), "connection reset")
}

// TestMiddleware_LateReadsSeeNoOtherRequest pins the recycling of body
// buffers: a handler that breaks net/http's contract by keeping r.Body past
// its return gets an error, never the bytes of a later request.
func TestMiddleware_LateReadsSeeNoOtherRequest(t *testing.T) {
	v := newTestVerifier(t)
	var kept []io.Reader
	handler := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kept = append(kept, r.Body)
	}))
	first := []byte(`{"event":"user.identified","user":{"email":"first@example.com"}}`)
	second := []byte(`{"event":"user.identified","user":{"email":"second@example.com"}}`)
	for _, body := range [][]byte{first, second} {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, newSignedRequest(testSecret, testNow.UnixMilli(), body))
		require.Equal(t, http.StatusOK, rec.Code)
	}
	late, err := io.ReadAll(kept[0])
	assert.Empty(t, late, "a late read of the first request's body")
	require.Error(t, err, "a late read fails loudly, not as an empty body")
	assert.Contains(t, err.Error(), "after the verifying middleware returned")
	var buf bytes.Buffer
	_, err = io.Copy(&buf, kept[1]) // io.Copy too, which would use a WriterTo
	assert.Error(t, err)
	assert.Empty(t, buf.Bytes())
}

func TestNewHandler_PayloadOutlivesTheRecycledBody(t *testing.T) {
	var got []webhook.Payload
	h := webhook.NewHandler(newTestVerifier(t), func(_ context.Context, p webhook.Payload) error {
		got = append(got, p)
		return nil
	}, nil)
	for _, email := range []string{"first@example.com", "second@example.com"} {
		body := []byte(`{"event":"user.identified","timestamp":"2026-11-21T10:00:00.000Z","user":{"id":"usr_1","email":"` +
			email + `","metadata":{"plan":"` + email + `"}},"application":{"id":"app_1"}}`)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, newSignedRequest(testSecret, testNow.UnixMilli(), body))
		require.Equal(t, http.StatusOK, rec.Code)
	}
	require.Len(t, got, 2)
	assert.Equal(t, "first@example.com", got[0].User.Email, "decoded strings share nothing with the buffer")
	assert.Equal(t, "first@example.com", got[0].User.Metadata.Plan())
}

// stallingBody gives a few bytes, then fails as a client that went away.
type stallingBody struct{ sent bool }

func (b *stallingBody) Read(p []byte) (int, error) {
	if b.sent {
		return 0, errors.New("client gone")
	}
	b.sent = true
	return copy(p, `{"event":`), nil
}

func (*stallingBody) Close() error { return nil }

// TestMiddleware_ContentLengthDoesNotReserveMemory pins that a body's
// declared Content-Length, unverified, does not make the middleware
// reserve memory for bytes that never come: a client that declares 1 MiB
// and sends a few bytes (many of them at once, each holding a connection)
// must cost little.
func TestMiddleware_ContentLengthDoesNotReserveMemory(t *testing.T) {
	v, err := webhook.NewVerifier([]string{testSecret}, nil)
	require.NoError(t, err)
	handler := v.Middleware(http.NotFoundHandler())
	serve := func() {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Body = &stallingBody{}
		r.ContentLength = webhook.DefaultMaxBodyBytes - 1
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, r)
		require.Equal(t, http.StatusBadRequest, rec.Code)
	}
	serve() // warm the pools
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const n = 20
	for range n {
		serve()
	}
	runtime.ReadMemStats(&after)
	perRequest := (after.TotalAlloc - before.TotalAlloc) / n
	assert.Less(t, perRequest, uint64(32<<10), "bytes allocated per request that declared 1 MiB and sent 9")
}

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
