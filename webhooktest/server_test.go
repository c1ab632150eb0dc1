package webhooktest_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/webhooktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const secret = "whsec_webhooktest"

func payload() webhook.Payload {
	return webhook.SamplePayload(time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC))
}

func fastRetries(n int) *webhook.RetryPolicy {
	return &webhook.RetryPolicy{MaxRetries: n, Backoff: webhook.ExponentialBackoff(2*time.Millisecond, 10*time.Millisecond)}
}

func kinds(as []webhook.Attempt) []webhook.FailureKind {
	var out []webhook.FailureKind
	for _, a := range as {
		out = append(out, a.Kind)
	}
	return out
}

func TestServer_RecordsVerifiedDeliveries(t *testing.T) {
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	before := time.Now()
	res, err := srv.Sender(nil).Send(context.Background(), srv.Connection(), payload())
	require.NoError(t, err)
	require.Len(t, res.Attempts, 1)

	got := srv.Deliveries()
	require.Len(t, got, 1)
	d := got[0]
	assert.NoError(t, d.Err)
	assert.Equal(t, http.MethodPost, d.Method)
	assert.Equal(t, "/webhooks", d.Path)
	assert.Equal(t, http.StatusOK, d.Status)
	assert.False(t, d.At.Before(before))
	assert.Equal(t, webhook.EventUserIdentified, d.Header.Get(webhook.HeaderEvent))
	p, err := d.Payload()
	require.NoError(t, err)
	assert.Equal(t, payload().User.Email, p.User.Email)
	assert.Equal(t, `{"ok":true}`, string(res.Attempts[0].ResponseBody))
}

func TestServer_RefusesWhatDoesNotVerify(t *testing.T) {
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	c := srv.Connection()
	c.Secret = "whsec_another"
	res, err := srv.Sender(&webhook.SenderOptions{Retry: fastRetries(0)}).Send(context.Background(), c, payload())
	require.Error(t, err)
	assert.Equal(t, http.StatusUnauthorized, res.Attempts[0].StatusCode)
	d := srv.Deliveries()[0]
	assert.ErrorIs(t, d.Err, webhook.ErrSignatureMismatch)
	assert.Equal(t, http.StatusUnauthorized, d.Status)
}

func TestServer_ScriptedAnswers(t *testing.T) {
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	srv.Script(
		webhooktest.Status(503),
		webhooktest.RetryAfter(429, 1500*time.Millisecond),
		webhooktest.Redirect("https://elsewhere.example/"),
		webhooktest.Reset(),
		webhooktest.Hang(),
		webhooktest.Slow(5*time.Millisecond, 500),
	)
	// Hang costs the whole attempt timeout. The other six answers, with the
	// new handshakes after Reset and Hang, must come within it: 3 s leaves a
	// slow machine ample time.
	s := srv.Sender(&webhook.SenderOptions{Retry: fastRetries(6), AttemptTimeout: 3 * time.Second})
	res, err := s.Send(context.Background(), srv.Connection(), payload())
	require.NoError(t, err, "the seventh answer is the default 200")
	assert.Equal(t, []webhook.FailureKind{webhook.KindStatus, webhook.KindStatus, webhook.KindRedirect, webhook.KindReset,
		webhook.KindTimeout, webhook.KindStatus, webhook.KindNone}, kinds(res.Attempts))
	assert.Equal(t, 429, res.Attempts[1].StatusCode)

	got := srv.Deliveries()
	require.Len(t, got, 7)
	var statuses []int
	for _, d := range got {
		assert.NoError(t, d.Err, "every arrival verified")
		statuses = append(statuses, d.Status)
	}
	assert.Equal(t, []int{503, 429, 307, 0, 0, 500, 200}, statuses)
}

// TestServer_ResetIsATCPReset: Reset closes the connection with a TCP RST,
// as documented, so that a client reading the answer sees the connection
// reset, not an orderly close: the TLS connection's close sent close_notify
// first, read as EOF (review).
func TestServer_ResetIsATCPReset(t *testing.T) {
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	srv.Script(webhooktest.Reset())
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: webhooktest.RootCAs()}}
	defer tr.CloseIdleConnections()
	req := webhooktest.NewRequest(secret, payload(), time.Now())
	u, err := url.Parse(srv.URL + "/webhooks")
	require.NoError(t, err)
	req.URL, req.Host, req.RequestURI = u, u.Host, ""
	_, err = tr.RoundTrip(req)
	assert.ErrorIs(t, err, syscall.ECONNRESET)
}

// TestServer_AnswersACopyAsTheLibrarysReceiversDo: a copy of a delivery
// (the same signed request again, as a proxy or a queue resends it) is
// answered as the library's receivers answer it (DESIGN 31): 200 once the
// first was answered 2xx, without its Handler or a scripted answer; handled
// again once the first failed; asked to come back (409) while the first is
// answered. It answered 401 to each, as a replay (review).
func TestServer_AnswersACopyAsTheLibrarysReceiversDo(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	var handled atomic.Int32
	srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled.Add(1)
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
	})})
	defer srv.Close()
	send := func(path string, h http.Header, body []byte) int {
		t.Helper()
		r, err := http.NewRequest(http.MethodPost, srv.URL+path, bytes.NewReader(body))
		require.NoError(t, err)
		r.Header = h.Clone()
		resp, err := srv.Client().Do(r)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	body := []byte(`{"event":"user.identified"}`)

	h := webhooktest.SignedHeader(secret, webhook.EventUserIdentified, body, time.Now())
	assert.Equal(t, http.StatusOK, send("/webhooks", h, body))
	assert.Equal(t, http.StatusOK, send("/webhooks", h, body), "a copy of a delivery answered 2xx")
	assert.Equal(t, int32(1), handled.Load(), "acknowledged without the Handler")

	srv.Script(webhooktest.Status(http.StatusServiceUnavailable))
	h = webhooktest.SignedHeader(secret, webhook.EventUserIdentified, body, time.Now().Add(time.Millisecond))
	assert.Equal(t, http.StatusServiceUnavailable, send("/webhooks", h, body))
	assert.Equal(t, http.StatusOK, send("/webhooks", h, body), "a copy of one that failed is handled")
	assert.Equal(t, int32(2), handled.Load())

	h = webhooktest.SignedHeader(secret, webhook.EventUserIdentified, body, time.Now().Add(2*time.Millisecond))
	first := make(chan int)
	go func() { first <- send("/slow", h, body) }()
	<-entered // the first is in the Handler
	assert.Equal(t, http.StatusConflict, send("/slow", h, body), "a copy while the first is answered")
	close(release)
	assert.Equal(t, http.StatusOK, <-first)

	for _, d := range srv.Deliveries() {
		assert.NoError(t, d.Err, "every copy is authentic and fresh")
	}
}

// TestServer_RemembersACopyAsTheLibraryDoes: with any tolerance, up to the
// longest Duration, a copy of a delivery answered 2xx is acknowledged: twice
// the tolerance overflowed, and the memory of it expired at once. A Handler
// that flushed 200 and then panicked did not handle its delivery, which the
// library's receivers hand to their handler again, as the Server does
// (review).
func TestServer_RemembersACopyAsTheLibraryDoes(t *testing.T) {
	body := []byte(`{"event":"user.identified"}`)
	sendTwice := func(srv *webhooktest.Server) {
		h := webhooktest.SignedHeader(secret, webhook.EventUserIdentified, body, time.Now())
		for range 2 {
			r, err := http.NewRequest(http.MethodPost, srv.URL+"/webhooks", bytes.NewReader(body))
			require.NoError(t, err)
			r.Header = h.Clone()
			if resp, err := srv.Client().Do(r); err == nil {
				// To its end: after a Handler's panic, the Server has let
				// the delivery go once the connection is cut.
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}
	for _, tol := range []time.Duration{math.MaxInt64, 250 * 365 * 24 * time.Hour} {
		var handled atomic.Int32
		srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Verifier: &webhook.VerifierOptions{Tolerance: tol},
			Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { handled.Add(1) })})
		sendTwice(srv)
		srv.Close()
		assert.Equal(t, int32(1), handled.Load(), "tolerance %v: the copy is acknowledged", tol)
	}

	var handled atomic.Int32
	srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if handled.Add(1) == 1 {
			w.WriteHeader(http.StatusOK)
			http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler)
		}
	})})
	defer srv.Close()
	sendTwice(srv)
	assert.Equal(t, int32(2), handled.Load(), "a delivery whose Handler panicked is handled again")
}

func TestServer_RetryAfterHeader(t *testing.T) {
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	srv.Script(webhooktest.RetryAfter(503, 1500*time.Millisecond))
	resp, err := srv.Client().Post(srv.URL, "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, "2", resp.Header.Get("Retry-After"), "rounded up to whole seconds")
}

func TestServer_HandlerAndClear(t *testing.T) {
	srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
	})})
	defer srv.Close()
	s := srv.Sender(nil)
	_, err := s.Send(context.Background(), srv.Connection(), payload())
	require.NoError(t, err)
	assert.Equal(t, http.StatusAccepted, srv.Deliveries()[0].Status)
	srv.Script(webhooktest.Status(500))
	srv.Clear()
	assert.Empty(t, srv.Deliveries())
	_, err = s.Send(context.Background(), srv.Connection(), payload())
	require.NoError(t, err, "Clear dropped the script too")
	srv.Close()
	srv.Close() // twice is fine
}

func TestServer_ClientIsTheLibrarysTransport(t *testing.T) {
	srv := webhooktest.NewServer(secret, nil)
	defer srv.Close()
	tr, ok := srv.Client().Transport.(*http.Transport)
	require.True(t, ok)
	assert.Equal(t, webhook.DefaultMaxIdleConnsPerHost, tr.MaxIdleConnsPerHost, "not httptest's pool of 2")
	assert.NotNil(t, srv.Certificate())
}

func TestServer_VerifierOptions(t *testing.T) {
	srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Verifier: &webhook.VerifierOptions{MaxBodyBytes: 64}})
	defer srv.Close()
	res, err := srv.Sender(&webhook.SenderOptions{Retry: fastRetries(0)}).Send(context.Background(), srv.Connection(), payload())
	require.Error(t, err)
	assert.Equal(t, http.StatusRequestEntityTooLarge, res.Attempts[0].StatusCode)
	assert.ErrorIs(t, srv.Deliveries()[0].Err, webhook.ErrBodyTooLarge)
}

func TestNewRequest(t *testing.T) {
	v, err := webhook.NewVerifier([]string{secret}, nil)
	require.NoError(t, err)
	handler := v.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	now := time.Now()
	tests := []struct {
		name string
		r    *http.Request
		want int
	}{
		{"valid", webhooktest.NewRequest(secret, payload(), now), http.StatusOK},
		{"expired", webhooktest.NewRequest(secret, payload(), now.Add(-6*time.Minute)), http.StatusUnauthorized},
		{"future", webhooktest.NewRequest(secret, payload(), now.Add(6*time.Minute)), http.StatusUnauthorized},
		{"other secret", webhooktest.NewRequest("whsec_other", payload(), now), http.StatusUnauthorized},
		{"raw", webhooktest.NewRawRequest(secret, "user.identified", []byte(`{"event":"user.identified"}`), now), http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, tc.r)
			assert.Equal(t, tc.want, rec.Code)
		})
	}
	h := webhooktest.SignedHeader(secret, "user.identified", []byte(`{"a":1}`), now)
	assert.NoError(t, webhook.Verify(secret, h, []byte(`{"a":1}`)))
	assert.ErrorIs(t, webhook.Verify(secret, h, []byte(`{"a":2}`)), webhook.ErrSignatureMismatch)
	assert.Panics(t, func() {
		p := payload()
		p.User.Metadata = webhook.Metadata{"x": func() {}}
		webhooktest.NewRequest(secret, p, now)
	})
}

// holdFirst answers the first delivery with first, once release is closed
// (arrived is closed when it is held), and every later one with later at
// once.
func holdFirst(arrived, release chan struct{}, first, later int) http.Handler {
	var n atomic.Int32
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			close(arrived)
			<-release
			w.WriteHeader(first)
			return
		}
		w.WriteHeader(later)
	})
}

// TestServer_ClearDuringDeliveryKeepsAnswerAndRecords pins that forgetting
// the records while a delivery is being answered neither loses that answer
// (the sender gets it, not a reset connection) nor writes its status into
// a record of a later delivery.
func TestServer_ClearDuringDeliveryKeepsAnswerAndRecords(t *testing.T) {
	for _, tc := range []struct {
		name  string
		later bool // another delivery arrives after Clear, before the release
	}{
		{"nothing after", false},
		{"another delivery after", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			arrived, release := make(chan struct{}), make(chan struct{})
			srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: holdFirst(arrived, release, http.StatusAccepted, http.StatusCreated)})
			defer srv.Close()
			s := srv.Sender(&webhook.SenderOptions{Retry: fastRetries(0)})

			type result struct {
				res *webhook.Result
				err error
			}
			first := make(chan result, 1)
			go func() {
				res, err := s.Send(context.Background(), srv.Connection(), payload())
				first <- result{res, err}
			}()
			<-arrived
			srv.Clear()
			want := []int(nil)
			if tc.later {
				_, err := s.Send(context.Background(), srv.Connection(), payload())
				require.NoError(t, err)
				want = []int{http.StatusCreated}
			}
			close(release)

			got := <-first
			require.NoError(t, got.err, "the held delivery gets its answer")
			require.Len(t, got.res.Attempts, 1)
			assert.Equal(t, http.StatusAccepted, got.res.Attempts[0].StatusCode)
			var statuses []int
			for _, d := range srv.Deliveries() {
				statuses = append(statuses, d.Status)
			}
			assert.Equal(t, want, statuses, "only the delivery after Clear is recorded, with its own status")
		})
	}
}

// TestServer_HandlerReachesTheResponseWriter pins that a custom Handler
// gets what http.ResponseController offers on the connection: here Flush,
// which a streaming receiver needs. The recorded status is the final one,
// not an informational 103.
func TestServer_HandlerReachesTheResponseWriter(t *testing.T) {
	srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, "flush: %v", http.NewResponseController(w).Flush())
	})})
	defer srv.Close()
	res, err := srv.Sender(nil).Send(context.Background(), srv.Connection(), payload())
	require.NoError(t, err)
	assert.Equal(t, "flush: <nil>", string(res.Attempts[0].ResponseBody))
	assert.Equal(t, http.StatusAccepted, srv.Deliveries()[0].Status)
}

// TestServer_ConcurrentClose pins that Close may be called from several
// goroutines at once, each returning once the Server is shut down. A
// check-then-close race shows as a panic (close of closed channel) within
// these rounds under -race.
func TestServer_ConcurrentClose(t *testing.T) {
	for range 1000 {
		srv := webhooktest.NewServer(secret, nil)
		addr := strings.TrimPrefix(srv.URL, "https://")
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				<-start
				srv.Close()
				if c, err := net.Dial("tcp", addr); err == nil {
					c.Close()
					t.Errorf("the Server still accepts connections after Close returned")
				}
			})
		}
		close(start)
		wg.Wait()
	}
}

// TestServer_OneSenderReachesEveryServer pins that the Servers of a process
// chain to one test CA, for 127.0.0.1 and localhost alike: the Sender of
// one Server delivers to all.
func TestServer_OneSenderReachesEveryServer(t *testing.T) {
	var conns []webhook.Connection
	var srvs []*webhooktest.Server
	for _, host := range []string{"127.0.0.1", "localhost", "127.0.0.1"} {
		srv := webhooktest.NewServer(secret, nil)
		defer srv.Close()
		c := srv.Connection()
		c.Name = fmt.Sprint("server ", len(srvs), " at ", host)
		c.URL = strings.Replace(c.URL, "127.0.0.1", host, 1)
		conns = append(conns, c)
		srvs = append(srvs, srv)
	}
	results := srvs[0].Sender(&webhook.SenderOptions{Retry: fastRetries(0)}).SendAll(context.Background(), conns, payload())
	for i, res := range results {
		require.NoError(t, res.Err, conns[i].Name)
		assert.Len(t, srvs[i].Deliveries(), 1, conns[i].Name)
	}
}

// TestNewUnstartedServer_EnableHTTP2 pins that deliveries arrive over
// HTTP/2 when the Server offers it, and over HTTP/1.1 otherwise, scripted
// answers included: under HTTP/2 a Reset fails that delivery only.
func TestNewUnstartedServer_EnableHTTP2(t *testing.T) {
	for _, tc := range []struct {
		http2 bool
		proto string
	}{
		{false, "HTTP/1.1"},
		{true, "HTTP/2.0"},
	} {
		t.Run(tc.proto, func(t *testing.T) {
			protos := make(chan string, 10)
			srv := webhooktest.NewUnstartedServer(secret, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				protos <- r.Proto
			})})
			defer srv.Close()
			assert.Empty(t, srv.URL, "not started")
			srv.EnableHTTP2 = tc.http2
			srv.StartTLS()
			require.NotEmpty(t, srv.URL)

			srv.Script(webhooktest.Status(503), webhooktest.Reset())
			res, err := srv.Sender(&webhook.SenderOptions{Retry: fastRetries(2)}).Send(context.Background(), srv.Connection(), payload())
			require.NoError(t, err)
			require.Len(t, res.Attempts, 3)
			assert.Equal(t, 503, res.Attempts[0].StatusCode)
			assert.Zero(t, res.Attempts[1].StatusCode, "reset: no answer")
			assert.Error(t, res.Attempts[1].Err)
			assert.Equal(t, tc.proto, <-protos, "the third delivery reached the Handler")

			var statuses []int
			for _, d := range srv.Deliveries() {
				statuses = append(statuses, d.Status)
			}
			assert.Equal(t, []int{503, 0, 200}, statuses)
		})
	}
}

// TestNewUnstartedServer_Config pins that Config is the http.Server that
// serves, as set before StartTLS, and that a Handler of its own is refused.
func TestNewUnstartedServer_Config(t *testing.T) {
	t.Run("hooks", func(t *testing.T) {
		srv := webhooktest.NewUnstartedServer(secret, nil)
		defer srv.Close()
		var conns atomic.Int32
		srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				conns.Add(1)
			}
		}
		srv.StartTLS()
		_, err := srv.Sender(nil).Send(context.Background(), srv.Connection(), payload())
		require.NoError(t, err)
		assert.Equal(t, int32(1), conns.Load())
		assert.Panics(t, srv.StartTLS, "started already")
	})
	t.Run("replaced", func(t *testing.T) {
		srv := webhooktest.NewUnstartedServer(secret, nil)
		defer srv.Close()
		srv.Config = &http.Server{MaxHeaderBytes: 1} // and 4 KiB of slack net/http adds
		srv.StartTLS()
		c := srv.Connection()
		c.Headers = map[string]string{"X-Large": strings.Repeat("a", 8<<10)}
		res, err := srv.Sender(&webhook.SenderOptions{Retry: fastRetries(0)}).Send(context.Background(), c, payload())
		require.Error(t, err)
		assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, res.Attempts[0].StatusCode)
		_, err = srv.Sender(nil).Send(context.Background(), srv.Connection(), payload())
		assert.NoError(t, err, "the Server's own handler serves the replaced Config")
	})
	t.Run("handler refused", func(t *testing.T) {
		srv := webhooktest.NewUnstartedServer(secret, nil)
		defer srv.Close()
		srv.Config.Handler = http.NotFoundHandler()
		assert.PanicsWithValue(t, "webhooktest: Config.Handler is the Server's own; set ServerOptions.Handler instead", srv.StartTLS)
	})
	t.Run("closed unstarted", func(t *testing.T) {
		srv := webhooktest.NewUnstartedServer(secret, nil)
		srv.Close()
		assert.Panics(t, srv.StartTLS)
	})
}

// TestNewRequest_TwoRequestsAreTwoDeliveries builds two requests of one
// payload at one instant, as a test of "a retry after our 200 was lost"
// does: both are handled. A Duplicate is acknowledged without a second run.
func TestNewRequest_TwoRequestsAreTwoDeliveries(t *testing.T) {
	v, err := webhook.NewVerifier([]string{secret}, nil)
	require.NoError(t, err)
	var calls atomic.Int32
	handler := webhook.NewHandler(v, func(context.Context, webhook.Payload) error { calls.Add(1); return nil }, nil)
	now := time.Now()
	first := webhooktest.NewRequest(secret, payload(), now)
	second := webhooktest.NewRequest(secret, payload(), now)
	copied := webhooktest.Duplicate(second)
	assert.NotEqual(t, first.Header.Get(webhook.HeaderSignature), second.Header.Get(webhook.HeaderSignature))
	assert.Equal(t, second.Header, copied.Header)
	for _, r := range []*http.Request{first, second, copied} {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, r)
		assert.Equal(t, http.StatusOK, rec.Code)
	}
	assert.Equal(t, int32(2), calls.Load(), "two deliveries handled, the copy acknowledged")
}

// TestServer_HandlerCanFlushAsAnyHandler: a ServerOptions.Handler flushes
// its answer as handlers do, through the http.Flusher the ResponseWriter
// net/http gives it is (a receiver's handler that streams, or answers
// before its heavy work, as the spec asks). The Server's writer was none:
// it flushed only through http.NewResponseController, and a handler that
// asserts http.Flusher, as most do, could not flush (or, asserting
// without ok, panicked and answered nothing).
func TestServer_HandlerCanFlushAsAnyHandler(t *testing.T) {
	srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, ok := w.(http.Flusher)
		if !ok {
			http.Error(w, "the ResponseWriter is not an http.Flusher", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		f.Flush()
	})})
	defer srv.Close()
	res, err := srv.Sender(&webhook.SenderOptions{Retry: &webhook.RetryPolicy{}}).Send(context.Background(), srv.Connection(), payload())
	require.NoError(t, err, "%s", res.Attempts[0].ResponseText())
	assert.Equal(t, http.StatusAccepted, srv.Deliveries()[0].Status)
}

// TestServer_ACopyPastTheHandlerLeaseIsHandledAsTheLibraryDoes: a copy of a
// delivery whose handler is still running is asked to come back (409) only
// for VerifierOptions.HandlerLease; past it, the library's receivers hand
// the copy to their handler. The Server, given the same VerifierOptions,
// must answer the copy as they do (review).
func TestServer_ACopyPastTheHandlerLeaseIsHandledAsTheLibraryDoes(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	vopts := webhook.VerifierOptions{Now: clock, HandlerLease: time.Second}
	body := []byte(`{"event":"user.identified"}`)

	answerToCopy := func(url string, client *http.Client, arrived, release chan struct{}) int {
		t.Helper()
		h := webhooktest.SignedHeader(secret, webhook.EventUserIdentified, body, clock())
		send := func() int { return postSigned(t, client, url+"/webhooks", h, body) }
		first := make(chan int)
		go func() { first <- send() }()
		<-arrived // the first is in its handler, which never ends on its own
		advance(2 * time.Second)
		code := send()
		close(release)
		assert.Equal(t, http.StatusOK, <-first)
		return code
	}

	// The library's receiver.
	arrived, release := make(chan struct{}), make(chan struct{})
	v, err := webhook.NewVerifier([]string{secret}, &vopts)
	require.NoError(t, err)
	lib := httptest.NewServer(v.Middleware(holdFirst(arrived, release, http.StatusOK, http.StatusOK)))
	defer lib.Close()
	want := answerToCopy(lib.URL, lib.Client(), arrived, release)
	require.Equal(t, http.StatusOK, want, "the library hands a copy past the lease to its handler")

	// The Server.
	arrived, release = make(chan struct{}), make(chan struct{})
	srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Verifier: &vopts,
		Handler: holdFirst(arrived, release, http.StatusOK, http.StatusOK)})
	defer srv.Close()
	assert.Equal(t, want, answerToCopy(srv.URL, srv.Client(), arrived, release),
		"the Server answers a copy past HandlerLease as the library's receivers do")
}

// TestServer_ACopyOfAHijackedDeliveryIsAnsweredAsTheLibraryDoes: a handler
// that takes the connection (Hijack) and answers 200 on it: the library's
// receivers record the delivery as handled and acknowledge its copy
// without their handler; the Server must answer the copy as they do
// (review).
func TestServer_ACopyOfAHijackedDeliveryIsAnsweredAsTheLibraryDoes(t *testing.T) {
	body := []byte(`{"event":"user.identified"}`)
	handler := func(calls *atomic.Int32) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) > 1 {
				return
			}
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("Hijack: %v", err)
				return
			}
			defer conn.Close()
			buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			buf.Flush()
		})
	}
	// The client reads the hijacked 200 before the handler returns and its
	// delivery is settled: a copy sent meanwhile is asked to retry (409,
	// ErrInProgress), as a sender would, until it is settled.
	sendTwice := func(url string, client *http.Client) {
		t.Helper()
		h := webhooktest.SignedHeader(secret, webhook.EventUserIdentified, body, time.Now())
		assert.Equal(t, http.StatusOK, postSigned(t, client, url+"/webhooks", h, body))
		status := http.StatusConflict
		for try := 0; status == http.StatusConflict && try < 10000; try++ {
			status = postSigned(t, client, url+"/webhooks", h, body)
		}
		assert.Equal(t, http.StatusOK, status, "the copy, once the delivery is settled")
	}

	var libCalls atomic.Int32
	v, err := webhook.NewVerifier([]string{secret}, nil)
	require.NoError(t, err)
	lib := httptest.NewServer(v.Middleware(handler(&libCalls)))
	defer lib.Close()
	sendTwice(lib.URL, lib.Client())

	var srvCalls atomic.Int32
	srv := webhooktest.NewServer(secret, &webhooktest.ServerOptions{Handler: handler(&srvCalls)})
	defer srv.Close()
	sendTwice(srv.URL, srv.Client())
	assert.Equal(t, libCalls.Load(), srvCalls.Load(), "the handler's calls: the Server hands a copy on as the library's receivers do")
}

// postSigned posts body to url with the signed header h, reads the answer
// and returns its status.
func postSigned(t *testing.T, client *http.Client, url string, h http.Header, body []byte) int {
	t.Helper()
	r, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	require.NoError(t, err)
	r.Header = h.Clone()
	resp, err := client.Do(r)
	require.NoError(t, err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}
