// Receiver is a minimal customer endpoint: it verifies each delivery's
// signature and timestamp and logs the identified user. Refused requests get
// 401 and are logged with the reason.
//
//	WEBHOOK_SECRET=whsec_... go run ./examples/receiver -addr :8443 -cert cert.pem -key key.pem
//
// Without -cert and -key it serves plain HTTP, for use behind a proxy that
// terminates TLS: the service delivers to HTTPS URLs only.
package main

import (
	"context"
	"flag"
	"log"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/signedhook/webhook"
)

func main() {
	addr := flag.String("addr", ":8443", "address to listen on")
	cert := flag.String("cert", "", "TLS certificate file (PEM)")
	key := flag.String("key", "", "TLS key file (PEM)")
	flag.Parse()

	// WEBHOOK_SECRET holds the connection's secret; during a rotation, the old
	// and the new one separated by a comma.
	secrets := splitSecrets(os.Getenv("WEBHOOK_SECRET"))
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	v, err := webhook.NewVerifier(secrets, &webhook.VerifierOptions{Logger: logger})
	if err != nil {
		log.Fatalf("WEBHOOK_SECRET: %v", err)
	}

	mux := http.NewServeMux()
	mux.Handle("POST /webhooks", webhook.NewHandler(v, func(ctx context.Context, p webhook.Payload) error {
		logger.InfoContext(ctx, "user identified", "id", p.User.ID, "email", p.User.Email, "plan", p.User.Metadata.Plan())
		return nil // an error answers 500, and the service retries
	}, &webhook.HandlerOptions{Logger: logger}))

	// Bound what a client may hold: the headers, the whole request, the
	// answer and idle keep-alive connections.
	srv := &http.Server{
		Addr:              *addr,
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	logger.Info("listening", "addr", *addr, "tls", *cert != "")
	if *cert != "" {
		err = srv.ListenAndServeTLS(*cert, *key)
	} else {
		err = srv.ListenAndServe()
	}
	log.Fatal(err)
}

// splitSecrets splits "old, new" into its secrets, without spaces or empty
// entries.
func splitSecrets(s string) []string {
	var out []string
	for _, secret := range strings.Split(s, ",") {
		if secret = strings.TrimSpace(secret); secret != "" {
			out = append(out, secret)
		}
	}
	return out
}
