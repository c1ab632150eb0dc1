package webhook_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/webhooktest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSend_WireFormat(t *testing.T) {
	for _, method := range []string{"", http.MethodPost, http.MethodPut, http.MethodPatch} {
		t.Run("method="+method, func(t *testing.T) {
			rv := newReceiver(t)
			c := rv.conn("/hooks/crm")
			c.Method = method
			c.Headers = map[string]string{"Authorization": "Bearer api-key", "x-tenant": "42"}
			s := newTestSender(t, rv, nil)
			before := time.Now().UnixMilli()
			res, err := s.Send(context.Background(), c, samplePayload())
			require.NoError(t, err)
			require.Len(t, res.Attempts, 1)

			got := rv.deliveries()
			require.Len(t, got, 1)
			d := got[0]
			wantMethod := method
			if wantMethod == "" {
				wantMethod = http.MethodPost
			}
			assert.Equal(t, wantMethod, d.Method)
			assert.Equal(t, "/hooks/crm", d.Path)
			assert.Equal(t, string(readTestdata(t, "body_user_identified.json")), string(d.Body))
			assert.Equal(t, "application/json", d.Header.Get("Content-Type"))
			assert.Equal(t, webhook.EventUserIdentified, d.Header.Get(webhook.HeaderEvent))
			assert.Equal(t, "Bearer api-key", d.Header.Get("Authorization"))
			assert.Equal(t, "42", d.Header.Get("X-Tenant"))
			ts, err := strconv.ParseInt(d.Header.Get(webhook.HeaderTimestamp), 10, 64)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, ts, before)
			assert.Equal(t, res.Attempts[0].Timestamp, ts)
			assert.Equal(t, webhook.Sign(testSecret, ts, d.Body), d.Header.Get(webhook.HeaderSignature))
			assert.NoError(t, webhook.Verify(testSecret, d.Header, d.Body), "the receiver's check")
			assert.Equal(t, []string{"Bearer api-key"}, d.Header.Values("Authorization"), "custom header sent once")
			for name := range d.Header {
				assert.NotContains(t, strings.ToLower(name), "secret")
			}
		})
	}
}

func TestSend_RetriesResignOverIdenticalBody(t *testing.T) {
	rv := newReceiver(t, 500, 500, 200)
	var hooked []webhook.Attempt
	type ctxKey struct{}
	ctx := context.WithValue(context.Background(), ctxKey{}, "trace-1")
	s := newTestSender(t, rv, &webhook.SenderOptions{OnAttempt: func(ctx context.Context, c webhook.Connection, a webhook.Attempt) {
		assert.Equal(t, "trace-1", ctx.Value(ctxKey{}), "the caller's context values")
		assert.Equal(t, rv.URL+"/", c.URL, "the attempt's connection")
		hooked = append(hooked, a)
	}})
	res, err := s.Send(ctx, rv.conn("/"), samplePayload())
	require.NoError(t, err)
	require.Len(t, res.Attempts, 3)
	got := rv.deliveries()
	require.Len(t, got, 3)
	var last int64
	for i, d := range got {
		assert.Equal(t, got[0].Body, d.Body, "body of attempt %d", i+1)
		ts, err := strconv.ParseInt(d.Header.Get(webhook.HeaderTimestamp), 10, 64)
		require.NoError(t, err)
		assert.Greater(t, ts, last, "timestamp of attempt %d", i+1)
		last = ts
		assert.NoError(t, webhook.Verify(testSecret, d.Header, d.Body), "attempt %d", i+1)
		assert.Equal(t, res.Attempts[i].Timestamp, ts)
	}
	for i, a := range res.Attempts {
		assert.Equal(t, i+1, a.N)
	}
	assert.Equal(t, []int{500, 500, 200}, statuses(res.Attempts))
	assert.Equal(t, []bool{true, true, false}, retries(res.Attempts))
	assert.Equal(t, webhook.KindStatus, res.Attempts[0].Kind)
	assert.Equal(t, `{"status":500}`, string(res.Attempts[0].ResponseBody))
	assert.True(t, res.Attempts[2].OK())
	if diff := cmp.Diff(res.Attempts, hooked, cmp.Comparer(sameError)); diff != "" {
		t.Errorf("OnAttempt saw another log (-result +hook):\n%s", diff)
	}
}

func sameError(a, b error) bool { return a == b }

func statuses(as []webhook.Attempt) []int {
	var out []int
	for _, a := range as {
		out = append(out, a.StatusCode)
	}
	return out
}

func retries(as []webhook.Attempt) []bool {
	var out []bool
	for _, a := range as {
		out = append(out, a.Retry)
	}
	return out
}

func TestSend_GivesUpAfterFourAttempts(t *testing.T) {
	srv := webhooktest.NewServer(testSecret, nil)
	defer srv.Close()
	srv.Script(webhooktest.Status(500), webhooktest.Status(500), webhooktest.Status(500), webhooktest.Status(500))
	res, err := srv.Sender(&webhook.SenderOptions{Retry: shortPolicy(3)}).Send(context.Background(), srv.Connection(), samplePayload())
	var de *webhook.DeliveryError
	require.ErrorAs(t, err, &de)
	assert.Len(t, srv.Deliveries(), 4)
	assert.Len(t, de.Attempts, 4)
	assert.Equal(t, res.Attempts, de.Attempts)
	assert.Equal(t, err, res.Err)
	assert.Equal(t, []int{500, 500, 500, 500}, statuses(de.Attempts))
	assert.Equal(t, []bool{true, true, true, false}, retries(de.Attempts))
	assert.Equal(t, `webhook: delivery to "webhooktest" failed after 4 attempt(s): webhook: receiver answered 500 Internal Server Error`, err.Error())
}

func TestSend_InvalidConnectionSendsNothing(t *testing.T) {
	rv := newReceiver(t)
	s := newTestSender(t, rv, nil)
	c := rv.conn("/")
	c.Headers = map[string]string{"X-Service-Signature": "sha256=forged"}
	res, err := s.Send(context.Background(), c, samplePayload())
	require.ErrorIs(t, err, webhook.ErrInvalidConnection)
	assert.Empty(t, res.Attempts)
	assert.Equal(t, err, res.Err)
	assert.Empty(t, rv.deliveries())
}

func TestSend_InvalidPayloadSendsNothing(t *testing.T) {
	rv := newReceiver(t)
	s := newTestSender(t, rv, nil)
	p := samplePayload()
	p.User.ID = "8f3a2b" // no usr_ prefix
	res, err := s.Send(context.Background(), rv.conn("/"), p)
	require.ErrorIs(t, err, webhook.ErrInvalidPayload)
	assert.Contains(t, err.Error(), "user.id")
	assert.Empty(t, res.Attempts)

	for _, event := range []string{"", "user.identified\r\nX-Injected: 1"} {
		res, err = s.SendBytes(context.Background(), rv.conn("/"), event, []byte(`{}`))
		require.ErrorIs(t, err, webhook.ErrInvalidPayload, "event %q", event)
		assert.Empty(t, res.Attempts)
	}
	assert.Empty(t, rv.deliveries())
}

func TestSendAll_IndependentResultsInOrder(t *testing.T) {
	ok := newReceiver(t)
	failing := newReceiver(t, 500)
	// Both servers' certificates are the same test certificate.
	s := newTestSender(t, ok, &webhook.SenderOptions{Retry: shortPolicy(1), MaxConcurrency: 2})
	invalid := ok.conn("/")
	invalid.Secret = ""
	conns := []webhook.Connection{ok.conn("/a"), failing.conn("/b"), invalid, ok.conn("/c")}
	results := s.SendAll(context.Background(), conns, samplePayload())
	require.Len(t, results, 4)
	assert.NoError(t, results[0].Err)
	var de *webhook.DeliveryError
	assert.ErrorAs(t, results[1].Err, &de)
	assert.Len(t, results[1].Attempts, 2)
	assert.ErrorIs(t, results[2].Err, webhook.ErrInvalidConnection)
	assert.NoError(t, results[3].Err)
	paths := map[string]bool{}
	for _, d := range ok.deliveries() {
		paths[d.Path] = true
		assert.Equal(t, string(readTestdata(t, "body_user_identified.json")), string(d.Body))
	}
	assert.Equal(t, map[string]bool{"/a": true, "/c": true}, paths)
}

// TestSendAll_APanicReachesTheCaller: SendAll runs the caller's code
// (OnAttempt, a Logger's handler, a RoundTripper) on goroutines of its own.
// A panic there killed the process, where Send's reaches its caller
// (review). It reaches SendAll's caller once the other deliveries have
// ended, as Send's would.
func TestSendAll_APanicReachesTheCaller(t *testing.T) {
	rv := newReceiver(t)
	s := newTestSender(t, rv, &webhook.SenderOptions{MaxConcurrency: 2, OnAttempt: func(_ context.Context, c webhook.Connection, _ webhook.Attempt) {
		if c.Name == "boom" {
			panic("OnAttempt's bug")
		}
	}})
	boom := rv.conn("/boom")
	boom.Name = "boom"
	got := func() (p any) {
		defer func() { p = recover() }()
		s.SendAll(context.Background(), []webhook.Connection{rv.conn("/a"), boom, rv.conn("/c")}, samplePayload())
		return nil
	}()
	assert.Equal(t, "OnAttempt's bug", got)
	assert.Len(t, rv.deliveries(), 3, "the other deliveries were made")
}

func TestSendAll_InvalidPayloadSendsNothing(t *testing.T) {
	rv := newReceiver(t)
	s := newTestSender(t, rv, nil)
	p := samplePayload()
	p.Event = ""
	results := s.SendAll(context.Background(), []webhook.Connection{rv.conn("/a"), rv.conn("/b")}, p)
	require.Len(t, results, 2)
	for _, r := range results {
		assert.ErrorIs(t, r.Err, webhook.ErrInvalidPayload)
		assert.Empty(t, r.Attempts)
	}
	assert.Empty(t, rv.deliveries())
}

func TestSendTest(t *testing.T) {
	srv := webhooktest.NewServer(testSecret, nil)
	defer srv.Close()
	res, err := srv.Sender(nil).SendTest(context.Background(), srv.Connection())
	require.NoError(t, err)
	require.Len(t, res.Attempts, 1)
	assert.Contains(t, res.Attempts[0].Diagnosis(), "delivered: the endpoint answered 200")
	got, err := srv.Deliveries()[0].Payload()
	require.NoError(t, err)
	assert.NoError(t, srv.Deliveries()[0].Err)
	assert.NoError(t, got.Validate(), "the test payload is complete and valid")
	assert.Equal(t, "Test User", got.User.Name)
	assert.Equal(t, "test.user@example.com", got.User.Email)
	assert.True(t, got.IsSendTest(), "a receiver can recognise it")
}

func TestSendTest_DiagnosesWrongSecretWithoutRetrying(t *testing.T) {
	rv := newReceiver(t, http.StatusUnauthorized)
	s := newTestSender(t, rv, nil)
	res, err := s.SendTest(context.Background(), rv.conn("/"))
	require.Error(t, err)
	require.Len(t, res.Attempts, 1, "Send Test makes one attempt")
	assert.False(t, res.Attempts[0].Retry)
	assert.Contains(t, res.Attempts[0].Diagnosis(), "this connection's secret")
}

func TestSender_Attempt(t *testing.T) {
	rv := newReceiver(t, 503)
	s := newTestSender(t, rv, &webhook.SenderOptions{Retry: webhook.DefaultRetryPolicy()})
	body, err := json.Marshal(samplePayload())
	require.NoError(t, err)
	want := map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 0}
	for n := 1; n <= 4; n++ {
		a := s.Attempt(context.Background(), rv.conn("/"), webhook.EventUserIdentified, body, n)
		assert.Equal(t, n, a.N)
		assert.Equal(t, 503, a.StatusCode)
		assert.Equal(t, want[n] > 0, a.Retry, "attempt %d", n)
		assert.Equal(t, want[n], a.RetryIn, "attempt %d", n)
	}
	assert.Len(t, rv.deliveries(), 4, "Attempt makes exactly one request")

	a := s.Attempt(context.Background(), webhook.Connection{URL: "http://x"}, webhook.EventUserIdentified, body, 1)
	assert.Equal(t, webhook.KindInvalid, a.Kind)
	assert.ErrorIs(t, a.Err, webhook.ErrInvalidConnection)
}

func TestNewSender_RefusesBadOptions(t *testing.T) {
	for _, opts := range []*webhook.SenderOptions{
		{Retry: &webhook.RetryPolicy{MaxRetries: -1}},
		{AttemptTimeout: -time.Second},
		{MaxConcurrency: -1},
	} {
		_, err := webhook.NewSender(opts)
		assert.Error(t, err, "%+v", opts)
	}
}

func TestNewSender_DoesNotModifyTheClient(t *testing.T) {
	rv := newReceiver(t, http.StatusMovedPermanently)
	client := rv.Client()
	before := *client
	s := newTestSender(t, rv, &webhook.SenderOptions{Client: client, Retry: shortPolicy(0)})
	_, err := s.Send(context.Background(), rv.conn("/"), samplePayload())
	require.Error(t, err)
	assert.Zero(t, client.Timeout)
	assert.Nil(t, client.CheckRedirect)
	assert.Equal(t, before.Transport, client.Transport)
}

// A receiver is a URL a stranger typed in: a cookie one sets must not
// reach another receiver on the same host (cookies ignore the port and, by
// default, the path), nor grow a jar without end. The Sender's copy of a
// client drops its Jar (review: a caller's cookiejar carried one
// receiver's session to the next).
func TestSend_NoCookieOfOneReceiverReachesAnother(t *testing.T) {
	setter := newReceiver(t)
	setter.handle = func(w http.ResponseWriter, _ *http.Request) bool {
		http.SetCookie(w, &http.Cookie{Name: "session", Value: "setters-secret", Path: "/"})
		return false
	}
	other := newReceiver(t)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	client := setter.Client()
	client.Jar = jar
	s := newTestSender(t, setter, &webhook.SenderOptions{Client: client, Retry: shortPolicy(0)})

	_, err = s.Send(context.Background(), setter.conn("/a"), samplePayload())
	require.NoError(t, err)
	_, err = s.Send(context.Background(), other.conn("/b"), samplePayload())
	require.NoError(t, err)

	got := other.deliveries()
	require.Len(t, got, 1)
	assert.Empty(t, got[0].Header.Values("Cookie"), "another receiver on the same host gets no cookie of the first")
	u, err := url.Parse(setter.URL)
	require.NoError(t, err)
	assert.Empty(t, jar.Cookies(u), "the caller's jar stores nothing a receiver sets")
	assert.Same(t, jar, client.Jar, "the caller's client is not modified")
}

func TestSender_AttemptIgnoresTheContextDeadline(t *testing.T) {
	s := fakeSender(t, func(*http.Request) (*http.Response, error) { return answer(503), nil }, &webhook.RetryPolicy{
		MaxRetries: 3,
		Backoff:    func(int, *http.Response) time.Duration { return time.Minute },
	})
	// A job queue runs each attempt under its own deadline, shorter than the
	// wait it will schedule.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := s.Attempt(ctx, fakeConn, webhook.EventUserIdentified, []byte(`{}`), 1)
	assert.True(t, a.Retry, "a queue schedules the retry, whatever this call's deadline")
	assert.Equal(t, time.Minute, a.RetryIn)

	res, err := s.Send(ctx, fakeConn, samplePayload())
	require.Error(t, err)
	require.Len(t, res.Attempts, 1, "Send still refuses a wait its deadline cannot cover")
	assert.False(t, res.Attempts[0].Retry)
}

func TestSend_ContextDoneBeforehandSendsNothing(t *testing.T) {
	sent := 0
	s := fakeSender(t, func(*http.Request) (*http.Response, error) { sent++; return answer(200), nil }, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := s.Send(ctx, fakeConn, samplePayload())
	require.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, res.Attempts, "the log shows what reached the wire: nothing")
	a := s.Attempt(ctx, fakeConn, webhook.EventUserIdentified, []byte(`{}`), 2)
	assert.Equal(t, webhook.KindCanceled, a.Kind)
	assert.Equal(t, 2, a.N)
	assert.False(t, a.Retry)
	assert.ErrorIs(t, a.Err, context.Canceled)
	res, err = s.SendTest(ctx, fakeConn)
	require.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, res.Attempts)
	assert.Zero(t, sent)

	res, err = s.Send(ctx, webhook.Connection{URL: "http://x"}, samplePayload())
	require.ErrorIs(t, err, webhook.ErrInvalidConnection, "an invalid connection is reported first")
	assert.Empty(t, res.Attempts)
}

func TestSend_RefusesBodiesOverTheLimit(t *testing.T) {
	sent := 0
	rt := func(*http.Request) (*http.Response, error) { sent++; return answer(200), nil }
	s := fakeSender(t, rt, nil)
	big := samplePayload()
	big.User.Metadata = webhook.Metadata{"notes": strings.Repeat("n", webhook.DefaultMaxBodyBytes)}
	res, err := s.Send(context.Background(), fakeConn, big)
	require.ErrorIs(t, err, webhook.ErrInvalidPayload)
	var fe *webhook.FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "body", fe.Field)
	assert.Contains(t, fe.Reason, "MaxBodyBytes")
	assert.Empty(t, res.Attempts)
	a := s.Attempt(context.Background(), fakeConn, webhook.EventUserIdentified, make([]byte, webhook.DefaultMaxBodyBytes+1), 1)
	assert.Equal(t, webhook.KindInvalid, a.Kind)
	assert.Zero(t, sent)

	raised, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: roundTripFunc(rt)}, MaxBodyBytes: 4 << 20})
	require.NoError(t, err)
	_, err = raised.Send(context.Background(), fakeConn, big)
	require.NoError(t, err)
	assert.Equal(t, 1, sent)
	_, err = webhook.NewSender(&webhook.SenderOptions{MaxBodyBytes: -1})
	assert.ErrorContains(t, err, "MaxBodyBytes")
}

func TestSender_ZeroValueRefusesClearly(t *testing.T) {
	var s webhook.Sender
	ctx := context.Background()
	_, err := s.Send(ctx, fakeConn, samplePayload())
	assert.ErrorContains(t, err, "NewSender")
	_, err = s.SendBytes(ctx, fakeConn, webhook.EventUserIdentified, []byte(`{}`))
	assert.ErrorContains(t, err, "NewSender")
	_, err = s.SendTest(ctx, fakeConn)
	assert.ErrorContains(t, err, "NewSender")
	results := s.SendAll(ctx, []webhook.Connection{fakeConn, fakeConn}, samplePayload())
	require.Len(t, results, 2)
	assert.ErrorContains(t, results[1].Err, "NewSender")
	a := s.Attempt(ctx, fakeConn, webhook.EventUserIdentified, []byte(`{}`), 1)
	assert.ErrorContains(t, a.Err, "NewSender")
	s.CloseIdleConnections() // no panic
}

func TestSendAll_OnAttemptRunsConcurrently(t *testing.T) {
	// Two deliveries whose receivers each wait until both attempts are in
	// flight: SendAll makes them at once, and OnAttempt is called from both.
	rv := newReceiver(t)
	var arrived sync.WaitGroup
	arrived.Add(2)
	rv.handle = func(w http.ResponseWriter, r *http.Request) bool {
		arrived.Done()
		arrived.Wait()
		return false
	}
	var mu sync.Mutex
	seen := map[string]int{}
	s := newTestSender(t, rv, &webhook.SenderOptions{MaxConcurrency: 2, OnAttempt: func(_ context.Context, c webhook.Connection, a webhook.Attempt) {
		mu.Lock()
		seen[c.Name]++
		mu.Unlock()
	}})
	a, b := rv.conn("/a"), rv.conn("/b")
	a.Name, b.Name = "a", "b"
	results := s.SendAll(context.Background(), []webhook.Connection{a, b}, samplePayload())
	for _, r := range results {
		require.NoError(t, r.Err)
	}
	assert.Equal(t, map[string]int{"a": 1, "b": 1}, seen)
}

func TestSender_AttemptTimeout(t *testing.T) {
	s, err := webhook.NewSender(nil)
	require.NoError(t, err)
	assert.Equal(t, webhook.DefaultAttemptTimeout, s.AttemptTimeout())
	s, err = webhook.NewSender(&webhook.SenderOptions{AttemptTimeout: 3 * time.Second})
	require.NoError(t, err)
	assert.Equal(t, 3*time.Second, s.AttemptTimeout())
}

// TestSend_LogsOnlyPrintableText pins that the Sender's slog records are
// printable text whatever the customer typed in the dashboard: its Name is a
// free label, which may carry U+009B (ESC [ on many terminals) or U+202E.
// The JSON handler, the usual one in production, writes them as they are,
// and the logs are read on terminals. Nothing is sent: the link-local
// address is blocked. (An IPv6 zone, which could carry them in the URL,
// is refused by Validate.)
func TestSend_LogsOnlyPrintableText(t *testing.T) {
	for _, c := range []webhook.Connection{
		{Name: "CRM\u009b2J\u202e", URL: "https://[fe80::1]/hooks", Secret: testSecret,
			Headers: map[string]string{"X-Tenant": "1"}},
	} {
		t.Run(c.Name, func(t *testing.T) {
			require.NoError(t, c.Validate(), "a valid connection")
			var logs bytes.Buffer
			s := newTestSender(t, nil, &webhook.SenderOptions{Retry: shortPolicy(0),
				Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			res, err := s.Send(context.Background(), c, samplePayload())
			require.ErrorIs(t, err, webhook.ErrBlockedDestination)
			requireAllPrintable(t, res, err) // the attempt's own texts are clean
			require.NotEmpty(t, logs.String())
			requirePrintable(t, logs.String(), "\n")
		})
	}
}

// TestSend_RetryInTheSameMillisecondIsNotAReplay answers 503 with
// Retry-After: 0 and stamps both attempts with one frozen clock: the retry's
// timestamp is later than the first's, so a receiver that refuses a repeated
// signature accepts it.
func TestSend_RetryInTheSameMillisecondIsNotAReplay(t *testing.T) {
	srv := webhooktest.NewServer(testSecret, nil)
	defer srv.Close()
	srv.Script(webhooktest.RetryAfter(http.StatusServiceUnavailable, 0))
	frozen := time.Now()
	policy := webhook.DefaultRetryPolicy()
	policy.Backoff = webhook.WithRetryAfter(policy.Backoff, time.Second)
	s := srv.Sender(&webhook.SenderOptions{Retry: policy, Now: func() time.Time { return frozen }})
	res, err := s.Send(context.Background(), srv.Connection(), samplePayload())
	require.NoError(t, err)
	require.Len(t, res.Attempts, 2)
	assert.Equal(t, res.Attempts[0].Timestamp+1, res.Attempts[1].Timestamp)
	d := srv.Deliveries()
	require.Len(t, d, 2)
	assert.NoError(t, d[1].Err, "the retry verifies: it is not a copy")
	assert.NotEqual(t, d[0].Header.Get(webhook.HeaderSignature), d[1].Header.Get(webhook.HeaderSignature))
}

// TestSend_SkipsAnEventTheConnectionDoesNotSubscribeTo: nothing is sent,
// and the error and the attempt's kind say why; Send Test is sent whatever
// the subscription.
func TestSend_SkipsAnEventTheConnectionDoesNotSubscribeTo(t *testing.T) {
	srv := webhooktest.NewServer(testSecret, nil)
	defer srv.Close()
	s := srv.Sender(nil)
	c := srv.Connection()
	c.Events = []string{"deal.closed", "user.created"}
	ctx := context.Background()

	res, err := s.Send(ctx, c, samplePayload())
	require.ErrorIs(t, err, webhook.ErrNotSubscribed)
	assert.Contains(t, err.Error(), `"user.identified" is not among the 2 event(s) it subscribes to`)
	assert.Empty(t, res.Attempts)
	js, _ := json.Marshal(res)
	assert.Contains(t, string(js), `"outcome":"skipped"`)
	a := s.Attempt(ctx, c, webhook.EventUserIdentified, []byte(`{}`), 1)
	assert.Equal(t, webhook.KindSkipped, a.Kind)
	assert.False(t, a.Retry)
	assert.Contains(t, a.Diagnosis(), "not sent")

	_, err = s.SendBytes(ctx, c, "deal.closed", []byte(`{"event":"deal.closed","deal":{"id":"d1"}}`))
	require.NoError(t, err)
	_, err = s.SendTestBytes(ctx, c, "invoice.paid", []byte(`{"event":"invoice.paid"}`))
	require.NoError(t, err, "a Send Test goes whatever the subscription")
	_, err = s.SendTest(ctx, c)
	require.NoError(t, err)
	var events []string
	for _, d := range srv.Deliveries() {
		events = append(events, d.Header.Get(webhook.HeaderEvent))
	}
	assert.Equal(t, []string{"deal.closed", "invoice.paid", "user.identified"}, events)

	c.Events = []string{"ok", "bad\nname"}
	assert.ErrorContains(t, c.Validate(), `events[1]`)
}

// signingEndpoint answers 200 and keeps each request's signature.
type signingEndpoint struct {
	mu   sync.Mutex
	sigs []string
}

func (e *signingEndpoint) RoundTrip(r *http.Request) (*http.Response, error) {
	e.mu.Lock()
	e.sigs = append(e.sigs, r.Header.Get(webhook.HeaderSignature))
	e.mu.Unlock()
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
}

// A Sender never signs one body for one secret at one millisecond twice:
// Attempt keeps no state between calls, and a queue may make two attempts
// of a delivery in one millisecond (Retry-After: 0), as two goroutines may
// Send one payload; a receiver refusing repeated signatures would refuse
// the second, and acknowledge it unhandled as a copy.
func TestSender_NeverRepeatsASignature(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ep := &signingEndpoint{}
		s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: ep}, Retry: &webhook.RetryPolicy{}})
		require.NoError(t, err)
		conn := webhook.Connection{Name: "crm", URL: "https://crm.example.com/hooks", Secret: testSecret}
		body := []byte(`{"event":"user.identified"}`)
		var stamps []int64
		for n := range 3 { // at one instant: the bubble's clock stands still
			a := s.Attempt(context.Background(), conn, webhook.EventUserIdentified, body, n+1)
			require.True(t, a.OK(), "%v", a.Err)
			stamps = append(stamps, a.Timestamp)
		}
		_, err = s.SendBytes(context.Background(), conn, webhook.EventUserIdentified, body)
		require.NoError(t, err)
		now := time.Now().UnixMilli()
		assert.Equal(t, []int64{now, now + 1, now + 2}, stamps, "each the first millisecond not signed at")
		seen := map[string]bool{}
		for _, sig := range ep.sigs {
			assert.False(t, seen[sig], "signature %s sent twice", sig)
			seen[sig] = true
		}
		assert.Len(t, seen, 4)

		// Sent steadily more than a thousand times a second, one body's
		// timestamps run a second ahead of the clock at the most: past
		// that, a copy goes out rather than a delivery a receiver's window
		// refuses as too new.
		var latest int64
		for n := range 1500 {
			a := s.Attempt(context.Background(), conn, webhook.EventUserIdentified, body, n+1)
			require.True(t, a.OK(), "%v", a.Err)
			latest = max(latest, a.Timestamp)
		}
		assert.Equal(t, now+1000, latest)
	})
}

// A Sender checks a connection's URL once per secret and URL: every
// delivery still goes to its own connection's URL, as it is now, over a
// request of its own, and is refused when any field is invalid.
func TestSend_TheURLCheckedOnceIsEachDeliverysOwn(t *testing.T) {
	rv := newReceiver(t)
	var requests atomic.Int32
	base := rv.Client().Transport
	s := newTestSender(t, rv, &webhook.SenderOptions{Client: &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if requests.Add(1) == 2 { // a RoundTripper that changes the second request's URL in place
			r.URL.RawQuery, r.URL.Path = "changed=1", "/changed"
			*r.URL.User = *url.UserPassword("changed", "changed")
		}
		return base.RoundTrip(r)
	})}})
	ctx := context.Background()
	a, b := rv.conn("/a"), rv.conn("/b?x=1") // one secret for two URLs
	a.URL = strings.Replace(a.URL, "https://", "https://alice:s3cret@", 1)
	for _, c := range []webhook.Connection{a, a, a, b, a, b} {
		_, err := s.Send(ctx, c, samplePayload())
		require.NoError(t, err)
	}
	var paths, users []string
	for _, d := range rv.deliveries() {
		paths = append(paths, d.Path)
		users = append(users, d.Header.Get("Authorization"))
	}
	assert.Equal(t, []string{"/a", "/changed", "/a", "/b", "/a", "/b"}, paths, "the second request's change stays its own")
	alice := "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:s3cret"))
	assert.Equal(t, []string{alice, alice, alice, "", alice, ""}, users, "its change of the user too (made after the header was set)")

	for _, tc := range []struct {
		field string
		c     webhook.Connection
	}{
		{"method", webhook.Connection{Name: a.Name, URL: a.URL, Secret: a.Secret, Method: http.MethodGet}},
		{"url", webhook.Connection{Name: a.Name, URL: strings.Replace(a.URL, "https://", "http://", 1), Secret: a.Secret}},
		{`headers["Host"]`, webhook.Connection{Name: a.Name, URL: a.URL, Secret: a.Secret, Headers: map[string]string{"Host": "x"}}},
	} {
		res, err := s.Send(ctx, tc.c, samplePayload())
		var fe *webhook.FieldError
		require.ErrorAs(t, err, &fe, tc.field)
		assert.Equal(t, tc.field, fe.Field)
		assert.ErrorIs(t, err, webhook.ErrInvalidConnection)
		assert.Empty(t, res.Attempts, "nothing sent")
	}
	assert.Len(t, rv.deliveries(), 6)

	// At once, the two URLs taking each other's place: each goes to its own.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			c := []webhook.Connection{a, b}[i%2]
			_, err := s.Send(ctx, c, samplePayload())
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	count := map[string]int{}
	for _, d := range rv.deliveries()[6:] {
		count[d.Path]++
	}
	assert.Equal(t, map[string]int{"/a": 4, "/b": 4}, count)
}

// TestSend_AllocatesAboutAsMuchAsNetHTTP: a delivery allocates at most
// two objects more than net/http doing the same work (encoding, signing,
// one request bounded by a timeout): what the Sender adds (its Result,
// the attempt's scope and its trace's hooks) it mostly saves elsewhere
// (the URL parsed once, the headers set without canonicalising). A change
// that moves the request to the heap fails it (bound reassigning its
// parameter copied every request there, 320 B more a delivery: 39 against
// 36).
func TestSend_AllocatesAboutAsMuchAsNetHTTP(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes what allocates")
	}
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		io.Copy(io.Discard, r.Body)
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody}, nil
	})}
	conn := webhook.Connection{Name: "allocs", URL: "https://crm.example.com/hooks", Secret: testSecret}
	p := samplePayload()
	raw := testing.AllocsPerRun(200, func() {
		ctx, cancel := context.WithTimeout(context.Background(), webhook.DefaultAttemptTimeout)
		defer cancel()
		req, err := rawRequest(ctx, conn, p)
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
	})
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: client})
	require.NoError(t, err)
	sent := testing.AllocsPerRun(200, func() {
		_, err := s.Send(context.Background(), conn, p)
		require.NoError(t, err)
	})
	assert.LessOrEqual(t, sent, raw+2.5, "allocations a delivery: the Sender %v, net/http %v", sent, raw)
}

// TestNewSender_ANilTransportIsRefusedAtOnce: a Client whose Transport is a
// nil *http.Transport (declared, never made: NewTransport's error ignored,
// say) was taken, and every delivery then panicked in net/http.
func TestNewSender_ANilTransportIsRefusedAtOnce(t *testing.T) {
	var tr *http.Transport
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr}})
	if err == nil {
		assert.NotPanics(t, func() { s.SendTest(t.Context(), fakeConn) }, "taken, so it must deliver or fail")
	}
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Transport")
}
