// Command webhook helps a customer build and debug a receiver of the
// service's signed webhooks, on their own machine:
//
//	webhook trigger URL   send one delivery signed as the service signs it
//	webhook listen        a local verifying receiver; -forward URL passes deliveries on;
//	                      -tls serves HTTPS from a CA it makes, and prints it for the sender
//	webhook verify        say whether a captured request verifies, and why not
//	webhook sign          print the three headers for a body, and a curl command
//
// Secrets come from an environment variable (-secret-env, WEBHOOK_SECRET by
// default) or a file (-secret-file), never from the command line, and are
// never printed; nor is a value of those flags that reads as a secret
// pasted in place of the variable's name or the file's path. It exits 0 on success, 1 when a delivery did not verify or
// was not delivered, and 2 on a usage error. Flags may come before or
// after the arguments. What it prints of a request or an answer is
// printable text, safe for a terminal.
//
// Install it with
//
//	go install github.com/signedhook/webhook/cmd/webhook@latest
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// SIGHUP too: a terminal closed, or an ssh session dropped, ends
	// listen as Ctrl-C does, removing what it made; unless it is ignored
	// (nohup): then the command was asked to outlive its terminal.
	signals := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		signals = append(signals, syscall.SIGHUP)
	}
	ctx, stop := signal.NotifyContext(context.Background(), signals...)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
