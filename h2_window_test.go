package webhook_test

import (
	"net/http"
	"sync"
	"testing"
)

// TestSend_HTTP2LargerStreamWindowDoesNotCutAnotherDelivery: the
// transport NewTransport returns is an *http.Transport, whose HTTP2 field
// may raise the window the client opens to a stream
// (HTTP2Config.MaxReceiveBufferPerStream). readAllowance assumes net/http's
// default 4 MiB. With a 16 MiB window, a receiver that answers one
// delivery with a large body, within the window the client gave it, makes
// the connection read past its budget (three allowances while two
// deliveries are on it) and closes it: the other delivery, answered 200
// right after, fails.
func TestSend_HTTP2LargerStreamWindowDoesNotCutAnotherDelivery(t *testing.T) {
	const window = 16 << 20
	srv := newRawH2(t)
	done := make(chan struct{}) // the test has its answers
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(done)
	wg.Go(func() {
		p, err := srv.accept()
		if err != nil {
			return
		}
		defer p.close()
		first, err := p.next()
		if err != nil || p.ok(first) != nil {
			return
		}
		a, errA := p.next()
		b, errB := p.next()
		if errA != nil || errB != nil {
			return
		}
		// A large answer to a, within the window the client opened to it.
		if p.stream(a, window-(16<<10)) != nil {
			return
		}
		p.ok(b) // b: 200
		<-done
	})
	testSharedH2(t, srv, &http.HTTP2Config{MaxReceiveBufferPerStream: window}, 2, nil)
}
