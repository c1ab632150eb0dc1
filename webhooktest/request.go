package webhooktest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/signedhook/webhook"
)

// NewRequest returns a delivery of p as the service sends it, for a
// receiver's handler: a POST to "/webhooks" with the JSON body, Content-Type
// and all three X-Service-* headers, signed with secret at time at. Give a
// time more than 5 minutes ago, or ahead, for an expired or a future
// delivery. It panics if p cannot be encoded, as httptest.NewRequest panics
// on bad input.
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
	for name, values := range SignedHeader(secret, event, body, at) {
		r.Header[name] = values
	}
	return r
}

// SignedHeader returns the headers of a delivery of body signed with secret
// at time at: Content-Type, X-Service-Event, X-Service-Timestamp and
// X-Service-Signature. With another body, they make a tampered delivery.
func SignedHeader(secret, event string, body []byte, at time.Time) http.Header {
	ts := at.UnixMilli()
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set(webhook.HeaderEvent, event)
	h.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts, 10))
	h.Set(webhook.HeaderSignature, webhook.Sign(secret, ts, body))
	return h
}
