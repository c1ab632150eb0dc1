// Quickstart delivers one signed user.identified webhook to an HTTPS
// receiver running in this process, the way the service does: the receiver
// verifies each delivery with the library's middleware and refuses the first
// two (as if it were restarting), so the Sender retries on the default
// schedule (1 s, then 2 s) and the third attempt succeeds. It prints the
// delivery-attempt log and the payload the receiver got.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"time"

	"github.com/signedhook/webhook"
)

func main() {
	if err := run(os.Stdout, nil); err != nil {
		log.Fatal(err)
	}
}

// run does the quickstart, printing to out; a nil policy is the default one.
func run(out io.Writer, policy *webhook.RetryPolicy) error {
	const secret = "whsec_quickstart_secret" // in real use: the connection's "Show Secret"

	rcv, err := newReceiver(secret)
	if err != nil {
		return err
	}
	defer rcv.Close()
	fmt.Fprintf(out, "receiver listening on %s (refuses the first 2 deliveries)\n\n", rcv.URL)

	// The test server's client trusts its self-signed certificate; the default
	// client also refuses loopback addresses, which real deliveries never reach.
	sender, err := webhook.NewSender(&webhook.SenderOptions{Client: rcv.Client(), Retry: policy})
	if err != nil {
		return err
	}
	conn := webhook.Connection{
		Name:    "Quickstart CRM",
		URL:     rcv.URL + "/webhooks",
		Method:  http.MethodPost,
		Headers: map[string]string{"Authorization": "Bearer quickstart-api-key"},
		Secret:  secret,
	}
	now := time.Now()
	payload := webhook.Payload{
		Event:     webhook.EventUserIdentified,
		Timestamp: webhook.NewTime(now),
		User: webhook.User{
			ID:        webhook.UserID("8f3a2b"),
			Email:     "ada@example.com",
			Name:      "Ada Lovelace",
			FirstName: "Ada",
			LastName:  "Lovelace",
			Phone:     "+44 20 7946 0000",
			Metadata:  webhook.Metadata{"plan": "pro", "source": "chrome_extension"},
			CreatedAt: webhook.NewTime(now.Add(-21 * 24 * time.Hour)),
			UpdatedAt: webhook.NewTime(now),
		},
		Application: webhook.Application{ID: webhook.ApplicationID("42c0de"), Name: "Acme Sidebar"},
	}

	res, err := sender.Send(context.Background(), conn, payload)
	res.WriteTable(out) // the delivery-attempt log, as the dashboard shows it
	if err != nil {
		return err
	}

	fmt.Fprintln(out, "\npayload the receiver got, verified:")
	got, err := json.MarshalIndent(rcv.payload(), "", "  ")
	if err != nil {
		return err
	}
	fmt.Fprintln(out, string(got))
	return nil
}

// receiver is an HTTPS endpoint on 127.0.0.1 that verifies deliveries with
// the library's middleware and answers 503 to the first two.
type receiver struct {
	*httptest.Server
	mu   sync.Mutex
	seen int
	got  webhook.Payload
}

func newReceiver(secret string) (*receiver, error) {
	v, err := webhook.NewVerifier([]string{secret}, nil)
	if err != nil {
		return nil, err
	}
	rcv := &receiver{}
	mux := http.NewServeMux()
	mux.Handle("/webhooks", v.Middleware(http.HandlerFunc(rcv.serve)))
	rcv.Server = httptest.NewUnstartedServer(mux)
	rcv.Config.ErrorLog = log.New(io.Discard, "", 0)
	rcv.StartTLS()
	return rcv, nil
}

func (rcv *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body) // the verified raw body, untouched
	if err != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if rcv.seen++; rcv.seen <= 2 {
		http.Error(w, `{"error":"restarting, try again"}`, http.StatusServiceUnavailable)
		return
	}
	p, err := webhook.ParsePayload(body)
	if err != nil {
		http.Error(w, "not a payload", http.StatusBadRequest)
		return
	}
	rcv.got = p
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, `{"received":true}`)
}

func (rcv *receiver) payload() webhook.Payload {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	return rcv.got
}
