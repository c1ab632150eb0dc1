package otelhook_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/otelhook"
	"github.com/signedhook/webhook/webhooktest"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// A Sender whose attempts become spans in the caller's trace and metrics.
// A service gives New its own providers, or nil for the global ones set
// with otel.SetMeterProvider and otel.SetTracerProvider; here the SDK's
// in-memory reader and exporter show what is recorded.
func Example() {
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewInMemoryExporter()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer mp.Shutdown(context.Background())
	defer tp.Shutdown(context.Background())

	inst, err := otelhook.New(&otelhook.Options{MeterProvider: mp, TracerProvider: tp})
	if err != nil {
		log.Fatal(err)
	}

	// A receiver on 127.0.0.1 that answers 503 once, then 200.
	srv := webhooktest.NewServer("whsec_example", nil)
	defer srv.Close()
	srv.Script(webhooktest.Status(http.StatusServiceUnavailable))

	s, err := webhook.NewSender(inst.SenderOptions(&webhook.SenderOptions{
		Client: srv.Client(), // its transport is wrapped, not replaced
		Retry: &webhook.RetryPolicy{MaxRetries: 3,
			Backoff: func(int, *http.Response) time.Duration { return 0 }}, // at once, for the example
	}))
	if err != nil {
		log.Fatal(err)
	}
	defer s.CloseIdleConnections()

	ctx, span := tp.Tracer("example").Start(context.Background(), "identify user")
	if _, err := s.Send(ctx, srv.Connection(), webhook.SamplePayload(time.Now())); err != nil {
		log.Fatal(err)
	}
	span.End()

	for _, sp := range spans.GetSpans() {
		if sp.Parent.SpanID() != span.SpanContext().SpanID() {
			continue // the caller's own span
		}
		fmt.Printf("span %s, child of %q: %s\n", sp.Name, "identify user",
			pick(attribute.NewSet(sp.Attributes...), "webhook.attempt", "http.response.status_code", "error.type", "webhook.outcome"))
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch data := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, dp := range data.DataPoints {
				fmt.Printf("%s{%s} %d\n", m.Name, pick(dp.Attributes, "webhook.outcome", "webhook.failure_kind"), dp.Value)
			}
		case metricdata.Histogram[float64]:
			for _, dp := range data.DataPoints {
				fmt.Printf("%s{%s} count %d\n", m.Name, pick(dp.Attributes, "http.response.status_code"), dp.Count)
			}
		}
	}
	// Unordered output:
	// span POST, child of "identify user": webhook.attempt=1 http.response.status_code=503 error.type=503 webhook.outcome=failed
	// span POST, child of "identify user": webhook.attempt=2 http.response.status_code=200 webhook.outcome=delivered
	// http.client.request.duration{http.response.status_code=503} count 1
	// http.client.request.duration{http.response.status_code=200} count 1
	// webhook.attempts{webhook.outcome=failed webhook.failure_kind=status} 1
	// webhook.attempts{webhook.outcome=delivered} 1
	// webhook.deliveries{webhook.outcome=delivered} 1
	// webhook.attempts.active{} 0
}

// pick returns the attributes of set named by keys, in that order, as
// "key=value" separated by spaces: the ones that do not vary from run to
// run (the receiver's port does).
func pick(set attribute.Set, keys ...attribute.Key) string {
	out := ""
	for _, k := range keys {
		if v, ok := set.Value(k); ok {
			if out != "" {
				out += " "
			}
			out += string(k) + "=" + v.String()
		}
	}
	return out
}

type tenantKey struct{}

// A dimension per customer on the metrics, taken from the delivery's
// context, bounded: past MaxAttributeSets customers, the metrics record
// otel.metric.overflow instead. OmitEndpoint leaves the hosts off.
func ExampleOptions_attributes() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	inst, err := otelhook.New(&otelhook.Options{
		MeterProvider: mp,
		OmitEndpoint:  true,
		Attributes: func(ctx context.Context, c webhook.Connection) []attribute.KeyValue {
			tenant, _ := ctx.Value(tenantKey{}).(string)
			return []attribute.KeyValue{attribute.String("tenant", tenant)}
		},
		MaxAttributeSets: 1,
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := webhooktest.NewServer("whsec_example", nil)
	defer srv.Close()
	s, _ := webhook.NewSender(inst.SenderOptions(&webhook.SenderOptions{Client: srv.Client()}))
	defer s.CloseIdleConnections()
	for _, tenant := range []string{"acme", "globex"} {
		ctx := context.WithValue(context.Background(), tenantKey{}, tenant)
		s.Send(ctx, srv.Connection(), webhook.SamplePayload(time.Now()))
	}

	var rm metricdata.ResourceMetrics
	reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "webhook.deliveries" {
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				fmt.Println(dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Value)
			}
		}
	}
	// Unordered output:
	// tenant=acme,webhook.outcome=delivered 1
	// otel.metric.overflow=true,webhook.outcome=delivered 1
}
