package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync/atomic"
	"time"
)

// This file holds the bound on what a connection of NewTransport's reads
// for the attempts it carries. An answer is read up to its excerpt and a
// bounded drain (readResponseBody); over HTTP/1 net/http then closes a
// connection whose answer was not read to its end, but over HTTP/2 it
// resets the stream and keeps the connection, and a receiver that ignores
// the reset can go on sending DATA on it, which the client reads and
// discards for as long as the connection lives (a review's finding).
// Bounded here: each attempt that gets the connection (httptrace's GotConn)
// lends it an allowance, and when one ends what is lent is cut back to one
// allowance per attempt still on it and idleAllowances more. Those cover
// what streams reset by ended attempts still had on the way (at most a
// stream window each, in practice what the link holds), so that another
// attempt's answer on the connection is never cut for it. Past its budget
// the connection is closed: the answers of the attempts on it are cut, as
// they would be on a receiver that stops answering.
//
// It also holds the bound on how long an attempt whose time is up still
// waits on its connection (boundOverrun).

// h2StreamWindow is the flow-control window net/http's HTTP/2 client opens
// to a stream (its transportDefaultStreamFlow): what a receiver may have
// sent on a stream, unread, when the client resets it.
const h2StreamWindow = 4 << 20

// readAllowance is what an attempt lets its connection read: the answer's
// header, excerpt and drain, a reset stream's window, and framing.
const readAllowance = maxResponseHeaderBytes + maxLoggedBody + maxDrainedBody + h2StreamWindow + 64<<10

// idleAllowances are the allowances a connection keeps beyond those of the
// attempts on it: about 34 MiB with net/http's stream window.
const idleAllowances = 8

// errReadBudget ends the reads of a connection past its budget.
var errReadBudget = errors.New("webhook: the receiver sent more than the attempts on this connection read; connection closed")

// boundedConn is a connection dialTLS made, under the TCP connection and
// its TLS: its reads count against the budget of the attempts it carries.
type boundedConn struct {
	net.Conn
	allowance int64        // readAllowance, with the stream window its transport opens
	inflight  atomic.Int64 // attempts on it
	used      atomic.Bool  // an attempt has had it (begin)
	budget    atomic.Int64 // bytes it may still read
}

// newBoundedConn bounds c, whose transport opens HTTP/2 streams a window
// of streamWindow bytes (0: net/http's default, h2StreamWindow).
func newBoundedConn(c net.Conn, streamWindow int64) *boundedConn {
	b := &boundedConn{Conn: c, allowance: readAllowance + max(0, streamWindow-h2StreamWindow)}
	b.budget.Store(b.allowance * idleAllowances)
	return b
}

func (c *boundedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.budget.Add(-int64(n)) < 0 {
		c.Conn.Close()
		if err == nil {
			err = errReadBudget
		}
	}
	return n, err
}

// stallTimeout is how long an attempt whose time is up may still wait on
// its connection: the time the spec gives a receiver to answer.
const stallTimeout = 5 * time.Second

// boundOverrun bounds how long an attempt whose ctx is done still waits on
// its connection, which t knows, until the returned stop is called: past
// stallTimeout, the connection is closed, with the attempts on it. Over
// HTTP/2, net/http ends an attempt's stream with a write under the
// connection's writer lock before the attempt's read of the answer's body
// returns, and a receiver that stops reading its socket while it makes the
// client write (PINGs to acknowledge), or reads it slowly behind other
// streams' large frames, would hold the attempt for as long as it liked.
// A healthy connection ends the stream at once.
func boundOverrun(ctx context.Context, t *connTrace) (stop func()) {
	returned := make(chan struct{})
	stopWatch := context.AfterFunc(ctx, func() {
		c := t.conn.Load()
		if c == nil {
			return // a connection another dialer made: not bounded
		}
		timer := time.NewTimer(stallTimeout)
		defer timer.Stop()
		select {
		case <-returned:
		case <-timer.C:
			c.Conn.Close()
		}
	})
	return func() {
		close(returned)
		stopWatch()
	}
}

// begin lends the connection an attempt's allowance.
func (c *boundedConn) begin() {
	c.used.Store(true)
	c.inflight.Add(1)
	c.budget.Add(c.allowance)
}

// end takes back what an ended attempt lent: the budget keeps one
// allowance for each attempt still on the connection, and idleAllowances.
func (c *boundedConn) end() {
	limit := c.allowance * (c.inflight.Add(-1) + idleAllowances)
	for {
		b := c.budget.Load()
		if b <= limit || c.budget.CompareAndSwap(b, limit) {
			return
		}
	}
}

// boundedOf returns the boundedConn under conn, an attempt's connection as
// GotConn reports it: a TLS connection over it, or over a proxy's TLS
// connection over it. Nil for a connection another dialer made.
func boundedOf(conn net.Conn) *boundedConn {
	for range 3 {
		switch c := conn.(type) {
		case *boundedConn:
			return c
		case *tls.Conn:
			conn = c.NetConn()
		default:
			return nil
		}
	}
	return nil
}
