package webhook_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signedhook/webhook"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSend_ResponseBodyIsCappedAndDrained(t *testing.T) {
	rv := newReceiver(t)
	rv.handle = func(w http.ResponseWriter, r *http.Request) bool {
		w.WriteHeader(http.StatusAccepted)
		w.Write(bytes.Repeat([]byte("y"), 10<<10))
		return true
	}
	s := newTestSender(t, rv, nil)
	res, err := s.Send(context.Background(), rv.conn("/"), samplePayload())
	require.NoError(t, err)
	assert.Equal(t, http.StatusAccepted, res.Attempts[0].StatusCode)
	assert.Len(t, res.Attempts[0].ResponseBody, 4<<10)
}

func TestSend_AttemptTimeout(t *testing.T) {
	rv := newReceiver(t)
	release := make(chan struct{})
	defer close(release)
	rv.handle = func(w http.ResponseWriter, r *http.Request) bool {
		select { // hang until the sender gives up on this request
		case <-r.Context().Done():
		case <-release:
		}
		return true // answers 200, once the attempt was cut: too late
	}
	s := newTestSender(t, rv, &webhook.SenderOptions{AttemptTimeout: 50 * time.Millisecond, Retry: shortPolicy(1)})
	res, err := s.Send(context.Background(), rv.conn("/"), samplePayload())
	require.Error(t, err)
	assert.Equal(t, []webhook.FailureKind{webhook.KindTimeout, webhook.KindTimeout}, kinds(res.Attempts))
	for _, a := range res.Attempts {
		assert.GreaterOrEqual(t, a.Duration, 50*time.Millisecond)
	}
	assert.Contains(t, res.Attempts[0].Diagnosis(), "answer within 5 seconds")
}

// An answer handed over once the attempt's time is up is a timeout, not a
// delivery. net/http can do it: closing a TLS connection writes close_notify
// first, a receiver whose handler returns when its request is cut answers
// 200 on seeing it, and on a loaded machine that answer can be read before
// the socket is closed (ExampleHealthOptions_notAnswering hung in CI on a
// "delivered" hang). Here the transport hands it over every time.
func TestSend_AnAnswerAfterTheAttemptsTimeIsATimeout(t *testing.T) {
	late := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		<-r.Context().Done() // the receiver answers when the attempt is cut
		res := answer(http.StatusOK)
		res.Request = r
		return res, nil
	})
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: late},
		AttemptTimeout: 20 * time.Millisecond, Retry: &webhook.RetryPolicy{}})
	require.NoError(t, err)
	res, err := s.Send(context.Background(), webhook.Connection{URL: "https://example.com/hooks", Secret: "whsec_test"}, samplePayload())
	require.Error(t, err, "not delivered")
	require.Len(t, res.Attempts, 1)
	assert.Equal(t, webhook.KindTimeout, res.Attempts[0].Kind)
	assert.Zero(t, res.Attempts[0].StatusCode, "no answer within the attempt's time")
}

// strictBody is an answer's body that counts its closes and the reads after
// the first.
type strictBody struct{ closes, readsAfterClose atomic.Int32 }

func (b *strictBody) Read([]byte) (int, error) {
	if b.closes.Load() > 0 {
		b.readsAfterClose.Add(1)
	}
	return 0, io.EOF
}

func (b *strictBody) Close() error { b.closes.Add(1); return nil }

// The body of an answer that came too late is closed once and never read
// after, with a retry or without (go-retryablehttp drains and closes the
// answer it holds before a retry).
func TestSend_ALateAnswersBodyIsClosedOnce(t *testing.T) {
	for _, retries := range []int{0, 1} {
		var bodies []*strictBody
		late := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			<-r.Context().Done()
			b := &strictBody{}
			bodies = append(bodies, b)
			res := answer(http.StatusOK)
			res.Body, res.Request = b, r
			return res, nil
		})
		s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: late}, AttemptTimeout: 20 * time.Millisecond,
			Retry: &webhook.RetryPolicy{MaxRetries: retries, Backoff: func(int, *http.Response) time.Duration { return time.Millisecond }}})
		require.NoError(t, err)
		res, _ := s.Send(context.Background(), webhook.Connection{URL: "https://example.com/hooks", Secret: "whsec_test"}, samplePayload())
		require.Len(t, res.Attempts, retries+1)
		for i, b := range bodies {
			assert.Equal(t, int32(1), b.closes.Load(), "retries %d, attempt %d: closed once", retries, i+1)
			assert.Zero(t, b.readsAfterClose.Load(), "retries %d, attempt %d: never read once closed", retries, i+1)
		}
	}
}

func TestSend_ConnectionResetIsAFailedAttempt(t *testing.T) {
	rv := newReceiver(t)
	rv.handle = func(w http.ResponseWriter, r *http.Request) bool {
		conn, _, err := http.NewResponseController(w).Hijack()
		require.NoError(t, err)
		if tc, ok := conn.(interface{ NetConn() net.Conn }); ok {
			if tcp, ok := tc.NetConn().(*net.TCPConn); ok {
				tcp.SetLinger(0) // close with RST
			}
		}
		conn.Close()
		return true
	}
	s := newTestSender(t, rv, &webhook.SenderOptions{Retry: shortPolicy(1)})
	res, err := s.Send(context.Background(), rv.conn("/"), samplePayload())
	require.Error(t, err)
	require.Len(t, res.Attempts, 2)
	assert.Equal(t, webhook.KindReset, res.Attempts[0].Kind, "error: %v", res.Attempts[0].Err)
	assert.Zero(t, res.Attempts[0].StatusCode)
}

func TestSend_ConnectionRefused(t *testing.T) {
	addr := refusedAddr(t)
	s := newTestSender(t, nil, &webhook.SenderOptions{AllowPrivateNetworks: true, Retry: shortPolicy(0)})
	res, err := s.Send(context.Background(), webhook.Connection{URL: "https://" + addr + "/?token=tok123", Secret: testSecret}, samplePayload())
	require.Error(t, err)
	require.Len(t, res.Attempts, 1)
	assert.Equal(t, webhook.KindRefused, res.Attempts[0].Kind, "error: %v", res.Attempts[0].Err)
	assert.NotContains(t, err.Error(), "tok123", "the query string must not reach the error")
	assert.Contains(t, res.Attempts[0].Diagnosis(), "firewall")
}

func TestSend_UntrustedCertificate(t *testing.T) {
	rv := newReceiver(t)
	// The default transport does not trust the test server's certificate.
	s := newTestSender(t, nil, &webhook.SenderOptions{AllowPrivateNetworks: true, Retry: shortPolicy(1)})
	res, err := s.Send(context.Background(), rv.conn("/"), samplePayload())
	require.Error(t, err)
	assert.Equal(t, []webhook.FailureKind{webhook.KindTLS, webhook.KindTLS}, kinds(res.Attempts))
	assert.Empty(t, rv.deliveries())
	assert.Contains(t, res.Attempts[0].Diagnosis(), "certificate")
}

func TestSend_DoesNotFollowRedirect(t *testing.T) {
	target := newReceiver(t)
	rv := newReceiver(t)
	rv.handle = func(w http.ResponseWriter, r *http.Request) bool {
		http.Redirect(w, r, target.URL+"/stolen?key=k1", http.StatusFound)
		return true
	}
	s := newTestSender(t, rv, &webhook.SenderOptions{Retry: shortPolicy(0)})
	res, err := s.Send(context.Background(), rv.conn("/"), samplePayload())
	require.Error(t, err)
	assert.Empty(t, target.deliveries(), "the redirect target must see nothing")
	require.Len(t, res.Attempts, 1)
	a := res.Attempts[0]
	assert.Equal(t, webhook.KindRedirect, a.Kind)
	assert.Equal(t, http.StatusFound, a.StatusCode)
	assert.Contains(t, a.Err.Error(), "(Location: "+target.URL+"/…)")
	assert.NotContains(t, a.Err.Error(), "k1")
	assert.NotContains(t, a.Err.Error(), "stolen", "a Location's path may carry a token too")
}

func TestSend_RefusesPrivateAddressesByDefault(t *testing.T) {
	rv := newReceiver(t)
	s, err := webhook.NewSender(nil) // the default transport, with its guard
	require.NoError(t, err)
	defer s.CloseIdleConnections()
	res, err := s.Send(context.Background(), rv.conn("/"), samplePayload())
	require.ErrorIs(t, err, webhook.ErrBlockedDestination)
	require.Len(t, res.Attempts, 1, "a blocked destination is never retried")
	assert.Equal(t, webhook.KindBlocked, res.Attempts[0].Kind)
	assert.False(t, res.Attempts[0].Retry)
	assert.Empty(t, rv.deliveries())
	assert.Contains(t, err.Error(), "127.0.0.1")
}

// TestSend_WritesEachRequestInOneRecord pins that the request's headers and
// body go out together: a body net/http does not know to be in memory makes
// it flush the headers first, a second write and TLS record per delivery.
func TestSend_WritesEachRequestInOneRecord(t *testing.T) {
	var writes []int
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c1, c2 := net.Pipe()
		go func() { // a receiver answering 200 to one request
			defer c2.Close()
			req, err := http.ReadRequest(bufio.NewReader(c2))
			if err == nil {
				io.Copy(io.Discard, req.Body)
				io.WriteString(c2, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			}
		}()
		return &countingConn{Conn: c1, writes: &writes}, nil
	}}
	tr.DialTLSContext = tr.DialContext // the https:// URL is served in plain text over the pipe
	s := newTestSender(t, nil, &webhook.SenderOptions{Client: &http.Client{Transport: tr}})
	_, err := s.Send(context.Background(), fakeConn, samplePayload())
	require.NoError(t, err)
	assert.Len(t, writes, 1, "headers and body in one write: %v bytes", writes)
}

type countingConn struct {
	net.Conn
	writes *[]int
}

func (c *countingConn) Write(p []byte) (int, error) {
	*c.writes = append(*c.writes, len(p))
	return c.Conn.Write(p)
}

func TestSend_EmptyPortIsDropped(t *testing.T) {
	var host, url string
	s := fakeSender(t, func(r *http.Request) (*http.Response, error) {
		host, url = r.Host, r.URL.String()
		return answer(200), nil
	}, nil)
	_, err := s.Send(context.Background(), webhook.Connection{URL: "https://crm.example.com:/hooks?x=1", Secret: testSecret}, samplePayload())
	require.NoError(t, err)
	assert.Equal(t, "crm.example.com", host, "as http.NewRequest sends it")
	assert.Equal(t, "https://crm.example.com/hooks?x=1", url)
}

// TestSend_URLPathIsNeverShown pins that a URL's path, which carries the
// credential in many webhook URLs, reaches no error, log line, table or
// formatting of a failed delivery, whatever the failure.
func TestSend_URLPathIsNeverShown(t *testing.T) {
	const path = "/services/T0001/B0002/pathsecret9"
	refused := "https://" + refusedAddr(t) + path + "?q=querysecret8"
	hang := newReceiver(t)
	hang.handle = func(w http.ResponseWriter, r *http.Request) bool {
		<-r.Context().Done()
		panic(http.ErrAbortHandler)
	}
	redirect := newReceiver(t)
	redirect.handle = func(w http.ResponseWriter, r *http.Request) bool {
		http.Redirect(w, r, "https://elsewhere.example"+path, http.StatusTemporaryRedirect)
		return true
	}
	status := newReceiver(t, http.StatusGone)
	for name, target := range map[string]struct {
		rv  *receiver
		url string
	}{
		"refused":  {nil, refused},
		"timeout":  {hang, hang.URL + path},
		"redirect": {redirect, redirect.URL + path},
		"status":   {status, status.URL + path},
	} {
		t.Run(name, func(t *testing.T) {
			var logs bytes.Buffer
			opts := &webhook.SenderOptions{AllowPrivateNetworks: true, Retry: shortPolicy(1), AttemptTimeout: 200 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
			if target.rv != nil {
				opts.Client = target.rv.Client()
			}
			s := newTestSender(t, nil, opts)
			conn := webhook.Connection{Name: "crm", URL: target.url, Secret: testSecret}
			res, err := s.Send(context.Background(), conn, samplePayload())
			require.Error(t, err)
			var table bytes.Buffer
			require.NoError(t, res.WriteTable(&table))
			shown := []string{err.Error(), table.String(), logs.String(), fmt.Sprintf("%v %+v", res, res), conn.String()}
			for _, a := range res.Attempts {
				shown = append(shown, a.Err.Error(), a.Diagnosis(), a.String())
			}
			if name == "refused" {
				a := s.Attempt(context.Background(), conn, webhook.EventUserIdentified, []byte(`{}`), 1)
				shown = append(shown, a.Err.Error(), a.Diagnosis())
			}
			for _, text := range shown {
				for _, part := range []string{"pathsecret9", "B0002", "services", "querysecret8"} {
					assert.NotContains(t, text, part)
				}
			}
			if target.rv != redirect && target.rv != status { // an answer's error names no URL
				assert.Contains(t, err.Error(), "/…", "the error says there was more to the URL")
			}
		})
	}
}

// TestSend_EchoedSecretsAreScrubbed pins that a receiver echoing what it was
// sent (Express's default 404 page says "Cannot POST /path", a 401 page may
// quote the Authorization header) shows none of the connection's secrets:
// not its URL's path or a segment of it, not its query, not a custom
// header's value, not the signing secret. The excerpt and every text built
// on the answer are scrubbed where they are read, before OnAttempt, a log,
// a table or a job row sees them.
func TestSend_EchoedSecretsAreScrubbed(t *testing.T) {
	const (
		pathToken   = "PATHTOKEN31c8e0"
		queryToken  = "QUERYTOKEN9a7b"
		headerToken = "HEADERTOKEN77ab"
	)
	secret := "whsec_SECRETTOKEN4f2d"
	path := "/services/T0001/" + pathToken
	echo := func(r *http.Request) string {
		return "Cannot POST " + r.URL.Path + "?" + r.URL.RawQuery + " " + r.Header.Get("Authorization") + " token=" + headerToken +
			" " + secret + " " + r.URL.EscapedPath()
	}
	rv := newReceiver(t)
	rv.handle = func(w http.ResponseWriter, r *http.Request) bool {
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, echo(r))
		return true
	}
	raw := newHostile(t, func(conn net.Conn, r *http.Request) { // the same in a reason phrase
		io.WriteString(conn, "HTTP/1.1 404 "+echo(r)+"\r\nContent-Length: 0\r\n\r\n")
	})
	for name, target := range map[string]struct {
		url    string
		client *http.Client
	}{
		"body":          {rv.URL + path + "?k=" + queryToken, rv.Client()},
		"reason phrase": {raw.url() + path + "?k=" + queryToken, nil},
	} {
		t.Run(name, func(t *testing.T) {
			var seen []webhook.Attempt
			opts := &webhook.SenderOptions{Client: target.client, Retry: shortPolicy(0),
				OnAttempt: func(_ context.Context, _ webhook.Connection, a webhook.Attempt) { seen = append(seen, a) }}
			var s *webhook.Sender
			if target.client == nil {
				s = faultSender(t, raw.pool, shortPolicy(0))
				opts = nil
			} else {
				s = newTestSender(t, nil, opts)
			}
			conn := webhook.Connection{Name: "crm", URL: target.url, Secret: secret,
				Headers: map[string]string{"Authorization": "Bearer " + headerToken}}
			res, err := s.Send(context.Background(), conn, samplePayload())
			require.Error(t, err)
			require.Equal(t, webhook.KindStatus, res.Attempts[0].Kind, "%v", err)
			var table strings.Builder
			require.NoError(t, res.WriteTable(&table))
			a := res.Attempts[0]
			texts := []string{string(a.ResponseBody), a.ResponseText(), a.Err.Error(), a.Diagnosis(), err.Error(), table.String()}
			if opts != nil {
				require.Len(t, seen, 1)
				texts = append(texts, string(seen[0].ResponseBody), seen[0].Err.Error())
			}
			for _, text := range texts {
				for _, token := range []string{pathToken, queryToken, headerToken, "SECRETTOKEN4f2d"} {
					assert.NotContains(t, text, token)
				}
			}
			if name == "body" {
				assert.Contains(t, a.ResponseText(), "Cannot POST …", "what is not secret stays")
			}
		})
	}
}

// printedTexts is every text the library makes of a delivery for people.
func printedTexts(t *testing.T, res *webhook.Result, err error) []string {
	t.Helper()
	var table strings.Builder
	require.NoError(t, res.WriteTable(&table))
	texts := []string{table.String()}
	if err != nil {
		texts = append(texts, err.Error())
	}
	for _, a := range res.Attempts {
		texts = append(texts, a.String(), a.Diagnosis(), a.ResponseText(), string(a.ResponseBody))
		if a.Err != nil {
			texts = append(texts, a.Err.Error())
		}
	}
	return texts
}

// A receiver echoes a connection's secret texts in other forms than the
// connection has them: a route trimmed of its slashes or of its last one,
// a run of the path's short segments (a Zapier URL's credential), query-
// escaped in a login redirect, a hex token lowered, the Basic credentials
// net/http makes of the URL's user information, and a token that the 4 KiB
// cut of the excerpt splits.
func TestSend_EchoedSecretsInOtherFormsAreScrubbed(t *testing.T) {
	const (
		short1 = "1234567"
		short2 = "abc1de2"
		hex    = "9F86D081884C7D65B2A1C3E4"
		cutTok = "T0123456789abcdefghijKLMNOPQRSTUV"
	)
	zapier := "/hooks/catch/" + short1 + "/" + short2 + "/"
	for name, tc := range map[string]struct {
		path    string
		echo    func(r *http.Request) string
		secrets []string // none of which, nor their first 7 bytes, may show
	}{
		"route trimmed": {zapier, func(r *http.Request) string {
			return "The route " + strings.Trim(r.URL.Path, "/") + " could not be found."
		}, []string{short1, short2}},
		"last slash dropped":   {zapier, func(r *http.Request) string { return "Cannot POST " + strings.TrimSuffix(r.URL.Path, "/") }, []string{short1, short2}},
		"a run of segments":    {zapier, func(r *http.Request) string { return "no hook " + short1 + "/" + short2 }, []string{short1 + "/" + short2}},
		"query-escaped":        {zapier, func(r *http.Request) string { return "log in: /login?next=" + url.QueryEscape(r.URL.Path) }, []string{short1, short2}},
		"lowered":              {"/hooks/" + hex, func(r *http.Request) string { return "unknown hook " + strings.ToLower(r.URL.Path) }, []string{strings.ToLower(hex)}},
		"basic credentials":    {"/hook", func(r *http.Request) string { return "bad credentials: " + r.Header.Get("Authorization") }, []string{"YWxpY2U6czNjcmV0UGFzc3dvcmQ"}},
		"cut by the 4 KiB cut": {"/hooks/" + cutTok, func(r *http.Request) string { return strings.Repeat("x", 4096-40) + "no route " + r.URL.Path }, []string{cutTok}},
		// Go's encoder writes & as \u0026: the raw query whole is then
		// not in the answer, and its value is percent-escaped as written.
		"query in Go's JSON": {"/hook?sv=2024&sig=Zk9PYmFy%2BcXV4%3D", func(r *http.Request) string {
			b, _ := json.Marshal(map[string]string{"error": "bad query", "query": r.URL.RawQuery})
			return string(b)
		}, []string{"Zk9PYmFy%2BcXV4%3D", "Zk9PYmFy+cXV4="}},
		"header in Go's JSON": {"/hook", func(r *http.Request) string {
			b, _ := json.Marshal(map[string]string{"error": "bad token", "got": r.Header.Get("X-Api-Key")})
			return string(b)
		}, []string{"abc\\u003cdef", "abc<def"}},
		"path in PHP's JSON": {"/hooks/catch/" + short1 + "/" + short2, func(r *http.Request) string {
			return `{"error":"no route","path":"` + strings.ReplaceAll(r.URL.Path, "/", `\/`) + `"}`
		}, []string{`catch\/` + short1, short1 + `\/`}},
	} {
		t.Run(name, func(t *testing.T) {
			rv := newReceiver(t)
			rv.handle = func(w http.ResponseWriter, r *http.Request) bool {
				w.WriteHeader(http.StatusNotFound)
				io.WriteString(w, tc.echo(r))
				return true
			}
			conn := rv.conn(tc.path)
			conn.URL = strings.Replace(conn.URL, "https://", "https://alice:s3cretPassword@", 1)
			conn.Headers = map[string]string{"X-Api-Key": "abc<def>&ghi-0123"}
			res, err := newTestSender(t, rv, &webhook.SenderOptions{Retry: shortPolicy(0)}).Send(context.Background(), conn, samplePayload())
			require.Error(t, err)
			require.Len(t, rv.deliveries(), 1, "the receiver saw it: %v", err)
			for _, text := range printedTexts(t, res, err) {
				for _, secret := range tc.secrets {
					assert.NotContains(t, text, secret[:7])
				}
			}
			assert.NotEmpty(t, res.Attempts[0].ResponseText(), "what is not secret stays")
		})
	}
}

// A certificate's names are the receiver's text, which may carry the
// URL's path token; Diagnosis shows the TLS failure's cause as scrubbed as
// the attempt's error.
func TestAttempt_DiagnosisOfATLSFailureShowsNoSecret(t *testing.T) {
	const token = "k9f86d081884c7d65b2a1"
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{token + ".invalid"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	srv.StartTLS()
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}
	defer tr.CloseIdleConnections()
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr}, Retry: shortPolicy(0)})
	require.NoError(t, err)

	conn := webhook.Connection{Name: "crm", URL: "https://localhost:" + srv.URL[strings.LastIndex(srv.URL, ":")+1:] + "/hooks/" + token, Secret: testSecret}
	res, err := s.Send(context.Background(), conn, samplePayload())
	require.Error(t, err)
	require.Equal(t, webhook.KindTLS, res.Attempts[0].Kind, "%v", err)
	assert.Contains(t, res.Attempts[0].Diagnosis(), "certificate is valid for …", "the cause is shown, scrubbed")
	for _, text := range printedTexts(t, res, err) {
		assert.NotContains(t, text, token)
	}
}
