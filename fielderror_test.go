package webhook_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/signedhook/webhook"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
