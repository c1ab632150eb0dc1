package webhook_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/signedhook/webhook"
)

func ExampleSign() {
	// The same digest as: printf %s '1763719200000.{"event":"user.identified"}' \
	//   | openssl dgst -sha256 -hmac whsec_test_secret
	body := []byte(`{"event":"user.identified"}`)
	fmt.Println(webhook.Sign("whsec_test_secret", 1763719200000, body))
	// Output: sha256=4eab61781187b690613cc53448df57693332f0537baf3595a6dddc40774e02b7
}

func ExampleVerify() {
	secret := "whsec_test_secret"
	body := []byte(`{"event":"user.identified","user":{"email":"ada@example.com"}}`)

	// The headers a delivery carries, as the service would set them.
	ts := time.Now().UnixMilli()
	h := http.Header{}
	h.Set(webhook.HeaderEvent, webhook.EventUserIdentified)
	h.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts, 10))
	h.Set(webhook.HeaderSignature, webhook.Sign(secret, ts, body))

	fmt.Println(webhook.Verify(secret, h, body))

	tampered := bytes.Replace(body, []byte("ada@"), []byte("eve@"), 1)
	err := webhook.Verify(secret, h, tampered)
	fmt.Println(errors.Is(err, webhook.ErrSignatureMismatch), errors.Is(err, webhook.ErrVerification))
	// Output:
	// <nil>
	// true true
}

func ExampleVerifier_Middleware() {
	secret := "whsec_test_secret"
	v, err := webhook.NewVerifier([]string{secret}, nil)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks", v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body) // the verified bytes, unchanged
		fmt.Printf("handler got %s\n", body)
	})))
	srv := httptest.NewTLSServer(mux)
	defer srv.Close()

	post := func(body, signedBody string) {
		ts := time.Now().UnixMilli()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/webhooks", bytes.NewBufferString(body))
		req.Header.Set(webhook.HeaderEvent, webhook.EventUserIdentified)
		req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts, 10))
		req.Header.Set(webhook.HeaderSignature, webhook.Sign(secret, ts, []byte(signedBody)))
		resp, err := srv.Client().Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Status)
	}
	post(`{"event":"user.identified"}`, `{"event":"user.identified"}`)
	post(`{"event":"user.identified","admin":true}`, `{"event":"user.identified"}`) // tampered
	// Output:
	// handler got {"event":"user.identified"}
	// 200 OK
	// 401 Unauthorized
}

func ExampleNewHandler() {
	secret := "whsec_test_secret"
	v, err := webhook.NewVerifier([]string{secret}, nil)
	if err != nil {
		log.Fatal(err)
	}
	h := webhook.NewHandler(v, func(ctx context.Context, p webhook.Payload) error {
		fmt.Printf("identified %s <%s> on plan %q\n", p.User.Name, p.User.Email, p.User.Metadata.Plan())
		return nil // an error here answers 500, and the service retries
	}, nil)
	srv := httptest.NewTLSServer(h)
	defer srv.Close()

	body := []byte(`{"event":"user.identified","timestamp":"2026-11-21T10:00:00.000Z",` +
		`"user":{"id":"usr_1","email":"ada@example.com","name":"Ada Lovelace","metadata":{"plan":"pro"}},` +
		`"application":{"id":"app_1","name":"Acme Sidebar"}}`)
	ts := time.Now().UnixMilli()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(webhook.HeaderEvent, webhook.EventUserIdentified)
	req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(webhook.HeaderSignature, webhook.Sign(secret, ts, body))
	resp, err := srv.Client().Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	ack, _ := io.ReadAll(resp.Body)
	fmt.Printf("%s %s", resp.Status, ack)
	// Output:
	// identified Ada Lovelace <ada@example.com> on plan "pro"
	// 200 OK {"ok":true}
}
