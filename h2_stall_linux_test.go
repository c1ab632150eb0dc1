package webhook_test

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

// throttledConn reads its socket at about 64 KiB a second once slow is set:
// a receiver that reads slowly but steadily.
type throttledConn struct {
	net.Conn
	slow atomic.Bool
}

func (c *throttledConn) Read(p []byte) (int, error) {
	if !c.slow.Load() {
		return c.Conn.Read(p)
	}
	time.Sleep(50 * time.Millisecond) // the receiver's pace, not a wait for the test
	return c.Conn.Read(p[:min(len(p), 64<<10/20)])
}

// TestSend_HTTP2SlowReaderBehindLargeFramesHoldsAnAttemptBoundedTime: a
// receiver reads slowly but steadily (64 KiB a second, through a small
// receive buffer), lets the client write 1 MiB frames (MAX_FRAME_SIZE), and
// answers one delivery with a body that never ends while four 1 MiB
// uploads share its connection. Every write ends, each in well under 5 s,
// but the timed-out attempt's stream waits behind the other streams' large
// frames: it still ends at most a stallTimeout past its AttemptTimeout (a
// review's finding against a bound on writes that had stopped: 30 s).
func TestSend_HTTP2SlowReaderBehindLargeFramesHoldsAnAttemptBoundedTime(t *testing.T) {
	t.Parallel()
	srv := newRawH2(t)
	// The receiver's own socket options: a small segment and receive buffer
	// keep the client's send buffer small.
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG, 536)
			if serr == nil {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 8<<10)
			}
		})
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	tr := newTransport(t, &webhook.TransportOptions{TLSClientConfig: &tls.Config{RootCAs: srv.pool}, AllowPrivateNetworks: true})
	const timeout = 2 * time.Second
	newSender := func(timeout time.Duration) *webhook.Sender { // on one transport: one connection
		s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr},
			AttemptTimeout: timeout, Retry: &webhook.RetryPolicy{MaxRetries: 0}})
		require.NoError(t, err)
		return s
	}
	s, uploader := newSender(timeout), newSender(90*time.Second)
	t.Cleanup(s.CloseIdleConnections)

	conns := make(chan *tls.Conn, 1)
	answered := make(chan struct{})
	serverDone := make(chan struct{})
	go func() {
		defer close(serverDone)
		raw, err := ln.Accept()
		if err != nil {
			return
		}
		slow := &throttledConn{Conn: raw}
		conn := tls.Server(slow, srv.cfg)
		conns <- conn
		if conn.Handshake() != nil {
			return
		}
		if _, err := io.ReadFull(conn, make([]byte, 24)); err != nil { // the preface
			return
		}
		settings := make([]byte, 12)
		binary.BigEndian.PutUint16(settings[0:], 0x5) // MAX_FRAME_SIZE
		binary.BigEndian.PutUint32(settings[2:], 1<<20)
		binary.BigEndian.PutUint16(settings[6:], 0x4) // INITIAL_WINDOW_SIZE
		binary.BigEndian.PutUint32(settings[8:], 1<<30)
		increment := make([]byte, 4)
		binary.BigEndian.PutUint32(increment, 1<<30)
		conn.Write(append(h2Frame(0x4, 0, 0, settings), h2Frame(0x8, 0, 0, increment)...)) // SETTINGS, WINDOW_UPDATE
		// Until the first request's HEADERS.
		stream := h2Request(conn, func(typ, _ byte) bool { return typ == 0x1 })
		if stream == 0 {
			return
		}
		// 200 and the start of a body that never ends; then a slow reader.
		conn.Write(append(h2Frame(0x1, 0x4, stream, []byte{0x88}), h2Frame(0x0, 0, stream, []byte("partial"))...))
		slow.slow.Store(true)
		close(answered)
		io.Copy(io.Discard, conn)
	}()
	var uploads sync.WaitGroup
	t.Cleanup(func() {
		ln.Close() // no second connection for the uploads
		select {
		case c := <-conns:
			c.Close()
		default:
		}
		<-serverDone
		uploads.Wait()
	})

	url := "https://" + ln.Addr().String() + "/hook"
	done := make(chan *webhook.Result, 1)
	go func() {
		res, _ := s.Send(context.Background(), webhook.Connection{URL: url, Secret: testSecret}, samplePayload())
		done <- res
	}()
	<-answered
	for range 4 {
		uploads.Go(func() {
			uploader.SendBytes(context.Background(), webhook.Connection{URL: url, Secret: testSecret}, "user.created", make([]byte, 1<<20))
		})
	}
	select {
	case res := <-done:
		require.Len(t, res.Attempts, 1)
		assert.Less(t, res.Attempts[0].Duration, timeout+stallTimeout+time.Second)
	case <-time.After(timeout + 3*stallTimeout):
		c := <-conns
		conns <- c
		c.Close() // the receiver lets the attempt go
		t.Fatalf("Send was still blocked %v past its AttemptTimeout: %v", 3*stallTimeout, (<-done).Attempts)
	}
}
