package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/riverhook/console"
)

// The console mounted under /webhooks/log/, behind the service's own
// authentication, scoped to the customer's connections: another customer's
// connection is not found, a cross-origin POST is refused, the endpoint
// shows as its origin, never its path, and a Send Test of an event the
// connection does not subscribe to is refused: it offers the service's
// sample of invoice.paid instead.
func ExampleNew() {
	sender, err := webhook.NewSender(nil)
	if err != nil {
		log.Fatal(err)
	}
	worker, err := riverhook.NewWorker(sender, func(_ context.Context, id string) (webhook.Connection, error) {
		return webhook.Connection{Name: id, URL: "https://hooks.example.com/in/T0kenInThePath", Secret: "whsec_example",
			Events: []string{"invoice.paid"}}, nil
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	// The service's River client; this one has no database, which the
	// requests below never reach.
	client, err := river.NewClient(riverpgxv5.New(nil), &river.Config{})
	if err != nil {
		log.Fatal(err)
	}

	pool, err := pgxpool.New(context.Background(), "postgres://db.example/service") // connects on first use
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	_, err = console.New(client, pool, worker, nil)
	fmt.Println(err)

	h, err := console.New(client, pool, worker, &console.Options{
		Connections: func(r *http.Request) ([]string, error) {
			// In a service: the signed-in customer's connections.
			return []string{"crm"}, nil
		},
		Actor: func(r *http.Request) string { return "ann@customer.example" },
		// The bodies of the Send Test of the service's own events.
		Samples: map[string]json.RawMessage{
			"invoice.paid": json.RawMessage(`{"event":"invoice.paid","invoice":{"id":"in_test_0001","amount_due":4200}}`),
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/webhooks/log/", http.StripPrefix("/webhooks/log", h)) // wrap it in your authentication

	for _, r := range []*http.Request{
		httptest.NewRequest("GET", "/webhooks/log/api/connections/crm/health", nil),
		httptest.NewRequest("GET", "/webhooks/log/api/connections/erp/deliveries", nil),
		crossOrigin(httptest.NewRequest("POST", "/webhooks/log/api/connections/crm/test", nil)),
		httptest.NewRequest("POST", "/webhooks/log/api/connections/crm/test?event=user.identified", nil),
	} {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Println(r.Method, r.URL.RequestURI(), w.Code, strings.Join(strings.Fields(w.Body.String()), " "))
	}
	// Output:
	// console: Options.Connections is required: it says which connections a request may see
	// GET /webhooks/log/api/connections/crm/health 200 { "endpoint": "https://hooks.example.com:443", "state": "unknown" }
	// GET /webhooks/log/api/connections/erp/deliveries 404 { "error": "not found" }
	// POST /webhooks/log/api/connections/crm/test 403 { "error": "a cross-origin request is refused: act from the console's own pages" }
	// POST /webhooks/log/api/connections/crm/test?event=user.identified 400 { "error": "no Send Test of \"user.identified\": connection \"crm\" does not subscribe to this event" }
}

func crossOrigin(r *http.Request) *http.Request {
	r.Header.Set("Sec-Fetch-Site", "cross-site")
	return r
}
