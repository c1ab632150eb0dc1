package webhook_test

import (
	"net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSend_HTTP2AnswerThroughAnHTTPProxyKeepsNoReadingAfterTheDelivery is
// TestSend_HTTP2AnswerKeepsNoReadingAfterTheDelivery through an http://
// CONNECT proxy (TransportOptions.Proxy; Smokescreen, the example the doc
// gives, is one). net/http dials such a proxy with DialContext and makes
// the TLS handshake with the receiver itself, so no boundedConn is under
// the connection: the HTTP/2 receiver that ignores the reset of its stream
// makes the Sender read 64 MiB after the delivery returned, as before the
// read budget.
func TestSend_HTTP2AnswerThroughAnHTTPProxyKeepsNoReadingAfterTheDelivery(t *testing.T) {
	srv := newRawH2(t)
	const after = 64 << 20
	written := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		p, err := srv.accept()
		if err != nil {
			written <- err
			return
		}
		defer p.close()
		s, err := p.next()
		if err == nil {
			err = p.stream(s, (1<<20)+after)
		}
		written <- err
	})
	proxy := newConnectProxy(t)
	proxy.route(srv.addr(), srv.addr())
	testHostileH2(t, srv, &url.URL{Scheme: "http", Host: proxy.addr}, written, after)
	require.EqualValues(t, 1, proxy.connects.Load(), "through the proxy")
	wg.Wait()
}
