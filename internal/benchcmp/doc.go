// Package benchcmp measures the library beside the limits of its scheme and
// beside the webhook libraries a Go team would otherwise use, in one run, so
// that every ratio is one benchstat away. It is a nested module: the peers
// are its dependencies, never the library's.
//
//	./internal/benchcmp/run.sh          # 6 runs of each, then the benchstat tables
//	COUNT=10 ./internal/benchcmp/run.sh
//	COUNT=1 BENCHTIME=1x ./internal/benchcmp/run.sh   # one iteration of each: does it run
//
// Verification, per body size (256 B, 1 KiB, 16 KiB, 256 KiB), each on its
// own scheme over the same payload:
//
//   - impl=floor: HMAC-SHA256 of "<ts>.<body>" with the keyed state kept
//     per secret (a sync.Pool of keyed hashes, Reset between uses), compared
//     in constant time: what a hand-written verifier costs at best;
//   - impl=hmac-new: the same with hmac.New per message;
//   - impl=sha256: SHA-256 of the body alone, below any HMAC;
//   - impl=webhook: this library's Verifier.Verify;
//   - impl=standardwebhooks, impl=svix: the Standard Webhooks and Svix Go
//     libraries' Verify (HMAC-SHA256 of "<id>.<ts>.<body>", base64);
//   - impl=stripe: stripe-go's webhook.ValidatePayload ("t=…,v1=…");
//   - impl=github: go-github's ValidateSignature (HMAC of the body alone).
//
// Signing, beside the same floor and hmac.New: this library's Sign, and the
// peers' signing functions where they have one.
//
// The receiver end to end (BenchmarkMiddlewareTLS): new signed deliveries
// posted over loopback TLS, in turns, to a handler verifying with the floor
// and to one of: the same handler calling Verify, the middleware without
// replay memory, and the middleware with it.
//
// Deliveries per second through the Sender beside a raw net/http client,
// the Sender's own cost in memory, and the middleware beside a hand-written
// verifying handler are benchmarks of the library's own module
// (BenchmarkDeliver, BenchmarkSendInMemory, BenchmarkMiddleware); run.sh
// runs them too.
package benchcmp
