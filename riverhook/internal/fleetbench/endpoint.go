package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/signedhook/webhook"
)

// endpoint is the customer's endpoint every scenario delivers to: HTTPS on
// 127.0.0.1, served by this process, answering after a latency that can
// change, or refusing connections (nothing listens on its port) until it
// answers again on the same port. It counts what arrives: attempts in
// flight and their peak, requests, the distinct deliveries (by the
// payload's user id, "usr_" and the delivery id) and when each first
// arrived, and signatures that do not verify. A delivery counts as
// answered once a request of it got its answer: a request its sender cut
// (a worker process killed during the attempt) does not.
type endpoint struct {
	addr   string // 127.0.0.1:port, kept while it refuses
	cert   tls.Certificate
	caPEM  []byte
	secret string

	handlers sync.WaitGroup // requests being answered

	srvMu  sync.Mutex
	srv    *http.Server  // nil while it refuses
	served chan struct{} // closed once srv's Serve returned

	mu       sync.Mutex
	latency  time.Duration
	inFlight int
	c        counts
	arrived  map[string]time.Time // delivery id -> first arrival
	answered map[string]bool      // delivery id -> a request of it was answered
	starts   []time.Time          // the signed timestamps of the first arrivals: when each attempt began
	all      chan struct{}        // closed once c.Answered reaches want
	want     int
}

// counts is what the endpoint saw since its last reset.
type counts struct {
	Peak      int       // attempts in flight at once
	Requests  int       // requests, copies included
	Distinct  int       // distinct deliveries
	Answered  int       // distinct deliveries answered (a request's handler ended, its sender still there)
	Cut       int       // requests their sender cut before the answer (the connection closed)
	BadSig    int       // requests whose signature did not verify
	First     time.Time // the first request's arrival
	LastDone  time.Time // when the last answer was given
	Unmatched int       // requests whose body named no delivery
}

// newEndpoint returns an endpoint answering at once, with a certificate of
// its own for 127.0.0.1 (its PEM, for the worker processes, in caPEM).
func newEndpoint(secret string) (*endpoint, error) {
	cert, caPEM, err := selfSigned()
	if err != nil {
		return nil, err
	}
	e := &endpoint{cert: cert, caPEM: caPEM, secret: secret, addr: "127.0.0.1:0"}
	e.reset(0, 0)
	if err := e.answer(); err != nil {
		return nil, err
	}
	return e, nil
}

// answer makes the endpoint accept connections, on the port it had.
func (e *endpoint) answer() error {
	e.srvMu.Lock()
	defer e.srvMu.Unlock()
	if e.srv != nil {
		return nil
	}
	ln, err := net.Listen("tcp", e.addr)
	if err != nil {
		return err
	}
	e.addr = ln.Addr().String()
	srv := &http.Server{
		Handler:           e,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{e.cert}},
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.ServeTLS(ln, "", "")
	}()
	e.srv, e.served = srv, served
	return nil
}

// refuse closes the endpoint's port and every connection to it: from now
// on a connection is refused.
func (e *endpoint) refuse() {
	e.srvMu.Lock()
	defer e.srvMu.Unlock()
	if e.srv == nil {
		return
	}
	e.srv.Close()
	<-e.served
	e.srv = nil
}

// close refuses, then waits for the answers under way.
func (e *endpoint) close() {
	e.refuse()
	e.handlers.Wait()
}

// reset forgets what arrived, sets the latency of the answers, and makes
// done's channel close once want distinct deliveries have been answered.
func (e *endpoint) reset(latency time.Duration, want int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.latency = latency
	e.c = counts{Peak: e.inFlight}
	e.arrived = map[string]time.Time{}
	e.answered = map[string]bool{}
	e.starts = nil
	e.want = want
	e.all = make(chan struct{})
	if want == 0 {
		close(e.all)
	}
}

// resetPeak starts counting the peak in flight anew.
func (e *endpoint) resetPeak() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.c.Peak = e.inFlight
}

// done returns a channel closed once the deliveries reset asked for have
// been answered.
func (e *endpoint) done() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.all
}

// counts returns what the endpoint saw since its last reset.
func (e *endpoint) counts() counts {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.c
}

// startTimes returns when the first attempt of each delivery began, as it
// was signed, in order.
func (e *endpoint) startTimes() []time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := slices.Clone(e.starts)
	slices.SortFunc(s, time.Time.Compare)
	return s
}

// arrivals returns when each delivery first arrived.
func (e *endpoint) arrivals() map[string]time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := make(map[string]time.Time, len(e.arrived))
	for id, at := range e.arrived {
		m[id] = at
	}
	return m
}

func (e *endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.handlers.Add(1)
	defer e.handlers.Done()
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	at := time.Now()
	if err != nil {
		http.Error(w, "unreadable body", http.StatusBadRequest)
		return
	}
	id := deliveryOf(body)
	bad := webhook.Verify(e.secret, r.Header, body) != nil

	e.mu.Lock()
	e.inFlight++
	e.c.Peak = max(e.c.Peak, e.inFlight)
	e.c.Requests++
	if e.c.First.IsZero() {
		e.c.First = at
	}
	if bad {
		e.c.BadSig++
	}
	switch _, seen := e.arrived[id]; {
	case id == "":
		e.c.Unmatched++
	case !seen:
		e.arrived[id] = at
		e.c.Distinct++
		if ms, err := strconv.ParseInt(r.Header.Get(webhook.HeaderTimestamp), 10, 64); err == nil {
			e.starts = append(e.starts, time.UnixMilli(ms))
		}
	}
	all, latency := e.all, e.latency
	e.mu.Unlock()

	cut := false
	if latency > 0 {
		t := time.NewTimer(latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			cut = true
		}
		t.Stop()
	}

	e.mu.Lock()
	e.inFlight--
	e.c.LastDone = time.Now()
	switch {
	case cut:
		e.c.Cut++
	case id != "" && !e.answered[id] && all == e.all:
		e.answered[id] = true
		if e.c.Answered++; e.c.Answered == e.want {
			close(e.all)
		}
	}
	e.mu.Unlock()
	if bad {
		http.Error(w, "bad signature", http.StatusUnauthorized)
	}
}

// deliveryOf returns the delivery id a body carries: its user id after
// "usr_" (see payload).
func deliveryOf(body []byte) string {
	var p struct {
		User struct {
			ID string `json:"id"`
		} `json:"user"`
	}
	if json.Unmarshal(body, &p) != nil {
		return ""
	}
	id, _ := strings.CutPrefix(p.User.ID, "usr_")
	return id
}

// waitDone waits until the deliveries e.reset asked for have been answered,
// for at most limit.
func (e *endpoint) waitDone(ctx context.Context, limit time.Duration, what string) error {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-e.done():
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		c := e.counts()
		return errors.New(what + ": " + itoa(c.Answered) + " of " + itoa(e.want) + " deliveries answered within " + limit.String())
	}
}

// selfSigned returns a certificate for 127.0.0.1 that is its own CA, and
// its PEM.
func selfSigned() (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "fleetbench endpoint"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}
