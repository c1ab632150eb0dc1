package webhook_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/webhooktest"
)

// delivered is one request a receiver got.
type delivered struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

// receiver is an HTTPS server on 127.0.0.1 that records what it gets and
// answers with the statuses of script in turn (the last one repeating).
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	got    []delivered
	script []int
	handle func(w http.ResponseWriter, r *http.Request) bool // optional; true if it answered
}

func newReceiver(t *testing.T, script ...int) *receiver {
	t.Helper()
	rv := &receiver{script: script}
	rv.Server = httptest.NewUnstartedServer(http.HandlerFunc(rv.serve))
	rv.Config.ErrorLog = log.New(io.Discard, "", 0) // handshake failures are expected in some tests
	rv.StartTLS()
	t.Cleanup(rv.Close)
	return rv
}

func (rv *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	rv.mu.Lock()
	n := len(rv.got)
	rv.got = append(rv.got, delivered{r.Method, r.URL.Path, r.Header.Clone(), body})
	status := http.StatusOK
	if len(rv.script) > 0 {
		status = rv.script[min(n, len(rv.script)-1)]
	}
	handle := rv.handle
	rv.mu.Unlock()
	if handle != nil && handle(w, r) {
		return
	}
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"status":%d}`, status)
}

func (rv *receiver) deliveries() []delivered {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	return slicesClone(rv.got)
}

func slicesClone[T any](s []T) []T { return append([]T(nil), s...) }

// conn returns a valid connection to the receiver's path.
func (rv *receiver) conn(path string) webhook.Connection {
	return webhook.Connection{Name: "test", URL: rv.URL + path, Secret: testSecret}
}

// shortPolicy retries every failure up to max times, waiting 2 ms: long
// enough for millisecond timestamps to differ, short enough for sockets.
func shortPolicy(max int) *webhook.RetryPolicy {
	return &webhook.RetryPolicy{
		MaxRetries: max,
		Backoff:    func(int, *http.Response) time.Duration { return 2 * time.Millisecond },
	}
}

func newTestSender(t *testing.T, rv *receiver, opts *webhook.SenderOptions) *webhook.Sender {
	t.Helper()
	if opts == nil {
		opts = &webhook.SenderOptions{}
	}
	if opts.Client == nil && rv != nil {
		opts.Client = rv.Client()
	}
	if opts.Retry == nil {
		opts.Retry = shortPolicy(3)
	}
	s, err := webhook.NewSender(opts)
	require.NoError(t, err)
	t.Cleanup(s.CloseIdleConnections)
	return s
}

func TestConnection_Validate(t *testing.T) {
	valid := webhook.Connection{Name: "crm", URL: "https://crm.example.com/hooks?k=v", Secret: "s",
		Headers: map[string]string{"Authorization": "Bearer abc", "X-Tenant": "42"}}
	tests := []struct {
		name      string
		mutate    func(*webhook.Connection)
		wantField string
		wantMsg   string
	}{
		{"valid", func(*webhook.Connection) {}, "", ""},
		{"PUT", func(c *webhook.Connection) { c.Method = "PUT" }, "", ""},
		{"PATCH", func(c *webhook.Connection) { c.Method = "PATCH" }, "", ""},
		{"no headers", func(c *webhook.Connection) { c.Headers = nil }, "", ""},
		{"empty URL", func(c *webhook.Connection) { c.URL = "" }, "URL", "empty"},
		{"http URL", func(c *webhook.Connection) { c.URL = "http://crm.example.com/hooks" }, "URL", "https://"},
		{"relative URL", func(c *webhook.Connection) { c.URL = "/hooks" }, "URL", "https://"},
		{"no host", func(c *webhook.Connection) { c.URL = "https:///hooks" }, "URL", "no host"},
		{"port only", func(c *webhook.Connection) { c.URL = "https://:443/hooks" }, "URL", "no host"},
		{"unparsable URL", func(c *webhook.Connection) { c.URL = "https://exa mple.com/%zz" }, "URL", "not a URL"},
		{"GET", func(c *webhook.Connection) { c.Method = "GET" }, "Method", `got "GET"`},
		{"lower-case post", func(c *webhook.Connection) { c.Method = "post" }, "Method", "POST, PUT or PATCH"},
		{"empty secret", func(c *webhook.Connection) { c.Secret = "" }, "Secret", "empty"},
		{"header name with space", func(c *webhook.Connection) { c.Headers = map[string]string{"X Tenant": "1"} }, `Headers["X Tenant"]`, "name"},
		{"header name with colon", func(c *webhook.Connection) { c.Headers = map[string]string{"X-A:": "1"} }, `Headers["X-A:"]`, "name"},
		{"empty header name", func(c *webhook.Connection) { c.Headers = map[string]string{"": "1"} }, `Headers[""]`, "name"},
		{"CRLF in value", func(c *webhook.Connection) {
			c.Headers = map[string]string{"X-Tenant": "1\r\nX-Injected: yes"}
		}, `Headers["X-Tenant"]`, "control character"},
		{"LF in value", func(c *webhook.Connection) { c.Headers = map[string]string{"X-Tenant": "1\n"} }, `Headers["X-Tenant"]`, "control character"},
		{"NUL in value", func(c *webhook.Connection) { c.Headers = map[string]string{"X-Tenant": "a\x00"} }, `Headers["X-Tenant"]`, "control character"},
		{"tab in value is fine", func(c *webhook.Connection) { c.Headers = map[string]string{"X-Tenant": "a\tb"} }, "", ""},
		{"names differing only in case", func(c *webhook.Connection) {
			c.Headers = map[string]string{"x-tenant": "1", "X-Tenant": "2"}
		}, `Headers["X-Tenant"]`, `same header as "x-tenant"`},
		{"host not UTF-8", func(c *webhook.Connection) { c.URL = "https://\xd90/hooks" }, "URL", "ASCII host name"},
		{"internationalised host", func(c *webhook.Connection) { c.URL = "https://bücher.example/hooks" }, "URL", "xn-- form"},
		{"its punycode form", func(c *webhook.Connection) { c.URL = "https://xn--bcher-kva.example/hooks" }, "", ""},
		{"not IDNA either", func(c *webhook.Connection) { c.URL = "https://\u0652/hooks" }, "URL", "ASCII host name"},
		{"label with a hyphen at its end", func(c *webhook.Connection) { c.URL = "https://crm-.example.com/hooks" }, "URL", "host"},
		{"empty label", func(c *webhook.Connection) { c.URL = "https://crm..example.com/hooks" }, "URL", "host"},
		{"final dot", func(c *webhook.Connection) { c.URL = "https://crm.example.com./hooks" }, "", ""},
		{"IPv6 literal", func(c *webhook.Connection) { c.URL = "https://[2001:db8::1]:8443/hooks" }, "", ""},
		{"IPv6 literal without brackets", func(c *webhook.Connection) { c.URL = "https://2001:db8::1/hooks" }, "URL", "brackets"},
		{"IPv6 zone", func(c *webhook.Connection) { c.URL = "https://[fe80::1%25eth0]/hooks" }, "URL", "zone"},
		{"IPv6 zone with controls", func(c *webhook.Connection) { c.URL = "https://[fe80::1%25\u009b2J\u202e]/hooks" }, "URL", "zone"},
		{"colons alone (found by the fuzzer)", func(c *webhook.Connection) { c.URL = "https://:::" }, "URL", "brackets"},
		{"underscore", func(c *webhook.Connection) { c.URL = "https://my_service.example.com/hooks" }, "", ""},
		{"port 443", func(c *webhook.Connection) { c.URL = "https://crm.example.com:443/hooks" }, "", ""},
		{"port 65535", func(c *webhook.Connection) { c.URL = "https://crm.example.com:65535/hooks" }, "", ""},
		{"port 0", func(c *webhook.Connection) { c.URL = "https://crm.example.com:0/hooks" }, "URL", "port"},
		{"port 65536", func(c *webhook.Connection) { c.URL = "https://crm.example.com:65536/hooks" }, "URL", "port"},
		{"port 99999999999999999999", func(c *webhook.Connection) { c.URL = "https://crm.example.com:99999999999999999999/hooks" }, "URL", "port"},
		{"port with leading zeros", func(c *webhook.Connection) { c.URL = "https://crm.example.com:00443/hooks" }, "URL", "port"},
	}
	for _, name := range []string{"Content-Type", "content-type", "X-Service-Signature", "x-service-timestamp",
		"X-SERVICE-EVENT", "X-Service-Anything", "Host", "Content-Length", "Transfer-Encoding", "connection", "Upgrade",
		"Expect", "proxy-authorization"} {
		tests = append(tests, struct {
			name      string
			mutate    func(*webhook.Connection)
			wantField string
			wantMsg   string
		}{"reserved " + name, func(c *webhook.Connection) { c.Headers = map[string]string{name: "x"} },
			"Headers[" + strconv.Quote(name) + "]", "would replace"})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := valid
			tc.mutate(&c)
			err := c.Validate()
			if tc.wantField == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, webhook.ErrInvalidConnection)
			var fe *webhook.FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.wantField, fe.Field)
			assert.Contains(t, err.Error(), tc.wantMsg)
			assert.NotContains(t, err.Error(), "Bearer abc")
		})
	}
}

// leakyConnection has a secret, credentials in its URL (user information, a
// path token as Slack's and Zapier's URLs have, a query) and a credential in
// a custom header value: none of them may be shown.
var leakyConnection = webhook.Connection{
	Name:    "crm",
	URL:     "https://user:pass@crm.example.com/services/T0001/pathtok9/hooks?token=tok123#frag",
	Secret:  "whsec_very_secret",
	Headers: map[string]string{"Authorization": "Bearer api-key-123"},
}

var leakyParts = []string{"whsec_very_secret", "very_secret", "api-key-123", "tok123", "pass", "frag", "pathtok9", "services",
	// the secret and the header value in hex, as %x of a string would print them
	fmt.Sprintf("%x", "whsec_very_secret"), fmt.Sprintf("%X", "whsec_very_secret"), fmt.Sprintf("%x", "api-key-123")}

func assertNoLeak(t *testing.T, what, out string) {
	t.Helper()
	for _, part := range leakyParts {
		if strings.Contains(out, part) {
			t.Errorf("%s shows %q: %s", what, part, out)
		}
	}
}

func TestConnection_NoFmtVerbShowsSecrets(t *testing.T) {
	c := leakyConnection
	type Exported struct{ Conn webhook.Connection }
	type ExportedPtr struct{ Conn *webhook.Connection }
	shapes := map[string]any{
		"value":                 c,
		"pointer":               &c,
		"slice":                 []webhook.Connection{c, c},
		"slice of pointers":     []*webhook.Connection{&c},
		"array":                 [1]webhook.Connection{c},
		"map value":             map[string]webhook.Connection{"k": c},
		"map of pointers":       map[string]*webhook.Connection{"k": &c},
		"exported field":        Exported{c},
		"exported ptr field":    ExportedPtr{&c},
		"pointer to struct":     &Exported{c},
		"nested slice":          [][]webhook.Connection{{c}},
		"in an interface slice": []any{c, &c},
	}
	flags := []string{"", "+", "#", "-", " ", "0", "10", ".3"}
	for name, v := range shapes {
		for verb := rune('A'); verb <= 'z'; verb++ {
			if !unicode.IsLetter(verb) || verb == 'w' || (verb == 'p' && !printsAsPointer(v)) {
				// %w of a non-error and %p of a non-pointer are misuses (go
				// vet reports them) that fmt prints by reflection, as the
				// Connection doc says.
				continue
			}
			for _, flag := range flags {
				format := "%" + flag + string(verb)
				assertNoLeak(t, fmt.Sprintf("%s of %s", format, name), fmt.Sprintf(format, v))
			}
		}
	}
	assert.Equal(t, `webhook connection "crm" (POST https://crm.example.com/…)`, c.String())
	assert.Equal(t, c.String(), fmt.Sprint(c))
	assert.Equal(t, strconv.Quote(c.String()), fmt.Sprintf("%q", c))
	assert.Equal(t, "<nil>", fmt.Sprint((*webhook.Connection)(nil)))
}

// printsAsPointer reports whether %p prints v as an address.
func printsAsPointer(v any) bool {
	switch reflect.TypeOf(v).Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map:
		return true
	}
	return false
}

func TestConnection_SlogAndJSONShowNoSecrets(t *testing.T) {
	c := leakyConnection
	type Exported struct{ Conn webhook.Connection }
	values := map[string]any{"value": c, "pointer": &c, "slice": []webhook.Connection{c},
		"map": map[string]webhook.Connection{"k": c}, "struct": Exported{c}}
	for name, v := range values {
		for hname, newHandler := range map[string]func(io.Writer) slog.Handler{
			"json": func(w io.Writer) slog.Handler { return slog.NewJSONHandler(w, nil) },
			"text": func(w io.Writer) slog.Handler { return slog.NewTextHandler(w, nil) },
		} {
			var out bytes.Buffer
			logger := slog.New(newHandler(&out))
			logger.Info("x", "conn", v)
			logger.Info("x", slog.Any("conn", v), slog.Group("g", "conn", v))
			assertNoLeak(t, hname+" handler with "+name, out.String())
			assert.Contains(t, out.String(), "https://crm.example.com/…", "%s handler with %s", hname, name)
		}
		b, err := json.Marshal(v)
		require.NoError(t, err)
		assertNoLeak(t, "json.Marshal of "+name, string(b))
		assert.Contains(t, string(b), "https://crm.example.com/…")
	}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "connection", c)
	assert.Contains(t, logs.String(), `"headers":["Authorization"]`)
	b, err := json.Marshal(c)
	require.NoError(t, err)
	assert.JSONEq(t, `{"name":"crm","method":"POST","url":"https://crm.example.com/…","headers":["Authorization"]}`, string(b))
}

func TestSend_WireFormat(t *testing.T) {
	for _, method := range []string{"", http.MethodPost, http.MethodPut, http.MethodPatch} {
		t.Run("method="+method, func(t *testing.T) {
			rv := newReceiver(t)
			c := rv.conn("/hooks/crm")
			c.Method = method
			c.Headers = map[string]string{"Authorization": "Bearer api-key", "x-tenant": "42"}
			s := newTestSender(t, rv, nil)
			before := time.Now().UnixMilli()
			res, err := s.Send(context.Background(), c, samplePayload())
			require.NoError(t, err)
			require.Len(t, res.Attempts, 1)

			got := rv.deliveries()
			require.Len(t, got, 1)
			d := got[0]
			wantMethod := method
			if wantMethod == "" {
				wantMethod = http.MethodPost
			}
			assert.Equal(t, wantMethod, d.Method)
			assert.Equal(t, "/hooks/crm", d.Path)
			assert.Equal(t, string(readTestdata(t, "body_user_identified.json")), string(d.Body))
			assert.Equal(t, "application/json", d.Header.Get("Content-Type"))
			assert.Equal(t, webhook.EventUserIdentified, d.Header.Get(webhook.HeaderEvent))
			assert.Equal(t, "Bearer api-key", d.Header.Get("Authorization"))
			assert.Equal(t, "42", d.Header.Get("X-Tenant"))
			ts, err := strconv.ParseInt(d.Header.Get(webhook.HeaderTimestamp), 10, 64)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, ts, before)
			assert.Equal(t, res.Attempts[0].Timestamp, ts)
			assert.Equal(t, webhook.Sign(testSecret, ts, d.Body), d.Header.Get(webhook.HeaderSignature))
			assert.NoError(t, webhook.Verify(testSecret, d.Header, d.Body), "the receiver's check")
			assert.Equal(t, []string{"Bearer api-key"}, d.Header.Values("Authorization"), "custom header sent once")
			for name := range d.Header {
				assert.NotContains(t, strings.ToLower(name), "secret")
			}
		})
	}
}

func TestSend_RetriesResignOverIdenticalBody(t *testing.T) {
	rv := newReceiver(t, 500, 500, 200)
	var hooked []webhook.Attempt
	type ctxKey struct{}
	ctx := context.WithValue(context.Background(), ctxKey{}, "trace-1")
	s := newTestSender(t, rv, &webhook.SenderOptions{OnAttempt: func(ctx context.Context, c webhook.Connection, a webhook.Attempt) {
		assert.Equal(t, "trace-1", ctx.Value(ctxKey{}), "the caller's context values")
		assert.Equal(t, rv.URL+"/", c.URL, "the attempt's connection")
		hooked = append(hooked, a)
	}})
	res, err := s.Send(ctx, rv.conn("/"), samplePayload())
	require.NoError(t, err)
	require.Len(t, res.Attempts, 3)
	got := rv.deliveries()
	require.Len(t, got, 3)
	var last int64
	for i, d := range got {
		assert.Equal(t, got[0].Body, d.Body, "body of attempt %d", i+1)
		ts, err := strconv.ParseInt(d.Header.Get(webhook.HeaderTimestamp), 10, 64)
		require.NoError(t, err)
		assert.Greater(t, ts, last, "timestamp of attempt %d", i+1)
		last = ts
		assert.NoError(t, webhook.Verify(testSecret, d.Header, d.Body), "attempt %d", i+1)
		assert.Equal(t, res.Attempts[i].Timestamp, ts)
	}
	for i, a := range res.Attempts {
		assert.Equal(t, i+1, a.N)
	}
	assert.Equal(t, []int{500, 500, 200}, statuses(res.Attempts))
	assert.Equal(t, []bool{true, true, false}, retries(res.Attempts))
	assert.Equal(t, webhook.KindStatus, res.Attempts[0].Kind)
	assert.Equal(t, `{"status":500}`, string(res.Attempts[0].ResponseBody))
	assert.True(t, res.Attempts[2].OK())
	if diff := cmp.Diff(res.Attempts, hooked, cmp.Comparer(sameError)); diff != "" {
		t.Errorf("OnAttempt saw another log (-result +hook):\n%s", diff)
	}
}

func sameError(a, b error) bool { return a == b }

func statuses(as []webhook.Attempt) []int {
	var out []int
	for _, a := range as {
		out = append(out, a.StatusCode)
	}
	return out
}

func retries(as []webhook.Attempt) []bool {
	var out []bool
	for _, a := range as {
		out = append(out, a.Retry)
	}
	return out
}

func kinds(as []webhook.Attempt) []webhook.FailureKind {
	var out []webhook.FailureKind
	for _, a := range as {
		out = append(out, a.Kind)
	}
	return out
}

func TestSend_GivesUpAfterFourAttempts(t *testing.T) {
	srv := webhooktest.NewServer(testSecret, nil)
	defer srv.Close()
	srv.Script(webhooktest.Status(500), webhooktest.Status(500), webhooktest.Status(500), webhooktest.Status(500))
	res, err := srv.Sender(&webhook.SenderOptions{Retry: shortPolicy(3)}).Send(context.Background(), srv.Connection(), samplePayload())
	var de *webhook.DeliveryError
	require.ErrorAs(t, err, &de)
	assert.Len(t, srv.Deliveries(), 4)
	assert.Len(t, de.Attempts, 4)
	assert.Equal(t, res.Attempts, de.Attempts)
	assert.Equal(t, err, res.Err)
	assert.Equal(t, []int{500, 500, 500, 500}, statuses(de.Attempts))
	assert.Equal(t, []bool{true, true, true, false}, retries(de.Attempts))
	assert.Equal(t, `webhook: delivery to "webhooktest" failed after 4 attempt(s): webhook: receiver answered 500 Internal Server Error`, err.Error())
}

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
		// Returning would answer 200, which can still reach a sender
		// whose attempt timed out a moment before: never answer.
		panic(http.ErrAbortHandler)
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
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

func TestSend_InvalidConnectionSendsNothing(t *testing.T) {
	rv := newReceiver(t)
	s := newTestSender(t, rv, nil)
	c := rv.conn("/")
	c.Headers = map[string]string{"X-Service-Signature": "sha256=forged"}
	res, err := s.Send(context.Background(), c, samplePayload())
	require.ErrorIs(t, err, webhook.ErrInvalidConnection)
	assert.Empty(t, res.Attempts)
	assert.Equal(t, err, res.Err)
	assert.Empty(t, rv.deliveries())
}

func TestSend_InvalidPayloadSendsNothing(t *testing.T) {
	rv := newReceiver(t)
	s := newTestSender(t, rv, nil)
	p := samplePayload()
	p.User.ID = "8f3a2b" // no usr_ prefix
	res, err := s.Send(context.Background(), rv.conn("/"), p)
	require.ErrorIs(t, err, webhook.ErrInvalidPayload)
	assert.Contains(t, err.Error(), "user.id")
	assert.Empty(t, res.Attempts)

	for _, event := range []string{"", "user.identified\r\nX-Injected: 1"} {
		res, err = s.SendBytes(context.Background(), rv.conn("/"), event, []byte(`{}`))
		require.ErrorIs(t, err, webhook.ErrInvalidPayload, "event %q", event)
		assert.Empty(t, res.Attempts)
	}
	assert.Empty(t, rv.deliveries())
}

func TestSendAll_IndependentResultsInOrder(t *testing.T) {
	ok := newReceiver(t)
	failing := newReceiver(t, 500)
	// Both servers' certificates are the same test certificate.
	s := newTestSender(t, ok, &webhook.SenderOptions{Retry: shortPolicy(1), MaxConcurrency: 2})
	invalid := ok.conn("/")
	invalid.Secret = ""
	conns := []webhook.Connection{ok.conn("/a"), failing.conn("/b"), invalid, ok.conn("/c")}
	results := s.SendAll(context.Background(), conns, samplePayload())
	require.Len(t, results, 4)
	assert.NoError(t, results[0].Err)
	var de *webhook.DeliveryError
	assert.ErrorAs(t, results[1].Err, &de)
	assert.Len(t, results[1].Attempts, 2)
	assert.ErrorIs(t, results[2].Err, webhook.ErrInvalidConnection)
	assert.NoError(t, results[3].Err)
	paths := map[string]bool{}
	for _, d := range ok.deliveries() {
		paths[d.Path] = true
		assert.Equal(t, string(readTestdata(t, "body_user_identified.json")), string(d.Body))
	}
	assert.Equal(t, map[string]bool{"/a": true, "/c": true}, paths)
}

func TestSendAll_InvalidPayloadSendsNothing(t *testing.T) {
	rv := newReceiver(t)
	s := newTestSender(t, rv, nil)
	p := samplePayload()
	p.Event = ""
	results := s.SendAll(context.Background(), []webhook.Connection{rv.conn("/a"), rv.conn("/b")}, p)
	require.Len(t, results, 2)
	for _, r := range results {
		assert.ErrorIs(t, r.Err, webhook.ErrInvalidPayload)
		assert.Empty(t, r.Attempts)
	}
	assert.Empty(t, rv.deliveries())
}

func TestSendTest(t *testing.T) {
	srv := webhooktest.NewServer(testSecret, nil)
	defer srv.Close()
	res, err := srv.Sender(nil).SendTest(context.Background(), srv.Connection())
	require.NoError(t, err)
	require.Len(t, res.Attempts, 1)
	assert.Contains(t, res.Attempts[0].Diagnosis(), "delivered: the endpoint answered 200")
	got, err := srv.Deliveries()[0].Payload()
	require.NoError(t, err)
	assert.NoError(t, srv.Deliveries()[0].Err)
	assert.NoError(t, got.Validate(), "the test payload is complete and valid")
	assert.Equal(t, "Test User", got.User.Name)
	assert.Equal(t, "test.user@example.com", got.User.Email)
	assert.True(t, got.IsSendTest(), "a receiver can recognise it")
}

func TestSendTest_DiagnosesWrongSecretWithoutRetrying(t *testing.T) {
	rv := newReceiver(t, http.StatusUnauthorized)
	s := newTestSender(t, rv, nil)
	res, err := s.SendTest(context.Background(), rv.conn("/"))
	require.Error(t, err)
	require.Len(t, res.Attempts, 1, "Send Test makes one attempt")
	assert.False(t, res.Attempts[0].Retry)
	assert.Contains(t, res.Attempts[0].Diagnosis(), "this connection's secret")
}

func TestSender_Attempt(t *testing.T) {
	rv := newReceiver(t, 503)
	s := newTestSender(t, rv, &webhook.SenderOptions{Retry: webhook.DefaultRetryPolicy()})
	body, err := json.Marshal(samplePayload())
	require.NoError(t, err)
	want := map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 0}
	for n := 1; n <= 4; n++ {
		a := s.Attempt(context.Background(), rv.conn("/"), webhook.EventUserIdentified, body, n)
		assert.Equal(t, n, a.N)
		assert.Equal(t, 503, a.StatusCode)
		assert.Equal(t, want[n] > 0, a.Retry, "attempt %d", n)
		assert.Equal(t, want[n], a.RetryIn, "attempt %d", n)
	}
	assert.Len(t, rv.deliveries(), 4, "Attempt makes exactly one request")

	a := s.Attempt(context.Background(), webhook.Connection{URL: "http://x"}, webhook.EventUserIdentified, body, 1)
	assert.Equal(t, webhook.KindInvalid, a.Kind)
	assert.ErrorIs(t, a.Err, webhook.ErrInvalidConnection)
}

func TestNewSender_RefusesBadOptions(t *testing.T) {
	for _, opts := range []*webhook.SenderOptions{
		{Retry: &webhook.RetryPolicy{MaxRetries: -1}},
		{AttemptTimeout: -time.Second},
		{MaxConcurrency: -1},
	} {
		_, err := webhook.NewSender(opts)
		assert.Error(t, err, "%+v", opts)
	}
}

func TestNewSender_DoesNotModifyTheClient(t *testing.T) {
	rv := newReceiver(t, http.StatusMovedPermanently)
	client := rv.Client()
	before := *client
	s := newTestSender(t, rv, &webhook.SenderOptions{Client: client, Retry: shortPolicy(0)})
	_, err := s.Send(context.Background(), rv.conn("/"), samplePayload())
	require.Error(t, err)
	assert.Zero(t, client.Timeout)
	assert.Nil(t, client.CheckRedirect)
	assert.Equal(t, before.Transport, client.Transport)
}

func TestSender_AttemptIgnoresTheContextDeadline(t *testing.T) {
	s := fakeSender(t, func(*http.Request) (*http.Response, error) { return answer(503), nil }, &webhook.RetryPolicy{
		MaxRetries: 3,
		Backoff:    func(int, *http.Response) time.Duration { return time.Minute },
	})
	// A job queue runs each attempt under its own deadline, shorter than the
	// wait it will schedule.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := s.Attempt(ctx, fakeConn, webhook.EventUserIdentified, []byte(`{}`), 1)
	assert.True(t, a.Retry, "a queue schedules the retry, whatever this call's deadline")
	assert.Equal(t, time.Minute, a.RetryIn)

	res, err := s.Send(ctx, fakeConn, samplePayload())
	require.Error(t, err)
	require.Len(t, res.Attempts, 1, "Send still refuses a wait its deadline cannot cover")
	assert.False(t, res.Attempts[0].Retry)
}

func TestSend_ContextDoneBeforehandSendsNothing(t *testing.T) {
	sent := 0
	s := fakeSender(t, func(*http.Request) (*http.Response, error) { sent++; return answer(200), nil }, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := s.Send(ctx, fakeConn, samplePayload())
	require.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, res.Attempts, "the log shows what reached the wire: nothing")
	a := s.Attempt(ctx, fakeConn, webhook.EventUserIdentified, []byte(`{}`), 2)
	assert.Equal(t, webhook.KindCanceled, a.Kind)
	assert.Equal(t, 2, a.N)
	assert.False(t, a.Retry)
	assert.ErrorIs(t, a.Err, context.Canceled)
	res, err = s.SendTest(ctx, fakeConn)
	require.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, res.Attempts)
	assert.Zero(t, sent)

	res, err = s.Send(ctx, webhook.Connection{URL: "http://x"}, samplePayload())
	require.ErrorIs(t, err, webhook.ErrInvalidConnection, "an invalid connection is reported first")
	assert.Empty(t, res.Attempts)
}

func TestSend_RefusesBodiesOverTheLimit(t *testing.T) {
	sent := 0
	rt := func(*http.Request) (*http.Response, error) { sent++; return answer(200), nil }
	s := fakeSender(t, rt, nil)
	big := samplePayload()
	big.User.Metadata = webhook.Metadata{"notes": strings.Repeat("n", webhook.DefaultMaxBodyBytes)}
	res, err := s.Send(context.Background(), fakeConn, big)
	require.ErrorIs(t, err, webhook.ErrInvalidPayload)
	var fe *webhook.FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "body", fe.Field)
	assert.Contains(t, fe.Reason, "MaxBodyBytes")
	assert.Empty(t, res.Attempts)
	a := s.Attempt(context.Background(), fakeConn, webhook.EventUserIdentified, make([]byte, webhook.DefaultMaxBodyBytes+1), 1)
	assert.Equal(t, webhook.KindInvalid, a.Kind)
	assert.Zero(t, sent)

	raised, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: roundTripFunc(rt)}, MaxBodyBytes: 4 << 20})
	require.NoError(t, err)
	_, err = raised.Send(context.Background(), fakeConn, big)
	require.NoError(t, err)
	assert.Equal(t, 1, sent)
	_, err = webhook.NewSender(&webhook.SenderOptions{MaxBodyBytes: -1})
	assert.ErrorContains(t, err, "MaxBodyBytes")
}

func TestSender_ZeroValueRefusesClearly(t *testing.T) {
	var s webhook.Sender
	ctx := context.Background()
	_, err := s.Send(ctx, fakeConn, samplePayload())
	assert.ErrorContains(t, err, "NewSender")
	_, err = s.SendBytes(ctx, fakeConn, webhook.EventUserIdentified, []byte(`{}`))
	assert.ErrorContains(t, err, "NewSender")
	_, err = s.SendTest(ctx, fakeConn)
	assert.ErrorContains(t, err, "NewSender")
	results := s.SendAll(ctx, []webhook.Connection{fakeConn, fakeConn}, samplePayload())
	require.Len(t, results, 2)
	assert.ErrorContains(t, results[1].Err, "NewSender")
	a := s.Attempt(ctx, fakeConn, webhook.EventUserIdentified, []byte(`{}`), 1)
	assert.ErrorContains(t, a.Err, "NewSender")
	s.CloseIdleConnections() // no panic
}

func TestSendAll_OnAttemptRunsConcurrently(t *testing.T) {
	// Two deliveries whose receivers each wait until both attempts are in
	// flight: SendAll makes them at once, and OnAttempt is called from both.
	rv := newReceiver(t)
	var arrived sync.WaitGroup
	arrived.Add(2)
	rv.handle = func(w http.ResponseWriter, r *http.Request) bool {
		arrived.Done()
		arrived.Wait()
		return false
	}
	var mu sync.Mutex
	seen := map[string]int{}
	s := newTestSender(t, rv, &webhook.SenderOptions{MaxConcurrency: 2, OnAttempt: func(_ context.Context, c webhook.Connection, a webhook.Attempt) {
		mu.Lock()
		seen[c.Name]++
		mu.Unlock()
	}})
	a, b := rv.conn("/a"), rv.conn("/b")
	a.Name, b.Name = "a", "b"
	results := s.SendAll(context.Background(), []webhook.Connection{a, b}, samplePayload())
	for _, r := range results {
		require.NoError(t, r.Err)
	}
	assert.Equal(t, map[string]int{"a": 1, "b": 1}, seen)
}

func TestSender_AttemptTimeout(t *testing.T) {
	s, err := webhook.NewSender(nil)
	require.NoError(t, err)
	assert.Equal(t, webhook.DefaultAttemptTimeout, s.AttemptTimeout())
	s, err = webhook.NewSender(&webhook.SenderOptions{AttemptTimeout: 3 * time.Second})
	require.NoError(t, err)
	assert.Equal(t, 3*time.Second, s.AttemptTimeout())
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

func TestRedactedURL(t *testing.T) {
	tests := []struct{ url, want string }{
		{"https://crm.example.com", "https://crm.example.com"},
		{"https://crm.example.com/", "https://crm.example.com/"},
		{"https://crm.example.com:8443/", "https://crm.example.com:8443/"},
		{"https://hooks.slack.example/services/T0001/B0002/token", "https://hooks.slack.example/…"},
		{"https://crm.example.com/?k=v", "https://crm.example.com/…"},
		{"https://crm.example.com?k=v", "https://crm.example.com/…"},
		{"https://crm.example.com/#frag", "https://crm.example.com/"},
		{"https://u:p@[2001:db8::1]:443/x", "https://[2001:db8::1]:443/…"},
		{"https://crm.example.com/%zz", "(unparsable URL)"},
		{"", "(unparsable URL)"},
		{"/login?next=/token", "/…"}, // a relative Location: its path may carry a secret too
		{"crm.example.com/hooks", "/…"},
	}
	for _, tc := range tests {
		c := webhook.Connection{Name: "n", URL: tc.url}
		assert.Equal(t, `webhook connection "n" (POST `+tc.want+`)`, c.String(), tc.url)
	}
}

// TestSend_URLPathIsNeverShown pins that a URL's path, which carries the
// credential in many webhook URLs, reaches no error, log line, table or
// formatting of a failed delivery, whatever the failure.
func TestSend_URLPathIsNeverShown(t *testing.T) {
	const path = "/services/T0001/B0002/pathsecret9"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := "https://" + ln.Addr().String() + path + "?q=querysecret8"
	require.NoError(t, ln.Close())
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

// TestConnection_FormatsAsPrintableText pins that printing a
// Connection (String, every fmt verb) gives printable text whatever its
// customer typed. url.Parse lets C1 controls (U+009B acts as ESC [ on many
// terminals), bidi overrides and invalid UTF-8 through in a host, raw or
// percent-encoded, and an IPv6 zone may carry them; Method is printed as it
// is. A connection is logged most often as it is refused.
func TestConnection_FormatsAsPrintableText(t *testing.T) {
	for _, c := range []webhook.Connection{
		{Name: "valid, zone", URL: "https://[fe80::1%25\u009b2J\u202e]/services/T/B/token", Secret: "s"},
		{Name: "host", URL: "https://evil\u009b2J\u202e.example/services/T/B/token", Secret: "s"},
		{Name: "encoded host", URL: "https://evil%C2%9B2J%E2%80%AE%FF.example/p", Secret: "s"},
		{Name: "method", URL: "https://crm.example.com/", Method: "POST\x1b[2J\u009b31m", Secret: "s"},
	} {
		t.Run(c.Name, func(t *testing.T) {
			for _, s := range []string{c.String(), fmt.Sprint(c), fmt.Sprintf("%v|%+v|%#v|%s", c, c, c, c)} {
				requirePrintable(t, s, "")
			}
		})
	}
}

// TestSend_LogsOnlyPrintableText pins that the Sender's slog records are
// printable text whatever the customer typed in the dashboard: its Name is a
// free label, which may carry U+009B (ESC [ on many terminals) or U+202E.
// The JSON handler, the usual one in production, writes them as they are,
// and the logs are read on terminals. Nothing is sent: the link-local
// address is blocked. (An IPv6 zone, which could carry them in the URL,
// is refused by Validate.)
func TestSend_LogsOnlyPrintableText(t *testing.T) {
	for _, c := range []webhook.Connection{
		{Name: "CRM\u009b2J\u202e", URL: "https://[fe80::1]/hooks", Secret: testSecret,
			Headers: map[string]string{"X-Tenant": "1"}},
	} {
		t.Run(c.Name, func(t *testing.T) {
			require.NoError(t, c.Validate(), "a valid connection")
			var logs bytes.Buffer
			s := newTestSender(t, nil, &webhook.SenderOptions{Retry: shortPolicy(0),
				Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			res, err := s.Send(context.Background(), c, samplePayload())
			require.ErrorIs(t, err, webhook.ErrBlockedDestination)
			requireAllPrintable(t, res, err) // the attempt's own texts are clean
			require.NotEmpty(t, logs.String())
			requirePrintable(t, logs.String(), "\n")
		})
	}
}
