package webhooktest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"

	"github.com/signedhook/webhook"
)

// NewRequest returns a delivery of p as the service sends it, for a
// receiver's handler: a POST to "/webhooks" with the JSON body, Content-Type
// and all three X-Service-* headers, signed with secret at time at. Give a
// time more than 5 minutes ago, or ahead, for an expired or a future
// delivery.
//
// Two requests are two deliveries, as the sender would make them: a request
// that would carry a signature made before in this process (the same
// secret and body, built in the same millisecond) is signed a millisecond
// later, as the sender signs a retry, so that a receiver handles it rather
// than acknowledging it as a copy. [Duplicate] makes a copy on purpose.
//
// It panics if p cannot be encoded, as httptest.NewRequest panics on bad
// input.
func NewRequest(secret string, p webhook.Payload, at time.Time) *http.Request {
	body, err := json.Marshal(p)
	if err != nil {
		panic("webhooktest: encoding payload: " + err.Error())
	}
	return NewRawRequest(secret, p.Event, body, at)
}

// NewRawRequest is NewRequest for a body encoded already, sent with event in
// the X-Service-Event header.
func NewRawRequest(secret, event string, body []byte, at time.Time) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/webhooks", bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil } // for Duplicate once r is served
	for name, values := range SignedHeader(secret, event, body, at) {
		r.Header[name] = values
	}
	return r
}

// SignedHeader returns the headers of a delivery of body signed with secret
// at time at: Content-Type, X-Service-Event, X-Service-Timestamp and
// X-Service-Signature. With another body, they make a tampered delivery.
// As with NewRequest, a signature made before in this process is never made
// again: the timestamp moves on a millisecond instead.
func SignedHeader(secret, event string, body []byte, at time.Time) http.Header {
	ts := at.UnixMilli()
	sig := webhook.Sign(secret, ts, body)
	for !signatures.first(sig) {
		ts++
		sig = webhook.Sign(secret, ts, body)
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set(webhook.HeaderEvent, event)
	h.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts, 10))
	h.Set(webhook.HeaderSignature, sig)
	return h
}

// Duplicate returns a copy of the delivery r: the same method, URL, headers
// and body, so the same signature. It is what a proxy's or a load
// balancer's retry, or a queue that stored the request, sends again: a
// receiver acknowledges it without handling it twice. r's body is read and
// restored, so r can still be served; of a request of this package's that
// was served already (its body read), the copy has the body it was built
// with.
func Duplicate(r *http.Request) *http.Request {
	var body []byte
	if r.Body != nil {
		var err error
		body, err = io.ReadAll(r.Body)
		if (err != nil || int64(len(body)) != r.ContentLength) && r.GetBody != nil {
			// Served already: a handler read the body, or the verifying
			// middleware released it.
			var rc io.ReadCloser
			if rc, err = r.GetBody(); err == nil {
				body, err = io.ReadAll(rc)
			}
		}
		if err != nil {
			panic("webhooktest: Duplicate: reading the body: " + err.Error())
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	c := httptest.NewRequest(r.Method, r.URL.String(), bytes.NewReader(body))
	c.Header = r.Header.Clone()
	return c
}

// signatures are the signatures this package made, so that it makes none
// twice. Tests build few requests in one millisecond: it is cleared once it
// holds maxSignatures, far more than a test makes at one instant.
var signatures = &issued{seen: make(map[string]struct{})}

const maxSignatures = 1 << 16

type issued struct {
	mu   sync.Mutex
	seen map[string]struct{}
}

// first records sig and reports whether it was not made before.
func (s *issued) first(sig string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen[sig]; ok {
		return false
	}
	if len(s.seen) >= maxSignatures {
		s.seen = make(map[string]struct{})
	}
	s.seen[sig] = struct{}{}
	return true
}
