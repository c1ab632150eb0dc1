package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/riverhook/console"
)

// serveConsole serves riverhook/console on addr, under /console/, until
// stop is called. Its scope is a demo's: every connection of the
// connections file, to whoever reaches addr, without authentication. A
// service mounts it behind its own sign-in and returns the signed-in
// customer's connections from Options.Connections.
func serveConsole(addr string, client *river.Client[pgx.Tx], pool *pgxpool.Pool, schema string, worker *riverhook.Worker, conns map[string]webhook.Connection,
	logger *slog.Logger, out io.Writer) (stop func(), err error) {
	ids := slices.Sorted(maps.Keys(conns))
	h, err := console.New(client, pool, worker, &console.Options{
		Connections: func(*http.Request) ([]string, error) { return ids, nil }, // the demo's scope: every connection
		Actor:       func(*http.Request) string { return "the durable example's console" },
		Marks:       riverhook.NewEndpointMarks(pool, schema), // what every worker found, not this process alone
		Limits:      console.NewSharedLimits(pool, schema),    // Send Test, Recover and Resend limited across replicas
		Logger:      logger,
	})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/console/", http.StripPrefix("/console", h))
	mux.Handle("GET /{$}", http.RedirectHandler("/console/", http.StatusFound))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln) //nolint:errcheck // http.ErrServerClosed at stop
	}()
	fmt.Fprintf(out, "console on http://%s/console/ (every connection, no sign-in: a demo's scope)\n", ln.Addr())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx) //nolint:errcheck // stopping anyway
		<-done
	}, nil
}
