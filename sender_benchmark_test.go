package webhook_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/signedhook/webhook"
)

// BenchmarkDeliver delivers a payload to a loopback TLS receiver, at
// concurrency 1 and 32:
//
//   - impl=raw: a bare net/http client doing the same JSON encoding and
//     signing, on a keep-alive transport sized for the concurrency (the floor);
//   - impl=sender: the Sender on that same client;
//   - impl=sender-default: the Sender on its own default transport;
//   - impl=retryablehttp-default: go-retryablehttp as shipped (NewClient),
//     whose pool keeps GOMAXPROCS+1 idle connections per host.
//
// Compare with: benchstat -col /impl bench.txt
func BenchmarkDeliver(b *testing.B) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())

	tr := srv.Client().Transport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	client := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()

	conn := webhook.Connection{Name: "bench", URL: srv.URL + "/hooks", Secret: testSecret}
	p := samplePayload()
	ctx := context.Background()

	raw := func() error {
		req, err := rawRequest(ctx, conn, p)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			b.Fatalf("status %d", resp.StatusCode)
		}
		return nil
	}

	newSender := func(opts *webhook.SenderOptions) func() error {
		s, err := webhook.NewSender(opts)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(s.CloseIdleConnections)
		return func() error {
			_, err := s.Send(ctx, conn, p)
			return err
		}
	}
	sender := newSender(&webhook.SenderOptions{Client: client})
	senderDefault := newSender(&webhook.SenderOptions{Client: &http.Client{Transport: webhook.NewTransport(
		&webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: pool}, AllowPrivateNetworks: true})}})

	rc := retryablehttp.NewClient()
	rc.Logger = nil
	rc.HTTPClient.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: pool}
	b.Cleanup(rc.HTTPClient.CloseIdleConnections)
	retryable := func() error {
		req, err := rawRequest(ctx, conn, p)
		if err != nil {
			return err
		}
		rreq, err := retryablehttp.FromRequest(req)
		if err != nil {
			return err
		}
		resp, err := rc.Do(rreq)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil
	}

	impls := []struct {
		name    string
		deliver func() error
	}{
		{"raw", raw},
		{"sender", sender},
		{"sender-default", senderDefault},
		{"retryablehttp-default", retryable},
	}
	for _, conc := range []int{1, 32} {
		for _, impl := range impls {
			b.Run("conc="+strconv.Itoa(conc)+"/impl="+impl.name, func(b *testing.B) {
				b.ReportAllocs()
				if conc == 1 {
					for b.Loop() {
						if err := impl.deliver(); err != nil {
							b.Fatal(err)
						}
					}
					return
				}
				procs := runtime.GOMAXPROCS(0)
				b.SetParallelism((conc + procs - 1) / procs)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := impl.deliver(); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// BenchmarkSendInMemory measures the Sender's own cost per delivery, with
// no network in the way: the same delivery as a raw net/http client (JSON
// encoding, signing, one request) to an in-memory transport that answers 200.
func BenchmarkSendInMemory(b *testing.B) {
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		io.Copy(io.Discard, r.Body)
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody}, nil
	})}
	conn := webhook.Connection{Name: "bench", URL: "https://crm.example.com/hooks", Secret: testSecret}
	p := samplePayload()
	ctx := context.Background()
	b.Run("impl=raw", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			req, err := rawRequest(ctx, conn, p)
			if err != nil {
				b.Fatal(err)
			}
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: client})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("impl=sender", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Send(ctx, conn, p); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// rawRequest is what the raw client does for each delivery: encode the
// payload, build the request, sign it.
func rawRequest(ctx context.Context, conn webhook.Connection, p webhook.Payload) (*http.Request, error) {
	body, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, conn.URL, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	ts := time.Now().UnixMilli()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(webhook.HeaderEvent, p.Event)
	req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(webhook.HeaderSignature, webhook.Sign(conn.Secret, ts, body))
	return req, nil
}
