package routers_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/examples/routers"
	"github.com/signedhook/webhook/webhooktest"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.ReleaseMode)
	goleak.VerifyTestMain(m)
}

const secret = "whsec_routers"

var builders = map[string]func(*webhook.Verifier, routers.OnPayload) http.Handler{
	"chi":  routers.Chi,
	"gin":  routers.Gin,
	"echo": routers.Echo,
}

func payload() webhook.Payload {
	p := webhook.SamplePayload(time.Now())
	p.User.ID, p.User.Metadata = "usr_8f3a2b", webhook.Metadata{"plan": "pro", "source": "chrome_extension"}
	return p
}

// recorder keeps what the handler was called with.
type recorder struct {
	mu   sync.Mutex
	got  []webhook.Payload
	raws [][]byte
	fail error
}

func (r *recorder) on(_ context.Context, p webhook.Payload, raw []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, p)
	r.raws = append(r.raws, raw)
	return r.fail
}

func TestRouters(t *testing.T) {
	for name, build := range builders {
		t.Run(name, func(t *testing.T) {
			v, err := webhook.NewVerifier([]string{secret}, &webhook.VerifierOptions{MaxBodyBytes: 4096})
			require.NoError(t, err)
			rec := &recorder{}
			h := build(v, rec.on)
			p := payload()
			body, err := json.Marshal(p)
			require.NoError(t, err)
			now := time.Now()

			tampered := webhooktest.NewRequest(secret, p, now)
			tampered.Body = http.NoBody
			big := bytes.Repeat([]byte("x"), 5000)
			tests := []struct {
				name string
				r    *http.Request
				want int
			}{
				{"valid", webhooktest.NewRawRequest(secret, webhook.EventUserIdentified, body, now), http.StatusOK},
				{"expired", webhooktest.NewRequest(secret, p, now.Add(-10*time.Minute)), http.StatusUnauthorized},
				{"tampered", tampered, http.StatusUnauthorized},
				{"wrong secret", webhooktest.NewRequest("whsec_other", p, now), http.StatusUnauthorized},
				{"too large", webhooktest.NewRawRequest(secret, webhook.EventUserIdentified, big, now), http.StatusRequestEntityTooLarge},
				{"send test", webhooktest.NewRequest(secret, webhook.SamplePayload(now), now), http.StatusOK},
			}
			for _, tc := range tests {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, tc.r)
				assert.Equal(t, tc.want, w.Code, tc.name)
			}
			require.Len(t, rec.got, 1, "only the valid delivery reaches the handler; Send Test is skipped")
			assert.Equal(t, body, rec.raws[0], "the handler reads the identical raw body")
			assert.Equal(t, p.User.ID, rec.got[0].User.ID)

			rec.fail = errors.New("database down")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, webhooktest.NewRequest(secret, p, now.Add(time.Second))) // signed afresh, as a retry is: the same one again is a replay
			assert.Equal(t, http.StatusInternalServerError, w.Code, "so that the service retries")
		})
	}
}

// TestRouters_EndToEnd delivers with the library's Sender to each router
// behind a real TLS server on loopback.
func TestRouters_EndToEnd(t *testing.T) {
	for name, build := range builders {
		t.Run(name, func(t *testing.T) {
			v, err := webhook.NewVerifier([]string{secret}, nil)
			require.NoError(t, err)
			rec := &recorder{}
			srv := httptest.NewTLSServer(build(v, rec.on))
			defer srv.Close()
			roots := x509.NewCertPool()
			roots.AddCert(srv.Certificate())
			tr, err := webhook.NewTransport(&webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: roots}, AllowPrivateNetworks: true})
			require.NoError(t, err)
			defer tr.CloseIdleConnections()
			s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr}})
			require.NoError(t, err)

			// A connection's method is POST, PUT or PATCH (SPEC 2.1).
			for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodPatch} {
				res, err := s.Send(context.Background(), webhook.Connection{URL: srv.URL + "/webhooks", Secret: secret, Method: method}, payload())
				require.NoError(t, err, method)
				assert.Len(t, res.Attempts, 1)
			}
			require.Len(t, rec.got, 3)
			assert.True(t, strings.HasPrefix(rec.got[0].User.ID, "usr_"))
		})
	}
}

// TestRouters_CopyOfAFailedDeliveryIsHandled: a delivery whose handler
// answered 500 is forgotten, so that its copy (a proxy's retry of the same
// signed request) is handled, whichever router serves it; a copy of one
// that was handled is acknowledged without a second run.
func TestRouters_CopyOfAFailedDeliveryIsHandled(t *testing.T) {
	for name, build := range builders {
		t.Run(name, func(t *testing.T) {
			v, err := webhook.NewVerifier([]string{secret}, nil)
			require.NoError(t, err)
			rec := &recorder{fail: errors.New("database down")}
			h := build(v, rec.on)
			r := webhooktest.NewRequest(secret, payload(), time.Now())
			copied := webhooktest.Duplicate(r)
			again := webhooktest.Duplicate(r)

			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			require.Equal(t, http.StatusInternalServerError, w.Code)

			rec.fail = nil
			w = httptest.NewRecorder()
			h.ServeHTTP(w, copied)
			assert.Equal(t, http.StatusOK, w.Code)
			assert.Len(t, rec.got, 2, "the copy of a failed delivery is handled")

			w = httptest.NewRecorder()
			h.ServeHTTP(w, again)
			assert.Equal(t, http.StatusOK, w.Code)
			assert.Len(t, rec.got, 2, "the copy of a handled delivery is not handled again")
		})
	}
}

// TestEcho_HandlerErrorForgetsTheDelivery: an echo handler fails the echo
// way, returning an error that echo's HTTPErrorHandler answers 500. The
// delivery is forgotten, so its copy is handled.
func TestEcho_HandlerErrorForgetsTheDelivery(t *testing.T) {
	v, err := webhook.NewVerifier([]string{secret}, nil)
	require.NoError(t, err)
	calls := 0
	e := echo.New()
	e.POST("/webhooks", func(c echo.Context) error {
		if calls++; calls == 1 {
			return echo.NewHTTPError(http.StatusInternalServerError, "database down")
		}
		return c.NoContent(http.StatusOK)
	}, routers.EchoVerify(v))
	r := webhooktest.NewRequest(secret, payload(), time.Now())
	copied := webhooktest.Duplicate(r)
	w := httptest.NewRecorder()
	e.ServeHTTP(w, r)
	require.Equal(t, http.StatusInternalServerError, w.Code)
	w = httptest.NewRecorder()
	e.ServeHTTP(w, copied)
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, 2, calls, "the copy of a failed delivery is handled")
}
