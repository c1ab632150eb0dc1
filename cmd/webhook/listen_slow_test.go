package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
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
