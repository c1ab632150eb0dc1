// Package webhook sends and verifies the service's signed webhooks: JSON
// deliveries of user.identified events, signed with HMAC-SHA256 over
// "<timestamp>.<body>".
//
// # Receiving
//
// A customer's endpoint checks each delivery with a [Verifier]: the
// signature, the timestamp window ([DefaultTolerance] either way) and the
// body size ([DefaultMaxBodyBytes]). [Verifier.Middleware] wraps any
// http.Handler and answers 401 (413 for a body over the limit) to what fails;
// [NewHandler] also decodes the [Payload] and calls a function for each
// [EventUserIdentified] delivery. [Verify] checks one request against one
// secret with the defaults.
//
//	v, err := webhook.NewVerifier([]string{os.Getenv("WEBHOOK_SECRET")}, nil)
//	...
//	http.Handle("POST /webhooks", webhook.NewHandler(v, func(ctx context.Context, p webhook.Payload) error {
//		return crm.Upsert(ctx, p.User) // an error answers 500 and the service retries
//	}, nil))
//
// # Security
//
// Verification uses the raw body as received, compares signatures in
// constant time with [hmac.Equal], checks the signature before the window
// (so an expired-timestamp error is only ever given for an authentic
// delivery), accepts several secrets at once for rotation, and never puts a
// secret or an expected signature in an error or a log line. The event
// header is not signed: [NewHandler] dispatches on the signed body.
//
// [Sign] and [Verify] keep the keyed hash state of a bounded number of
// recently used secrets in memory, to skip key setup; a [Verifier] keeps its
// own.
package webhook
