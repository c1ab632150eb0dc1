package webhook_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

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
		{"empty URL", func(c *webhook.Connection) { c.URL = "" }, "url", "empty"},
		{"http URL", func(c *webhook.Connection) { c.URL = "http://crm.example.com/hooks" }, "url", "https://"},
		{"relative URL", func(c *webhook.Connection) { c.URL = "/hooks" }, "url", "has no scheme; want an absolute https:// URL"},
		{"host without a scheme", func(c *webhook.Connection) { c.URL = "crm.example.com/hooks" }, "url", "has no scheme"},
		{"no host", func(c *webhook.Connection) { c.URL = "https:///hooks" }, "url", "no host"},
		{"port only", func(c *webhook.Connection) { c.URL = "https://:443/hooks" }, "url", "no host"},
		{"unparsable URL", func(c *webhook.Connection) { c.URL = "https://exa mple.com/%zz" }, "url", "not a URL"},
		{"GET", func(c *webhook.Connection) { c.Method = "GET" }, "method", `got "GET"`},
		{"lower-case post", func(c *webhook.Connection) { c.Method = "post" }, "method", "POST, PUT or PATCH"},
		{"empty secret", func(c *webhook.Connection) { c.Secret = "" }, "secret", "empty"},
		{"a bound and a rate", func(c *webhook.Connection) { c.MaxInFlight, c.RateLimit = 4, 0.5 }, "", ""},
		{"negative bound", func(c *webhook.Connection) { c.MaxInFlight = -1 }, "maxInFlight", "negative"},
		{"negative rate", func(c *webhook.Connection) { c.RateLimit = -1 }, "rateLimit", "got -1"},
		{"NaN rate", func(c *webhook.Connection) { c.RateLimit = math.NaN() }, "rateLimit", "finite"},
		{"header name with space", func(c *webhook.Connection) { c.Headers = map[string]string{"X Tenant": "1"} }, `headers["X Tenant"]`, "name"},
		{"header name with colon", func(c *webhook.Connection) { c.Headers = map[string]string{"X-A:": "1"} }, `headers["X-A:"]`, "name"},
		{"empty header name", func(c *webhook.Connection) { c.Headers = map[string]string{"": "1"} }, `headers[""]`, "name"},
		{"CRLF in value", func(c *webhook.Connection) {
			c.Headers = map[string]string{"X-Tenant": "1\r\nX-Injected: yes"}
		}, `headers["X-Tenant"]`, "control character"},
		{"LF in value", func(c *webhook.Connection) { c.Headers = map[string]string{"X-Tenant": "1\n"} }, `headers["X-Tenant"]`, "control character"},
		{"NUL in value", func(c *webhook.Connection) { c.Headers = map[string]string{"X-Tenant": "a\x00"} }, `headers["X-Tenant"]`, "control character"},
		{"tab in value is fine", func(c *webhook.Connection) { c.Headers = map[string]string{"X-Tenant": "a\tb"} }, "", ""},
		{"names differing only in case", func(c *webhook.Connection) {
			c.Headers = map[string]string{"x-tenant": "1", "X-Tenant": "2"}
		}, `headers["X-Tenant"]`, `same header as "x-tenant"`},
		{"host not UTF-8", func(c *webhook.Connection) { c.URL = "https://\xd90/hooks" }, "url", "ASCII host name"},
		{"internationalised host", func(c *webhook.Connection) { c.URL = "https://bücher.example/hooks" }, "url", "xn-- form"},
		{"its punycode form", func(c *webhook.Connection) { c.URL = "https://xn--bcher-kva.example/hooks" }, "", ""},
		{"not IDNA either", func(c *webhook.Connection) { c.URL = "https://\u0652/hooks" }, "url", "ASCII host name"},
		{"label with a hyphen at its end", func(c *webhook.Connection) { c.URL = "https://crm-.example.com/hooks" }, "url", "host"},
		{"empty label", func(c *webhook.Connection) { c.URL = "https://crm..example.com/hooks" }, "url", "host"},
		{"final dot", func(c *webhook.Connection) { c.URL = "https://crm.example.com./hooks" }, "", ""},
		{"IPv6 literal", func(c *webhook.Connection) { c.URL = "https://[2001:db8::1]:8443/hooks" }, "", ""},
		{"IPv6 literal without brackets", func(c *webhook.Connection) { c.URL = "https://2001:db8::1/hooks" }, "url", "brackets"},
		{"IPv6 zone", func(c *webhook.Connection) { c.URL = "https://[fe80::1%25eth0]/hooks" }, "url", "zone"},
		{"IPv6 zone with controls", func(c *webhook.Connection) { c.URL = "https://[fe80::1%25\u009b2J\u202e]/hooks" }, "url", "zone"},
		{"colons alone (found by the fuzzer)", func(c *webhook.Connection) { c.URL = "https://:::" }, "url", "brackets"},
		{"underscore", func(c *webhook.Connection) { c.URL = "https://my_service.example.com/hooks" }, "", ""},
		{"port 443", func(c *webhook.Connection) { c.URL = "https://crm.example.com:443/hooks" }, "", ""},
		{"port 65535", func(c *webhook.Connection) { c.URL = "https://crm.example.com:65535/hooks" }, "", ""},
		{"port 0", func(c *webhook.Connection) { c.URL = "https://crm.example.com:0/hooks" }, "url", "port"},
		{"port 65536", func(c *webhook.Connection) { c.URL = "https://crm.example.com:65536/hooks" }, "url", "port"},
		{"port 99999999999999999999", func(c *webhook.Connection) { c.URL = "https://crm.example.com:99999999999999999999/hooks" }, "url", "port"},
		{"port with leading zeros", func(c *webhook.Connection) { c.URL = "https://crm.example.com:00443/hooks" }, "url", "port"},
		{"URL of 8 KiB", func(c *webhook.Connection) { c.URL = urlOfLen(8 << 10) }, "", ""},
		{"URL over 8 KiB", func(c *webhook.Connection) { c.URL = urlOfLen(8<<10 + 1) }, "url", "over the limit of 8192"},
		// With either, net/http sends a POST again, signature and all, when
		// a kept-alive connection closes under it (review: one signature on
		// the wire twice, logged as one attempt).
		{"Idempotency-Key", func(c *webhook.Connection) { c.Headers = map[string]string{"Idempotency-Key": "k"} },
			`headers["Idempotency-Key"]`, "send the request again"},
		{"x-idempotency-key", func(c *webhook.Connection) { c.Headers = map[string]string{"x-idempotency-key": "k"} },
			`headers["x-idempotency-key"]`, "send the request again"},
		{"an underscore elsewhere is fine", func(c *webhook.Connection) { c.Headers = map[string]string{"X_Tenant": "1"} }, "", ""},
	}
	for _, name := range []string{"Content-Type", "content-type", "X-Service-Signature", "x-service-timestamp",
		"X-SERVICE-EVENT", "X-Service-Anything", "Host", "Content-Length", "Transfer-Encoding", "connection", "Upgrade",
		"Expect", "proxy-authorization",
		// CGI-style servers (PHP, WSGI, Rack) read '_' and '-' alike
		// (HTTP_X_SERVICE_SIGNATURE): an underscore name is the header.
		"X_Service_Signature", "x_service_timestamp", "X-Service_Event"} {
		tests = append(tests, struct {
			name      string
			mutate    func(*webhook.Connection)
			wantField string
			wantMsg   string
		}{"reserved " + name, func(c *webhook.Connection) { c.Headers = map[string]string{name: "x"} },
			"headers[" + strconv.Quote(name) + "]", "would replace"})
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

// urlOfLen returns a valid URL n bytes long, of many short path segments.
func urlOfLen(n int) string {
	u := "https://crm.example.com/hooks"
	u += strings.Repeat("/a1b2", (n-len(u))/5)
	return u + strings.Repeat("x", n-len(u))
}

// TestSend_EchoedBasicCredentialsOfAUserWithoutPasswordAreScrubbed pins
// that a URL's user information without a password (https://KEY@host/, an
// API key as the user name) shows in no text made of the answer when the
// receiver echoes the Authorization header net/http sends for it: Basic
// base64("KEY:").
func TestSend_EchoedBasicCredentialsOfAUserWithoutPasswordAreScrubbed(t *testing.T) {
	const key = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
	rv := newReceiver(t)
	rv.handle = func(w http.ResponseWriter, r *http.Request) bool {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, "bad credentials: "+r.Header.Get("Authorization"))
		return true
	}
	conn := rv.conn("/hook")
	conn.URL = strings.Replace(conn.URL, "https://", "https://"+key+"@", 1)
	res, err := newTestSender(t, rv, &webhook.SenderOptions{Retry: shortPolicy(0)}).Send(context.Background(), conn, samplePayload())
	require.Error(t, err)
	basic := base64.StdEncoding.EncodeToString([]byte(key + ":"))
	require.Equal(t, "Basic "+basic, rv.deliveries()[0].Header.Get("Authorization"), "net/http sends the user as Basic credentials")
	for _, text := range printedTexts(t, res, err) {
		assert.NotContains(t, text, basic[:12])
		assert.NotContains(t, text, key[:12])
	}
	assert.Contains(t, res.Attempts[0].ResponseText(), "bad credentials: Basic …", "what is not secret stays")
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

// TestRedactedURL pins that a Connection names its endpoint by its origin
// (internal/redact's TestURL has every case).
func TestRedactedURL(t *testing.T) {
	tests := []struct{ url, want string }{
		{"https://crm.example.com/", "https://crm.example.com/"},
		{"https://hooks.slack.example/services/T0001/B0002/token", "https://hooks.slack.example/…"},
		{"https://u:p@[2001:db8::1]:443/x?k=v", "https://[2001:db8::1]:443/…"},
		{"https://crm.example.com/%zz", "(unparsable URL)"},
	}
	for _, tc := range tests {
		c := webhook.Connection{Name: "n", URL: tc.url}
		assert.Equal(t, `webhook connection "n" (POST `+tc.want+`)`, c.String(), tc.url)
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
