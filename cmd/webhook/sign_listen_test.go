package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/webhooktest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shellWords splits a POSIX shell command line of single-quoted and plain
// words, with backslash-newline continuations: what sign prints.
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var words []string
	var w strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quoted:
			if c == '\'' {
				quoted = false
			} else {
				w.WriteByte(c)
			}
		case c == '\'':
			quoted, inWord = true, true
		case c == '\\' && i+1 < len(s):
			i++
			if s[i] != '\n' {
				w.WriteByte(s[i])
				inWord = true
			}
		case c == ' ' || c == '\n' || c == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	require.False(t, quoted, "unterminated quote")
	if inWord {
		words = append(words, w.String())
	}
	return words
}

// curlRequest parses the curl command sign printed into a request.
func curlRequest(t *testing.T, out string) *http.Request {
	t.Helper()
	i := strings.Index(out, "curl ")
	require.GreaterOrEqual(t, i, 0, out)
	words := shellWords(t, out[i:])
	require.Equal(t, "curl", words[0])
	var method, target string
	var body []byte
	h := http.Header{}
	for j := 1; j < len(words); j++ {
		switch words[j] {
		case "-sS":
		case "-X":
			j++
			method = words[j]
		case "-H":
			j++
			name, value, ok := strings.Cut(words[j], ": ")
			require.True(t, ok, words[j])
			h.Add(name, value)
		case "--data-binary":
			j++
			if file, ok := strings.CutPrefix(words[j], "@"); ok {
				data, err := os.ReadFile(file)
				require.NoError(t, err)
				body = data
			} else {
				body = []byte(words[j])
			}
		default:
			require.Empty(t, target, "one URL: %q", words[j])
			target = words[j]
		}
	}
	r := httptest.NewRequest(method, target, bytes.NewReader(body))
	r.Header = h
	return r
}

func TestSign_CurlCommandVerifies(t *testing.T) {
	odd := writeFile(t, "it's.json", []byte("{\"event\":\"user.identified\",\"note\":\"it's \\\"quoted\\\"\"}\n"))
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
	}{
		{"sample payload", "", nil},
		{"body from a file", "", []string{"-body", odd}},
		{"body from standard input", "{\"event\":\"user.identified\",\n\"a\":\"it's\"}", []string{"-body", "-"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"sign", "-url", "https://127.0.0.1:8443/webhooks?k=1", "-method", "PUT"}, tc.args...)
			res := runCmd(t, tc.stdin, args...)
			require.Equal(t, exitOK, res.code, res.stderr)
			for _, name := range []string{webhook.HeaderEvent, webhook.HeaderTimestamp, webhook.HeaderSignature} {
				assert.Contains(t, res.stdout, name+": ")
			}
			r := curlRequest(t, res.stdout)
			assert.Equal(t, http.MethodPut, r.Method)
			assert.Equal(t, "/webhooks", r.URL.Path)
			body, err := io.ReadAll(r.Body)
			require.NoError(t, err)
			require.NoError(t, webhook.Verify(testSecret, r.Header, body), "the curl command's headers verify")
			assert.Equal(t, "application/json", r.Header.Get("Content-Type"))

			// And a receiver accepts what curl would send.
			v, err := webhook.NewVerifier([]string{testSecret}, nil)
			require.NoError(t, err)
			rec := httptest.NewRecorder()
			r.Body = io.NopCloser(bytes.NewReader(body))
			v.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(rec, r)
			assert.Equal(t, http.StatusOK, rec.Code)
		})
	}
	res := runCmd(t, "ok\x1b[2J", "sign", "-body", "-")
	assert.Equal(t, exitUsage, res.code, "a body with terminal escapes is not printed")
	assert.NotContains(t, res.stdout+res.stderr, "\x1b")
	assert.Contains(t, res.stderr, "control characters")

	// curl reads a --data-binary starting with @ as a file's name: such a
	// body is sent from its file too, and the error says why.
	res = runCmd(t, "@/etc/hostname", "sign", "-body", "-")
	assert.Equal(t, exitUsage, res.code)
	assert.Contains(t, res.stderr, "starts with @")
	assert.NotContains(t, res.stderr, "control characters")
}

// target is the customer's application behind listen -forward: it records
// what it got and answers 202.
type target struct {
	mu  sync.Mutex
	got []*http.Request
	raw [][]byte
}

func (tg *target) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	tg.mu.Lock()
	tg.got, tg.raw = append(tg.got, r), append(tg.raw, body)
	tg.mu.Unlock()
	w.Header().Set("X-App", "crm")
	w.WriteHeader(http.StatusAccepted)
	io.WriteString(w, `{"queued":true}`)
}

func (tg *target) received() ([]*http.Request, [][]byte) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return append([]*http.Request(nil), tg.got...), append([][]byte(nil), tg.raw...)
}

// startListen runs listen with args until the test ends, and returns its
// base URL and its output.
func startListen(t *testing.T, args ...string) (string, *lines) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := newLines()
	done := make(chan int)
	getenv := func(name string) string {
		if name == "WEBHOOK_SECRET" {
			return testSecret
		}
		return ""
	}
	go func() {
		done <- run(ctx, append([]string{"listen", "-addr", "127.0.0.1:0"}, args...), strings.NewReader(""), out, out, getenv)
	}()
	t.Cleanup(func() {
		cancel()
		assert.Equal(t, exitOK, <-done)
		assert.NotContains(t, out.String(), testSecret)
	})
	first := <-out.each
	addr, ok := strings.CutPrefix(first, "listening on ")
	require.True(t, ok, first)
	addr, _, _ = strings.Cut(addr, ",")
	return addr, out
}

func post(t *testing.T, url string, h http.Header, body []byte) (*http.Response, []byte) {
	t.Helper()
	r, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	require.NoError(t, err)
	r.Header = h
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(r)
	require.NoError(t, err)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, got
}

func TestListen_ForwardsVerifiedDeliveriesByteIdentical(t *testing.T) {
	app := &target{}
	appSrv := httptest.NewServer(app)
	defer appSrv.Close()
	base, out := startListen(t, "-forward", appSrv.URL+"/crm/hook")

	body := []byte("{\"event\":\"user.identified\", \"user\":{\"id\":\"usr_1\",\"email\":\"ada@example.com\"}}\n")
	h := webhooktest.SignedHeader(testSecret, webhook.EventUserIdentified, body, time.Now())
	h.Set("Authorization", "Bearer k_123")
	resp, answer := post(t, base+"/webhooks/tok_in_the_path", h, body)
	assert.Equal(t, http.StatusAccepted, resp.StatusCode, "what the target answered")
	assert.Equal(t, `{"queued":true}`, string(answer))
	assert.Equal(t, "crm", resp.Header.Get("X-App"))
	line := <-out.each
	assert.Contains(t, line, "verified")
	assert.Contains(t, line, "POST /…", "a URL's path may be its credential: it is never printed")
	assert.NotContains(t, line, "tok_in_the_path")
	assert.Contains(t, line, "usr_1 <ada@example.com>")
	assert.Contains(t, line, "answered 202")

	got, raw := app.received()
	require.Len(t, got, 1)
	assert.Equal(t, body, raw[0], "byte for byte")
	assert.Equal(t, "/crm/hook", got[0].URL.Path)
	for _, name := range []string{webhook.HeaderEvent, webhook.HeaderTimestamp, webhook.HeaderSignature, "Content-Type", "Authorization"} {
		assert.Equal(t, h.Get(name), got[0].Header.Get(name), name)
	}
	assert.NoError(t, webhook.Verify(testSecret, got[0].Header, raw[0]), "the target can verify it too")

	// A tampered delivery, and a replay of the first, are refused and not passed on.
	tampered := bytes.Replace(body, []byte("ada@"), []byte("eve@"), 1)
	resp, _ = post(t, base+"/webhooks", webhooktest.SignedHeader(testSecret, webhook.EventUserIdentified, body, time.Now()), tampered)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Contains(t, <-out.each, "refused: webhook: signature mismatch")
	resp, _ = post(t, base+"/webhooks", h, body)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Contains(t, <-out.each, "refused: webhook: replayed delivery")
	got, _ = app.received()
	assert.Len(t, got, 1, "only the verified delivery reached the target")
}

func TestListen_WithoutForwardAnswers200(t *testing.T) {
	base, out := startListen(t)
	body := []byte(`{"event":"user.identified","user":{"id":"usr_2","email":"x\u001b[2J@example.com"}}`)
	resp, _ := post(t, base+"/hooks", webhooktest.SignedHeader(testSecret, webhook.EventUserIdentified, body, time.Now()), body)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	line := <-out.each
	assert.Contains(t, line, "verified")
	assert.Contains(t, line, "age ")
	assert.NotContains(t, line, "\x1b", "receiver text is printable")
}

func TestSign_UsageErrorPrintsOnlyToStderr(t *testing.T) {
	tests := []struct {
		name  string
		stdin string
		args  []string
	}{
		{"body with terminal escapes on standard input", "ok\x1b[2J", []string{"-body", "-"}},
		{"body with NUL on standard input", "{\"a\":\"\x00\"}", []string{"-body", "-"}},
		{"negative timestamp", "", []string{"-timestamp", "-5"}},
		{"method", "", []string{"-method", "GET"}},
		{"URL", "", []string{"-url", "localhost:8080"}},
		{"an argument", "", []string{"body.json"}},
		{"unknown flag", "", []string{"-bodyfile", "x"}},
		{"no secret", "", []string{"-secret-env", "UNSET"}},
		{"no body file", "", []string{"-body", "no-such-file.json"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := runCmd(t, tc.stdin, append([]string{"sign"}, tc.args...)...)
			assert.Equal(t, exitUsage, res.code)
			assert.Empty(t, res.stdout, "nothing on standard output")
			assert.Contains(t, res.stderr, "webhook sign: ")
			assert.Contains(t, res.stderr, "run 'webhook sign -h' for usage")
			assert.NotContains(t, res.stderr, "\x1b")
		})
	}

	binary := writeFile(t, "body.bin", []byte("{\"a\":\"\x1b[2J\"}"))
	res := runCmd(t, "", "sign", "-body", binary)
	require.Equal(t, exitOK, res.code, "a body file is sent by curl from the file: %s", res.stderr)
	assert.NotContains(t, res.stdout, "\x1b")
	assert.Empty(t, res.stderr)
	r := curlRequest(t, res.stdout)
	body, err := io.ReadAll(r.Body)
	require.NoError(t, err)
	assert.NoError(t, webhook.Verify(testSecret, r.Header, body))
}

func TestListen_ForwardsToASelfSignedReceiverItIsToldToTrust(t *testing.T) {
	app := &target{}
	appSrv := httptest.NewTLSServer(app)
	defer appSrv.Close()
	ca := writeFile(t, "app.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: appSrv.Certificate().Raw}))
	body := []byte(`{"event":"user.identified","user":{"id":"usr_3"}}`)

	base, out := startListen(t, "-forward", appSrv.URL+"/hook")
	resp, _ := post(t, base+"/webhooks", webhooktest.SignedHeader(testSecret, webhook.EventUserIdentified, body, time.Now()), body)
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode, "an untrusted certificate")
	line := <-out.each
	assert.Contains(t, line, "not forwarded")
	assert.Contains(t, line, "certificate")
	assert.NotContains(t, line, "/hook", "the target's path is not shown")

	base, out = startListen(t, "-forward", appSrv.URL+"/hook", "-cacert", ca)
	resp, _ = post(t, base+"/webhooks", webhooktest.SignedHeader(testSecret, webhook.EventUserIdentified, body, time.Now()), body)
	assert.Equal(t, http.StatusAccepted, resp.StatusCode)
	assert.Contains(t, <-out.each, "answered 202")
	got, raw := app.received()
	require.Len(t, got, 1)
	assert.Equal(t, body, raw[0])

	res := runCmd(t, "", "listen", "-cacert", ca)
	assert.Equal(t, exitUsage, res.code, "-cacert without -forward")
	res = runCmd(t, "", "listen", "-forward", appSrv.URL, "-cacert", writeFile(t, "empty.pem", nil))
	assert.Equal(t, exitUsage, res.code, "a file without a certificate")
	assert.Contains(t, res.stderr, "holds no PEM certificate")
}

// trusted reads what listen -tls printed after its first line: the CA
// certificate's file and fingerprint. It checks that the fingerprint is
// the file's, and returns the file and a pool holding its certificate.
func trusted(t *testing.T, out *lines) (string, *x509.CertPool) {
	t.Helper()
	line := <-out.each
	path, ok := strings.CutPrefix(line, "the sender must trust the CA certificate in ")
	require.True(t, ok, line)
	line = strings.TrimSpace(<-out.each)
	fingerprint, ok := strings.CutPrefix(line, "SHA-256 fingerprint ")
	require.True(t, ok, line)
	for range 4 { // the names, and how to send to it
		<-out.each
	}
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	block, _ := pem.Decode(data)
	require.NotNil(t, block, "a PEM certificate in %s", path)
	sum := sha256.Sum256(block.Bytes)
	assert.Equal(t, strings.ToUpper(hex.EncodeToString(sum[:])), strings.ReplaceAll(fingerprint, ":", ""), "the printed fingerprint is the file's")
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(data))
	return path, pool
}

func TestListen_TLSServesWhatTheLibrarysSenderDeliversTo(t *testing.T) {
	caPath := filepath.Join(t.TempDir(), "ca.pem")
	base, out := startListen(t, "-tls", "-ca-out", caPath)
	require.True(t, strings.HasPrefix(base, "https://127.0.0.1:"), base)
	path, pool := trusted(t, out)
	assert.Equal(t, caPath, path)

	s := trustingSender(t, pool)
	_, port, err := net.SplitHostPort(strings.TrimPrefix(base, "https://"))
	require.NoError(t, err)
	for _, host := range []string{"127.0.0.1", "localhost"} {
		conn := webhook.Connection{Name: "local", URL: "https://" + net.JoinHostPort(host, port) + "/webhooks", Secret: testSecret}
		res, err := s.Send(context.Background(), conn, webhook.SamplePayload(time.Now()))
		require.NoError(t, err, "to %s", host)
		assert.Equal(t, http.StatusOK, res.Attempts[0].StatusCode)
		assert.Contains(t, <-out.each, "verified")
	}

	res := runCmd(t, "", "trigger", "-allow-private", "-cacert", caPath, base+"/webhooks")
	assert.Equal(t, exitOK, res.code, res.stdout+res.stderr)
	assert.Contains(t, <-out.each, "verified")

	block, _ := pem.Decode(mustReadFile(t, caPath))
	ca, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	assert.True(t, ca.IsCA && ca.MaxPathLenZero, "signs servers only")
	assert.Equal(t, []string{"localhost"}, ca.PermittedDNSDomains, "constrained to this machine's names")
	_, err = ca.Verify(x509.VerifyOptions{Roots: pool})
	assert.NoError(t, err)
}

func TestListen_TLSWithoutCAOutWritesATemporaryFileAndRemovesIt(t *testing.T) {
	var path string
	t.Run("listening", func(t *testing.T) {
		_, out := startListen(t, "-tls")
		path, _ = trusted(t, out)
		assert.Equal(t, filepath.Clean(os.TempDir()), filepath.Dir(path))
	})
	_, err := os.Stat(path)
	assert.True(t, errors.Is(err, fs.ErrNotExist), "got %v, want the file removed at exit", err)

	res := runCmd(t, "", "listen", "-ca-out", filepath.Join(t.TempDir(), "ca.pem"))
	assert.Equal(t, exitUsage, res.code, "-ca-out without -tls")
	assert.Empty(t, res.stdout)
}

func mustReadFile(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(name)
	require.NoError(t, err)
	return data
}

// A port in use is a failure to listen, not a usage error: exit 1, without
// the usage hint; an -addr that is no address is one.
func TestListen_APortInUseIsNoUsageError(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	res := runCmd(t, "", "listen", "-addr", busy.Addr().String())
	assert.Equal(t, exitFailed, res.code, res.stderr)
	assert.Contains(t, res.stderr, "address already in use")
	assert.NotContains(t, res.stderr, "for usage")

	res = runCmd(t, "", "listen", "-addr", "no-port-here")
	assert.Equal(t, exitUsage, res.code, res.stderr)
	res = runCmd(t, "", "listen", "-addr", "127.0.0.1:99999")
	assert.Equal(t, exitUsage, res.code, res.stderr)
}

// trustingSender returns a Sender, without retries, whose transport trusts
// pool and delivers to loopback addresses.
func trustingSender(t *testing.T, pool *x509.CertPool) *webhook.Sender {
	t.Helper()
	tr, err := webhook.NewTransport(&webhook.TransportOptions{
		TLSClientConfig: &tls.Config{RootCAs: pool}, AllowPrivateNetworks: true,
	})
	require.NoError(t, err)
	t.Cleanup(tr.CloseIdleConnections)
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: tr}, Retry: &webhook.RetryPolicy{MaxRetries: 0}})
	require.NoError(t, err)
	return s
}
