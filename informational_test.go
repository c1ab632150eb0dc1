package webhook_test

import (
	"context"
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

// TestSend_1xxFloodIsBoundedWhenTheCallersContextTraces proves that the
// 64 KiB bound on what a receiver's headers may take, 1xx answers
// included, holds whatever values the caller's context carries. A caller
// whose context carries an httptrace.ClientTrace with Got1xxResponse (a
// tracing library's, say: the Sender hands the caller's values on to each
// request) turns net/http's count of 1xx header bytes off, and the Sender
// then reads 1xx answers without end, until the attempt timeout.
func TestSend_1xxFloodIsBoundedWhenTheCallersContextTraces(t *testing.T) {
	const answer = "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" // 39 bytes
	const flood = 20000                                             // 780 KB of 1xx answers
	var h *hostile
	h = newHostile(t, func(conn net.Conn, _ *http.Request) {
		for range flood {
			if _, err := io.WriteString(conn, answer); err != nil {
				return
			}
		}
		h.hold()
	})
	s := faultSenderTimeout(t, h.pool, &webhook.RetryPolicy{MaxRetries: 0}, faultTimeout)
	var seen atomic.Int64
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		Got1xxResponse: func(int, textproto.MIMEHeader) error { seen.Add(1); return nil },
	})
	res, err := s.Send(ctx, h.conn(), samplePayload())
	require.Error(t, err)
	require.Len(t, res.Attempts, 1)
	// 64 KiB of headers is at most 64<<10/len(answer) 1xx answers.
	assert.LessOrEqual(t, seen.Load(), int64(64<<10/len(answer)+1), "1xx answers read past the 64 KiB header bound")
	assert.NotEqual(t, webhook.KindTimeout, res.Attempts[0].Kind, "the flood ran until the attempt timed out: %v", res.Attempts[0].Err)
}

// TestSend_A1xxIsCountedOnceWhenTheCallersContextTraces: a receiver may
// send a few 1xx answers before its answer (103 Early Hints), and the
// Sender reads up to five of them, as net/http does. A caller whose
// context carries a ClientTrace with Got1xxResponse must not change what
// a receiver may send: delivery.bound composes the attempt's trace (which
// counts) with the caller's, then bound1xx counts again before calling the
// composed hook, so every 1xx answer is counted twice (the composed hook's
// own error is lost), and the fourth one fails an attempt that the same
// receiver passes without the trace; the header bytes count twice too.
func TestSend_A1xxIsCountedOnceWhenTheCallersContextTraces(t *testing.T) {
	const hints = 4 // fewer than the five a receiver may send
	h := newHostile(t, func(conn net.Conn, _ *http.Request) {
		for range hints {
			io.WriteString(conn, "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n")
		}
		io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	})
	s := faultSenderTimeout(t, h.pool, &webhook.RetryPolicy{MaxRetries: 0}, faultTimeout)

	_, err := s.Send(context.Background(), h.conn(), samplePayload())
	require.NoError(t, err, "without a trace of the caller's")

	var seen atomic.Int64
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		Got1xxResponse: func(int, textproto.MIMEHeader) error { seen.Add(1); return nil },
	})
	res, err := s.Send(ctx, h.conn(), samplePayload())
	require.NoError(t, err, "the same %d 1xx answers, with a trace of the caller's: %v", hints, res.Attempts)
	assert.Equal(t, int64(hints), seen.Load(), "the caller's hook sees each 1xx answer once")
}
