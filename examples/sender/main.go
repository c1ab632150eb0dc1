// Sender is the dashboard's "Send Test" on the command line: it sends one
// signed test delivery to a webhook endpoint and says what happened. With
// -retry it delivers on the service's schedule instead (up to 3 retries,
// 1 s, 2 s, 4 s), printing each attempt as it happens.
//
//	go run ./examples/sender -url https://crm.example.com/webhooks -secret whsec_...
//	WEBHOOK_SECRET=whsec_... go run ./examples/sender -url https://... -retry
//
// It exits 1 when the delivery failed and 2 when nothing could be sent. Like
// the service, it refuses private and loopback addresses.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/signedhook/webhook"
)

// headerFlags collects -H flags. One without a colon is counted, not
// refused: the flag package would print it, and a header's value may be a
// credential.
type headerFlags struct {
	m         map[string]string
	malformed int
}

func (h *headerFlags) String() string { return "" }

func (h *headerFlags) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	if !ok {
		h.malformed++
		return nil
	}
	h.m[strings.TrimSpace(name)] = strings.TrimSpace(value)
	return nil
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, nil, nil))
}

// run sends as args say and returns the exit code. A nil client means the
// library's guarded default, and a nil policy the service's schedule; tests
// pass a client that trusts their server and a fast policy.
func run(args []string, stdout, stderr io.Writer, client *http.Client, policy *webhook.RetryPolicy) int {
	headers := &headerFlags{m: map[string]string{}}
	conn := webhook.Connection{Name: "command line", Headers: headers.m}
	fs := flag.NewFlagSet("sender", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&conn.URL, "url", "", "the endpoint's https:// URL")
	// The flag's default stays empty so that -h never prints the secret;
	// the environment fills it in after parsing.
	fs.StringVar(&conn.Secret, "secret", "", "the signing secret (default: the WEBHOOK_SECRET environment variable)")
	fs.StringVar(&conn.Method, "method", "POST", "POST, PUT or PATCH")
	fs.Var(headers, "H", "a custom header, `Name: value` (repeatable)")
	retry := fs.Bool("retry", false, "deliver with retries (1 s, 2 s, 4 s) instead of a single Send Test attempt")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if headers.malformed > 0 {
		fmt.Fprintln(stderr, "-H wants a header as Name: value (the one given is not shown: it may be a credential)")
		return 2
	}
	if conn.Secret == "" {
		conn.Secret = os.Getenv("WEBHOOK_SECRET")
	}

	sender, err := webhook.NewSender(&webhook.SenderOptions{
		Client: client,
		Retry:  policy,
		OnAttempt: func(_ context.Context, _ webhook.Connection, a webhook.Attempt) {
			fmt.Fprintln(stdout, a) // as it happens: number, status, kind, wait before the next
		},
	})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	var res *webhook.Result
	if *retry {
		res, err = sender.Send(context.Background(), conn, webhook.SamplePayload(time.Now()))
	} else {
		res, err = sender.SendTest(context.Background(), conn)
	}
	fmt.Fprintln(stdout)
	res.WriteTable(stdout)
	switch {
	case len(res.Attempts) == 0: // invalid connection: nothing was sent
		return 2
	case err != nil:
		return 1
	}
	return 0
}
