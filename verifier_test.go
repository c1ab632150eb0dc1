package webhook_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

const testSecret = "whsec_test_secret"

// testNow is the receiver's clock in verifier tests.
var testNow = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// signedHeader returns the headers of a delivery of body signed at ts.
func signedHeader(secret string, ts int64, body []byte) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set(webhook.HeaderEvent, webhook.EventUserIdentified)
	h.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts, 10))
	h.Set(webhook.HeaderSignature, webhook.Sign(secret, ts, body))
	return h
}

func newTestVerifier(t testing.TB, secrets ...string) *webhook.Verifier {
	t.Helper()
	if len(secrets) == 0 {
		secrets = []string{testSecret}
	}
	v, err := webhook.NewVerifier(secrets, &webhook.VerifierOptions{
		Now:          func() time.Time { return testNow },
		MaxBodyBytes: 4096,
	})
	require.NoError(t, err)
	return v
}

func TestVerify_KnownAnswers(t *testing.T) {
	for i, v := range loadVectors(t) {
		h := http.Header{}
		h.Set(webhook.HeaderEvent, webhook.EventUserIdentified)
		h.Set(webhook.HeaderTimestamp, strconv.FormatInt(v.timestamp, 10))
		h.Set(webhook.HeaderSignature, v.signature)
		ver, err := webhook.NewVerifier([]string{v.secret}, &webhook.VerifierOptions{
			Now: func() time.Time { return time.UnixMilli(v.timestamp) },
		})
		require.NoError(t, err)
		assert.NoError(t, ver.Verify(h, v.body), "vector %d", i)
	}
}

func TestVerify_PackageFunctionUsesTheClock(t *testing.T) {
	body := []byte(`{"event":"user.identified"}`)
	now := time.Now().UnixMilli()
	require.NoError(t, webhook.Verify(testSecret, signedHeader(testSecret, now, body), body))
	err := webhook.Verify(testSecret, signedHeader(testSecret, now-301_000, body), body)
	assert.ErrorIs(t, err, webhook.ErrTimestampExpired)
	err = webhook.Verify("another secret", signedHeader(testSecret, now, body), body)
	assert.ErrorIs(t, err, webhook.ErrSignatureMismatch)
}

func TestVerifier_Verify(t *testing.T) {
	body := readTestdata(t, "body_user_identified.json")
	now := testNow.UnixMilli()
	sec := time.Second.Milliseconds()

	tests := []struct {
		name    string
		header  func() http.Header
		body    []byte
		wantErr error
		wantMsg string // a part of the message, when it matters
	}{
		{"valid", func() http.Header { return signedHeader(testSecret, now, body) }, body, nil, ""},
		{"299 s old", func() http.Header { return signedHeader(testSecret, now-299*sec, body) }, body, nil, ""},
		{"exactly 300 s old", func() http.Header { return signedHeader(testSecret, now-300*sec, body) }, body, nil, ""},
		{"299 s ahead", func() http.Header { return signedHeader(testSecret, now+299*sec, body) }, body, nil, ""},
		{"301 s old", func() http.Header { return signedHeader(testSecret, now-301*sec, body) }, body, webhook.ErrTimestampExpired, "5m1s old"},
		{"300.001 s old", func() http.Header { return signedHeader(testSecret, now-300*sec-1, body) }, body, webhook.ErrTimestampExpired, ""},
		{"301 s in the future", func() http.Header { return signedHeader(testSecret, now+301*sec, body) }, body, webhook.ErrTimestampInFuture, "ahead"},
		{"timestamp in seconds", func() http.Header { return signedHeader(testSecret, now/1000, body) }, body, webhook.ErrTimestampExpired, "looks like Unix seconds"},
		{"ancient timestamp", func() http.Header { return signedHeader(testSecret, 0, body) }, body, webhook.ErrTimestampExpired, "old"},
		{"far-future timestamp", func() http.Header { return signedHeader(testSecret, 999_999_999_999_999_999, body) }, body, webhook.ErrTimestampInFuture, "years"},
		{"wrong secret", func() http.Header { return signedHeader("whsec_other", now, body) }, body, webhook.ErrSignatureMismatch, ""},
		{"body tampered by one byte", func() http.Header { return signedHeader(testSecret, now, body) }, flipLastByte(body), webhook.ErrSignatureMismatch, ""},
		{"timestamp changed after signing", func() http.Header {
			h := signedHeader(testSecret, now, body)
			h.Set(webhook.HeaderTimestamp, strconv.FormatInt(now+1, 10))
			return h
		}, body, webhook.ErrSignatureMismatch, ""},
		{"missing event header", without(webhook.HeaderEvent, signedHeader(testSecret, now, body)), body, webhook.ErrMissingHeader, webhook.HeaderEvent},
		{"missing timestamp header", without(webhook.HeaderTimestamp, signedHeader(testSecret, now, body)), body, webhook.ErrMissingHeader, webhook.HeaderTimestamp},
		{"missing signature header", without(webhook.HeaderSignature, signedHeader(testSecret, now, body)), body, webhook.ErrMissingHeader, webhook.HeaderSignature},
		{"empty signature", with(webhook.HeaderSignature, "", signedHeader(testSecret, now, body)), body, webhook.ErrMalformedSignature, "empty"},
		{"prefix only", with(webhook.HeaderSignature, "sha256=", signedHeader(testSecret, now, body)), body, webhook.ErrMalformedSignature, ""},
		{"wrong prefix", func() http.Header {
			h := signedHeader(testSecret, now, body)
			h.Set(webhook.HeaderSignature, "sha1="+strings.TrimPrefix(h.Get(webhook.HeaderSignature), "sha256="))
			return h
		}, body, webhook.ErrMalformedSignature, "must start with"},
		{"no prefix", func() http.Header {
			h := signedHeader(testSecret, now, body)
			h.Set(webhook.HeaderSignature, strings.TrimPrefix(h.Get(webhook.HeaderSignature), "sha256="))
			return h
		}, body, webhook.ErrMalformedSignature, ""},
		{"digest too short", with(webhook.HeaderSignature, "sha256=abcd", signedHeader(testSecret, now, body)), body, webhook.ErrMalformedSignature, "64 hex digits"},
		{"digest not hex", with(webhook.HeaderSignature, "sha256="+strings.Repeat("zz", 32), signedHeader(testSecret, now, body)), body, webhook.ErrMalformedSignature, "hex"},
		{"two signatures", func() http.Header {
			h := signedHeader(testSecret, now, body)
			h.Add(webhook.HeaderSignature, h.Get(webhook.HeaderSignature))
			return h
		}, body, webhook.ErrMalformedSignature, "2 times"},
		{"lower-case names, built by hand", func() http.Header { return lowerNames(signedHeader(testSecret, now, body)) }, body, nil, ""},
		{"two spellings of a name, built by hand", func() http.Header {
			h := lowerNames(signedHeader(testSecret, now, body))
			h["X-SERVICE-SIGNATURE"] = []string{"sha256=" + strings.Repeat("0", 64)}
			return h
		}, body, webhook.ErrMalformedSignature, "2 times"},
		{"uppercase hex accepted", func() http.Header {
			h := signedHeader(testSecret, now, body)
			h.Set(webhook.HeaderSignature, "sha256="+strings.ToUpper(strings.TrimPrefix(h.Get(webhook.HeaderSignature), "sha256=")))
			return h
		}, body, nil, ""},
		{"empty timestamp", with(webhook.HeaderTimestamp, "", signedHeader(testSecret, now, body)), body, webhook.ErrMalformedTimestamp, "empty"},
		{"non-decimal timestamp", with(webhook.HeaderTimestamp, "0x19a", signedHeader(testSecret, now, body)), body, webhook.ErrMalformedTimestamp, "decimal digits"},
		{"signed timestamp", with(webhook.HeaderTimestamp, "+"+strconv.FormatInt(now, 10), signedHeader(testSecret, now, body)), body, webhook.ErrMalformedTimestamp, ""},
		{"negative timestamp", with(webhook.HeaderTimestamp, "-1", signedHeader(testSecret, now, body)), body, webhook.ErrMalformedTimestamp, ""},
		{"spaced timestamp", with(webhook.HeaderTimestamp, " "+strconv.FormatInt(now, 10), signedHeader(testSecret, now, body)), body, webhook.ErrMalformedTimestamp, ""},
		{"fractional timestamp", with(webhook.HeaderTimestamp, strconv.FormatInt(now, 10)+".5", signedHeader(testSecret, now, body)), body, webhook.ErrMalformedTimestamp, ""},
		{"ISO timestamp", with(webhook.HeaderTimestamp, "2026-11-21T10:00:00.000Z", signedHeader(testSecret, now, body)), body, webhook.ErrMalformedTimestamp, ""},
		{"leading zero on the signed timestamp", func() http.Header {
			h := signedHeader(testSecret, now, body)
			h.Set(webhook.HeaderTimestamp, "0"+strconv.FormatInt(now, 10)) // the signature is over the text without it
			return h
		}, body, webhook.ErrMalformedTimestamp, "leading zero"},
		{"timestamp zero", with(webhook.HeaderTimestamp, "0", signedHeader(testSecret, 0, body)), body, webhook.ErrTimestampExpired, ""},
		{"timestamp overflowing int64", with(webhook.HeaderTimestamp, strings.Repeat("9", 25), signedHeader(testSecret, now, body)), body, webhook.ErrMalformedTimestamp, ""},
		{"body over the limit", func() http.Header { return signedHeader(testSecret, now, bytes.Repeat([]byte("x"), 4097)) }, bytes.Repeat([]byte("x"), 4097), webhook.ErrBodyTooLarge, "4096"},
		{"body at the limit", func() http.Header { return signedHeader(testSecret, now, bytes.Repeat([]byte("x"), 4096)) }, bytes.Repeat([]byte("x"), 4096), nil, ""},
		{"header names in lower case", func() http.Header {
			h := http.Header{}
			for k, v := range signedHeader(testSecret, now, body) {
				h[strings.ToLower(k)] = v
			}
			return h
		}, body, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := newTestVerifier(t) // each case alone: several sign the same delivery
			err := v.Verify(tc.header(), tc.body)
			if tc.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.wantErr)
			assert.ErrorIs(t, err, webhook.ErrVerification)
			assert.Contains(t, err.Error(), tc.wantMsg)
			assert.True(t, strings.HasPrefix(err.Error(), "webhook: "), "message %q", err)
			assert.NotContains(t, err.Error(), testSecret)
			assert.NotContains(t, err.Error(), webhook.Sign(testSecret, now, tc.body)[7:], "an expected signature leaked")
		})
	}
}

func flipLastByte(b []byte) []byte {
	out := bytes.Clone(b)
	out[len(out)-1] ^= 1
	return out
}

func without(name string, h http.Header) func() http.Header {
	return func() http.Header { h.Del(name); return h }
}

func with(name, value string, h http.Header) func() http.Header {
	return func() http.Header { h.Set(name, value); return h }
}

func TestVerifier_SecretRotation(t *testing.T) {
	body := []byte(`{"event":"user.identified"}`)
	now := testNow.UnixMilli()
	v := newTestVerifier(t, "whsec_old", "whsec_new")
	assert.NoError(t, v.Verify(signedHeader("whsec_old", now, body), body), "old secret")
	assert.NoError(t, v.Verify(signedHeader("whsec_new", now, body), body), "new secret")
	assert.ErrorIs(t, v.Verify(signedHeader("whsec_neither", now, body), body), webhook.ErrSignatureMismatch)
}

func TestNewVerifier_RefusesBadOptions(t *testing.T) {
	tests := []struct {
		name    string
		secrets []string
		opts    *webhook.VerifierOptions
		wantMsg string
	}{
		{"no secret", nil, nil, "at least one secret"},
		{"empty secret", []string{"a", ""}, nil, "secret 2 of 2 is empty"},
		{"only an empty secret", []string{""}, nil, "secret 1 of 1 is empty"},
		{"negative tolerance", []string{"a"}, &webhook.VerifierOptions{Tolerance: -time.Second}, "Tolerance"},
		{"negative body limit", []string{"a"}, &webhook.VerifierOptions{MaxBodyBytes: -1}, "MaxBodyBytes"},
		// A store declared and never made: it would panic on the first
		// request, not say what is wrong.
		{"a nil memory store", []string{"a"}, &webhook.VerifierOptions{ReplayStore: (*webhook.MemoryReplayStore)(nil)}, "ReplayStore is a nil *webhook.MemoryReplayStore"},
		{"a nil store of the caller's", []string{"a"}, &webhook.VerifierOptions{ReplayStore: (*nilStore)(nil)}, "ReplayStore is a nil *webhook_test.nilStore"},
		{"a nil map store", []string{"a"}, &webhook.VerifierOptions{ReplayStore: mapStore(nil)}, "ReplayStore is a nil webhook_test.mapStore"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := webhook.NewVerifier(tc.secrets, tc.opts)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.wantMsg)
		})
	}
}

func TestVerifier_ToleranceOption(t *testing.T) {
	body := []byte(`{}`)
	v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{
		Tolerance: 10 * time.Second,
		Now:       func() time.Time { return testNow },
	})
	require.NoError(t, err)
	assert.NoError(t, v.Verify(signedHeader(testSecret, testNow.UnixMilli()-10_000, body), body))
	assert.ErrorIs(t, v.Verify(signedHeader(testSecret, testNow.UnixMilli()-10_001, body), body), webhook.ErrTimestampExpired)
}

// FuzzVerify checks that no header value or body panics, and that whatever
// verifies carries the signature Sign computes. Run beyond the seed corpus with
//
//	go test -run '^$' -fuzz FuzzVerify
func FuzzVerify(f *testing.F) {
	now := testNow.UnixMilli()
	body := readTestdata(f, "body_user_identified.json")
	f.Add(strconv.FormatInt(now, 10), webhook.Sign(testSecret, now, body), body)
	f.Add(strconv.FormatInt(now/1000, 10), webhook.Sign(testSecret, now/1000, body), body)
	f.Add("", "", []byte{})
	f.Add("-0", "sha256=", []byte("{"))
	f.Add("99999999999999999999999", "sha256="+strings.Repeat("A", 64), []byte("\x00"))
	f.Add(strconv.FormatInt(now, 10), "sha256="+strings.Repeat("g", 64), body)
	v := newTestVerifier(f)
	f.Fuzz(func(t *testing.T, ts, sig string, body []byte) {
		h := http.Header{}
		h.Set(webhook.HeaderEvent, webhook.EventUserIdentified)
		h.Set(webhook.HeaderTimestamp, ts)
		h.Set(webhook.HeaderSignature, sig)
		err := v.Verify(h, body)
		if err == nil {
			n, perr := strconv.ParseInt(ts, 10, 64)
			require.NoError(t, perr, "accepted timestamp %q", ts)
			require.True(t, strings.EqualFold(webhook.Sign(testSecret, n, body), sig), "accepted signature %q", sig)
			return
		}
		require.ErrorIs(t, err, webhook.ErrVerification)
	})
}

// TestVerify_DoesNotAllocateOnSuccess measures successes: distinct
// deliveries, each verified once. Remembering them for replay refusal
// allocates only when a map grows, now and then: amortised, nothing.
func TestVerify_DoesNotAllocateOnSuccess(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items")
	}
	body := readTestdata(t, "body_user_identified.json")
	const runs = 2000
	headers := make([]http.Header, 2*runs+104) // AllocsPerRun runs once more than asked
	for i := range headers {
		headers[i] = signedHeader(testSecret, testNow.UnixMilli()-int64(i), body)
	}
	i := 0 // each delivery verified once, across the runs
	verifyAll := func(v *webhook.Verifier) func() {
		return func() {
			if err := v.Verify(headers[i], body); err != nil {
				t.Fatal(err)
			}
			i++
		}
	}
	v := newTestVerifier(t)
	testing.AllocsPerRun(runs, verifyAll(v)) // the store's maps grow to their size
	assert.Less(t, testing.AllocsPerRun(runs, verifyAll(v)), 0.05, "Verifier.Verify, refusing replays")

	v, err := webhook.NewVerifier([]string{testSecret}, &webhook.VerifierOptions{Now: func() time.Time { return testNow }, AllowReplays: true})
	require.NoError(t, err)
	assert.Zero(t, testing.AllocsPerRun(100, verifyAll(v)), "Verifier.Verify, allowing replays")
	h := signedHeader(testSecret, time.Now().UnixMilli(), body)
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = webhook.Verify(testSecret, h, body) }), "Verify")
}

func TestVerify_EmptySecretNeverVerifies(t *testing.T) {
	body := []byte(`{"event":"user.identified"}`)
	now := time.Now().UnixMilli()
	err := webhook.Verify("", signedHeader("", now, body), body) // an unset environment variable on both sides
	require.ErrorIs(t, err, webhook.ErrVerification)
	assert.ErrorIs(t, err, webhook.ErrEmptySecret)
	assert.Contains(t, err.Error(), "secret is empty")
}

func TestVerifier_ZeroValueRefusesClearly(t *testing.T) {
	body := []byte(`{"event":"user.identified"}`)
	var v webhook.Verifier
	err := v.Verify(signedHeader("", testNow.UnixMilli(), body), body)
	require.ErrorIs(t, err, webhook.ErrVerification)
	assert.Contains(t, err.Error(), "NewVerifier")
	rec := httptest.NewRecorder()
	v.Middleware(http.NotFoundHandler()).ServeHTTP(rec, newSignedRequest("", testNow.UnixMilli(), body))
	assert.Equal(t, http.StatusUnauthorized, rec.Code)
}

// TestVerifier_ZeroValueWithSecretsUsesTheDefaults pins that SetSecrets on a
// Verifier not made by NewVerifier gives one that checks with the defaults
// (the clock, DefaultTolerance, DefaultMaxBodyBytes), rather than one that
// panics on its first request.
func TestVerifier_ZeroValueWithSecretsUsesTheDefaults(t *testing.T) {
	var v webhook.Verifier
	require.NoError(t, v.SetSecrets([]string{testSecret}))
	body := []byte(`{"event":"user.identified"}`)
	now := time.Now()
	assert.NoError(t, v.Verify(signedHeader(testSecret, now.UnixMilli(), body), body))
	assert.ErrorIs(t, v.Verify(signedHeader(testSecret, now.Add(-webhook.DefaultTolerance-time.Minute).UnixMilli(), body), body),
		webhook.ErrTimestampExpired)
	big := bytes.Repeat([]byte("x"), webhook.DefaultMaxBodyBytes+1)
	assert.ErrorIs(t, v.Verify(signedHeader(testSecret, now.UnixMilli(), big), big), webhook.ErrBodyTooLarge)

	for _, tc := range []struct {
		body []byte
		ts   time.Time
		want int
	}{
		{body, now.Add(time.Millisecond), http.StatusOK}, // not the delivery verified above: that would be a replay
		{body, now.Add(-time.Hour), http.StatusUnauthorized},
		{big, now, http.StatusRequestEntityTooLarge},
	} {
		rec := httptest.NewRecorder()
		v.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(rec, newSignedRequest(testSecret, tc.ts.UnixMilli(), tc.body))
		assert.Equal(t, tc.want, rec.Code)
		_, err := v.VerifyRequest(newSignedRequest(testSecret, tc.ts.Add(time.Millisecond).UnixMilli(), tc.body))
		assert.Equal(t, tc.want == http.StatusOK, err == nil, "VerifyRequest: %v", err)
	}
	req := newSignedRequest(testSecret, now.Add(10*time.Millisecond).UnixMilli(), body)
	req2 := newSignedRequest(testSecret, now.Add(10*time.Millisecond).UnixMilli(), body)
	_, err := v.VerifyRequest(req)
	require.NoError(t, err)
	_, err = v.VerifyRequest(req2)
	assert.ErrorIs(t, err, webhook.ErrReplayed, "the zero Verifier refuses replays too")
}

func TestVerifier_SetSecretsWhileServing(t *testing.T) {
	body := []byte(`{"event":"user.identified"}`)
	// Replays allowed: requests signed in the same millisecond are the same
	// delivery, and this test is about secrets.
	v, err := webhook.NewVerifier([]string{"whsec_old"}, &webhook.VerifierOptions{AllowReplays: true})
	require.NoError(t, err)
	handler := v.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	serve := func(secret string) int {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, newSignedRequest(secret, time.Now().UnixMilli(), body))
		return rec.Code
	}
	require.Equal(t, http.StatusOK, serve("whsec_old"))
	require.Equal(t, http.StatusUnauthorized, serve("whsec_new"))

	// Requests keep arriving, signed with either secret, while the
	// secrets are rotated: each is judged by the old or the new set whole.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if code := serve("whsec_old"); code != http.StatusOK && code != http.StatusUnauthorized {
					t.Errorf("status %d", code)
				}
			}
		}()
	}
	require.NoError(t, v.SetSecrets([]string{"whsec_old", "whsec_new"}))
	assert.Equal(t, http.StatusOK, serve("whsec_new"), "the new secret works at once")
	assert.Equal(t, http.StatusOK, serve("whsec_old"), "the old one still does")
	require.NoError(t, v.SetSecrets([]string{"whsec_new"}))
	close(stop)
	wg.Wait()
	assert.Equal(t, http.StatusUnauthorized, serve("whsec_old"), "the old secret is retired")
	assert.Equal(t, http.StatusOK, serve("whsec_new"))

	assert.ErrorContains(t, v.SetSecrets(nil), "at least one secret")
	assert.ErrorContains(t, v.SetSecrets([]string{"whsec_x", ""}), "secret 2 of 2 is empty")
	assert.Equal(t, http.StatusOK, serve("whsec_new"), "a refused SetSecrets changes nothing")
}

// nilStore is a ReplayStore of a caller's, given as a nil pointer.
type nilStore struct{ webhook.ReplayStore }

// mapStore is a ReplayStore of a caller's kept in a map, given nil.
type mapStore map[string]time.Time

func (mapStore) Add(context.Context, string, time.Duration) (bool, error) { return true, nil }
func (mapStore) Claim(context.Context, string, time.Duration) (webhook.ReplayState, error) {
	return webhook.ReplayUnseen, nil
}
func (mapStore) Complete(context.Context, string, time.Duration) error { return nil }
func (mapStore) Release(context.Context, string) error                 { return nil }

// lowerNames returns h with its names in lower case, as a map built by
// hand from another framework's request may hold them.
func lowerNames(h http.Header) http.Header {
	out := make(http.Header, len(h))
	for name, values := range h {
		out[strings.ToLower(name)] = values
	}
	return out
}
