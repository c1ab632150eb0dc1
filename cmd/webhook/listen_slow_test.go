package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/webhooktest"
)

// A client that sends its headers and then the body a byte at a time, or
// not at all (slowloris), does not hold listen's connection and handler
// for ever: listen is meant to be reachable behind a tunnel, and the
// service gives up on an attempt after 30 seconds. It is answered or cut
// off within a bounded time (bodyTimeout, made short here).
func TestListen_ASlowBodyIsCutOff(t *testing.T) {
	saved := bodyTimeout
	bodyTimeout = 500 * time.Millisecond
	t.Cleanup(func() { bodyTimeout = saved }) // after startListen's cleanup has stopped it
	base, _ := startListen(t)
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST /webhooks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, conn.SetReadDeadline(start.Add(20*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("listen still waits for the body after %v: a client holds a connection and a handler for as long as it likes", time.Since(start).Round(time.Second))
	}
	if err == nil {
		resp.Body.Close()
		assert.GreaterOrEqual(t, resp.StatusCode, 400, "a request whose body never came is not accepted")
	}
}

// A client that never reads the answer listen forwards from the
// application does not hold listen's handler, and its connection to the
// application, for ever: the answer is written within bodyTimeout (made
// short here), then the handler ends (review).
func TestListen_AClientThatNeverReadsTheAnswerIsCutOff(t *testing.T) {
	saved := bodyTimeout
	bodyTimeout = 500 * time.Millisecond
	t.Cleanup(func() { bodyTimeout = saved })
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(make([]byte, 64<<20)) // more than the sockets between hold
	}))
	defer app.Close()
	base, out := startListen(t, "-forward", app.URL+"/hook")
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	body := []byte(`{"event":"user.identified","user":{"email":"a@example.com"}}`)
	req, err := http.NewRequest(http.MethodPost, base+"/webhooks", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header = webhooktest.SignedHeader(testSecret, webhook.EventUserIdentified, body, time.Now())
	require.NoError(t, req.Write(conn)) // and never read the answer
	select {
	case line := <-out.each:
		assert.Contains(t, line, "answered 200")
	case <-time.After(20 * time.Second): // a guard: the handler ends within bodyTimeout, or never
		t.Fatal("the handler still writes the answer to a client that does not read it")
	}
}

// A client of listen -tls over HTTP/2 that gives the answer no window
// (SETTINGS_INITIAL_WINDOW_SIZE 0) does not hold listen's handler, and its
// connection, for ever: the answer is written within bodyTimeout (made
// short here), or its stream is reset. Over HTTP/1 the kernel takes a
// short answer whether or not the client reads it; HTTP/2's flow control
// does not, and net/http's server has no write timeout of its own, nor an
// idle timeout while a stream is open.
func TestListen_AnHTTP2ClientThatGivesNoWindowIsCutOff(t *testing.T) {
	saved := bodyTimeout
	bodyTimeout = 500 * time.Millisecond
	t.Cleanup(func() { bodyTimeout = saved })
	base, out := startListen(t, "-tls")
	_, pool := trusted(t, out)
	conn, err := tls.Dial("tcp", strings.TrimPrefix(base, "https://"), &tls.Config{RootCAs: pool, NextProtos: []string{"h2"}})
	require.NoError(t, err)
	defer conn.Close()
	require.Equal(t, "h2", conn.ConnectionState().NegotiatedProtocol)

	frame := func(typ, flags byte, stream uint32, payload []byte) error {
		h := []byte{byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload)), typ, flags,
			byte(stream >> 24), byte(stream >> 16), byte(stream >> 8), byte(stream)}
		_, err := conn.Write(append(h, payload...))
		return err
	}
	body := []byte(`{"event":"user.identified","user":{"email":"a@example.com"}}`)
	var block []byte // HPACK, each field a literal without indexing
	field := func(name, value string) {
		block = append(block, 0, byte(len(name)))
		block = append(block, name...)
		block = append(block, byte(len(value)))
		block = append(block, value...)
	}
	field(":method", "POST")
	field(":scheme", "https")
	field(":path", "/webhooks")
	field(":authority", strings.TrimPrefix(base, "https://"))
	field("content-type", "application/json")
	field("content-length", fmt.Sprint(len(body)))
	for name, vs := range webhooktest.SignedHeader(testSecret, webhook.EventUserIdentified, body, time.Now()) {
		if name != "Content-Type" {
			field(strings.ToLower(name), vs[0])
		}
	}
	_, err = conn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
	require.NoError(t, err)
	require.NoError(t, frame(0x4, 0, 0, []byte{0, 0x4, 0, 0, 0, 0})) // SETTINGS: INITIAL_WINDOW_SIZE 0
	require.NoError(t, frame(0x1, 0x4, 1, block))                    // HEADERS, END_HEADERS
	require.NoError(t, frame(0x0, 0x1, 1, body))                     // DATA, END_STREAM

	// Read the server's frames: the stream ends with DATA or HEADERS
	// ending it, RST_STREAM, GOAWAY or the connection's end.
	ended := make(chan string, 1)
	go func() {
		h := make([]byte, 9)
		for {
			if _, err := io.ReadFull(conn, h); err != nil {
				ended <- "the connection closed"
				return
			}
			n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
			typ, flags, stream := h[3], h[4], binary.BigEndian.Uint32(h[5:])&0x7fffffff
			if _, err := io.CopyN(io.Discard, conn, int64(n)); err != nil {
				ended <- "the connection closed"
				return
			}
			switch {
			case typ == 0x4 && flags&0x1 == 0:
				frame(0x4, 0x1, 0, nil) //nolint:errcheck // SETTINGS ACK; a write that fails ends the read too
			case stream == 1 && (typ == 0x0 || typ == 0x1) && flags&0x1 != 0:
				ended <- "the answer was sent"
				return
			case stream == 1 && typ == 0x3:
				ended <- "the stream was reset"
				return
			case typ == 0x7:
				ended <- "GOAWAY"
				return
			}
		}
	}()
	assert.Contains(t, <-out.each, "verified")
	select {
	case how := <-ended:
		t.Log(how)
	case <-time.After(20 * time.Second): // a guard: the stream ends within bodyTimeout, or never
		t.Fatal("the handler still waits to write its answer to a client that gives it no window: the client holds it, and the connection, for as long as it likes")
	}
}
