package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

type userCreated struct {
	Event string `json:"event"`
	User  struct {
		ID    string `json:"id"`
		Email string `json:"email"`
	} `json:"user"`
}

type dealClosed struct {
	Deal struct {
		ID     string `json:"id"`
		Amount int    `json:"amount"`
	} `json:"deal"`
}

// Validate makes On check a dealClosed, as it checks a Payload.
func (d *dealClosed) Validate() error {
	if d.Deal.ID == "" {
		return errors.New("deal.id is empty")
	}
	return nil
}

func TestNewEventHandler_DispatchesEachEventToItsType(t *testing.T) {
	var logs bytes.Buffer
	var got []any
	var e webhook.Events
	webhook.On(&e, "user.created", func(_ context.Context, u userCreated) error { got = append(got, u.User.Email); return nil })
	webhook.On(&e, "deal.closed", func(_ context.Context, d dealClosed) error {
		if d.Deal.Amount < 0 {
			return errors.New("ledger refused a negative amount")
		}
		got = append(got, d.Deal.Amount)
		return nil
	})
	webhook.On(&e, webhook.EventUserIdentified, func(_ context.Context, p webhook.Payload) error { got = append(got, p.User.ID); return nil })
	webhook.On(&e, "raw.event", func(_ context.Context, raw json.RawMessage) error { got = append(got, string(raw)); return nil })
	h := webhook.NewEventHandler(newTestVerifier(t), &e, &webhook.HandlerOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})

	identified := string(readTestdata(t, "body_user_identified.json"))
	tests := []struct {
		name string
		body string
		code int
		got  any // what the handler got, nil when not called
	}{
		{"custom event", `{"event":"user.created","user":{"id":"u1","email":"a@example.com"}}`, 200, "a@example.com"},
		{"another custom event", `{"event":"deal.closed","deal":{"id":"d1","amount":1200}}`, 200, 1200},
		{"the handler's error", `{"event":"deal.closed","deal":{"id":"d2","amount":-1}}`, 500, nil},
		{"a body its type does not take", `{"event":"deal.closed","deal":{"id":"d3","amount":"1200"}}`, 400, nil},
		{"a body its type does not validate", `{"event":"deal.closed","deal":{"amount":5}}`, 400, nil},
		{"an unknown event is logged and acknowledged", `{"event":"invoice.paid","invoice":{}}`, 200, nil},
		{"user.identified as a Payload", identified, 200, "usr_8f3a2b"},
		{"user.identified is lenient", `{"event":"user.identified","timestamp":"2026-11-21T10:00:00.000Z","user":{"id":"8f3a"},"application":{"id":"app_1"}}`, 200, "8f3a"},
		{"user.identified of the wrong shape", `{"event":"user.identified","user":"ada"}`, 400, nil},
		{"the raw body", `{"event":"raw.event","x":[1,2]}`, 200, `{"event":"raw.event","x":[1,2]}`},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got = nil
			code := serve(h, newSignedRequest(testSecret, testNow.UnixMilli()-int64(i), []byte(tc.body)))
			assert.Equal(t, tc.code, code)
			if tc.got == nil {
				assert.Empty(t, got)
			} else {
				assert.Equal(t, []any{tc.got}, got)
			}
		})
	}
	assert.Contains(t, logs.String(), "ignoring an event that has no handler")
	assert.Contains(t, logs.String(), "event=invoice.paid")
}

func TestOn_RefusesWhatCannotServe(t *testing.T) {
	var e webhook.Events
	fn := func(context.Context, userCreated) error { return nil }
	webhook.On(&e, "user.created", fn)
	assert.PanicsWithValue(t, `webhook: On: event "user.created" has a handler already`, func() { webhook.On(&e, "user.created", fn) })
	assert.Panics(t, func() { webhook.On(&e, "", fn) })
	assert.Panics(t, func() { webhook.On[userCreated](&e, "x", nil) })
	assert.Panics(t, func() { webhook.NewEventHandler(nil, &e, nil) })
}

// TestEvents_RegisteredWhileServing registers a handler while requests are
// served: safe, and used from then on.
func TestEvents_RegisteredWhileServing(t *testing.T) {
	var e webhook.Events
	h := webhook.NewEventHandler(newTestVerifier(t), &e, nil)
	body := []byte(`{"event":"late.event"}`)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 50 {
			serve(h, newSignedRequest(testSecret, testNow.UnixMilli()-int64(i), body))
		}
	}()
	called := make(chan struct{}, 1)
	webhook.On(&e, "late.event", func(context.Context, json.RawMessage) error {
		select {
		case called <- struct{}{}:
		default:
		}
		return nil
	})
	<-done
	require.Equal(t, 200, serve(h, newSignedRequest(testSecret, testNow.Add(time.Second).UnixMilli(), body)))
	assert.Len(t, called, 1)
}

// TestOn_ValidatesAPointerType: a handler taking a pointer to a type of
// one's own with Validate gets only bodies that validate, as one taking the
// value does; a *Payload, like a Payload, is handed whatever has an event.
func TestOn_ValidatesAPointerType(t *testing.T) {
	v := newTestVerifier(t)
	var e webhook.Events
	var payloads, deals atomic.Int32
	webhook.On(&e, webhook.EventUserIdentified, func(context.Context, *webhook.Payload) error { payloads.Add(1); return nil })
	webhook.On(&e, "deal.closed", func(context.Context, *dealClosed) error { deals.Add(1); return nil })
	h := webhook.NewEventHandler(v, &e, nil)
	tests := []struct {
		body string
		code int
	}{
		{`{"event":"user.identified","user":{"id":"8f3a2b"}}`, http.StatusOK},  // no usr_ prefix, no timestamp
		{`{"event":"deal.closed","deal":{"amount":3}}`, http.StatusBadRequest}, // no deal.id
	}
	for i, tc := range tests {
		assert.Equal(t, tc.code, serve(h, newSignedRequest(testSecret, testNow.UnixMilli()-int64(i), []byte(tc.body))), tc.body)
	}
	assert.Equal(t, int32(1), payloads.Load(), "the Payload is handed over")
	assert.Zero(t, deals.Load(), "no invalid event of the caller's type is handed over")
}

// TestNewHandler_AnswersTheSpecsMinimalTestRequest: SPEC §6's hand-made test
// request (a body with "event", "user.email" and "user.name", signed by
// OpenSSL in testdata/vectors.sh) is handed over with the missing fields
// zero, by NewHandler and by NewEventHandler with a Payload or a *Payload.
func TestNewHandler_AnswersTheSpecsMinimalTestRequest(t *testing.T) {
	var minimal vector
	for _, v := range loadVectors(t) {
		if bytes.Contains(v.body, []byte(`"name":"Test User"`)) {
			minimal = v
		}
	}
	require.NotNil(t, minimal.body, "testdata/vectors.txt signs body_minimal.json")
	request := func() *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/webhooks", bytes.NewReader(minimal.body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(webhook.HeaderEvent, webhook.EventUserIdentified)
		r.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(minimal.timestamp, 10))
		r.Header.Set(webhook.HeaderSignature, minimal.signature)
		return r
	}
	verifier := func() *webhook.Verifier {
		v, err := webhook.NewVerifier([]string{minimal.secret}, &webhook.VerifierOptions{
			Now: func() time.Time { return time.UnixMilli(minimal.timestamp).Add(time.Second) },
		})
		require.NoError(t, err)
		return v
	}
	want := webhook.User{Email: "test@example.com", Name: "Test User"}

	var got []webhook.User
	var byValue, byPointer webhook.Events
	webhook.On(&byValue, webhook.EventUserIdentified, func(_ context.Context, p webhook.Payload) error { got = append(got, p.User); return nil })
	webhook.On(&byPointer, webhook.EventUserIdentified, func(_ context.Context, p *webhook.Payload) error { got = append(got, p.User); return nil })
	handlers := map[string]http.Handler{
		"NewHandler": func() http.Handler {
			return webhook.NewHandler(verifier(), func(_ context.Context, p webhook.Payload) error { got = append(got, p.User); return nil }, nil)
		}(),
		"NewEventHandler, Payload":  webhook.NewEventHandler(verifier(), &byValue, nil),
		"NewEventHandler, *Payload": webhook.NewEventHandler(verifier(), &byPointer, nil),
	}
	for name, h := range handlers {
		t.Run(name, func(t *testing.T) {
			got = nil
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, request())
			assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			assert.Equal(t, []webhook.User{want}, got)
		})
	}
}

// refund is an event type of the caller's whose Validate reports the
// field at fault with the library's exported FieldError.
type refund struct {
	Amount int `json:"amount"`
}

func (r refund) Validate() error {
	if r.Amount <= 0 {
		return &webhook.FieldError{Field: "amount", Reason: "must be positive"}
	}
	return nil
}

// TestOn_AFieldErrorOfTheCallersIsAnsweredBadRequest: a Validate of the
// caller's type that reports the field at fault with a FieldError it built
// (exported, with exported fields) gets the 400 On promises, and the error
// prints. Its Error dereferenced the sentinel only the library sets: the
// handler panicked while logging the refusal, net/http dropped the
// connection, and the sender retried a delivery that will never be valid.
func TestOn_AFieldErrorOfTheCallersIsAnsweredBadRequest(t *testing.T) {
	fe := &webhook.FieldError{Field: "amount", Reason: "must be positive"}
	assert.NotPanics(t, func() { _ = fe.Error() }, "Error of a FieldError of the caller's")
	assert.NotPanics(t, func() { _ = (&webhook.FieldError{}).Error() }, "Error of the zero FieldError")

	v := newTestVerifier(t)
	var e webhook.Events
	var calls atomic.Int32
	webhook.On(&e, "refund.issued", func(context.Context, refund) error { calls.Add(1); return nil })
	srv := httptest.NewServer(webhook.NewEventHandler(v, &e, nil))
	defer srv.Close()

	body := []byte(`{"event":"refund.issued","amount":0}`)
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/webhooks", nil)
	require.NoError(t, err)
	r := newSignedRequest(testSecret, testNow.UnixMilli(), body)
	req.Header, req.Body, req.ContentLength = r.Header, r.Body, r.ContentLength
	res, err := srv.Client().Do(req)
	require.NoError(t, err, "the receiver answers")
	res.Body.Close()
	assert.Equal(t, http.StatusBadRequest, res.StatusCode)
	assert.Zero(t, calls.Load())
}
