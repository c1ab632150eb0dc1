package main

import (
	"context"
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
)

// This file holds the fleet's API tier (serve), and the connections'
// resolver every command's Worker shares.

// resolveFrom resolves the connections of the connections file.
func resolveFrom(conns map[string]webhook.Connection) riverhook.Resolver {
	return func(_ context.Context, id string) (webhook.Connection, error) {
		c, ok := conns[id]
		if !ok {
			return webhook.Connection{}, riverhook.ErrConnectionGone
		}
		return c, nil
	}
}

// serve is the API tier of a fleet: it serves the console on consoleAddr
// until ctx is done, and works no delivery. Its River client inserts
// (resends, recovers) and lists; its Worker makes the console's Send Tests,
// taking a place in flight of the same table as the workers', and its
// console reads the endpoint marks the workers write.
func serve(ctx context.Context, pool *pgxpool.Pool, schema string, conns map[string]webhook.Connection, sender *webhook.Sender,
	consoleAddr string, logger *slog.Logger, out io.Writer) error {
	worker, err := riverhook.NewWorker(sender, resolveFrom(conns), &riverhook.WorkerOptions{
		MaxInFlightPerConnection: 8, // as the workers': a Send Test is one of the 8
		Places:                   riverhook.NewConnectionPlaces(pool, schema),
		Logger:                   logger,
	})
	if err != nil {
		return err
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema, Logger: logger}) // insert-only
	if err != nil {
		return err
	}
	stop, err := serveConsole(consoleAddr, client, pool, schema, worker, conns, logger, out)
	if err != nil {
		return err
	}
	defer stop()
	<-ctx.Done()
	return nil
}
