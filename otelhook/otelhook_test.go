package otelhook_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/otelhook"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Texts a span or a metric must never hold.
const (
	secret      = "whsec_otelhook-test-secret-0123456789"
	secretPath  = "/hooks/T0kenInThePath"
	secretQuery = "token=QuerySecret42"
	headerValue = "Bearer HeaderValue-9f8e7d"
)

// telemetry is an SDK meter and tracer provider on an in-memory reader and
// exporter, with Instruments on them.
type telemetry struct {
	reader *sdkmetric.ManualReader
	spans  *tracetest.InMemoryExporter
	tracer trace.Tracer // the caller's own, for the parent span
	inst   *otelhook.Instruments
}

func newTelemetry(t *testing.T, opts *otelhook.Options) *telemetry {
	t.Helper()
	tm := &telemetry{reader: sdkmetric.NewManualReader(), spans: tracetest.NewInMemoryExporter()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(tm.reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tm.spans))
	t.Cleanup(func() {
		mp.Shutdown(context.Background())
		tp.Shutdown(context.Background())
	})
	var o otelhook.Options
	if opts != nil {
		o = *opts
	}
	o.MeterProvider, o.TracerProvider = mp, tp
	inst, err := otelhook.New(&o)
	if err != nil {
		t.Fatal(err)
	}
	tm.inst, tm.tracer = inst, tp.Tracer("caller")
	return tm
}

// collect returns the metric named name, or nil.
func (tm *telemetry) collect(t *testing.T, name string) *metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tm.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for i, m := range sm.Metrics {
			if m.Name == name {
				if sm.Scope.Name != otelhook.ScopeName {
					t.Errorf("%s: scope %q, want %q", name, sm.Scope.Name, otelhook.ScopeName)
				}
				return &sm.Metrics[i]
			}
		}
	}
	return nil
}

// sums returns the int64 sum named name by attribute set, written as
// "key=value,...", sorted by key.
func (tm *telemetry) sums(t *testing.T, name string) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	m := tm.collect(t, name)
	if m == nil {
		return got
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is a %T, want metricdata.Sum[int64]", name, m.Data)
	}
	for _, dp := range sum.DataPoints {
		got[key(dp.Attributes)] = dp.Value
	}
	return got
}

// histogram returns the histogram named name's counts by attribute set,
// checking that each sum is within the bounds given.
func (tm *telemetry) histogram(t *testing.T, name string, maxSum float64) map[string]uint64 {
	t.Helper()
	m := tm.collect(t, name)
	if m == nil {
		t.Fatalf("no metric %s", name)
	}
	if m.Unit != "s" {
		t.Errorf("%s: unit %q, want s", name, m.Unit)
	}
	h, ok := m.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s is a %T, want metricdata.Histogram[float64]", name, m.Data)
	}
	got := map[string]uint64{}
	for _, dp := range h.DataPoints {
		if dp.Sum <= 0 || dp.Sum > maxSum {
			t.Errorf("%s{%s}: sum %v s, want in (0, %v]", name, key(dp.Attributes), dp.Sum, maxSum)
		}
		got[key(dp.Attributes)] = dp.Count
	}
	return got
}

func key(s attribute.Set) string { return s.Encoded(attribute.DefaultEncoder()) }

// receiver is an HTTPS server on 127.0.0.1 answering the statuses of its
// script in turn, then 200; during a request it calls during, if set.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	script []int
	during func()
}

func newReceiver(t *testing.T, script ...int) *receiver {
	t.Helper()
	rv := &receiver{script: script}
	rv.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		rv.mu.Lock()
		status := http.StatusOK
		if len(rv.script) > 0 {
			status, rv.script = rv.script[0], rv.script[1:]
		}
		during := rv.during
		rv.mu.Unlock()
		if during != nil {
			during()
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"echo":%q}`, r.Header.Get("Authorization")) // never logged by a span
	}))
	rv.Config.ErrorLog = log.New(io.Discard, "", 0)
	rv.StartTLS()
	t.Cleanup(rv.Close)
	return rv
}

// connection returns a connection to rv whose URL's path and query, header
// value and secret are the texts no span or metric may hold.
func (rv *receiver) connection() webhook.Connection {
	return webhook.Connection{
		Name:    "CRM",
		URL:     rv.URL + secretPath + "?" + secretQuery,
		Headers: map[string]string{"Authorization": headerValue},
		Secret:  secret,
	}
}

// port returns rv's port.
func (rv *receiver) port(t *testing.T) int {
	t.Helper()
	u, err := url.Parse(rv.URL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// trustingTransport returns a transport from webhook.NewTransport that
// trusts rv's certificate (nil: trusts nothing but the system's roots),
// private networks allowed since receivers are on loopback.
func trustingTransport(t *testing.T, rv *receiver) *http.Transport {
	t.Helper()
	cfg := &tls.Config{}
	if rv != nil {
		cfg.RootCAs = x509.NewCertPool()
		cfg.RootCAs.AddCert(rv.Certificate())
	}
	tr, err := webhook.NewTransport(&webhook.TransportOptions{TLSClientConfig: cfg, AllowPrivateNetworks: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// noWait retries at once: the tests never wait.
func noWait(retries int) *webhook.RetryPolicy {
	return &webhook.RetryPolicy{MaxRetries: retries, Backoff: func(int, *http.Response) time.Duration { return 0 }}
}

func newSender(t *testing.T, opts *webhook.SenderOptions) *webhook.Sender {
	t.Helper()
	s, err := webhook.NewSender(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.CloseIdleConnections)
	return s
}

// spanAttrs returns a span's attributes as "key=value" strings, sorted.
func spanAttrs(s tracetest.SpanStub) []string {
	out := make([]string, 0, len(s.Attributes))
	for _, kv := range s.Attributes {
		out = append(out, string(kv.Key)+"="+kv.Value.String())
	}
	slices.Sort(out)
	return out
}

func TestSend_RecordsEachAttemptAsAChildSpanWithMetrics(t *testing.T) {
	tm := newTelemetry(t, nil)
	rv := newReceiver(t, http.StatusServiceUnavailable, http.StatusServiceUnavailable)
	port := strconv.Itoa(rv.port(t))
	var seen []int
	s := newSender(t, tm.inst.SenderOptions(&webhook.SenderOptions{
		Client:    &http.Client{Transport: trustingTransport(t, rv)},
		Retry:     noWait(3),
		OnAttempt: func(_ context.Context, _ webhook.Connection, a webhook.Attempt) { seen = append(seen, a.N) },
	}))

	ctx, parent := tm.tracer.Start(context.Background(), "caller's operation")
	res, err := s.Send(ctx, rv.connection(), webhook.SamplePayload(time.Now()))
	parent.End()
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	if len(res.Attempts) != 3 {
		t.Fatalf("got %d attempts, want 3", len(res.Attempts))
	}
	if !slices.Equal(seen, []int{1, 2, 3}) {
		t.Errorf("the caller's OnAttempt saw attempts %v, want [1 2 3]", seen)
	}

	// Spans: one per attempt, children of the caller's, timed as the
	// attempts were, with their attributes by value.
	var attempts []tracetest.SpanStub
	for _, sp := range tm.spans.GetSpans() {
		if sp.Name != "caller's operation" {
			attempts = append(attempts, sp)
		}
	}
	if len(attempts) != 3 {
		t.Fatalf("got %d attempt spans, want 3", len(attempts))
	}
	common := []string{"http.request.method=POST", "server.address=127.0.0.1", "server.port=" + port,
		"url.scheme=https", "webhook.connection.name=CRM"}
	want := [][]string{
		append(slices.Clone(common), "webhook.attempt=1", "http.response.status_code=503", "error.type=503",
			"webhook.outcome=failed", "webhook.failure_kind=status", "webhook.retry=true", "webhook.retry_in_ms=0"),
		append(slices.Clone(common), "webhook.attempt=2", "http.request.resend_count=1", "http.response.status_code=503",
			"error.type=503", "webhook.outcome=failed", "webhook.failure_kind=status", "webhook.retry=true", "webhook.retry_in_ms=0"),
		append(slices.Clone(common), "webhook.attempt=3", "http.request.resend_count=2", "http.response.status_code=200",
			"webhook.outcome=delivered", "webhook.retry=false"),
	}
	for i, sp := range attempts {
		a := res.Attempts[i]
		if sp.Name != "POST" || sp.SpanKind != trace.SpanKindClient {
			t.Errorf("span %d: %q of kind %v, want POST of kind client", i+1, sp.Name, sp.SpanKind)
		}
		if sp.Parent.SpanID() != parent.SpanContext().SpanID() || sp.SpanContext.TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("span %d: parent %v in trace %v, want the caller's span %v in trace %v", i+1,
				sp.Parent.SpanID(), sp.SpanContext.TraceID(), parent.SpanContext().SpanID(), parent.SpanContext().TraceID())
		}
		if !sp.StartTime.Equal(a.Start) || !sp.EndTime.Equal(a.Start.Add(a.Duration)) {
			t.Errorf("span %d: from %v to %v, want the attempt's %v to %v", i+1, sp.StartTime, sp.EndTime, a.Start, a.Start.Add(a.Duration))
		}
		w := slices.Clone(want[i])
		slices.Sort(w)
		if got := spanAttrs(sp); !slices.Equal(got, w) {
			t.Errorf("span %d attributes:\ngot  %q\nwant %q", i+1, got, w)
		}
		wantStatus := codes.Unset
		if i < 2 {
			wantStatus = codes.Error
		}
		if sp.Status.Code != wantStatus || (wantStatus == codes.Error && sp.Status.Description != "503") {
			t.Errorf("span %d: status %v %q, want %v", i+1, sp.Status.Code, sp.Status.Description, wantStatus)
		}
	}

	// Metrics, by value.
	ep := "server.address=127.0.0.1,server.port=" + port
	if got, want := tm.sums(t, "webhook.attempts"), map[string]int64{
		ep + ",webhook.failure_kind=status,webhook.outcome=failed": 2,
		ep + ",webhook.outcome=delivered":                          1,
	}; !mapsEqual(got, want) {
		t.Errorf("webhook.attempts:\ngot  %v\nwant %v", got, want)
	}
	if got, want := tm.sums(t, "webhook.deliveries"), map[string]int64{ep + ",webhook.outcome=delivered": 1}; !mapsEqual(got, want) {
		t.Errorf("webhook.deliveries:\ngot  %v\nwant %v", got, want)
	}
	if got, want := tm.histogram(t, "http.client.request.duration", 10), map[string]uint64{
		"error.type=503,http.request.method=POST,http.response.status_code=503," + ep: 2,
		"http.request.method=POST,http.response.status_code=200," + ep:                1,
	}; !mapsEqual(got, want) {
		t.Errorf("http.client.request.duration counts:\ngot  %v\nwant %v", got, want)
	}
	if got, want := tm.sums(t, "webhook.attempts.active"), map[string]int64{ep: 0}; !mapsEqual(got, want) {
		t.Errorf("webhook.attempts.active after the delivery:\ngot  %v\nwant %v", got, want)
	}
	assertNoSecrets(t, tm)
}

// assertNoSecrets fails if any span or metric holds the URL's path or
// query, the secret or a header's value.
func assertNoSecrets(t *testing.T, tm *telemetry) {
	t.Helper()
	var texts []string
	for _, sp := range tm.spans.GetSpans() {
		texts = append(texts, sp.Name, sp.Status.Description)
		for _, kv := range sp.Attributes {
			texts = append(texts, string(kv.Key), kv.Value.String())
		}
		for _, ev := range sp.Events {
			texts = append(texts, ev.Name)
			for _, kv := range ev.Attributes {
				texts = append(texts, kv.Value.String())
			}
		}
	}
	var rm metricdata.ResourceMetrics
	if err := tm.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	texts = append(texts, fmt.Sprintf("%+v", rm))
	for _, text := range texts {
		for _, bad := range []string{secret, secretPath, "T0kenInThePath", "QuerySecret42", headerValue, "HeaderValue"} {
			if strings.Contains(text, bad) {
				t.Errorf("telemetry holds %q: %q", bad, text)
			}
		}
	}
}

func mapsEqual[V comparable](a, b map[string]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestSend_FailingEndpointCountsFailedDeliveryAndEndpointDown(t *testing.T) {
	tm := newTelemetry(t, nil)
	// A port nothing listens on: every attempt is refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	changes := make(chan webhook.EndpointHealth, 4)
	s := newSender(t, tm.inst.SenderOptions(&webhook.SenderOptions{
		Client: &http.Client{Transport: trustingTransport(t, nil)},
		Retry:  noWait(1),
		Health: &webhook.HealthOptions{DownAfter: 2, OnChange: func(_ context.Context, h webhook.EndpointHealth) { changes <- h }},
	}))
	conn := webhook.Connection{Name: "Gone", URL: fmt.Sprintf("https://127.0.0.1:%d%s?%s", port, secretPath, secretQuery), Secret: secret}
	res, err := s.Send(context.Background(), conn, webhook.SamplePayload(time.Now()))
	if err == nil || len(res.Attempts) != 2 {
		t.Fatalf("Send: %d attempts, error %v; want 2 refused attempts", len(res.Attempts), err)
	}
	if h := <-changes; !h.Down { // OnChange runs off the attempt path: it may come after Send returned
		t.Fatalf("the caller's OnChange got %v, want the endpoint down", h)
	}

	ep := fmt.Sprintf("server.address=127.0.0.1,server.port=%d", port)
	if got, want := tm.sums(t, "webhook.attempts"), map[string]int64{ep + ",webhook.failure_kind=refused,webhook.outcome=failed": 2}; !mapsEqual(got, want) {
		t.Errorf("webhook.attempts:\ngot  %v\nwant %v", got, want)
	}
	if got, want := tm.sums(t, "webhook.deliveries"), map[string]int64{ep + ",webhook.failure_kind=refused,webhook.outcome=failed": 1}; !mapsEqual(got, want) {
		t.Errorf("webhook.deliveries:\ngot  %v\nwant %v", got, want)
	}
	if got, want := tm.histogram(t, "http.client.request.duration", 10), map[string]uint64{"error.type=refused,http.request.method=POST," + ep: 2}; !mapsEqual(got, want) {
		t.Errorf("http.client.request.duration counts:\ngot  %v\nwant %v", got, want)
	}
	if got, want := tm.sums(t, "webhook.endpoints.down"), map[string]int64{"webhook.endpoint.scope=origin": 1}; !mapsEqual(got, want) {
		t.Errorf("webhook.endpoints.down:\ngot  %v\nwant %v", got, want)
	}
	if got, want := tm.sums(t, "webhook.attempts.active"), map[string]int64{ep: 0}; !mapsEqual(got, want) {
		t.Errorf("webhook.attempts.active:\ngot  %v\nwant %v", got, want)
	}
	for _, sp := range tm.spans.GetSpans() {
		if sp.Parent.IsValid() {
			t.Errorf("span %q has a parent, want a root span: Send's context had none", sp.Name)
		}
		if sp.Status.Code != codes.Error || sp.Status.Description != "refused" {
			t.Errorf("span status %v %q, want Error refused", sp.Status.Code, sp.Status.Description)
		}
	}
	assertNoSecrets(t, tm)
}

func TestSend_EndpointDownThenUpLeavesNoneDown(t *testing.T) {
	tm := newTelemetry(t, nil)
	rv := newReceiver(t)
	// The transport trusts no certificate at first: attempts fail their TLS
	// handshake, which takes the origin down. The transport reads its TLS
	// configuration at each dial, so trusting the receiver then lets the
	// next probe through.
	tr := trustingTransport(t, nil)
	changes := make(chan bool, 4)
	s := newSender(t, tm.inst.SenderOptions(&webhook.SenderOptions{
		Client: &http.Client{Transport: tr},
		Retry:  noWait(0),
		Health: &webhook.HealthOptions{DownAfter: 1, ProbeInterval: time.Nanosecond,
			OnChange: func(_ context.Context, h webhook.EndpointHealth) { changes <- h.Down }},
	}))
	conn := rv.connection()
	res, _ := s.Send(context.Background(), conn, webhook.SamplePayload(time.Now()))
	if len(res.Attempts) != 1 || res.Attempts[0].Kind != webhook.KindTLS {
		t.Fatalf("first delivery: %v, want one attempt of kind tls", res.Attempts)
	}
	if down := <-changes; !down { // OnChange runs off the attempt path: wait for it
		t.Fatal("the caller's OnChange got up, want down")
	}
	if got, want := tm.sums(t, "webhook.endpoints.down"), map[string]int64{"webhook.endpoint.scope=origin": 1}; !mapsEqual(got, want) {
		t.Errorf("webhook.endpoints.down while down:\ngot  %v\nwant %v", got, want)
	}

	tr.TLSClientConfig.RootCAs = x509.NewCertPool()
	tr.TLSClientConfig.RootCAs.AddCert(rv.Certificate())
	delivered := false
	for range 1000 { // a delivery refused before its probe is due returns at once
		if _, err := s.Send(context.Background(), conn, webhook.SamplePayload(time.Now())); err == nil {
			delivered = true
			break
		}
	}
	if !delivered {
		t.Fatal("no probe was let through")
	}
	if down := <-changes; down {
		t.Error("the caller's OnChange got down, want up")
	}
	if got, want := tm.sums(t, "webhook.endpoints.down"), map[string]int64{"webhook.endpoint.scope=origin": 0}; !mapsEqual(got, want) {
		t.Errorf("webhook.endpoints.down once up:\ngot  %v\nwant %v", got, want)
	}
}

func TestTransport_CountsAttemptsInFlight(t *testing.T) {
	tm := newTelemetry(t, &otelhook.Options{OmitEndpoint: true})
	rv := newReceiver(t)
	var during map[string]int64
	rv.during = func() { during = tm.sums(t, "webhook.attempts.active") }
	s := newSender(t, tm.inst.SenderOptions(&webhook.SenderOptions{Client: &http.Client{Transport: trustingTransport(t, rv)}}))
	if _, err := s.Send(context.Background(), rv.connection(), webhook.SamplePayload(time.Now())); err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{"": 1}; !mapsEqual(during, want) {
		t.Errorf("webhook.attempts.active while the receiver answers: got %v, want %v", during, want)
	}
	if got, want := tm.sums(t, "webhook.attempts.active"), map[string]int64{"": 0}; !mapsEqual(got, want) {
		t.Errorf("webhook.attempts.active after: got %v, want %v", got, want)
	}
	// OmitEndpoint: the metrics have no endpoint; the spans keep it.
	if got, want := tm.sums(t, "webhook.attempts"), map[string]int64{"webhook.outcome=delivered": 1}; !mapsEqual(got, want) {
		t.Errorf("webhook.attempts: got %v, want %v", got, want)
	}
	spans := tm.spans.GetSpans()
	if len(spans) != 1 || !slices.Contains(spanAttrs(spans[0]), "server.address=127.0.0.1") {
		t.Errorf("spans %v, want one with server.address", spans)
	}
}

func TestSenderOptions_KeepsTheGuard(t *testing.T) {
	tm := newTelemetry(t, nil)
	rv := newReceiver(t)
	// No Client: the Sender's default transport, guarded, wrapped.
	s := newSender(t, tm.inst.SenderOptions(&webhook.SenderOptions{Retry: noWait(0)}))
	res, err := s.Send(context.Background(), rv.connection(), webhook.SamplePayload(time.Now()))
	if err == nil || len(res.Attempts) != 1 || res.Attempts[0].Kind != webhook.KindBlocked {
		t.Fatalf("Send to 127.0.0.1: %v, %v; want one attempt of kind blocked", res.Attempts, err)
	}
	if got := tm.sums(t, "webhook.deliveries"); got["server.address=127.0.0.1,server.port="+strconv.Itoa(rv.port(t))+",webhook.failure_kind=blocked,webhook.outcome=failed"] != 1 {
		t.Errorf("webhook.deliveries: got %v, want one blocked", got)
	}

	// A Client of one's own keeps its transport, wrapped.
	tr := trustingTransport(t, rv)
	opts := tm.inst.SenderOptions(&webhook.SenderOptions{Client: &http.Client{Transport: tr}})
	u, ok := opts.Client.Transport.(interface{ Unwrap() http.RoundTripper })
	if !ok || u.Unwrap() != tr {
		t.Errorf("the Client's transport is %T, want a wrapper of the caller's", opts.Client.Transport)
	}
}

func TestSenderOptions_LeavesTheCallersOptionsAlone(t *testing.T) {
	tm := newTelemetry(t, nil)
	client := &http.Client{}
	health := &webhook.HealthOptions{DownAfter: 3}
	opts := &webhook.SenderOptions{Client: client, Health: health}
	got := tm.inst.SenderOptions(opts)
	if opts.Client != client || client.Transport != nil || opts.OnAttempt != nil || opts.Health != health || health.OnChange != nil {
		t.Error("SenderOptions modified the caller's options")
	}
	if got.Client == client || got.OnAttempt == nil || got.Health == health || got.Health.OnChange == nil || got.Health.DownAfter != 3 {
		t.Errorf("SenderOptions returned %+v, want copies with the hooks set", got)
	}
	if none := tm.inst.SenderOptions(nil); none.Health != nil || none.Client == nil || none.OnAttempt == nil {
		t.Errorf("SenderOptions(nil) = %+v, want a Client and OnAttempt, no Health", none)
	}
}

func TestOnChange_CountsByScope(t *testing.T) {
	tm := newTelemetry(t, nil)
	var got []webhook.EndpointHealth
	onChange := tm.inst.OnChange(func(_ context.Context, h webhook.EndpointHealth) { got = append(got, h) })
	changes := []webhook.EndpointHealth{
		{Endpoint: "https://a.example:443", Down: true},
		{Endpoint: "https://b.example:443", Down: true},
		{Endpoint: "https://c.example:443/…", Down: true, PerURL: true},
		{Endpoint: "https://a.example:443", Down: false},
		{Endpoint: "https://b.example:443", Confirmed: true}, // up without a change of its own (another process's mark): counted no more
		{Endpoint: "https://d.example:443", Down: false},     // an up never counted down: takes nothing off
	}
	for _, c := range changes {
		onChange(context.Background(), c)
	}
	if len(got) != len(changes) {
		t.Errorf("the caller's OnChange got %d changes, want %d", len(got), len(changes))
	}
	if got, want := tm.sums(t, "webhook.endpoints.down"), map[string]int64{
		"webhook.endpoint.scope=origin": 0, "webhook.endpoint.scope=url": 1,
	}; !mapsEqual(got, want) {
		t.Errorf("webhook.endpoints.down: got %v, want %v", got, want)
	}
	tm.inst.OnChange(nil)(context.Background(), webhook.EndpointHealth{Endpoint: "https://b.example:443"}) // no caller's hook: no panic
}

func TestNew_Defaults(t *testing.T) {
	inst, err := otelhook.New(nil) // the global providers, no-ops here
	if err != nil {
		t.Fatal(err)
	}
	inst.OnAttempt(nil)(context.Background(), webhook.Connection{URL: "https://example.com/x"}, webhook.Attempt{N: 1, StatusCode: 200})
}

func TestSendAll_AttributesEachAttemptToItsEndpoint(t *testing.T) {
	tm := newTelemetry(t, nil)
	ok, failing := newReceiver(t), newReceiver(t, http.StatusInternalServerError)
	pool := x509.NewCertPool()
	pool.AddCert(ok.Certificate()) // httptest's servers share one certificate
	tr, err := webhook.NewTransport(&webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: pool}, AllowPrivateNetworks: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.CloseIdleConnections)
	s := newSender(t, tm.inst.SenderOptions(&webhook.SenderOptions{Client: &http.Client{Transport: tr}, Retry: noWait(0)}))

	ctx, parent := tm.tracer.Start(context.Background(), "fan out")
	results := s.SendAll(ctx, []webhook.Connection{ok.connection(), failing.connection()}, webhook.SamplePayload(time.Now()))
	parent.End()
	if results[0].Err != nil || results[1].Err == nil {
		t.Fatalf("SendAll: errors %v and %v, want nil then a failure", results[0].Err, results[1].Err)
	}

	okEp := "server.address=127.0.0.1,server.port=" + strconv.Itoa(ok.port(t))
	failingEp := "server.address=127.0.0.1,server.port=" + strconv.Itoa(failing.port(t))
	if got, want := tm.sums(t, "webhook.deliveries"), map[string]int64{
		okEp + ",webhook.outcome=delivered":                               1,
		failingEp + ",webhook.failure_kind=status,webhook.outcome=failed": 1,
	}; !mapsEqual(got, want) {
		t.Errorf("webhook.deliveries:\ngot  %v\nwant %v", got, want)
	}
	children := 0
	for _, sp := range tm.spans.GetSpans() {
		if sp.Parent.SpanID() == parent.SpanContext().SpanID() {
			children++
		}
	}
	if children != 2 {
		t.Errorf("got %d attempt spans under the caller's, want 2", children)
	}
}

type customerKey struct{}

// TestAttributes_PerCustomerBoundedInCardinality adds a customer id, taken
// from the delivery's context, to the attempt metrics and spans: past
// MaxAttributeSets, the metrics record the overflow attribute instead, and
// the spans keep the value.
func TestAttributes_PerCustomerBoundedInCardinality(t *testing.T) {
	tm := newTelemetry(t, &otelhook.Options{
		OmitEndpoint: true,
		Attributes: func(ctx context.Context, c webhook.Connection) []attribute.KeyValue {
			id, _ := ctx.Value(customerKey{}).(string)
			return []attribute.KeyValue{attribute.String("customer.id", id)}
		},
		MaxAttributeSets: 2,
	})
	rv := newReceiver(t)
	s := newSender(t, tm.inst.SenderOptions(&webhook.SenderOptions{Client: &http.Client{Transport: trustingTransport(t, rv)}, Retry: noWait(0)}))
	for _, customer := range []string{"cus_a", "cus_b", "cus_c", "cus_a", "cus_d"} {
		ctx := context.WithValue(context.Background(), customerKey{}, customer)
		if _, err := s.Send(ctx, rv.connection(), webhook.SamplePayload(time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := tm.sums(t, "webhook.deliveries"), map[string]int64{
		"customer.id=cus_a,webhook.outcome=delivered":         2,
		"customer.id=cus_b,webhook.outcome=delivered":         1,
		"otel.metric.overflow=true,webhook.outcome=delivered": 2,
	}; !mapsEqual(got, want) {
		t.Errorf("webhook.deliveries:\ngot  %v\nwant %v", got, want)
	}
	var customers []string
	for _, sp := range tm.spans.GetSpans() {
		for _, kv := range sp.Attributes {
			if kv.Key == "customer.id" {
				customers = append(customers, kv.Value.AsString())
			}
		}
	}
	slices.Sort(customers)
	if want := []string{"cus_a", "cus_a", "cus_b", "cus_c", "cus_d"}; !slices.Equal(customers, want) {
		t.Errorf("spans' customer.id: got %v, want %v", customers, want)
	}
	if _, err := otelhook.New(&otelhook.Options{MaxAttributeSets: -1}); err == nil {
		t.Error("New accepted a negative MaxAttributeSets")
	}
}

// TestAttributes_LeavesTheReturnedSliceAlone: Attributes may return a slice
// the caller keeps, such as one per customer made once and shared by every
// delivery, called concurrently: the Instruments only read it.
func TestAttributes_LeavesTheReturnedSliceAlone(t *testing.T) {
	shared := []attribute.KeyValue{attribute.String("tenant", "t1"), attribute.String("plan", "pro")}
	tm := newTelemetry(t, &otelhook.Options{
		OmitEndpoint: true,
		Attributes:   func(context.Context, webhook.Connection) []attribute.KeyValue { return shared },
	})
	rv := newReceiver(t)
	s := newSender(t, tm.inst.SenderOptions(&webhook.SenderOptions{Client: &http.Client{Transport: trustingTransport(t, rv)}, Retry: noWait(0)}))
	conns := make([]webhook.Connection, 8)
	for i := range conns {
		conns[i] = rv.connection()
	}
	for i, res := range s.SendAll(context.Background(), conns, webhook.SamplePayload(time.Now())) {
		if res.Err != nil {
			t.Fatalf("delivery %d: %v", i, res.Err)
		}
	}
	if want := []attribute.KeyValue{attribute.String("tenant", "t1"), attribute.String("plan", "pro")}; !slices.Equal(shared, want) {
		t.Errorf("the slice Attributes returned is now %v, want %v as it was", shared, want)
	}
	if got, want := tm.sums(t, "webhook.deliveries"), map[string]int64{"plan=pro,tenant=t1,webhook.outcome=delivered": 8}; !mapsEqual(got, want) {
		t.Errorf("webhook.deliveries:\ngot  %v\nwant %v", got, want)
	}
}

// memoryMarks is a deployment's store of endpoint health marks, in memory:
// the last mark of each origin.
type memoryMarks struct {
	mu    sync.Mutex
	marks map[string]webhook.EndpointHealth
	at    map[string]time.Time
}

func (m *memoryMarks) Mark(_ context.Context, h webhook.EndpointHealth) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.marks == nil {
		m.marks, m.at = map[string]webhook.EndpointHealth{}, map[string]time.Time{}
	}
	if old, ok := m.marks[h.Endpoint]; ok && old.Changed.After(h.Changed) {
		return nil
	}
	m.marks[h.Endpoint], m.at[h.Endpoint] = h, time.Now()
	return nil
}

func (m *memoryMarks) Since(_ context.Context, after time.Time) ([]webhook.EndpointHealth, time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []webhook.EndpointHealth
	next := after
	for key, h := range m.marks {
		if at := m.at[key]; !at.Before(after) {
			out = append(out, h)
			if at.After(next) {
				next = at
			}
		}
	}
	return out, next, nil
}

// TestOnChange_CountsWhatThisProcessFoundDownWithMarks runs two processes'
// Senders on one store of marks (HealthOptions.Marks, as riverhook's
// workers share them). A finds the endpoint down and counts it; B, starting
// up, holds it down from A's mark but does not count it (A does: summed over
// the fleet, an endpoint counts once, not once per process following it);
// B's probe finds it up: B's count stays at none, never fewer. A follows
// B's up mark, and its next answer from the endpoint (confirmed up) takes
// it out of A's count.
func TestOnChange_CountsWhatThisProcessFoundDownWithMarks(t *testing.T) {
	ctx := context.Background()
	rv := newReceiver(t)
	conn := rv.connection()
	marks := &memoryMarks{}
	health := func() *webhook.HealthOptions {
		return &webhook.HealthOptions{DownAfter: 1, ProbeInterval: time.Nanosecond, Marks: marks, ConfirmUpEvery: time.Hour}
	}
	origin := func(n int64) map[string]int64 { return map[string]int64{"webhook.endpoint.scope=origin": n} }

	// A's first transport trusts no certificate: its attempt fails its TLS
	// handshake, which takes the origin down.
	trust := &switchTransport{rt: trustingTransport(t, nil)}
	tmA := newTelemetry(t, nil)
	a := newSender(t, tmA.inst.SenderOptions(&webhook.SenderOptions{Client: &http.Client{Transport: trust}, Retry: noWait(0), Health: health()}))
	if res, _ := a.Send(ctx, conn, webhook.SamplePayload(time.Now())); len(res.Attempts) != 1 || res.Attempts[0].Kind != webhook.KindTLS {
		t.Fatalf("A's delivery: %v, want one attempt of kind tls", res.Attempts)
	}
	if err := a.Flush(ctx); err != nil { // A's mark is written
		t.Fatal(err)
	}
	if got := tmA.sums(t, "webhook.endpoints.down"); !mapsEqual(got, origin(1)) {
		t.Fatalf("A's webhook.endpoints.down: got %v, want %v", got, origin(1))
	}

	// B starts from the marks, and holds the endpoint down: A counts it.
	tmB := newTelemetry(t, nil)
	b := newSender(t, tmB.inst.SenderOptions(&webhook.SenderOptions{Client: &http.Client{Transport: trustingTransport(t, rv)}, Retry: noWait(0), Health: health()}))
	if err := b.Flush(ctx); err != nil { // B's first read of the marks
		t.Fatal(err)
	}
	if h := b.Health(); len(h) != 1 || !h[0].Down {
		t.Fatalf("B's Health() = %v, want the endpoint down from A's mark", h)
	}
	if got := tmB.sums(t, "webhook.endpoints.down"); len(got) != 0 && !mapsEqual(got, origin(0)) {
		t.Errorf("B's webhook.endpoints.down while it follows A's mark: got %v, want none (A counts it)", got)
	}

	// B's probe finds it up: never fewer than none.
	if _, err := b.Send(ctx, conn, webhook.SamplePayload(time.Now())); err != nil {
		t.Fatalf("B's probe: %v", err)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if h := b.Health(); len(h) != 0 {
		t.Fatalf("B's Health() = %v, want none failing once its probe answered", h)
	}
	if got := tmB.sums(t, "webhook.endpoints.down"); len(got) != 0 && !mapsEqual(got, origin(0)) {
		t.Errorf("B's webhook.endpoints.down once up: got %v, want none", got)
	}

	// A follows B's up mark; its next answer confirms the endpoint up.
	trust.set(trustingTransport(t, rv))
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Send(ctx, conn, webhook.SamplePayload(time.Now())); err != nil {
		t.Fatalf("A's delivery once up: %v", err)
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := tmA.sums(t, "webhook.endpoints.down"); !mapsEqual(got, origin(0)) {
		t.Errorf("A's webhook.endpoints.down once its answer confirmed the endpoint up: got %v, want %v", got, origin(0))
	}
}

// switchTransport is a RoundTripper whose transport a test replaces.
type switchTransport struct {
	mu sync.Mutex
	rt http.RoundTripper
}

func (s *switchTransport) set(rt http.RoundTripper) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rt = rt
}

func (s *switchTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	rt := s.rt
	s.mu.Unlock()
	return rt.RoundTrip(r)
}

// panickingTransport is a RoundTripper with a bug: it panics.
type panickingTransport struct{}

func (panickingTransport) RoundTrip(*http.Request) (*http.Response, error) {
	panic("a RoundTripper's bug")
}

// TestTransport_APanicLeavesNoAttemptActive: an attempt whose round trip
// panics, a panic its caller recovers (River does, for each job), is no
// longer active. The root library ends such an attempt; the count of
// attempts active kept it for good (review).
func TestTransport_APanicLeavesNoAttemptActive(t *testing.T) {
	tm := newTelemetry(t, &otelhook.Options{OmitEndpoint: true})
	s := newSender(t, tm.inst.SenderOptions(&webhook.SenderOptions{Client: &http.Client{Transport: panickingTransport{}}, Retry: noWait(0)}))
	c := webhook.Connection{Name: "bug", URL: "https://127.0.0.1:1/hook", Secret: secret}
	for range 3 {
		func() {
			defer func() { recover() }()
			s.Attempt(context.Background(), c, webhook.EventUserIdentified, []byte(`{}`), 1)
		}()
	}
	if got := tm.sums(t, "webhook.attempts.active"); got[""] != 0 {
		t.Errorf("webhook.attempts.active after three recovered panics: %v, want 0", got)
	}
}

// TestSenderOptions_NewTransportBoundsAWriteByTheAttempt: with no Client,
// SenderOptions makes the transport the Sender would have made, and the
// Sender's own lets one HTTP/2 write wait as long as an attempt may take
// (SenderOptions.Client's doc, TestNewSender_OwnTransportBoundsAWriteByTheAttempt):
// otherwise instrumenting a Sender with a long AttemptTimeout cuts a large
// body over a slow link 30 seconds into one write (review).
func TestSenderOptions_NewTransportBoundsAWriteByTheAttempt(t *testing.T) {
	tm := newTelemetry(t, nil)
	for timeout, want := range map[time.Duration]time.Duration{
		0:               webhook.DefaultAttemptTimeout,
		2 * time.Second: webhook.DefaultAttemptTimeout,
		2 * time.Minute: 2 * time.Minute,
	} {
		opts := tm.inst.SenderOptions(&webhook.SenderOptions{AttemptTimeout: timeout})
		u, ok := opts.Client.Transport.(interface{ Unwrap() http.RoundTripper })
		if !ok {
			t.Fatalf("the Client's transport is %T, want a wrapper", opts.Client.Transport)
		}
		tr, ok := u.Unwrap().(*http.Transport)
		if !ok || tr.HTTP2 == nil {
			t.Fatalf("the wrapped transport is %T, want NewTransport's", u.Unwrap())
		}
		if got := tr.HTTP2.WriteByteTimeout; got != want {
			t.Errorf("AttemptTimeout %v: HTTP2.WriteByteTimeout is %v, want %v, as the Sender's own transport", timeout, got, want)
		}
		if got := tr.TLSHandshakeTimeout; got != want {
			t.Errorf("AttemptTimeout %v: TLSHandshakeTimeout is %v, want %v, as the Sender's own transport", timeout, got, want)
		}
	}
}
