package main

import (
	"bytes"
	"context"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/signedhook/webhook/webhooktest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv("WEBHOOK_TEST_RUN_MAIN") == "1" { // the command itself, for a test of its process (signals_test.go)
		for i, arg := range os.Args {
			if arg == "--" {
				os.Args = append([]string{"webhook"}, os.Args[i+1:]...)
				break
			}
		}
		main()
	}
	goleak.VerifyTestMain(m)
}

const testSecret = "whsec_cmd_test_secret_0123456789"

// result is what one run of the command gave.
type result struct {
	code           int
	stdout, stderr string
}

// runCmd runs the command line in-process with WEBHOOK_SECRET set to
// testSecret, and checks that the secret was printed nowhere.
func runCmd(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return runCmdContext(t, context.Background(), stdin, args...)
}

// runCmdContext is runCmd with ctx, which ends listen.
func runCmdContext(t *testing.T, ctx context.Context, stdin string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	getenv := func(name string) string {
		if name == "WEBHOOK_SECRET" {
			return testSecret
		}
		return ""
	}
	code := run(ctx, args, strings.NewReader(stdin), &stdout, &stderr, getenv)
	res := result{code, stdout.String(), stderr.String()}
	assert.NotContains(t, res.stdout+res.stderr, testSecret, "the secret is never printed")
	return res
}

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path
}

// caFile writes the webhooktest CA to a PEM file, for -cacert.
func caFile(t *testing.T, srv *webhooktest.Server) string {
	return writeFile(t, "ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
}

func TestHelp(t *testing.T) {
	for _, name := range []string{"trigger", "listen", "verify", "sign"} {
		res := runCmd(t, "", name, "-h")
		assert.Equal(t, exitOK, res.code, name)
		assert.Contains(t, res.stdout, "usage: webhook "+name, name)
		assert.Contains(t, res.stdout, "-secret-env", name)
	}
	res := runCmd(t, "", "-h")
	assert.Equal(t, exitOK, res.code)
	assert.Contains(t, res.stdout, "trigger")

	assert.Equal(t, exitUsage, runCmd(t, "").code)
	assert.Equal(t, exitUsage, runCmd(t, "", "frobnicate").code)
	assert.Equal(t, exitUsage, runCmd(t, "", "sign", "-no-such-flag").code)
	res = runCmd(t, "", "sign", "-secret-env", "UNSET")
	assert.Equal(t, exitUsage, res.code)
	assert.Contains(t, res.stderr, "set the environment variable UNSET")
}

func TestSecretFile(t *testing.T) {
	path := writeFile(t, "secrets", []byte("# old, then new\nwhsec_old_one\n\n"+testSecret+"\n"))
	res := runCmd(t, "", "sign", "-secret-file", path)
	assert.Equal(t, exitUsage, res.code, "sign signs with one secret")
	assert.NotContains(t, res.stderr, "whsec_old_one")

	one := writeFile(t, "secret", []byte(testSecret+"\n"))
	assert.Equal(t, exitOK, runCmd(t, "", "sign", "-secret-file", one).code)
	assert.Equal(t, exitUsage, runCmd(t, "", "sign", "-secret-file", filepath.Join(t.TempDir(), "none")).code)
}

// lines is an io.Writer that hands each complete line to a channel, so a
// test waits for what the command prints instead of sleeping.
type lines struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	all  strings.Builder
	each chan string
}

func newLines() *lines { return &lines{each: make(chan string, 100)} }

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all.Write(p)
	l.buf.Write(p)
	for {
		line, err := l.buf.ReadString('\n')
		if err != nil {
			l.buf.WriteString(line)
			return len(p), nil
		}
		l.each <- strings.TrimSuffix(line, "\n")
	}
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.all.String()
}
