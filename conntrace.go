package webhook

import (
	"net/http/httptrace"
	"net/textproto"
	"sync/atomic"
)

// This file holds what an attempt learns of its connection from net/http's
// trace; delivery.go holds the attempts.

// connTrace notes the connection an attempt got (httptrace's GotConn):
// endpoint health counts only the attempts that got none against their
// endpoint, and a connection of NewTransport's reads what its attempts
// lend it (readbudget.go). One is made per attempt, since net/http may
// call it from another goroutine.
type connTrace struct {
	connected atomic.Bool
	conn      atomic.Pointer[boundedConn] // lent the attempt's allowance
	got1xx    informational
	trace     httptrace.ClientTrace
}

func newConnTrace() *connTrace {
	t := &connTrace{}
	t.trace.GotConn = t.gotConn
	t.trace.Got1xxResponse = func(_ int, h textproto.MIMEHeader) error { return t.got1xx.count(h) }
	return t
}

func (t *connTrace) gotConn(info httptrace.GotConnInfo) {
	t.connected.Store(true)
	if c := boundedOf(info.Conn); c != nil {
		c.begin()
		if old := t.conn.Swap(c); old != nil {
			old.end() // net/http retried the request on another connection
		}
	}
}

// done ends the attempt's loan to its connection, once its answer is read.
func (t *connTrace) done() {
	if c := t.conn.Swap(nil); c != nil {
		c.end()
	}
}
