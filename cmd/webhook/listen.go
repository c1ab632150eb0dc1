package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/internal/redact"
)

var listenCmd = &command{
	name:  "listen",
	short: "run a local verifying receiver; -forward URL passes deliveries on",
	long: `Listen runs a receiver on this machine (plain HTTP, for use behind your own
tunnel or proxy, or HTTPS with -tls) that verifies every request as the
library's Verifier does, replays refused, and prints each as it arrives:
verified or refused and why, the event, the user, and how old it is. It
answers 200 to what verifies and 401 to the rest.

With -forward URL it passes each verified delivery on to URL, byte for byte
and with its headers, and answers what URL answered, as
"stripe listen --forward-to" does; refused ones are not passed on, and a
copy of a delivery URL did not accept (2xx) is passed on again. A
receiver with a certificate of its own (self-signed, or of a private CA) is
trusted with -cacert FILE.

With -tls it serves HTTPS, as the service sends only to https:// URLs: at
start it makes a CA and a certificate for 127.0.0.1, ::1 and localhost
(and the -addr host), keeps the CA's key in memory only, writes the CA
certificate to -ca-out FILE (or a temporary file, removed at exit) and
prints that file and its SHA-256 fingerprint: what the sender must trust.
-ca-out FILE is made, or replaced when it holds the CA certificate of an
earlier listen -tls; any other file there is not overwritten: listen
refuses to start.
"webhook trigger -allow-private -cacert FILE", or a Sender on
webhook.NewTransport with that CA in TLSClientConfig.RootCAs and
AllowPrivateNetworks, then delivers to it. It runs until interrupted.`,
	flags: func(fs *flag.FlagSet, e *env) func(context.Context, []string) int {
		var secrets secretFlags
		secrets.register(fs, true)
		addr := fs.String("addr", "127.0.0.1:8080", "the `address` to listen on")
		forward := fs.String("forward", "", "pass verified deliveries on to this `URL`")
		cacert := fs.String("cacert", "", "with -forward, also trust the certificates of this PEM `file` (a receiver with a certificate of its own)")
		tolerance := fs.Duration("tolerance", webhook.DefaultTolerance, "how far a timestamp may be from now, either way")
		var tlsOpts listenTLS
		fs.BoolVar(&tlsOpts.on, "tls", false, "serve HTTPS, with a certificate for 127.0.0.1, ::1 and localhost from a CA made at start; prints the CA certificate's file and SHA-256 fingerprint for the sender to trust")
		fs.StringVar(&tlsOpts.caOut, "ca-out", "", "with -tls, write the CA certificate (PEM) to this `file`: made, or replaced if an earlier listen -tls wrote it; any other file is never overwritten (default: a new file in the temporary directory, removed at exit)")
		return func(ctx context.Context, args []string) int {
			if len(args) != 0 {
				return e.fail("listen", usagef("listen takes no arguments, got %d", len(args)))
			}
			if err := listen(ctx, e, &secrets, *addr, *forward, *cacert, *tolerance, tlsOpts); err != nil {
				return e.fail("listen", err)
			}
			return exitOK
		}
	},
}

// forwardTo sets l to pass verified deliveries on to forward (none when
// it is empty), trusting the certificates of the PEM file cacert too.
func (l *listener) forwardTo(forward, cacert string) error {
	if forward == "" {
		if cacert != "" {
			return usagef("-cacert is for the receiver of -forward; give -forward URL")
		}
		return nil
	}
	u, err := url.Parse(forward)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return usagef("-forward must be an absolute http:// or https:// URL")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if cacert != "" {
		pool, err := trustPool(cacert)
		if err != nil {
			return err
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	l.forward = u
	l.client = &http.Client{
		Transport:     tr,
		Timeout:       webhook.DefaultAttemptTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return nil
}

// listenTLS are listen's -tls flags.
type listenTLS struct {
	on    bool
	caOut string
}

func listen(ctx context.Context, e *env, sf *secretFlags, addr, forward, cacert string, tolerance time.Duration, tlsOpts listenTLS) error {
	secrets, err := sf.load(e, true)
	if err != nil {
		return err
	}
	if tolerance <= 0 {
		return usagef("-tolerance must be positive")
	}
	// Replays are refused by the listener, as the library's Middleware
	// refuses them: a copy of a delivery whose forwarding failed is
	// forwarded, not refused.
	v, err := webhook.NewVerifier(secrets, &webhook.VerifierOptions{Tolerance: tolerance, AllowReplays: true})
	if err != nil {
		return usagef("%v", err)
	}
	replays, err := webhook.NewMemoryReplayStore(nil)
	if err != nil {
		return err
	}
	l := &listener{e: e, v: v, replays: replays, tolerance: tolerance}
	if err := l.forwardTo(forward, cacert); err != nil {
		return err
	}
	if l.client != nil {
		defer l.client.CloseIdleConnections()
	}
	if tlsOpts.caOut != "" && !tlsOpts.on {
		return usagef("-ca-out is the file of -tls's CA certificate; give -tls")
	}
	var ca *throwawayCA
	var caPath string
	if tlsOpts.on {
		host, _, _ := net.SplitHostPort(addr)
		if ca, err = newThrowawayCA(host); err != nil {
			return err
		}
		path, remove, err := ca.write(tlsOpts.caOut)
		if err != nil {
			return err
		}
		defer remove()
		caPath = path
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if _, port, perr := net.SplitHostPort(addr); perr != nil || !validPort(port) {
			return usagef("%v", err) // -addr is no host:port
		}
		return err // a port in use, or not this command's to take: no usage error
	}
	srv := &http.Server{Handler: l, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	scheme := "http"
	if ca != nil {
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{ca.leaf}, MinVersion: tls.VersionTLS12}
		scheme = "https"
	}
	fmt.Fprintf(e.stdout, "listening on %s://%s", scheme, ln.Addr())
	if l.forward != nil {
		fmt.Fprintf(e.stdout, ", forwarding verified deliveries to %s", redact.URL(forward))
	}
	fmt.Fprintln(e.stdout)
	done := make(chan error, 1)
	if ca != nil {
		fmt.Fprint(e.stdout, trustText(caPath, ca, localURL(ln.Addr())))
		go func() { done <- srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { done <- srv.Serve(ln) }()
	}
	select {
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
		<-done
		return nil
	case err := <-done:
		return err
	}
}

// localURL is the https:// URL of addr from this machine.
func localURL(addr net.Addr) string {
	host, port, _ := net.SplitHostPort(addr.String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "https://" + net.JoinHostPort(host, port)
}

// trustText says what a sender must trust to deliver to listen -tls at
// url: ca's certificate, in path.
func trustText(path string, ca *throwawayCA, url string) string {
	shown := redact.Printable(path)
	word := shown
	if strings.Trim(shown, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:") != "" {
		word = shellQuote(shown)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the sender must trust the CA certificate in %s\n", shown)
	fmt.Fprintf(&b, "  SHA-256 fingerprint %s\n", ca.Fingerprint())
	fmt.Fprintf(&b, "  made now for %s only; its key is never written\n", redact.Printable(strings.Join(ca.names, ", ")))
	fmt.Fprintf(&b, "  send with: webhook trigger -allow-private -cacert %s %s/webhooks\n", word, url)
	fmt.Fprintf(&b, "  or a webhook.Sender whose Client's Transport is webhook.NewTransport with\n")
	fmt.Fprintf(&b, "  TLSClientConfig.RootCAs holding it and AllowPrivateNetworks: true\n")
	return b.String()
}

// bodyTimeout bounds how long listen waits for a request's body, counted
// from its headers, and how long it writes the answer it forwards: the
// sender's attempt timeout (a variable for tests).
var bodyTimeout = webhook.DefaultAttemptTimeout

// listener verifies, prints and forwards each request.
type listener struct {
	e       *env
	v       *webhook.Verifier
	forward *url.URL
	client  *http.Client
	mu      sync.Mutex // one printed line at a time

	// replays holds the deliveries accepted (answered 2xx) and those being
	// forwarded, by signature: a copy of one accepted is refused, a copy of
	// one being forwarded is asked to come back, and a copy of one whose
	// forwarding failed is forwarded.
	replays   *webhook.MemoryReplayStore
	tolerance time.Duration
}

func (l *listener) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.e.stdout, format, args...)
}

func (l *listener) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	// The body within the sender's attempt timeout, counted from the
	// headers: a client that sends it a byte at a time, or never, holds
	// no connection and handler for longer.
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(arrived.Add(bodyTimeout))
	body, err := l.v.VerifyRequest(r)
	if err == nil {
		// Read to its end; the deadline, kept, would cancel r's context
		// while forwarding. A refused request keeps it: net/http reads
		// what is left of the body, under it, when the handler returns.
		rc.SetReadDeadline(time.Time{})
	}
	// Every answer written within bodyTimeout too: over HTTP/2 a client
	// that gives it no window holds the handler, and its connection, as
	// long as it likes; net/http's server has no write timeout of its own.
	// Forwarding clears it, and pass sets it again to write the answer.
	rc.SetWriteDeadline(time.Now().Add(bodyTimeout))
	// A URL's path may be its credential: any but the root shows as "/…",
	// as the forward URL's does.
	path := "/"
	if r.URL.Path != "/" {
		path = "/…"
	}
	head := fmt.Sprintf("%s  %s %s", arrived.Format("15:04:05.000"), redact.PrintableCut(r.Method, 10), path)
	if err != nil {
		l.printf("%s  refused: %s\n", head, redact.Printable(err.Error()))
		switch {
		case errors.Is(err, webhook.ErrBodyTooLarge):
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
		case errors.Is(err, webhook.ErrVerification):
			http.Error(w, "invalid webhook signature", http.StatusUnauthorized)
		default:
			http.Error(w, "bad request", http.StatusBadRequest)
		}
		return
	}
	what := "(not a payload)"
	if p, err := webhook.ParsePayload(body); err == nil {
		what = fmt.Sprintf("%s  %s <%s>", redact.PrintableCut(p.Event, 40), redact.PrintableCut(p.User.ID, 40), redact.PrintableCut(p.User.Email, 60))
		if p.IsSendTest() {
			what += " (Send Test)"
		}
	}
	ts, _ := strconv.ParseInt(r.Header.Get(webhook.HeaderTimestamp), 10, 64)
	// The signature verified: "sha256=" and 64 hex digits, of either case.
	key := strings.ToLower(strings.TrimPrefix(r.Header.Get(webhook.HeaderSignature), webhook.SignaturePrefix))
	ttl := time.Duration(ts+l.tolerance.Milliseconds()+1-arrived.UnixMilli()) * time.Millisecond
	switch state, _ := l.replays.Claim(r.Context(), key, min(webhook.DefaultHandlerLease, ttl)); state {
	case webhook.ReplayHandled:
		l.printf("%s  refused: %s\n", head, redact.Printable(webhook.ErrReplayed.Error()+": this signature was accepted before, within the window; the sender signs every attempt afresh, so this is a copy"))
		http.Error(w, "invalid webhook signature", http.StatusUnauthorized)
		return
	case webhook.ReplayHandling:
		l.printf("%s  refused for now: a copy of a delivery being forwarded; asked to retry\n", head)
		w.Header().Set("Retry-After", "5")
		http.Error(w, "this delivery is being handled; retry later", http.StatusConflict)
		return
	}
	accepted := false
	defer func() {
		if accepted {
			l.replays.Complete(context.WithoutCancel(r.Context()), key, ttl)
		} else {
			l.replays.Release(context.WithoutCancel(r.Context()), key)
		}
	}()
	line := fmt.Sprintf("%s  verified  %s  age %s", head, what, time.Duration(arrived.UnixMilli()-ts)*time.Millisecond)
	if l.forward == nil {
		l.printf("%s\n", line)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
		accepted = true
		return
	}
	rc.SetWriteDeadline(time.Time{}) // over HTTP/2, a deadline passed resets the stream, and cancels the forwarding
	status, err := l.pass(w, r, body)
	if err != nil {
		rc.SetWriteDeadline(time.Now().Add(bodyTimeout))
		l.printf("%s  -> not forwarded: %s\n", line, redact.Printable(err.Error()))
		http.Error(w, "forwarding failed", http.StatusBadGateway)
		return
	}
	accepted = status >= 200 && status < 300
	l.printf("%s  -> %s answered %d\n", line, redact.URL(l.forward.String()), status)
}

// hopByHop are the headers of one connection, not passed on.
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// pass forwards the verified request with body, byte for byte with its
// headers, and copies the answer to w. It returns the answer's status.
func (l *listener) pass(w http.ResponseWriter, r *http.Request, body []byte) (int, error) {
	out, err := http.NewRequestWithContext(r.Context(), r.Method, l.forward.String(), bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	out.Header = r.Header.Clone()
	for _, h := range hopByHop {
		out.Header.Del(h)
	}
	resp, err := l.client.Do(out)
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		return 0, ue.Err // without the URL: its path may be a credential
	} else if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	for name, vs := range resp.Header {
		w.Header()[name] = vs
	}
	for _, h := range hopByHop {
		w.Header().Del(h)
	}
	// Written within bodyTimeout: a client that does not read the answer
	// holds this handler, and the application's connection, no longer.
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(bodyTimeout))
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
	return resp.StatusCode, nil
}

// validPort reports whether port is a port number, or a service name
// net.Listen looks up.
func validPort(port string) bool {
	n, err := strconv.Atoi(port)
	return err != nil && port != "" || err == nil && n >= 0 && n <= 65535
}
