// Sender is the dashboard's "Send Test" on the command line: it sends one
// signed test delivery to a webhook endpoint and says what happened.
//
//	go run ./examples/sender -url https://crm.example.com/webhooks -secret whsec_...
//
// It exits 1 when the delivery failed. Like the service, it refuses private
// and loopback addresses.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/signedhook/webhook"
)

type headerFlags map[string]string

func (h headerFlags) String() string { return "" }

func (h headerFlags) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	if !ok {
		return fmt.Errorf("want Name: value, got %q", v)
	}
	h[strings.TrimSpace(name)] = strings.TrimSpace(value)
	return nil
}

func main() {
	headers := headerFlags{}
	conn := webhook.Connection{Name: "command line", Headers: headers}
	flag.StringVar(&conn.URL, "url", "", "the endpoint's https:// URL")
	// The flag's default stays empty so that -h never prints the secret;
	// the environment fills it in after parsing.
	flag.StringVar(&conn.Secret, "secret", "", "the signing secret (default: the WEBHOOK_SECRET environment variable)")
	flag.StringVar(&conn.Method, "method", "POST", "POST, PUT or PATCH")
	flag.Var(headers, "H", "a custom header, `Name: value` (repeatable)")
	flag.Parse()
	if conn.Secret == "" {
		conn.Secret = os.Getenv("WEBHOOK_SECRET")
	}

	sender, err := webhook.NewSender(nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	res, err := sender.SendTest(context.Background(), conn)
	if len(res.Attempts) == 0 { // the connection is invalid: nothing was sent
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	a := res.Attempts[0]
	fmt.Printf("%s\n", a.Diagnosis())
	if len(a.ResponseBody) > 0 {
		fmt.Printf("response body: %s\n", a.ResponseBody)
	}
	if err != nil {
		os.Exit(1)
	}
}
