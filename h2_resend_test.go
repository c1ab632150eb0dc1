package webhook_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

// TestSend_HTTP2RequestDroppedAfterItWasSentIsNotSentAgain: a receiver that
// reads each request, signature and body, then drops it as not processed
// (GOAWAY with last stream 0, or RST_STREAM REFUSED_STREAM): net/http sent
// the same signed request again within the attempt, on a new connection
// each time after a GOAWAY, until the attempt's time was up (2,118 copies
// of one signature in a 2 s attempt). One attempt sends it once.
func TestSend_HTTP2RequestDroppedAfterItWasSentIsNotSentAgain(t *testing.T) {
	for _, tc := range []struct {
		name string
		drop func(p *h2Peer, stream uint32)
	}{
		{"GOAWAY", func(p *h2Peer, _ uint32) { p.frame(0x7, 0, 0, make([]byte, 8)) }},                        // last stream 0, NO_ERROR
		{"REFUSED_STREAM", func(p *h2Peer, stream uint32) { p.frame(0x3, 0, stream, []byte{0, 0, 0, 0x7}) }}, // RST_STREAM
		{"103 then GOAWAY", func(p *h2Peer, stream uint32) { // an informational answer is no answer
			p.frame(0x1, 0x4, stream, []byte{0x08, 0x03, '1', '0', '3'}) // HEADERS :status 103
			p.frame(0x7, 0, 0, make([]byte, 8))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newRawH2(t)
			var wg sync.WaitGroup
			var requests atomic.Int32
			wg.Go(func() {
				for {
					p, err := srv.accept()
					if err != nil {
						return
					}
					wg.Go(func() {
						defer p.close()
						for {
							stream, err := p.next()
							if err != nil {
								return
							}
							requests.Add(1)
							tc.drop(p, stream)
						}
					})
				}
			})
			tr := newTransport(t, &webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: srv.pool}, AllowPrivateNetworks: true})
			s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr}, Retry: shortPolicy(0), AttemptTimeout: 2 * time.Second})
			require.NoError(t, err)
			res, err := s.Send(context.Background(), webhook.Connection{URL: "https://" + srv.addr() + "/hooks", Secret: testSecret}, samplePayload())
			require.Error(t, err)
			s.CloseIdleConnections()
			tr.CloseIdleConnections()
			srv.ln.Close()
			wg.Wait()
			assert.EqualValues(t, 1, requests.Load(), "one attempt, one signature sent")
			require.Len(t, res.Attempts, 1)
			assert.Equal(t, webhook.KindReset, res.Attempts[0].Kind, "%v", res.Attempts[0].Err)
		})
	}
}

// A 307 over HTTP/2 is still a redirect: net/http's client asks for the
// body of the request it would make (never sent), after the answer came.
func TestSend_HTTP2TemporaryRedirectIsARedirect(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	tr := newTransport(t, &webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: pool}, AllowPrivateNetworks: true})
	defer tr.CloseIdleConnections()
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr}, Retry: shortPolicy(0)})
	require.NoError(t, err)
	res, err := s.Send(context.Background(), webhook.Connection{URL: srv.URL + "/hooks", Secret: testSecret}, samplePayload())
	require.Error(t, err)
	require.Len(t, res.Attempts, 1)
	assert.Equal(t, webhook.KindRedirect, res.Attempts[0].Kind, "%v", res.Attempts[0].Err)
	assert.Equal(t, http.StatusTemporaryRedirect, res.Attempts[0].StatusCode)
}
