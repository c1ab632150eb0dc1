package webhook_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

// tracingTransport adds a ClientTrace inside RoundTrip, as otelhttp's
// Transport does with otelhttp.WithClientTrace(otelhttptrace.NewClientTrace),
// whose trace sets Got1xxResponse.
type tracingTransport struct {
	rt   http.RoundTripper
	seen *atomic.Int64
}

func (t *tracingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx := httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{
		Got1xxResponse: func(int, textproto.MIMEHeader) error { t.seen.Add(1); return nil },
	})
	return t.rt.RoundTrip(r.WithContext(ctx))
}

// TestSend_1xxFloodIsBoundedThroughATracingTransport: NewTransport's doc
// names a tracing RoundTripper such as otelhttp's around it as a supported
// Client. Such a wrapper adds its ClientTrace (with Got1xxResponse) inside
// RoundTrip, after delivery.bound looked at the context, so bound1xx never
// applies, net/http's own 64 KiB bound on 1xx headers is off, and the
// Sender reads a receiver's 1xx answers up to the connection's read budget
// (4.2 MiB), 20,000 of them here, until the attempt times out.
func TestSend_1xxFloodIsBoundedThroughATracingTransport(t *testing.T) {
	const answer = "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" // 39 bytes
	const flood = 20000
	var h *hostile
	h = newHostile(t, func(conn net.Conn, _ *http.Request) {
		for range flood {
			if _, err := io.WriteString(conn, answer); err != nil {
				return
			}
		}
		h.hold()
	})
	tr := newTransport(t, &webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: h.pool}, AllowPrivateNetworks: true})
	t.Cleanup(tr.CloseIdleConnections)
	var seen atomic.Int64
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: &tracingTransport{rt: tr, seen: &seen}},
		AttemptTimeout: faultTimeout, Retry: &webhook.RetryPolicy{MaxRetries: 0}})
	require.NoError(t, err)
	res, err := s.Send(context.Background(), h.conn(), samplePayload())
	require.Error(t, err)
	require.Len(t, res.Attempts, 1)
	assert.LessOrEqual(t, seen.Load(), int64(64<<10/len(answer)+1), "1xx answers read past the 64 KiB header bound")
	assert.NotEqual(t, webhook.KindTimeout, res.Attempts[0].Kind, "the flood ran until the attempt timed out: %v", res.Attempts[0].Err)
}
