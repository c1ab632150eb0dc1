// Receiver is a minimal customer endpoint: it verifies each delivery's
// signature and timestamp and logs the identified user. Refused requests get
// 401 and are logged with the reason.
//
//	WEBHOOK_SECRET=whsec_... go run ./examples/receiver -addr :8443 -cert cert.pem -key key.pem
//	go run ./examples/receiver -secrets /etc/webhook/secrets   # rotate with: kill -HUP <pid>
//
// Secrets come from -secrets, a file with one secret per line (a line that
// starts with "#" is a comment), re-read on SIGHUP so a rotation needs no
// restart; or else from WEBHOOK_SECRET, the old and the new one separated
// by a comma while rotating. Without -cert and -key it serves plain HTTP, for use behind a
// proxy that terminates TLS: the service delivers to HTTPS URLs only.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/signedhook/webhook"
)

func main() {
	addr := flag.String("addr", ":8443", "address to listen on")
	cert := flag.String("cert", "", "TLS certificate file (PEM)")
	key := flag.String("key", "", "TLS key file (PEM)")
	secretsFile := flag.String("secrets", "", "file of secrets, one per line, re-read on SIGHUP (default: $WEBHOOK_SECRET)")
	flag.Parse()

	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	secrets, err := loadSecrets(*secretsFile)
	if err != nil {
		log.Fatal(err)
	}
	v, err := webhook.NewVerifier(secrets, &webhook.VerifierOptions{Logger: logger})
	if err != nil {
		log.Fatalf("secrets: %v", err)
	}
	if *secretsFile != "" {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		go rotateOn(context.Background(), hup, v, *secretsFile, logger)
	}

	// Bound what a client may hold: the headers, the whole request, the
	// answer and idle keep-alive connections.
	srv := &http.Server{
		Addr:              *addr,
		Handler:           newMux(v, logger),
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

// newMux serves /webhooks: each verified user.identified delivery is
// logged. Fields the body lacks are empty, as in the spec's minimal test.
// Any method reaches the handler, which refuses what is not signed: a
// connection's method is POST, PUT or PATCH.
func newMux(v *webhook.Verifier, logger *slog.Logger) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/webhooks", webhook.NewHandler(v, func(ctx context.Context, p webhook.Payload) error {
		if p.IsSendTest() {
			logger.InfoContext(ctx, "Send Test received")
			return nil // acknowledged, not stored
		}
		logger.InfoContext(ctx, "user identified", "id", p.User.ID, "email", p.User.Email, "name", p.User.Name, "plan", p.User.Metadata.Plan())
		return nil // an error answers 500, and the service retries
	}, &webhook.HandlerOptions{Logger: logger}))
	return mux
}

// loadSecrets reads the secrets file, or WEBHOOK_SECRET when path is empty.
func loadSecrets(path string) ([]string, error) {
	if path == "" {
		return splitSecrets(os.Getenv("WEBHOOK_SECRET")), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseSecretsFile(string(b))
}

// rotateOn re-reads the secrets file at each signal and gives the Verifier
// the new secrets, until ctx is done. A file that cannot be read, or holds
// no secret, leaves the secrets as they were.
func rotateOn(ctx context.Context, signals <-chan os.Signal, v *webhook.Verifier, path string, logger *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-signals:
			secrets, err := loadSecrets(path)
			if err == nil {
				err = v.SetSecrets(secrets)
			}
			if err != nil {
				logger.Error("secrets not rotated; the previous ones stay in use", "file", path, "error", err)
				continue
			}
			logger.Info("secrets rotated", "file", path, "count", len(secrets)) // never the secrets
		}
	}
}

// splitSecrets splits s, WEBHOOK_SECRET, at its commas into its secrets,
// without spaces around them or empty entries. A "#" is part of a secret.
func splitSecrets(s string) []string {
	var out []string
	for _, secret := range strings.Split(s, ",") {
		if secret = strings.TrimSpace(secret); secret != "" {
			out = append(out, secret)
		}
	}
	return out
}

// parseSecretsFile returns the secrets of a secrets file: one a line,
// without spaces around it. A line that starts with "#" is a comment. A
// space within a line is refused: a comment after a secret would be taken
// as part of it.
func parseSecretsFile(s string) ([]string, error) {
	var out []string
	for i, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.ContainsFunc(line, unicode.IsSpace):
			return nil, fmt.Errorf("line %d has a space within: a secret has none, and a comment is a line that starts with #", i+1)
		default:
			out = append(out, line)
		}
	}
	return out, nil
}
