package webhooktest_test

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/webhooktest"
)

// A receiver's test: a valid, an expired and a tampered delivery.
func ExampleNewRequest() {
	v, _ := webhook.NewVerifier([]string{"whsec_test"}, nil)
	handler := webhook.NewHandler(v, func(context.Context, webhook.Payload) error { return nil }, nil)
	p := webhook.SamplePayload(time.Now())

	tampered := webhooktest.NewRequest("whsec_test", p, time.Now())
	tampered.Body = http.NoBody // or any other body than the one signed
	for _, r := range []*http.Request{
		webhooktest.NewRequest("whsec_test", p, time.Now()),
		webhooktest.NewRequest("whsec_test", p, time.Now().Add(-10*time.Minute)),
		tampered,
	} {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, r)
		fmt.Println(rec.Code)
	}
	// Output:
	// 200
	// 401
	// 401
}

// A sender's test: the receiver fails twice, the third attempt succeeds.
func ExampleServer_Script() {
	srv := webhooktest.NewServer("whsec_test", nil)
	defer srv.Close()
	srv.Script(webhooktest.Status(503), webhooktest.Reset())

	fast := &webhook.RetryPolicy{MaxRetries: 3, Backoff: webhook.ExponentialBackoff(time.Millisecond, time.Second)}
	res, err := srv.Sender(&webhook.SenderOptions{Retry: fast}).Send(context.Background(), srv.Connection(), webhook.SamplePayload(time.Now()))
	for _, a := range res.Attempts {
		fmt.Println(a.N, a.StatusCode, cmp.Or(string(a.Kind), "delivered"))
	}
	fmt.Println(err, len(srv.Deliveries()), srv.Deliveries()[2].Err)
	// Output:
	// 1 503 status
	// 2 0 reset
	// 3 200 delivered
	// <nil> 3 <nil>
}

func ExampleServer_Deliveries() {
	srv := webhooktest.NewServer("whsec_test", nil)
	defer srv.Close()
	_, _ = srv.Sender(nil).SendTest(context.Background(), srv.Connection())

	d := srv.Deliveries()[0]
	p, _ := d.Payload()
	fmt.Println(d.Method, d.Path, d.Status, d.Err)
	fmt.Println(d.Header.Get(webhook.HeaderEvent), p.User.Email, strings.HasPrefix(d.Header.Get(webhook.HeaderSignature), "sha256="))
	// Output:
	// POST /webhooks 200 <nil>
	// user.identified test.user@example.com true
}

// Fan-out: one Sender reaches every Server of the process, since their
// certificates come from one test CA.
func ExampleServer_Sender() {
	var conns []webhook.Connection
	var srvs []*webhooktest.Server
	for _, name := range []string{"crm", "billing", "audit"} {
		srv := webhooktest.NewServer("whsec_"+name, nil)
		defer srv.Close()
		c := srv.Connection()
		c.Name = name
		conns, srvs = append(conns, c), append(srvs, srv)
	}
	srvs[1].Script(webhooktest.Status(503)) // billing fails once

	fast := &webhook.RetryPolicy{MaxRetries: 1, Backoff: webhook.ExponentialBackoff(time.Millisecond, time.Second)}
	s := srvs[0].Sender(&webhook.SenderOptions{Retry: fast})
	for i, res := range s.SendAll(context.Background(), conns, webhook.SamplePayload(time.Now())) {
		fmt.Println(res.ConnectionName, len(res.Attempts), res.Err, len(srvs[i].Deliveries()))
	}
	// Output:
	// crm 1 <nil> 1
	// billing 2 <nil> 2
	// audit 1 <nil> 1
}

// A client of your own, here net/http's, trusts every Server with RootCAs.
func ExampleRootCAs() {
	a := webhooktest.NewServer("whsec_test", nil)
	defer a.Close()
	b := webhooktest.NewServer("whsec_test", nil)
	defer b.Close()

	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: webhooktest.RootCAs()}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	for _, srv := range []*webhooktest.Server{a, b} {
		body := []byte(`{"event":"user.identified"}`)
		req, _ := http.NewRequest(http.MethodPost, srv.Connection().URL, bytes.NewReader(body))
		req.Header = webhooktest.SignedHeader("whsec_test", "user.identified", body, time.Now())
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			continue
		}
		resp.Body.Close()
		fmt.Println(resp.Status, srv.Deliveries()[0].Err)
	}
	// Output:
	// 200 OK <nil>
	// 200 OK <nil>
}

// An unstarted Server, to set Config or EnableHTTP2 first, as with
// httptest: here deliveries arrive over HTTP/2.
func ExampleNewUnstartedServer() {
	srv := webhooktest.NewUnstartedServer("whsec_test", &webhooktest.ServerOptions{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Println("received over", r.Proto)
		}),
	})
	defer srv.Close()
	srv.EnableHTTP2 = true
	srv.Config.ReadHeaderTimeout = 5 * time.Second
	srv.StartTLS()

	res, err := srv.Sender(nil).SendTest(context.Background(), srv.Connection())
	fmt.Println(res.Attempts[0].StatusCode, err)
	// Output:
	// received over HTTP/2.0
	// 200 <nil>
}

// A proxy's retry of a delivery that was handled: the copy carries the same
// signature, and the receiver acknowledges it without handling it twice.
func ExampleDuplicate() {
	v, _ := webhook.NewVerifier([]string{"whsec_test"}, nil)
	handled := 0
	handler := webhook.NewHandler(v, func(context.Context, webhook.Payload) error { handled++; return nil }, nil)

	r := webhooktest.NewRequest("whsec_test", webhook.SamplePayload(time.Now()), time.Now())
	for _, req := range []*http.Request{r, webhooktest.Duplicate(r)} {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		fmt.Println(rec.Code)
	}
	fmt.Println("handled:", handled)
	// Output:
	// 200
	// 200
	// handled: 1
}
