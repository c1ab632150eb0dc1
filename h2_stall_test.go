package webhook_test

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

// h2Frame returns an HTTP/2 frame of type typ with flags on stream.
func h2Frame(typ, flags byte, stream uint32, payload []byte) []byte {
	var h [9]byte
	h[0], h[1], h[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	h[3], h[4] = typ, flags
	binary.BigEndian.PutUint32(h[5:], stream)
	return append(h[:], payload...)
}

// h2Request reads the client's frames on conn, acknowledging its SETTINGS,
// until one for which ends(type, flags) holds, and returns its stream: 0
// when the connection ends first.
func h2Request(conn net.Conn, ends func(typ, flags byte) bool) uint32 {
	for {
		var h [9]byte
		if _, err := io.ReadFull(conn, h[:]); err != nil {
			return 0
		}
		if _, err := io.ReadFull(conn, make([]byte, int(h[0])<<16|int(h[1])<<8|int(h[2]))); err != nil {
			return 0
		}
		switch {
		case h[3] == 0x4 && h[4]&0x1 == 0: // SETTINGS: acknowledged
			conn.Write(h2Frame(0x4, 0x1, 0, nil))
		case ends(h[3], h[4]):
			return binary.BigEndian.Uint32(h[5:]) & 0x7fffffff
		}
	}
}

// stopReading accepts one connection on s and reads a request to its end
// (END_STREAM on its HEADERS or DATA). When answer is set, it answers 200
// (HPACK static index 8) without END_STREAM and no body yet. Then it writes
// PINGs, whose acknowledgements fill both socket buffers, and never reads
// again. It sends the connection on conns once accepted, and returns when
// its writing ends, once the client closes the connection or after held:
// true, or false when it stopped before.
func (s *rawH2) stopReading(conns chan<- *tls.Conn, answer bool, held time.Duration) bool {
	raw, err := s.ln.Accept()
	if err != nil {
		return false
	}
	conn := tls.Server(raw, s.cfg)
	conns <- conn
	if conn.Handshake() != nil {
		return false
	}
	if _, err := io.ReadFull(conn, make([]byte, 24)); err != nil { // the preface
		return false
	}
	conn.Write(h2Frame(0x4, 0, 0, nil)) // SETTINGS
	stream := h2Request(conn, func(typ, flags byte) bool { return (typ == 0x0 || typ == 0x1) && flags&0x1 != 0 })
	if stream == 0 {
		return false
	}
	if answer {
		conn.Write(h2Frame(0x1, 0x4, stream, []byte{0x88}))
	}
	var pings []byte
	for range 400_000 {
		pings = append(pings, h2Frame(0x6, 0, 0, make([]byte, 8))...)
	}
	conn.SetWriteDeadline(time.Now().Add(held))
	conn.Write(pings)
	return true
}

// stallTimeout is how long an attempt whose time is up may still wait on
// its connection.
const stallTimeout = 5 * time.Second

// TestSend_HTTP2ReceiverThatStopsReadingHoldsAnAttemptBoundedTime: a
// receiver answers a delivery's headers, then stops reading its socket
// while it makes the client write (PINGs to acknowledge, whose answers fill
// both socket buffers). The HTTP/2 connection's writer blocks holding its
// lock; net/http ends the stream of an attempt whose time is up with a
// write under that lock, and only then lets the read of the answer's body
// return. The attempt ends at most a stallTimeout past its AttemptTimeout,
// when the connection still holding it is closed (a review's finding: the
// attempt lasted as long as the receiver kept the connection open).
func TestSend_HTTP2ReceiverThatStopsReadingHoldsAnAttemptBoundedTime(t *testing.T) {
	t.Parallel()
	srv := newRawH2(t)
	tr := newTransport(t, &webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: srv.pool}, AllowPrivateNetworks: true})
	const timeout = 2 * time.Second // about 1 s of PINGs fills the buffers
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr},
		AttemptTimeout: timeout, Retry: &webhook.RetryPolicy{MaxRetries: 0}})
	require.NoError(t, err)
	t.Cleanup(s.CloseIdleConnections)

	conns := make(chan *tls.Conn, 1)
	serverDone := make(chan struct{})
	go func() {
		defer close(serverDone)
		srv.stopReading(conns, true, time.Minute)
	}()
	t.Cleanup(func() {
		select {
		case c := <-conns:
			c.Close()
		default:
		}
		<-serverDone
	})

	done := make(chan *webhook.Result, 1)
	start := time.Now()
	go func() {
		res, _ := s.Send(context.Background(), webhook.Connection{URL: "https://" + srv.addr() + "/hook", Secret: testSecret}, samplePayload())
		done <- res
	}()
	select {
	case res := <-done:
		require.Len(t, res.Attempts, 1)
		// The status came: delivered, with the answer's body cut.
		assert.Equal(t, http.StatusOK, res.Attempts[0].StatusCode)
		assert.Less(t, res.Attempts[0].Duration, timeout+stallTimeout+time.Second)
	case <-time.After(timeout + 3*stallTimeout):
		(<-conns).Close() // the receiver lets the attempt go
		t.Fatalf("Send was still blocked %v after it began (AttemptTimeout %v), until the receiver closed the connection: %v",
			time.Since(start).Round(time.Second), timeout, (<-done).Attempts)
	}
}

// TestSend_HTTP2AttemptThatTimesOutLeavesItsConnectionsOtherDeliveries: on
// one HTTP/2 connection, an attempt whose answer's body does not end in
// time has its stream reset alone; a delivery in flight on the same
// connection is answered.
func TestSend_HTTP2AttemptThatTimesOutLeavesItsConnectionsOtherDeliveries(t *testing.T) {
	slowEnded := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/slow" {
			w.WriteHeader(http.StatusOK)
			w.Write([]byte("partial"))
			http.NewResponseController(w).Flush()
			<-r.Context().Done() // reset by the client
			close(slowEnded)
			return
		}
		if r.URL.Path == "/ok" {
			<-slowEnded // answered once the slow one's attempt has ended
		}
	}))
	var conns atomic.Int32
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	tr := newTransport(t, &webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: pool}, AllowPrivateNetworks: true})
	newSender := func(timeout time.Duration) *webhook.Sender { // on one transport: one connection
		s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr},
			AttemptTimeout: timeout, Retry: &webhook.RetryPolicy{MaxRetries: 0}})
		require.NoError(t, err)
		return s
	}
	s := newSender(300 * time.Millisecond)
	t.Cleanup(s.CloseIdleConnections)

	_, err := s.Send(context.Background(), webhook.Connection{URL: srv.URL + "/warm", Secret: testSecret}, samplePayload())
	require.NoError(t, err) // the connection the next two share

	ok := make(chan *webhook.Result, 1)
	go func() {
		res, _ := newSender(time.Minute).Send(context.Background(), webhook.Connection{URL: srv.URL + "/ok", Secret: testSecret}, samplePayload())
		ok <- res
	}()
	res, err := s.Send(context.Background(), webhook.Connection{URL: srv.URL + "/slow", Secret: testSecret}, samplePayload())
	require.NoError(t, err, "the status came")
	assert.Equal(t, "partial", string(res.Attempts[0].ResponseBody))
	other := <-ok
	require.NoError(t, other.Err)
	assert.Equal(t, http.StatusOK, other.Attempts[0].StatusCode)
	assert.Equal(t, int32(1), conns.Load(), "one connection for the three")
}

// stallingLink is a TCP link to target whose client-to-server direction can
// stall (a congested or slow link), then carries on: the receiver reads
// everything that reaches it.
type stallingLink struct {
	ln    net.Listener
	mu    sync.Mutex
	open  chan struct{} // closed while bytes cross from the client to the server
	conns atomic.Int32
}

// pass waits while the link stalls.
func (l *stallingLink) pass() {
	l.mu.Lock()
	open := l.open
	l.mu.Unlock()
	<-open
}

// stallFor stalls the link for d.
func (l *stallingLink) stallFor(d time.Duration) {
	open := make(chan struct{})
	l.mu.Lock()
	l.open = open
	l.mu.Unlock()
	time.AfterFunc(d, func() { close(open) })
}

func newStallingLink(t *testing.T, target string) *stallingLink {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := &stallingLink{ln: ln, open: make(chan struct{})}
	close(l.open)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.conns.Add(1)
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				return
			}
			go func() { io.Copy(c, s); c.Close() }()
			go func() {
				buf := make([]byte, 32<<10)
				for {
					n, err := c.Read(buf)
					l.pass()
					if n > 0 {
						if _, werr := s.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				s.Close()
			}()
		}
	}()
	return l
}

// behindStallingLink starts srv as an HTTP/2 receiver whose flow-control
// windows are wider than any body here, so that an upload waits on the
// link, not on flow control, behind a stallingLink. It returns the link,
// the receiver's URL through it, and a transport that trusts it.
func behindStallingLink(t *testing.T, srv *httptest.Server) (*stallingLink, string, *http.Transport) {
	srv.EnableHTTP2 = true
	srv.Config.HTTP2 = &http.HTTP2Config{MaxReceiveBufferPerConnection: 64 << 20, MaxReceiveBufferPerStream: 64 << 20}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	link := newStallingLink(t, srv.Listener.Addr().String())
	pool := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	tr := newTransport(t, &webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: pool}, AllowPrivateNetworks: true})
	return link, "https://" + link.ln.Addr().String(), tr
}

// TestSend_HTTP2SlowLinkKeepsItsConnectionWhenAnAttemptTimesOut: a link
// that stalls for a moment (1.5 s, less than a write may wait) carries an
// upload and an attempt whose answer's body never ends. The attempt's time
// runs out during the stall; the upload, on the same connection, goes on
// once the link does (a review's finding against a cut that closed a
// connection whenever a write was under way as an attempt ended).
func TestSend_HTTP2SlowLinkKeepsItsConnectionWhenAnAttemptTimesOut(t *testing.T) {
	t.Parallel()
	var bigGot atomic.Int64
	slowAnswered := make(chan struct{}, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusOK)
			w.Write([]byte("partial"))
			http.NewResponseController(w).Flush()
			slowAnswered <- struct{}{}
			<-r.Context().Done()
		case "/big":
			n, _ := io.Copy(io.Discard, r.Body)
			bigGot.Store(n)
		default:
			io.Copy(io.Discard, r.Body)
		}
	}))
	link, base, tr := behindStallingLink(t, srv)
	newSender := func(timeout time.Duration) *webhook.Sender {
		s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr},
			AttemptTimeout: timeout, MaxBodyBytes: 64 << 20, Retry: &webhook.RetryPolicy{MaxRetries: 0}})
		require.NoError(t, err)
		return s
	}
	const timeout = 1500 * time.Millisecond
	slow, uploader := newSender(timeout), newSender(time.Minute)
	t.Cleanup(slow.CloseIdleConnections)

	_, err := slow.Send(context.Background(), webhook.Connection{URL: base + "/warm", Secret: testSecret}, samplePayload())
	require.NoError(t, err) // the one connection

	slowDone := make(chan *webhook.Result, 1)
	go func() {
		res, _ := slow.Send(context.Background(), webhook.Connection{URL: base + "/slow", Secret: testSecret}, samplePayload())
		slowDone <- res
	}()
	// Wait for /slow's request to be on the wire before the link stalls:
	// its handler answers and the attempt reads the body.
	<-slowAnswered

	body := make([]byte, 32<<20)
	link.stallFor(timeout) // as long as the slow attempt has, then it carries on
	bigDone := make(chan *webhook.Result, 1)
	go func() {
		res, _ := uploader.SendBytes(context.Background(), webhook.Connection{URL: base + "/big", Secret: testSecret}, "user.identified", body)
		bigDone <- res
	}()
	res := <-bigDone
	require.NoError(t, res.Err, "the upload over a healthy, slow link")
	assert.Equal(t, int64(len(body)), bigGot.Load())
	slowRes := <-slowDone
	require.NoError(t, slowRes.Err, "the status came")
	assert.Less(t, slowRes.Attempts[0].Duration, 2*timeout+stallTimeout)
	assert.Equal(t, int32(1), link.conns.Load(), "one connection for all")
}

// TestSend_HTTP2ReceiverThatStopsReadingBeforeAnsweringLosesItsConnection:
// a receiver takes a delivery's request, never answers, and stops reading
// its socket while it makes the client write (PINGs to acknowledge). The
// attempt ends at its AttemptTimeout, but the connection's writer stays
// blocked: net/http kept such a connection, with its goroutines and
// buffers, for as long as the receiver held it open (a review's finding).
// The transport closes a connection on which a write waits
// HTTP2.WriteByteTimeout, DefaultAttemptTimeout by default, made short
// here, so the receiver's own write fails soon after.
func TestSend_HTTP2ReceiverThatStopsReadingBeforeAnsweringLosesItsConnection(t *testing.T) {
	t.Parallel()
	srv := newRawH2(t)
	tr := newTransport(t, &webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: srv.pool}, AllowPrivateNetworks: true})
	require.Equal(t, webhook.DefaultAttemptTimeout, tr.HTTP2.WriteByteTimeout, "the default bound on one write")
	const writeTimeout = 3 * time.Second
	tr.HTTP2.WriteByteTimeout = writeTimeout
	const timeout = 2 * time.Second // about 1 s of PINGs fills the buffers
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr},
		AttemptTimeout: timeout, Retry: &webhook.RetryPolicy{MaxRetries: 0}})
	require.NoError(t, err)
	t.Cleanup(s.CloseIdleConnections)

	const held = 30 * time.Second // how long the receiver would hold the connection
	conns := make(chan *tls.Conn, 1)
	writeEnded := make(chan time.Time, 1)
	go func() {
		defer close(writeEnded)
		if srv.stopReading(conns, false, held) {
			writeEnded <- time.Now()
		}
	}()
	t.Cleanup(func() {
		select {
		case c := <-conns:
			c.Close()
		default:
		}
	})

	res, err := s.Send(context.Background(), webhook.Connection{URL: "https://" + srv.addr() + "/hook", Secret: testSecret}, samplePayload())
	require.Error(t, err)
	require.Len(t, res.Attempts, 1)
	assert.Equal(t, webhook.KindTimeout, res.Attempts[0].Kind)
	ended := time.Now()
	closed, ok := <-writeEnded
	require.True(t, ok, "the receiver stopped before it wrote")
	// The buffers fill in about a second, up to 6 s on a loaded machine;
	// unbounded, the receiver would hold the connection for held.
	assert.Less(t, closed.Sub(ended), writeTimeout+10*time.Second,
		"the connection whose writer the receiver blocked must be closed, not kept until the receiver lets go")
}

// TestSend_HTTP2LinkThatStallsSixSecondsKeepsItsDelivery: a link that
// stops carrying the client's bytes for 6 seconds, as a congested path or
// TCP's retransmission backoff may, then carries on, holds a large upload's
// write for that long. The delivery, whose AttemptTimeout is a minute, is
// made: a bound of 5 s on one write cut it (a review's finding).
func TestSend_HTTP2LinkThatStallsSixSecondsKeepsItsDelivery(t *testing.T) {
	t.Parallel()
	var got atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		got.Store(n)
	}))
	link, base, tr := behindStallingLink(t, srv)
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr},
		AttemptTimeout: time.Minute, MaxBodyBytes: 64 << 20, Retry: &webhook.RetryPolicy{MaxRetries: 0}})
	require.NoError(t, err)
	t.Cleanup(s.CloseIdleConnections)
	// An earlier delivery opened the connection: the receiver's SETTINGS are known.
	_, err = s.Send(context.Background(), webhook.Connection{URL: base + "/warm", Secret: testSecret}, samplePayload())
	require.NoError(t, err)

	body := make([]byte, 32<<20) // more than the link's socket buffers hold
	link.stallFor(6 * time.Second)
	res, err := s.SendBytes(context.Background(), webhook.Connection{URL: base + "/big", Secret: testSecret}, "user.identified", body)
	require.NoError(t, err, "a healthy receiver whose link stalled 6 s: %v", res.Attempts)
	assert.Equal(t, int64(len(body)), got.Load())
}
