// Package webhooktest provides what tests of webhook senders and receivers
// need, in the spirit of net/http/httptest: a recording HTTPS receiver on
// 127.0.0.1 that verifies every delivery and answers as scripted, a Sender
// that trusts it, and signed requests for receivers' tests.
//
// A sender's test in a few lines:
//
//	srv := webhooktest.NewServer(secret, nil)
//	defer srv.Close()
//	srv.Script(webhooktest.Status(503), webhooktest.Reset())
//	res, err := srv.Sender(nil).Send(ctx, srv.Connection(), payload)
//	// res.Attempts: 503, reset, 200; srv.Deliveries(): three verified arrivals
//
// Every Server of a process presents a certificate of its own, for
// 127.0.0.1, ::1 and localhost, signed by one test CA made once per
// process. So the [Server.Client] and [Server.Sender] of any Server reach
// them all, for a fan-out test with one Sender, and [RootCAs] gives the
// CA to a client of your own. As with httptest, [NewUnstartedServer] and
// [Server.StartTLS] let you set the Server's Config, or EnableHTTP2, first.
//
// A receiver's test:
//
//	rec := httptest.NewRecorder()
//	handler.ServeHTTP(rec, webhooktest.NewRequest(secret, payload, time.Now().Add(-10*time.Minute)))
//	// rec.Code: 401, the delivery is expired
//
// The package uses only the standard library and this module.
package webhooktest

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/signedhook/webhook"
)

// Delivery is one request the [Server] received, as it arrived.
type Delivery struct {
	Method string      // POST, PUT or PATCH for a real delivery
	Path   string      // the request's path, such as "/webhooks"
	Header http.Header // every header as received
	Body   []byte      // the raw body
	At     time.Time   // when it arrived
	Err    error       // nil when it verified; otherwise why not (matches webhook.ErrVerification)
	Status int         // the status the Server answered; 0 for a reset, a hang, a Handler's hijack, or while it answers
}

// Payload decodes the delivery's body; see [webhook.ParsePayload].
func (d Delivery) Payload() (webhook.Payload, error) { return webhook.ParsePayload(d.Body) }

// ServerOptions configures a [Server]. A nil *ServerOptions selects the
// defaults.
type ServerOptions struct {
	// Verifier configures the verification of each delivery, such as its
	// Tolerance or Now. Its ErrorHandler is not used: the Server records
	// the error and answers 401 (413 for a body over the limit) itself.
	// Nor are AllowReplays and ReplayStore: the Server answers a copy
	// itself (see Server).
	Verifier *webhook.VerifierOptions

	// Handler, if not nil, answers the verified deliveries that no
	// scripted answer is left for, instead of 200 with {"ok":true}. It
	// reads the identical raw body from r.Body, and its ResponseWriter is
	// an http.Flusher and an http.Hijacker, and unwraps for
	// http.NewResponseController (Flush, deadlines, Hijack).
	// The delivery records the first status it writes other than a 1xx,
	// or 200; none (0) if it takes the connection (Hijack), whatever it
	// writes there, or panics before flushing its status (Flush; a status
	// net/http sent on its own, as a long body overflowed its buffer, is
	// not seen, and a panic after it records 0).
	Handler http.Handler
}

// Server is an HTTPS receiver on 127.0.0.1 for tests. It verifies every
// delivery against its secret with the library's [webhook.Verifier], records
// it (see [Server.Deliveries]), and answers with the next scripted [Answer],
// or, when none is left, 401 to what fails verification and 200 to the rest.
// A copy of a delivery (the same signature again, as a proxy resends it) is
// answered as the library's receivers answer it: 200 once the first was
// answered 2xx (or its Handler took the connection), with no scripted
// answer or Handler; 409 with Retry-After
// while the first is answered, for VerifierOptions.HandlerLease at most;
// and as any delivery once the first failed.
// Its certificate is signed by the process's test CA (see [RootCAs]).
// Its methods but StartTLS are safe for concurrent use; set its fields
// before StartTLS.
type Server struct {
	// URL is the base URL, of the form https://127.0.0.1:port, with no
	// trailing slash; empty until StartTLS.
	URL string

	// EnableHTTP2 makes the Server offer HTTP/2 (ALPN "h2") instead of
	// HTTP/1.1 only; the library's transport takes it. Set it between
	// NewUnstartedServer and StartTLS. Under HTTP/2, where one connection
	// carries several deliveries, the scripted [Reset] resets the
	// delivery's stream instead of the connection.
	EnableHTTP2 bool

	// Config is the http.Server that serves: set its fields (timeouts,
	// MaxHeaderBytes, ConnState, ErrorLog, ...) or replace it between
	// NewUnstartedServer and StartTLS. Its Handler is the Server's own,
	// which verifies, records and answers: leave it, or nil for StartTLS
	// to set it; a handler of yours goes in ServerOptions.Handler. Its
	// ErrorLog, if nil, is set to discard what the server logs: scripted
	// resets and hangs make it log on purpose.
	Config *http.Server

	secret  string
	srv     *httptest.Server
	own     http.Handler // the handler that verifies, records and answers
	v       *webhook.Verifier
	copies  *webhook.MemoryReplayStore // the deliveries answered 2xx, and being answered, by signature
	window  time.Duration              // how long a copy may come: the tolerance, either way
	lease   time.Duration              // how long a copy of a delivery being answered is asked to come back: HandlerLease, as the library's receivers
	handler http.Handler
	client  *http.Client
	closed  chan struct{} // closed by Close, which releases the hanging answers
	close   sync.Once

	mu         sync.Mutex
	script     []Answer
	deliveries []*Delivery // the handler holds its own by pointer: Clear may drop it meanwhile
}

// NewServer starts and returns a Server that verifies deliveries with
// secret: [NewUnstartedServer] then [Server.StartTLS]. Close it when done.
// It panics if opts is invalid or no port is free, as httptest.NewServer
// does.
func NewServer(secret string, opts *ServerOptions) *Server {
	s := NewUnstartedServer(secret, opts)
	s.StartTLS()
	return s
}

// NewUnstartedServer returns a Server that verifies deliveries with secret,
// listening on a port of 127.0.0.1 but not serving yet, as
// httptest.NewUnstartedServer does: set its Config or EnableHTTP2, then call
// [Server.StartTLS]. There is no plain-HTTP Start, since deliveries are
// HTTPS only. Close it when done, started or not. It panics if opts is
// invalid or no port is free.
func NewUnstartedServer(secret string, opts *ServerOptions) *Server {
	if opts == nil {
		opts = &ServerOptions{}
	}
	var vopts webhook.VerifierOptions
	if opts.Verifier != nil {
		vopts = *opts.Verifier
	}
	vopts.ErrorHandler = nil
	// A copy is answered by the Server's own memory, by what the first was
	// answered (serve), as the library's receivers answer it.
	vopts.AllowReplays, vopts.ReplayStore = true, nil
	v, err := webhook.NewVerifier([]string{secret}, &vopts)
	if err != nil {
		panic("webhooktest: " + err.Error())
	}
	copies, err := webhook.NewMemoryReplayStore(&webhook.MemoryReplayStoreOptions{Now: vopts.Now})
	if err != nil {
		panic("webhooktest: " + err.Error())
	}
	tolerance := cmp.Or(vopts.Tolerance, webhook.DefaultTolerance)
	window := time.Duration(math.MaxInt64) // a copy comes within the tolerance either way: twice it, saturated
	if tolerance < math.MaxInt64/2 {
		window = 2 * tolerance
	}
	s := &Server{secret: secret, v: v, copies: copies, window: window,
		lease:   min(cmp.Or(vopts.HandlerLease, webhook.DefaultHandlerLease), window),
		handler: opts.Handler, closed: make(chan struct{})}
	s.own = &recording{s}
	s.srv = httptest.NewUnstartedServer(s.own)
	s.Config = s.srv.Config
	s.Config.ErrorLog = discardLog
	tr, err := webhook.NewTransport(&webhook.TransportOptions{
		TLSClientConfig:      &tls.Config{RootCAs: RootCAs()},
		AllowPrivateNetworks: true, // the Server listens on loopback
	})
	if err != nil {
		panic("webhooktest: " + err.Error())
	}
	s.client = &http.Client{Transport: tr}
	return s
}

var discardLog = log.New(io.Discard, "", 0)

// recording is the Server's own handler.
type recording struct{ s *Server }

func (h *recording) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.s.serve(w, r) }

// StartTLS starts serving HTTPS with a certificate of the Server's own,
// signed by the test CA of [RootCAs], offering HTTP/2 if EnableHTTP2 is
// set, with Config. Call it once, after NewUnstartedServer and before
// using the Server, not concurrently with its other methods. It panics if
// the Server is started or closed already, or if Config.Handler is not
// the Server's own.
func (s *Server) StartTLS() {
	if s.URL != "" {
		panic("webhooktest: the Server is started already")
	}
	select {
	case <-s.closed:
		panic("webhooktest: StartTLS after Close")
	default:
	}
	if s.Config == nil {
		s.Config = &http.Server{}
	}
	switch s.Config.Handler {
	case nil:
		s.Config.Handler = s.own
	case s.own:
	default:
		panic("webhooktest: Config.Handler is the Server's own; set ServerOptions.Handler instead")
	}
	if s.Config.ErrorLog == nil {
		s.Config.ErrorLog = discardLog
	}
	s.srv.Config = s.Config
	s.srv.EnableHTTP2 = s.EnableHTTP2
	s.srv.TLS = &tls.Config{Certificates: []tls.Certificate{testCA().issue()}}
	s.srv.StartTLS()
	s.URL = s.srv.URL
}

// Close releases the answers that hang, shuts the Server down, started or
// not, and closes the idle connections of its Client. It blocks until
// every request has ended. It may be called more than once, from several
// goroutines: each call returns once the Server is shut down.
func (s *Server) Close() {
	s.close.Do(func() {
		close(s.closed)
		s.srv.Close()
		s.client.CloseIdleConnections()
	})
}

// String returns "webhooktest.Server(<URL>)": fmt and slog print a Server
// by it, never its fields (the secret among them), and read no field but
// URL, which is set before the Server serves.
func (s *Server) String() string { return "webhooktest.Server(" + s.URL + ")" }

// GoString is String, for %#v.
func (s *Server) GoString() string { return s.String() }

// LogValue is String, for slog.
func (s *Server) LogValue() slog.Value { return slog.StringValue(s.String()) }

// Connection returns a valid connection to the Server's path "/webhooks"
// with its secret, named "webhooktest". Its URL is valid once the Server
// is started.
func (s *Server) Connection() webhook.Connection {
	return webhook.Connection{Name: "webhooktest", URL: s.URL + "/webhooks", Secret: s.secret}
}

// Client returns the Server's client: on the library's own transport
// ([webhook.NewTransport], with its pool sizing), with private networks
// allowed since the Server is on loopback, trusting the test CA of
// [RootCAs]. So it reaches every Server of the process, not only this one.
// Close closes its idle connections.
func (s *Server) Client() *http.Client { return s.client }

// Certificate returns the certificate of the process's test CA, which
// signed the Server's own: add it to the root CAs of a client of your own,
// or write it to a PEM file for another program, and that client trusts
// every Server of the process. [RootCAs] returns a pool that holds it.
// The certificate is shared: do not modify it.
func (s *Server) Certificate() *x509.Certificate { return testCA().cert }

// Sender returns a Sender configured by opts (nil for the defaults) whose
// Client is the Server's [Server.Client]: it delivers to every Server of
// the process. It panics if opts is invalid.
func (s *Server) Sender(opts *webhook.SenderOptions) *webhook.Sender {
	var o webhook.SenderOptions
	if opts != nil {
		o = *opts
	}
	o.Client = s.client
	sender, err := webhook.NewSender(&o)
	if err != nil {
		panic("webhooktest: " + err.Error())
	}
	return sender
}

// Script sets the answers to the next deliveries, one each, in order,
// replacing those not used yet. Once they are used the Server answers as
// usual again. A scripted answer is given whether or not the delivery
// verified.
func (s *Server) Script(answers ...Answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append([]Answer(nil), answers...)
}

// Deliveries returns every delivery received so far, in order of arrival,
// since the last [Server.Clear]. Each Header and Body is the one recorded:
// read it, do not modify it.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Delivery, len(s.deliveries))
	for i, d := range s.deliveries {
		out[i] = *d
	}
	return out
}

// Clear forgets the deliveries received and the answers scripted. A
// delivery being answered meanwhile still gets its answer, but is not
// recorded. It does not forget which deliveries were answered 2xx: a copy
// of one is acknowledged still, as a receiver would. (The scripted answer that resets the connection is [Reset].)
func (s *Server) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deliveries, s.script = nil, nil
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, err := s.v.VerifyRequest(r)
	d := &Delivery{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, At: time.Now(), Err: err}
	handled := false // answered 2xx, or the Handler took the connection, the Handler (if any) returning
	if err == nil {
		// A copy (the same signature again) of a delivery answered 2xx is
		// acknowledged, one of a delivery being answered asked to come
		// back; otherwise it is answered, and remembered if 2xx.
		key := strings.ToLower(r.Header.Get(webhook.HeaderSignature))
		switch state, _ := s.copies.Claim(r.Context(), key, s.lease); state {
		case webhook.ReplayHandled:
			s.record(d, writeStatus(w, http.StatusOK))
			return
		case webhook.ReplayHandling:
			w.Header().Set("Retry-After", "5")
			s.record(d, writeStatus(w, http.StatusConflict))
			return
		}
		defer func() {
			if handled {
				s.copies.Complete(context.WithoutCancel(r.Context()), key, s.window)
			} else {
				s.copies.Release(context.WithoutCancel(r.Context()), key)
			}
		}()
	}

	s.mu.Lock()
	var answer Answer
	scripted := len(s.script) > 0
	if scripted {
		answer, s.script = s.script[0], s.script[1:]
	}
	s.deliveries = append(s.deliveries, d)
	s.mu.Unlock()

	rw := &statusRecorder{ResponseWriter: w}
	status, answered := 0, false
	defer func() {
		if !answered { // a Handler panicked: the sender got what it flushed before, if anything
			status = rw.flushedStatus()
		}
		s.mu.Lock()
		d.Status = status // in the records, or dropped by Clear meanwhile
		s.mu.Unlock()
	}()
	status = s.answer(rw, r, err, answer, scripted)
	answered = true
	// A Handler that took the connection handled the delivery, as the
	// library's receivers take it; a scripted Reset did not.
	handled = status/100 == 2 || !scripted && rw.hijacked
}

// record keeps d, a copy the Server answered status itself.
func (s *Server) record(d *Delivery, status int) {
	d.Status = status
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deliveries = append(s.deliveries, d)
}

// answer writes the response through w and returns its status, or 0 when
// none was written.
func (s *Server) answer(w *statusRecorder, r *http.Request, verr error, a Answer, scripted bool) int {
	if !scripted {
		switch {
		case errors.Is(verr, webhook.ErrBodyTooLarge):
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
			return http.StatusRequestEntityTooLarge
		case verr != nil:
			http.Error(w, "invalid webhook signature", http.StatusUnauthorized)
			return http.StatusUnauthorized
		case s.handler != nil:
			s.handler.ServeHTTP(w, r)
			if w.hijacked {
				return 0 // what it wrote on the connection is its own
			}
			return cmp.Or(w.status, http.StatusOK) // net/http answers 200 to a handler that wrote nothing
		}
		return writeStatus(w, http.StatusOK)
	}
	if a.delay > 0 {
		t := time.NewTimer(a.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return 0
		case <-s.closed:
			return 0
		}
	}
	switch a.kind {
	case answerHang:
		select {
		case <-r.Context().Done():
		case <-s.closed:
		}
		return 0
	case answerReset:
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			// HTTP/2 has no connection of its own to hijack: reset the
			// delivery's stream (net/http answers RST_STREAM to this panic).
			panic(http.ErrAbortHandler)
		}
		if tc, ok := conn.(*tls.Conn); ok {
			conn = tc.NetConn() // closed under TLS: no close_notify first
		}
		if tcp, ok := conn.(*net.TCPConn); ok {
			tcp.SetLinger(0) // close with a TCP RST
		}
		conn.Close()
		return 0
	}
	for name, value := range a.header {
		w.Header().Set(name, value)
	}
	return writeStatus(w, a.status)
}

// writeStatus answers status with a small JSON body: {"ok":true} for a 2xx,
// {"status":N} otherwise.
func writeStatus(w http.ResponseWriter, status int) int {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if status/100 == 2 {
		io.WriteString(w, `{"ok":true}`)
	} else {
		fmt.Fprintf(w, `{"status":%d}`, status)
	}
	return status
}

// Answer is a scripted answer of a [Server] to one delivery. Build one with
// [Status], [RetryAfter], [Redirect], [Slow], [Hang] or [Reset].
type Answer struct {
	kind   answerKind
	status int
	header map[string]string
	delay  time.Duration
}

type answerKind int

const (
	answerStatus answerKind = iota
	answerHang
	answerReset
)

// Status answers with the status code and a small JSON body.
func Status(code int) Answer { return Answer{status: code} }

// RetryAfter answers with the status code (such as 429 or 503) and a
// Retry-After header asking to wait after, in whole seconds (rounded up).
func RetryAfter(code int, after time.Duration) Answer {
	secs := int64((after + time.Second - 1) / time.Second)
	return Answer{status: code, header: map[string]string{"Retry-After": strconv.FormatInt(secs, 10)}}
}

// Redirect answers 307 Temporary Redirect to location. A Sender never
// follows it: the attempt fails with kind webhook.KindRedirect.
func Redirect(location string) Answer {
	return Answer{status: http.StatusTemporaryRedirect, header: map[string]string{"Location": location}}
}

// Slow answers with the status code after a delay, or not at all if the
// sender gives up first.
func Slow(delay time.Duration, code int) Answer { return Answer{status: code, delay: delay} }

// Hang never answers: the request is held until the sender gives up (its
// attempt timeout) or the Server is closed.
func Hang() Answer { return Answer{kind: answerHang} }

// Reset closes the connection with a TCP RST instead of answering. Under
// HTTP/2 (see [Server.EnableHTTP2]) it resets the delivery's stream
// instead, leaving the connection to the other deliveries it carries.
func Reset() Answer { return Answer{kind: answerReset} }
