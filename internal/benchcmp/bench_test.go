package benchcmp

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-github/v75/github"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stripe/stripe-go/v85/webhook"
	svix "github.com/svix/svix-webhooks/go"

	signedhook "github.com/signedhook/webhook"
)

var sizes = []struct {
	name string
	n    int
}{{"256B", 256}, {"1KiB", 1 << 10}, {"16KiB", 16 << 10}, {"256KiB", 256 << 10}}

const secret = "whsec_benchcmp_secret_0123456789"

// body returns n bytes of JSON-like text, the same for every library.
func body(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	copy(b, `{"event":"user.identified","user":{"notes":"`)
	b[n-2], b[n-1] = '"', '}'
	return b
}

// floor keeps keyed HMAC state per secret: the least work a verifier of
// this scheme can do.
type floor struct{ pool sync.Pool }

type floorState struct {
	mac hash.Hash
	buf [64]byte
}

func newFloor(key string) *floor {
	f := &floor{}
	f.pool.New = func() any { return &floorState{mac: hmac.New(sha256.New, []byte(key))} }
	return f
}

func (f *floor) sum(ts string, body []byte, out *[32]byte) {
	st := f.pool.Get().(*floorState)
	st.mac.Reset()
	st.mac.Write(append(st.buf[:0], ts...))
	st.mac.Write(dot)
	st.mac.Write(body)
	copy(out[:], st.mac.Sum(st.buf[:0]))
	f.pool.Put(st)
}

var (
	sink bool
	dot  = []byte{'.'}
)

func BenchmarkVerify(b *testing.B) {
	now := time.Now()
	ts := strconv.FormatInt(now.UnixMilli(), 10)
	secs := strconv.FormatInt(now.Unix(), 10)
	swSecret := "whsec_" + base64.StdEncoding.EncodeToString([]byte(secret))
	for _, size := range sizes {
		payload := body(size.n)
		fl := newFloor(secret)
		var want [32]byte
		fl.sum(ts, payload, &want)
		sigHexBytes := []byte(hex.EncodeToString(want[:]))

		v, err := signedhook.NewVerifier([]string{secret}, &signedhook.VerifierOptions{MaxBodyBytes: 1 << 20, Now: func() time.Time { return now },
			AllowReplays: true}) // one delivery, verified again and again, as the peers do
		if err != nil {
			b.Fatal(err)
		}
		ours := http.Header{}
		ours.Set(signedhook.HeaderEvent, signedhook.EventUserIdentified)
		ours.Set(signedhook.HeaderTimestamp, ts)
		ours.Set(signedhook.HeaderSignature, signedhook.Sign(secret, now.UnixMilli(), payload))

		sw, err := standardwebhooks.NewWebhook(swSecret)
		if err != nil {
			b.Fatal(err)
		}
		swSig, err := sw.Sign("msg_1", now, payload)
		if err != nil {
			b.Fatal(err)
		}
		swHeader := http.Header{}
		swHeader.Set("webhook-id", "msg_1")
		swHeader.Set("webhook-timestamp", secs)
		swHeader.Set("webhook-signature", swSig)

		sv, err := svix.NewWebhook(swSecret)
		if err != nil {
			b.Fatal(err)
		}
		svSig, err := sv.Sign("msg_1", now, payload)
		if err != nil {
			b.Fatal(err)
		}
		svHeader := http.Header{}
		svHeader.Set("svix-id", "msg_1")
		svHeader.Set("svix-timestamp", secs)
		svHeader.Set("svix-signature", svSig)

		stripeHeader := fmt.Sprintf("t=%s,v1=%s", secs, hex.EncodeToString(webhook.ComputeSignature(now, payload, secret)))
		ghMAC := hmac.New(sha256.New, []byte(secret))
		ghMAC.Write(payload)
		ghSig := "sha256=" + hex.EncodeToString(ghMAC.Sum(nil))

		impls := []struct {
			name   string
			verify func() bool
		}{
			{"floor", func() bool {
				var got, sig [32]byte
				hex.Decode(sig[:], sigHexBytes)
				fl.sum(ts, payload, &got)
				return hmac.Equal(got[:], sig[:])
			}},
			{"hmac-new", func() bool {
				m := hmac.New(sha256.New, []byte(secret))
				m.Write([]byte(ts))
				m.Write([]byte{'.'})
				m.Write(payload)
				return hmac.Equal(m.Sum(nil), want[:])
			}},
			{"sha256", func() bool { s := sha256.Sum256(payload); return s[0] != 0 || s[1] != 0 }},
			{"webhook", func() bool { return v.Verify(ours, payload) == nil }},
			{"standardwebhooks", func() bool { return sw.Verify(payload, swHeader) == nil }},
			{"svix", func() bool { return sv.Verify(payload, svHeader) == nil }},
			{"stripe", func() bool { return webhook.ValidatePayload(payload, stripeHeader, secret) == nil }},
			{"github", func() bool { return github.ValidateSignature(ghSig, payload, []byte(secret)) == nil }},
		}
		for _, impl := range impls {
			if impl.name != "sha256" && !impl.verify() {
				b.Fatalf("%s does not verify its own signature", impl.name)
			}
			b.Run("size="+size.name+"/impl="+impl.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(size.n))
				for b.Loop() {
					sink = impl.verify()
				}
			})
		}
	}
}

var sinkString string

func BenchmarkSign(b *testing.B) {
	now := time.Now()
	ms := now.UnixMilli()
	ts := strconv.FormatInt(ms, 10)
	swSecret := "whsec_" + base64.StdEncoding.EncodeToString([]byte(secret))
	sw, err := standardwebhooks.NewWebhook(swSecret)
	if err != nil {
		b.Fatal(err)
	}
	sv, err := svix.NewWebhook(swSecret)
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range sizes {
		payload := body(size.n)
		fl := newFloor(secret)
		impls := []struct {
			name string
			sign func() string
		}{
			{"floor", func() string {
				var sum [32]byte
				fl.sum(ts, payload, &sum)
				var out [71]byte
				copy(out[:], "sha256=")
				hex.Encode(out[7:], sum[:])
				return string(out[:])
			}},
			{"hmac-new", func() string {
				m := hmac.New(sha256.New, []byte(secret))
				m.Write([]byte(ts))
				m.Write([]byte{'.'})
				m.Write(payload)
				return "sha256=" + hex.EncodeToString(m.Sum(nil))
			}},
			{"webhook", func() string { return signedhook.Sign(secret, ms, payload) }},
			{"standardwebhooks", func() string { s, _ := sw.Sign("msg_1", now, payload); return s }},
			{"svix", func() string { s, _ := sv.Sign("msg_1", now, payload); return s }},
			{"stripe", func() string { return string(webhook.ComputeSignature(now, payload, secret)) }},
		}
		for _, impl := range impls {
			b.Run("size="+size.name+"/impl="+impl.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(size.n))
				for b.Loop() {
					sinkString = impl.sign()
				}
			})
		}
	}
}

// TestPeersAgreeOnTheirOwnSchemes keeps the comparison honest: every
// verifier accepts what its own library signed, and refuses a tampered body.
func TestPeersAgreeOnTheirOwnSchemes(t *testing.T) {
	payload := body(1 << 10)
	now := time.Now()
	tampered := append([]byte(nil), payload...)
	tampered[10] ^= 1
	if err := signedhook.Verify(secret, headerFor(now, payload), tampered); err == nil {
		t.Error("webhook accepted a tampered body")
	}
	if err := signedhook.Verify(secret, headerFor(now, payload), payload); err != nil {
		t.Errorf("webhook: %v", err)
	}
	var key [32]byte
	rand.Read(key[:])
	sw, err := standardwebhooks.NewWebhookRaw(key[:])
	if err != nil {
		t.Fatal(err)
	}
	sig, _ := sw.Sign("msg_1", now, payload)
	h := http.Header{"Webhook-Id": {"msg_1"}, "Webhook-Timestamp": {strconv.FormatInt(now.Unix(), 10)}, "Webhook-Signature": {sig}}
	if err := sw.Verify(payload, h); err != nil {
		t.Errorf("standardwebhooks: %v", err)
	}
	if err := sw.Verify(tampered, h); err == nil {
		t.Error("standardwebhooks accepted a tampered body")
	}
}

func headerFor(now time.Time, payload []byte) http.Header {
	h := http.Header{}
	h.Set(signedhook.HeaderEvent, signedhook.EventUserIdentified)
	h.Set(signedhook.HeaderTimestamp, strconv.FormatInt(now.UnixMilli(), 10))
	h.Set(signedhook.HeaderSignature, signedhook.Sign(secret, now.UnixMilli(), payload))
	return h
}
