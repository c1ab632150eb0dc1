package webhook_test

// Fuzz targets beyond the seeds, which run in every go test:
//
//	go test -run '^$' -fuzz FuzzMiddleware -fuzztime 60s .
//	go test -run '^$' -fuzz FuzzConnection_Validate -fuzztime 60s .
//
// .ci/run gives each a short pass.

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

// rawHMAC is the reference signature, computed without the library: the
// HMAC-SHA256 of the timestamp text, a period and the body.
func rawHMAC(secret, tsText string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(tsText + "."))
	m.Write(body)
	return m.Sum(nil)
}

// authentic is the oracle: whether a request with these headers and body is
// an authentic, fresh delivery by the spec and DESIGN's decisions 8, 9, 19.
func authentic(h http.Header, body []byte, now time.Time, tolerance time.Duration, maxBody int) bool {
	one := func(name string) (string, bool) {
		vs := h.Values(name)
		return strings.Join(vs, ""), len(vs) == 1 && vs[0] != ""
	}
	tsText, okTS := one(webhook.HeaderTimestamp)
	sig, okSig := one(webhook.HeaderSignature)
	_, okEvent := one(webhook.HeaderEvent)
	if !okTS || !okSig || !okEvent || len(body) > maxBody {
		return false
	}
	if tsText != strings.TrimLeft(tsText, "0") && tsText != "0" {
		return false // not canonical
	}
	ts, err := strconv.ParseUint(tsText, 10, 63)
	if err != nil || tsText[0] == '+' {
		return false
	}
	age := now.UnixMilli() - int64(ts)
	if age > tolerance.Milliseconds() || -age > tolerance.Milliseconds() {
		return false
	}
	got, err := hex.DecodeString(strings.TrimPrefix(sig, "sha256="))
	return strings.HasPrefix(sig, "sha256=") && err == nil && hmac.Equal(got, rawHMAC(testSecret, tsText, body))
}

// FuzzMiddleware drives the middleware end to end with arbitrary headers
// and bodies: nothing but an authentic, fresh delivery reaches the next
// handler, which then reads the identical body; everything else gets 401 or
// 413, and nothing panics.
func FuzzMiddleware(f *testing.F) {
	now := testNow.UnixMilli()
	body := readTestdata(f, "body_user_identified.json")
	nowText := strconv.FormatInt(now, 10)
	f.Add(nowText, "", webhook.EventUserIdentified, body, true, uint8(0))
	f.Add("0"+nowText, "", webhook.EventUserIdentified, body, true, uint8(0))
	f.Add(strconv.FormatInt(now-300_001, 10), "", webhook.EventUserIdentified, body, true, uint8(0))
	f.Add(strconv.FormatInt(now+300_000, 10), "", webhook.EventUserIdentified, body, true, uint8(0))
	f.Add(nowText, "", "", body, true, uint8(0))
	f.Add(nowText, "", webhook.EventUserIdentified, body, true, uint8(1))
	f.Add(nowText, "", webhook.EventUserIdentified, body, true, uint8(2))
	f.Add(nowText, "", webhook.EventUserIdentified, bytes.Repeat([]byte("x"), 4097), true, uint8(0))
	f.Add(nowText, "sha256="+strings.Repeat("0", 64), webhook.EventUserIdentified, body, false, uint8(0))
	f.Add("+"+nowText, "", webhook.EventUserIdentified, body, true, uint8(0))
	f.Add(nowText+" ", "", webhook.EventUserIdentified, body, true, uint8(3))
	f.Fuzz(func(t *testing.T, tsText, sig, event string, body []byte, sign bool, mutate uint8) {
		// Tolerance 5 min, body limit 4096 bytes, and a fresh memory of
		// accepted deliveries: the oracle has none.
		v := newTestVerifier(t)
		if sign { // the fuzzer cannot forge HMACs: give it real ones to mutate around
			sig = "sha256=" + hex.EncodeToString(rawHMAC(testSecret, tsText, body))
			if mutate&4 != 0 {
				sig = strings.ToUpper(sig[:7]) + sig[7:]
			}
		}
		r := httptest.NewRequest(http.MethodPost, "/webhooks", bytes.NewReader(body))
		for name, value := range map[string]string{webhook.HeaderTimestamp: tsText, webhook.HeaderSignature: sig, webhook.HeaderEvent: event} {
			if !validFieldValue(value) {
				return // net/http never delivers such a header
			}
			r.Header[name] = []string{value}
		}
		switch mutate & 3 {
		case 1: // a second signature header
			r.Header.Add(webhook.HeaderSignature, sig)
		case 2: // names in lower case, as a hand-built header might have them
			for name, vs := range r.Header {
				delete(r.Header, name)
				r.Header[strings.ToLower(name)] = vs
			}
		}
		want := authentic(http.Header(canonicalized(r.Header)), body, testNow, webhook.DefaultTolerance, 4096)

		var got []byte
		called := false
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			called = true
			got, _ = io.ReadAll(r.Body)
		})
		rec := httptest.NewRecorder()
		v.Middleware(next).ServeHTTP(rec, r)
		require.Equal(t, want, called, "next called = %v, oracle says authentic = %v (ts %q, sig %q, status %d)", called, want, tsText, sig, rec.Code)
		if called {
			require.Equal(t, body, got, "the next handler must read the identical body")
			return
		}
		require.Contains(t, []int{http.StatusUnauthorized, http.StatusRequestEntityTooLarge}, rec.Code)
		require.NotContains(t, rec.Body.String(), testSecret)
	})
}

// canonicalized returns h with canonical names, merging values.
func canonicalized(h http.Header) map[string][]string {
	out := http.Header{}
	for name, vs := range h {
		for _, v := range vs {
			out.Add(name, v)
		}
	}
	return out
}

func validFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

var errDialReached = errors.New("dial reached")

// FuzzConnection_Validate checks that Validate accepts only connections the
// transport can send as configured: a valid one reaches the dial of the
// right host and port, with the custom header on the wire as given, and
// Validate's error never shows the secret or a header value.
func FuzzConnection_Validate(f *testing.F) {
	f.Add("https://crm.example.com/hooks?k=v", "POST", "Authorization", "Bearer abc", "whsec_s3cr3t")
	f.Add("https://crm.example.com:65536/", "", "X-Tenant", "1", "whsec_s3cr3t")
	f.Add("https://[::1]:443/x", "PATCH", "x-tenant", "a\tb", "whsec_s3cr3t")
	f.Add("http://crm.example.com/", "PUT", "Host", "evil", "whsec_s3cr3t")
	f.Add("https://user:pw@h/%zz", "GET", "X-A\r\n", "1\r\nX-B: 2", "")
	f.Add("https://h:0/", "post", "", "", "x")
	f.Add("https://h:00443/", "POST", "Content-Type", "text/plain", "whsec_s3cr3t")
	f.Fuzz(func(t *testing.T, rawURL, method, name, value, secret string) {
		c := webhook.Connection{URL: rawURL, Method: method, Headers: map[string]string{name: value}, Secret: secret}
		err := c.Validate()
		if err != nil {
			require.ErrorIs(t, err, webhook.ErrInvalidConnection)
			var fe *webhook.FieldError
			require.ErrorAs(t, err, &fe)
			if len(secret) >= 8 && !strings.Contains(rawURL+method+name+value, secret) {
				require.NotContains(t, err.Error(), secret)
			}
			if len(value) >= 8 && !strings.Contains(rawURL+method+name, value) {
				require.NotContains(t, err.Error(), value, "a header value may be a credential")
			}
			return
		}
		u, perr := url.Parse(rawURL)
		require.NoError(t, perr)
		wantAddr := net.JoinHostPort(u.Hostname(), cmpOr(u.Port(), "443"))
		var dialled string
		tr := &http.Transport{DialTLSContext: func(_ context.Context, _, addr string) (net.Conn, error) {
			dialled = addr
			return nil, errDialReached
		}}
		s, serr := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr}, Retry: &webhook.RetryPolicy{}})
		require.NoError(t, serr)
		res, _ := s.Send(context.Background(), c, samplePayload())
		require.Len(t, res.Attempts, 1)
		require.ErrorIs(t, res.Attempts[0].Err, errDialReached, "a valid connection must reach the dial")
		assert.Equal(t, wantAddr, dialled, "the host dialled is the host validated")
	})
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
