package webhooktest_test

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/webhooktest"
)

// TestSignedHeader_NeverMakesASignatureTwice signs more requests than the
// package's memory of signatures holds (a benchmark's loop does), then one
// at the instant of the first: it is a delivery of its own, not a copy of
// the first.
func TestSignedHeader_NeverMakesASignatureTwice(t *testing.T) {
	base := time.Now()
	body := []byte(`{"event":"user.identified","n":2}`)
	sign := func(at time.Time) string {
		return webhooktest.SignedHeader(secret, webhook.EventUserIdentified, body, at).Get(webhook.HeaderSignature)
	}
	first := sign(base)
	for i := 1; i <= 1<<17; i++ {
		sign(base.Add(time.Duration(i) * time.Millisecond))
	}
	assert.NotEqual(t, first, sign(base), "a receiver acknowledges it as a copy of the first and never handles it")
}

// TestNewRequest_ManyAtOneInstant builds requests of one payload at one
// instant, as a benchmark's loop with the time taken once does: each costs
// about one signature, not one per request built before it.
func TestNewRequest_ManyAtOneInstant(t *testing.T) {
	at := time.Now().Add(time.Hour) // an instant no other test signs at
	body := []byte(`{"event":"user.identified","n":3}`)
	other := []byte(`{"event":"user.identified","n":4}`)
	const n = 4000
	for range n {
		webhooktest.SignedHeader(secret, webhook.EventUserIdentified, body, at)
	}
	// One more request at that instant costs about what a request at an
	// instant nothing was signed at costs: one signature, not one per
	// request before (4,000). Each is the fastest of 100 calls, made in
	// turn, so the ratio holds on a machine of any speed, busy or not.
	crowded, fresh := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	for i := range 100 {
		start := time.Now()
		webhooktest.SignedHeader(secret, webhook.EventUserIdentified, body, at)
		crowded = min(crowded, time.Since(start))
		start = time.Now()
		webhooktest.SignedHeader(secret, webhook.EventUserIdentified, other, at.Add(time.Duration(i+1)*time.Hour))
		fresh = min(fresh, time.Since(start))
	}
	assert.LessOrEqual(t, crowded, 4*fresh, "a request after %d at one instant took %v, one at a new instant %v", n, crowded, fresh)
}

// TestDuplicate_OfADeliveryServedAlready makes the copy of a request after
// serving it, as a test of "a proxy retried our delivery" does: the copy is
// the same delivery, acknowledged without a second run.
func TestDuplicate_OfADeliveryServedAlready(t *testing.T) {
	v, err := webhook.NewVerifier([]string{secret}, nil)
	require.NoError(t, err)
	var calls atomic.Int32
	for name, h := range map[string]http.Handler{
		"NewHandler": webhook.NewHandler(v, func(context.Context, webhook.Payload) error { calls.Add(1); return nil }, nil),
		"plain":      http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = r.Body.Read(make([]byte, 1<<10)) }),
	} {
		t.Run(name, func(t *testing.T) {
			r := webhooktest.NewRequest(secret, payload(), time.Now())
			h.ServeHTTP(httptest.NewRecorder(), r)
			var c *http.Request
			require.NotPanics(t, func() { c = webhooktest.Duplicate(r) })
			assert.Equal(t, r.Header, c.Header)
			// A copy is a request of this package's too: served, it can
			// be copied again, with its body.
			h.ServeHTTP(httptest.NewRecorder(), c)
			require.NotPanics(t, func() { c = webhooktest.Duplicate(c) })
			_, err := v.VerifyRequest(c)
			if name == "NewHandler" {
				assert.ErrorIs(t, err, webhook.ErrReplayed, "the copy carries the served request's signature and body")
			} else {
				assert.NoError(t, err, "the copy carries the served request's body")
			}
		})
	}
}

// TestNewRequest_ATimeBefore1970IsExpired: the zero time.Time, the usual
// "long ago", makes an expired delivery as the doc says, not a timestamp
// header no receiver parses ("-62135596800000").
func TestNewRequest_ATimeBefore1970IsExpired(t *testing.T) {
	v, err := webhook.NewVerifier([]string{secret}, nil)
	require.NoError(t, err)
	for _, at := range []time.Time{{}, time.Unix(-1, 0)} {
		r := webhooktest.NewRequest(secret, webhook.Payload{Event: webhook.EventUserIdentified}, at)
		_, err := v.VerifyRequest(r)
		assert.ErrorIs(t, err, webhook.ErrTimestampExpired, "signed at %v", at)
	}
}
