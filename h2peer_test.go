package webhook_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// rawH2 is an HTTP/2 receiver on 127.0.0.1 written frame by frame, for the
// answers net/http's server never gives: data on a stream the client
// reset, a stream's whole window sent late.
type rawH2 struct {
	ln   net.Listener
	cfg  *tls.Config
	pool *x509.CertPool // what the Sender trusts
}

func newRawH2(t *testing.T) *rawH2 {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	srv.StartTLS() // for its certificate
	cfg := srv.TLS.Clone()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	srv.Close()
	cfg.NextProtos = []string{"h2"}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	return &rawH2{ln: ln, cfg: cfg, pool: pool}
}

func (s *rawH2) addr() string { return s.ln.Addr().String() }

// h2Peer is a connection rawH2 accepted, past the client's preface, with
// the server's SETTINGS sent. A goroutine reads the client's frames: it
// acknowledges SETTINGS and PING, sends on ended the stream of each
// request as it ends, and closes ended when the client's side ends.
type h2Peer struct {
	conn  *tls.Conn
	wmu   sync.Mutex
	ended chan uint32
}

// accept accepts the next connection; close it when done.
func (s *rawH2) accept() (*h2Peer, error) {
	raw, err := s.ln.Accept()
	if err != nil {
		return nil, err
	}
	conn := tls.Server(raw, s.cfg)
	preface := make([]byte, 24)
	if err := conn.Handshake(); err != nil {
		raw.Close()
		return nil, err
	}
	if _, err := io.ReadFull(conn, preface); err != nil {
		raw.Close()
		return nil, err
	}
	p := &h2Peer{conn: conn, ended: make(chan uint32, 16)}
	if err := p.frame(0x4, 0, 0, nil); err != nil { // SETTINGS
		raw.Close()
		return nil, err
	}
	go p.read()
	return p, nil
}

func (p *h2Peer) read() {
	defer close(p.ended)
	for {
		var h [9]byte
		if _, err := io.ReadFull(p.conn, h[:]); err != nil {
			return
		}
		payload := make([]byte, int(h[0])<<16|int(h[1])<<8|int(h[2]))
		if _, err := io.ReadFull(p.conn, payload); err != nil {
			return
		}
		stream := binary.BigEndian.Uint32(h[5:]) & 0x7fffffff
		switch {
		case h[3] == 0x4 && h[4]&0x1 == 0: // SETTINGS
			p.frame(0x4, 0x1, 0, nil)
		case h[3] == 0x6 && h[4]&0x1 == 0: // PING
			p.frame(0x6, 0x1, 0, payload)
		case (h[3] == 0x0 || h[3] == 0x1) && h[4]&0x1 != 0: // DATA or HEADERS ending the request
			p.ended <- stream
		}
	}
}

// frame writes one frame, one at a time, failing past a failsafe deadline
// (a client that reads nothing holds the writer).
func (p *h2Peer) frame(typ, flags byte, stream uint32, payload []byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	var h [9]byte
	h[0], h[1], h[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	h[3], h[4] = typ, flags
	binary.BigEndian.PutUint32(h[5:], stream)
	_, err := p.conn.Write(append(h[:], payload...))
	return err
}

// next waits for the next request to end, and returns its stream.
func (p *h2Peer) next() (uint32, error) {
	s, ok := <-p.ended
	if !ok {
		return 0, errors.New("the client's side ended")
	}
	return s, nil
}

// ok answers stream 200 without a body.
func (p *h2Peer) ok(stream uint32) error { return p.frame(0x1, 0x5, stream, []byte{0x88}) }

// stream answers stream 200 and sends n bytes of its body (no end).
func (p *h2Peer) stream(stream uint32, n int) error {
	if err := p.frame(0x1, 0x4, stream, []byte{0x88}); err != nil {
		return err
	}
	return p.data(stream, n)
}

// data sends n more bytes of stream's body, in frames of 16 KiB.
func (p *h2Peer) data(stream uint32, n int) error {
	chunk := make([]byte, 16<<10)
	for sent := 0; sent < n; sent += len(chunk) {
		if err := p.frame(0x0, 0, stream, chunk); err != nil {
			return err
		}
	}
	return nil
}

func (p *h2Peer) close() { p.conn.Close() }
