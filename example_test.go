package webhook_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"expvar"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/webhooktest"
)

func ExampleSign() {
	// The same digest as: printf %s '1763719200000.{"event":"user.identified"}' \
	//   | openssl dgst -sha256 -hmac whsec_test_secret
	body := []byte(`{"event":"user.identified"}`)
	fmt.Println(webhook.Sign("whsec_test_secret", 1763719200000, body))
	// Output: sha256=4eab61781187b690613cc53448df57693332f0537baf3595a6dddc40774e02b7
}

func ExampleVerify() {
	secret := "whsec_test_secret"
	body := []byte(`{"event":"user.identified","user":{"email":"ada@example.com"}}`)

	// The headers a delivery carries, as the service would set them.
	ts := time.Now().UnixMilli()
	h := http.Header{}
	h.Set(webhook.HeaderEvent, webhook.EventUserIdentified)
	h.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts, 10))
	h.Set(webhook.HeaderSignature, webhook.Sign(secret, ts, body))

	fmt.Println(webhook.Verify(secret, h, body))

	tampered := bytes.Replace(body, []byte("ada@"), []byte("eve@"), 1)
	err := webhook.Verify(secret, h, tampered)
	fmt.Println(errors.Is(err, webhook.ErrSignatureMismatch), errors.Is(err, webhook.ErrVerification))
	// Output:
	// <nil>
	// true true
}

func ExampleVerifier_Middleware() {
	secret := "whsec_test_secret"
	v, err := webhook.NewVerifier([]string{secret}, nil)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/webhooks", v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body) // the verified bytes, unchanged
		fmt.Printf("handler got %s\n", body)
	})))
	srv := httptest.NewTLSServer(mux)
	defer srv.Close()

	post := func(body, signedBody string) {
		ts := time.Now().UnixMilli()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/webhooks", bytes.NewBufferString(body))
		req.Header.Set(webhook.HeaderEvent, webhook.EventUserIdentified)
		req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts, 10))
		req.Header.Set(webhook.HeaderSignature, webhook.Sign(secret, ts, []byte(signedBody)))
		resp, err := srv.Client().Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Status)
	}
	post(`{"event":"user.identified"}`, `{"event":"user.identified"}`)
	post(`{"event":"user.identified","admin":true}`, `{"event":"user.identified"}`) // tampered
	// Output:
	// handler got {"event":"user.identified"}
	// 200 OK
	// 401 Unauthorized
}

func ExampleNewHandler() {
	secret := "whsec_test_secret"
	v, err := webhook.NewVerifier([]string{secret}, nil)
	if err != nil {
		log.Fatal(err)
	}
	h := webhook.NewHandler(v, func(ctx context.Context, p webhook.Payload) error {
		fmt.Printf("identified %s <%s> on plan %q\n", p.User.Name, p.User.Email, p.User.Metadata.Plan())
		return nil // an error here answers 500, and the service retries
	}, nil)
	srv := httptest.NewTLSServer(h)
	defer srv.Close()

	body := []byte(`{"event":"user.identified","timestamp":"2026-11-21T10:00:00.000Z",` +
		`"user":{"id":"usr_1","email":"ada@example.com","name":"Ada Lovelace","metadata":{"plan":"pro"}},` +
		`"application":{"id":"app_1","name":"Acme Sidebar"}}`)
	ts := time.Now().UnixMilli()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(webhook.HeaderEvent, webhook.EventUserIdentified)
	req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(webhook.HeaderSignature, webhook.Sign(secret, ts, body))
	resp, err := srv.Client().Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	ack, _ := io.ReadAll(resp.Body)
	fmt.Printf("%s %s", resp.Status, ack)
	// Output:
	// identified Ada Lovelace <ada@example.com> on plan "pro"
	// 200 OK {"ok":true}
}

// Example shows the whole loop: a receiver that verifies and handles
// deliveries, and a Sender delivering to it.
func Example() {
	secret := "whsec_test_secret"

	// Receiver side: verify, decode, handle.
	v, err := webhook.NewVerifier([]string{secret}, nil)
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewTLSServer(webhook.NewHandler(v, func(ctx context.Context, p webhook.Payload) error {
		fmt.Printf("receiver: %s %s <%s> from %s\n", p.Event, p.User.ID, p.User.Email, p.Application.Name)
		return nil
	}, nil))
	defer srv.Close()

	// Sender side: the test server's client trusts its certificate.
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: srv.Client()})
	if err != nil {
		log.Fatal(err)
	}
	conn := webhook.Connection{Name: "crm", URL: srv.URL + "/webhooks", Secret: secret}
	res, err := s.Send(context.Background(), conn, webhook.Payload{
		Event:       webhook.EventUserIdentified,
		Timestamp:   webhook.NewTime(time.Now()),
		User:        webhook.User{ID: webhook.UserID("8f3a2b"), Email: "ada@example.com", Name: "Ada Lovelace"},
		Application: webhook.Application{ID: webhook.ApplicationID("42c0de"), Name: "Acme Sidebar"},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("sender: %d attempt(s), status %d\n", len(res.Attempts), res.Attempts[0].StatusCode)
	// Output:
	// receiver: user.identified usr_8f3a2b <ada@example.com> from Acme Sidebar
	// sender: 1 attempt(s), status 200
}

func ExampleSender_Send() {
	// A receiver that is down for its first two deliveries.
	var calls atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			http.Error(w, "warming up", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, `{"received":true}`)
	}))
	defer srv.Close()

	s, err := webhook.NewSender(&webhook.SenderOptions{
		Client: srv.Client(),
		// The default waits 1 s, 2 s and 4 s; this example waits 10 ms.
		Retry: &webhook.RetryPolicy{MaxRetries: 3, Backoff: webhook.ExponentialBackoff(10*time.Millisecond, time.Second)},
	})
	if err != nil {
		log.Fatal(err)
	}
	conn := webhook.Connection{Name: "crm", URL: srv.URL, Secret: "whsec_test_secret"}
	res, err := s.Send(context.Background(), conn, webhook.SamplePayload(time.Now()))
	if err != nil {
		log.Fatal(err)
	}
	for _, a := range res.Attempts {
		fmt.Printf("attempt %d: %d %s retry=%v in %v\n", a.N, a.StatusCode, bytes.TrimSpace(a.ResponseBody), a.Retry, a.RetryIn)
	}
	// Output:
	// attempt 1: 503 warming up retry=true in 10ms
	// attempt 2: 503 warming up retry=true in 20ms
	// attempt 3: 200 {"received":true} retry=false in 0s
}

func ExampleSender_SendTest() {
	// An endpoint configured with another secret answers 401.
	v, err := webhook.NewVerifier([]string{"whsec_the_old_secret"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewTLSServer(v.Middleware(http.NotFoundHandler()))
	defer srv.Close()

	s, err := webhook.NewSender(&webhook.SenderOptions{Client: srv.Client()})
	if err != nil {
		log.Fatal(err)
	}
	conn := webhook.Connection{Name: "crm", URL: srv.URL, Secret: "whsec_the_new_secret"}
	res, _ := s.SendTest(context.Background(), conn)
	a := res.Attempts[0]
	fmt.Println(a.Kind, a.StatusCode)
	fmt.Println(a.Diagnosis())
	// Output:
	// status 401
	// failed: the endpoint answered 401; check that it verifies with this connection's secret, over the raw body
}

func ExampleRetryPolicy() {
	// Retry only server errors and timeouts, never a 4xx answer, and honour
	// Retry-After up to a minute; wait 1 s, 2 s, 4 s, 8 s otherwise, with
	// up to 20% jitter.
	policy := &webhook.RetryPolicy{
		MaxRetries: 4,
		Backoff: webhook.WithRetryAfter(
			webhook.WithJitter(webhook.ExponentialBackoff(time.Second, 30*time.Second), 0.2),
			time.Minute),
		ShouldRetry: func(resp *http.Response, err error) bool {
			return resp == nil || resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests
		},
	}
	s, err := webhook.NewSender(&webhook.SenderOptions{Retry: policy})
	if err != nil {
		log.Fatal(err)
	}
	_ = s // s.Send(ctx, conn, payload) now follows the policy

	fmt.Println(webhook.ExponentialBackoff(time.Second, 30*time.Second)(4, nil))
	// Output: 8s
}

func ExampleDeliveryError() {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "database unavailable", http.StatusInternalServerError)
	}))
	defer srv.Close()
	s, err := webhook.NewSender(&webhook.SenderOptions{
		Client: srv.Client(),
		Retry:  &webhook.RetryPolicy{MaxRetries: 2, Backoff: webhook.ExponentialBackoff(time.Millisecond, time.Second)},
	})
	if err != nil {
		log.Fatal(err)
	}
	conn := webhook.Connection{Name: "crm", URL: srv.URL, Secret: "whsec_test_secret"}
	_, err = s.Send(context.Background(), conn, webhook.SamplePayload(time.Now()))

	var de *webhook.DeliveryError
	if errors.As(err, &de) {
		for _, a := range de.Attempts {
			fmt.Printf("attempt %d: %s %d\n", a.N, a.Kind, a.StatusCode)
		}
		fmt.Println(de.Err)
	}
	// Output:
	// attempt 1: status 500
	// attempt 2: status 500
	// attempt 3: status 500
	// webhook: receiver answered 500 Internal Server Error
}

// countingTransport stands in for a tracing RoundTripper such as
// otelhttp.NewTransport(next): it wraps the guarded transport.
type countingTransport struct {
	next http.RoundTripper
	n    atomic.Int32
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.n.Add(1)
	return t.next.RoundTrip(r)
}

func ExampleNewTransport() {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	// A private CA (here, the test server's) on the library's own transport:
	// the guard, the pool sizing and the header bound stay.
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	guarded, err := webhook.NewTransport(&webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: roots}})
	if err != nil {
		log.Fatal(err)
	}
	traced := &countingTransport{next: guarded}

	s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: traced}})
	if err != nil {
		log.Fatal(err)
	}
	conn := webhook.Connection{Name: "internal", URL: srv.URL, Secret: "whsec_test_secret"}
	_, err = s.SendTest(context.Background(), conn)
	fmt.Println(errors.Is(err, webhook.ErrBlockedDestination), traced.n.Load())

	// Only AllowPrivateNetworks reaches the loopback test server.
	open, err := webhook.NewTransport(&webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: roots}, AllowPrivateNetworks: true})
	if err != nil {
		log.Fatal(err)
	}
	s, err = webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: &countingTransport{next: open}}})
	if err != nil {
		log.Fatal(err)
	}
	res, err := s.SendTest(context.Background(), conn)
	fmt.Println(err, res.Attempts[0].StatusCode)
	guarded.CloseIdleConnections()
	open.CloseIdleConnections()
	// Output:
	// true 1
	// <nil> 200
}

func ExampleNewSecret() {
	secret := webhook.NewSecret() // store it with the connection; show it on "Show Secret"
	fmt.Println(strings.HasPrefix(secret, webhook.SecretPrefix), len(secret))
	// Output: true 49
}

func ExampleConnection() {
	conn := webhook.Connection{
		Name:    "CRM",
		URL:     "https://hooks.crm.example.com/services/T0001/B0002/path-token",
		Headers: map[string]string{"Authorization": "Bearer api-key"},
		Secret:  "whsec_test_secret",
	}
	// No verb, slog handler or json.Marshal shows the secret, the URL's
	// path or query (the credential of many webhook URLs) or a header
	// value: the URL's origin and the Name say which endpoint it is.
	fmt.Printf("%v\n%+v\n", conn, []webhook.Connection{conn})
	b, _ := json.Marshal(conn)
	fmt.Println(string(b))
	// Output:
	// webhook connection "CRM" (POST https://hooks.crm.example.com/…)
	// [webhook connection "CRM" (POST https://hooks.crm.example.com/…)]
	// {"name":"CRM","method":"POST","url":"https://hooks.crm.example.com/…","headers":["Authorization"]}
}

func ExampleSender_Attempt() {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: srv.Client()})
	if err != nil {
		log.Fatal(err)
	}
	conn := webhook.Connection{URL: srv.URL, Secret: "whsec_test_secret"}
	body, _ := json.Marshal(webhook.SamplePayload(time.Now()))

	// A job queue runs attempt n under its own deadline and schedules the
	// next one itself, after a.RetryIn.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for n := 1; n <= 4; n++ {
		a := s.Attempt(ctx, conn, webhook.EventUserIdentified, body, n)
		fmt.Printf("attempt %d: %d, retry=%v in %v\n", a.N, a.StatusCode, a.Retry, a.RetryIn)
	}
	// Output:
	// attempt 1: 503, retry=true in 1s
	// attempt 2: 503, retry=true in 2s
	// attempt 3: 503, retry=true in 4s
	// attempt 4: 503, retry=false in 0s
}

// Endpoint health: after three connections refused in a row the endpoint is
// down, and deliveries to it fail at once, sending nothing, until a probe
// (one delivery let through, DefaultProbeInterval later) finds it up.
func ExampleHealthOptions() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	ln.Close() // nothing listens there now: every connection is refused

	changes := make(chan webhook.EndpointHealth, 8)
	s, err := webhook.NewSender(&webhook.SenderOptions{
		AllowPrivateNetworks: true,                   // the example's endpoint is on loopback
		Retry:                &webhook.RetryPolicy{}, // one attempt per delivery, for the example
		Health: &webhook.HealthOptions{
			DownAfter: 3,
			// Off the attempt path: mark it in the service's table (by
			// Connection.Endpoint), tell the customer, disable it after days.
			OnChange: func(ctx context.Context, h webhook.EndpointHealth) { changes <- h },
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	conn := webhook.Connection{Name: "CRM", URL: "https://" + ln.Addr().String() + "/hooks", Secret: "whsec_example"}
	for range 4 {
		res, err := s.Send(context.Background(), conn, webhook.SamplePayload(time.Now()))
		fmt.Printf("attempts: %d, endpoint down: %v\n", len(res.Attempts), errors.Is(err, webhook.ErrEndpointDown))
	}
	fmt.Println(len(s.Health()), s.Health()[0].Down)
	h := <-changes
	fmt.Printf("OnChange: %v down: %v, after %d failed attempts, the last: %s\n",
		h.Endpoint == conn.Endpoint(), h.Down, h.Failures, h.LastFailure.Kind)
	// Output:
	// attempts: 1, endpoint down: false
	// attempts: 1, endpoint down: false
	// attempts: 1, endpoint down: false
	// attempts: 0, endpoint down: true
	// 1 true
	// OnChange: true down: true, after 3 failed attempts, the last: refused
}

// A URL that accepts the request and never answers (an application hung
// behind its load balancer, one tenant's path on a shared host) is isolated
// alone: after DownAfter deliveries timed out, the next ones to it are
// refused at once, while the other paths of the same host go on.
func ExampleHealthOptions_notAnswering() {
	changes := make(chan webhook.EndpointHealth, 8)
	srv := webhooktest.NewServer("whsec_example", &webhooktest.ServerOptions{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/tenant-7") {
			<-r.Context().Done() // hangs until the sender gives up
		}
	})})
	defer srv.Close()
	s := srv.Sender(&webhook.SenderOptions{
		// The spec's is 30 s. Each hang costs this much; it is long enough for
		// a new TLS handshake and an answer even on a slow, loaded machine
		// (2 s failed once beside another module's tests under -race).
		AttemptTimeout: 5 * time.Second,
		Retry:          &webhook.RetryPolicy{}, // one attempt per delivery, for the example
		Health:         &webhook.HealthOptions{DownAfter: 2, OnChange: func(_ context.Context, h webhook.EndpointHealth) { changes <- h }},
	})
	hung, other := srv.Connection(), srv.Connection()
	hung.URL += "/tenant-7"
	other.URL += "/tenant-8"
	for i := range 3 {
		p := webhook.SamplePayload(time.Now())
		p.User.ID = fmt.Sprintf("usr_%d", i) // deliveries of different users
		_, err := s.Send(context.Background(), hung, p)
		fmt.Printf("tenant-7: not answering: %v, refused at once: %v\n", err != nil, errors.Is(err, webhook.ErrEndpointNotAnswering))
	}
	_, err := s.Send(context.Background(), other, webhook.SamplePayload(time.Now()))
	fmt.Println("tenant-8 delivered:", err == nil)
	h := <-changes
	fmt.Printf("OnChange: %s down %v, one URL: %v, tenant-7's: %v\n", h.Endpoint[:len("https://127.0.0.1")], h.Down, h.PerURL, h.URLKey == hung.URLKey())
	// Output:
	// tenant-7: not answering: true, refused at once: false
	// tenant-7: not answering: true, refused at once: false
	// tenant-7: not answering: true, refused at once: true
	// tenant-8 delivered: true
	// OnChange: https://127.0.0.1 down true, one URL: true, tenant-7's: true
}

// A Verifier remembers each delivery it accepted until it leaves the
// window: a copy (from a log, a proxy, a debugging session) is refused,
// while the sender's retry, signed afresh, is accepted.
func ExampleVerifier_Verify_replay() {
	secret := "whsec_test_secret"
	v, err := webhook.NewVerifier([]string{secret}, nil) // ReplayStore: nil is a MemoryReplayStore
	if err != nil {
		log.Fatal(err)
	}
	body := []byte(`{"event":"user.identified"}`)
	sent := time.Now()
	delivery := webhooktest.SignedHeader(secret, webhook.EventUserIdentified, body, sent)
	retry := webhooktest.SignedHeader(secret, webhook.EventUserIdentified, body, sent.Add(time.Second))

	fmt.Println("delivery:", v.Verify(delivery, body))
	err = v.Verify(delivery, body)
	fmt.Println("its copy:", errors.Is(err, webhook.ErrReplayed), errors.Is(err, webhook.ErrVerification))
	fmt.Println("the sender's retry:", v.Verify(retry, body))
	// Output:
	// delivery: <nil>
	// its copy: true true
	// the sender's retry: <nil>
}

// The replay memory is one field to turn off: with AllowReplays, nothing is
// remembered, and a copy verifies as the delivery did. ReplayStore, the
// other field, shares the memory between the instances of a receiver.
func ExampleVerifierOptions_allowReplays() {
	secret := "whsec_test_secret"
	v, err := webhook.NewVerifier([]string{secret}, &webhook.VerifierOptions{AllowReplays: true})
	if err != nil {
		log.Fatal(err)
	}
	body := []byte(`{"event":"user.identified"}`)
	delivery := webhooktest.SignedHeader(secret, webhook.EventUserIdentified, body, time.Now())

	fmt.Println("delivery:", v.Verify(delivery, body))
	fmt.Println("its copy:", v.Verify(delivery, body))
	// Output:
	// delivery: <nil>
	// its copy: <nil>
}

// A receiver of several events, each decoded into its own type. An event
// without a handler is logged and acknowledged, as the spec asks.
func ExampleOn() {
	type DealClosed struct {
		Deal struct {
			ID     string `json:"id"`
			Amount int    `json:"amount"`
		} `json:"deal"`
	}
	var events webhook.Events
	webhook.On(&events, webhook.EventUserIdentified, func(ctx context.Context, p webhook.Payload) error {
		fmt.Println("identified", p.User.Email)
		return nil
	})
	webhook.On(&events, "deal.closed", func(ctx context.Context, d DealClosed) error {
		fmt.Println("deal", d.Deal.ID, "closed at", d.Deal.Amount)
		return nil
	})
	v, _ := webhook.NewVerifier([]string{"whsec_test"}, nil)
	h := webhook.NewEventHandler(v, &events, nil)

	for _, d := range [][2]string{
		{"deal.closed", `{"event":"deal.closed","deal":{"id":"deal_7","amount":1200}}`},
		{"invoice.paid", `{"event":"invoice.paid","invoice":{"id":"inv_1"}}`}, // no handler: 200
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, webhooktest.NewRawRequest("whsec_test", d[0], []byte(d[1]), time.Now()))
		fmt.Println(rec.Code)
	}
	// Output:
	// deal deal_7 closed at 1200
	// 200
	// 200
}

// Idempotency in one line: a user's update is applied only when it is newer
// than the last one applied (user.id, user.updatedAt), whatever order the
// deliveries arrive in.
func ExampleLastWriterWins() {
	onUser := func(ctx context.Context, p webhook.Payload) error {
		fmt.Println("saved", p.User.Email, "as of", p.User.UpdatedAt.Format("15:04"))
		return nil
	}
	v, _ := webhook.NewVerifier([]string{"whsec_test"}, nil)
	h := webhook.NewHandler(v, webhook.LastWriterWins(onUser, nil), nil)

	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	for _, update := range []struct {
		email   string
		updated time.Time
	}{
		{"ada@new.example", at.Add(2 * time.Minute)},
		{"ada@old.example", at.Add(time.Minute)}, // overtaken: acknowledged, not applied
	} {
		p := webhook.SamplePayload(time.Now())
		p.User.ID, p.User.Email, p.User.UpdatedAt = "usr_ada", update.email, webhook.NewTime(update.updated)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, webhooktest.NewRequest("whsec_test", p, time.Now()))
		fmt.Println(rec.Code)
	}
	// Output:
	// saved ada@new.example as of 10:02
	// 200
	// 200
}

// Counting what LastWriterWins did with each update: applied, skipped as
// stale (overtaken by a newer one) or skipped as a duplicate (a copy).
// expvar.Map counts safely from many requests at once, and serves the counts
// on /debug/vars once published with expvar.NewMap.
func ExampleLastWriterWins_outcomes() {
	var outcomes expvar.Map
	onUser := webhook.LastWriterWins(func(ctx context.Context, p webhook.Payload) error {
		return nil // save the user
	}, &webhook.LastWriterWinsOptions[webhook.Payload]{
		OnOutcome: func(_ context.Context, _ webhook.Payload, o webhook.LastWriterOutcome) {
			outcomes.Add(o.String(), 1)
		},
	})

	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	for _, minute := range []time.Duration{2, 1, 2, 3} { // 1 is overtaken; the second 2 is a copy
		p := webhook.SamplePayload(at)
		p.User.ID, p.User.UpdatedAt = "usr_ada", webhook.NewTime(at.Add(minute*time.Minute))
		_ = onUser(context.Background(), p)
	}
	fmt.Println(outcomes.String())
	// Output: {"applied": 2, "duplicate": 1, "stale": 1}
}

// A Send Test of an event of the service's own, to a connection that
// subscribes to it only.
func ExampleSender_SendTestBytes() {
	srv := webhooktest.NewServer("whsec_test", nil)
	defer srv.Close()
	s := srv.Sender(nil)
	c := srv.Connection()
	c.Events = []string{"deal.closed"}

	_, err := s.Send(context.Background(), c, webhook.SamplePayload(time.Now()))
	fmt.Println(errors.Is(err, webhook.ErrNotSubscribed))
	res, _ := s.SendTestBytes(context.Background(), c, "deal.closed", []byte(`{"event":"deal.closed","deal":{"id":"deal_test"}}`))
	fmt.Println(res.Attempts[0].Diagnosis()[:24])
	// Output:
	// true
	// delivered: the endpoint
}
