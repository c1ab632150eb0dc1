package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runStopped runs the command line as runCmd does, its context already
// ended: a listen that starts stops at once, rather than running until the
// test times out.
func runStopped(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return runCmdContext(t, ctx, "", args...)
}

// listen -tls -ca-out FILE leaves a FILE that exists alone, unless it is
// the CA certificate of an earlier listen -tls: it refuses to start, naming
// the flag and the file. A symbolic link is not followed to its target.
func TestListen_CAOutDoesNotOverwriteAFileOfTheUsers(t *testing.T) {
	dir := t.TempDir()
	precious := []byte("-----BEGIN PRIVATE KEY-----\nnot listen's to replace\n-----END PRIVATE KEY-----\n")
	file := filepath.Join(dir, "server.pem")
	require.NoError(t, os.WriteFile(file, precious, 0o600))
	link := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.Symlink(file, link))

	for _, path := range []string{file, link} {
		res := runStopped(t, "listen", "-addr", "127.0.0.1:0", "-tls", "-ca-out", path)
		assert.Equal(t, exitUsage, res.code, "stdout: %s\nstderr: %s", res.stdout, res.stderr)
		assert.Empty(t, res.stdout, "it did not start")
		assert.Contains(t, res.stderr, "-ca-out "+path, "the error names the flag and the file")
		assert.Contains(t, res.stderr, "exists")
		assert.Equal(t, precious, mustReadFile(t, file), "the file is as it was")
		fi, err := os.Lstat(link)
		require.NoError(t, err)
		assert.True(t, fi.Mode()&os.ModeSymlink != 0, "the link is still a link")
	}
}

// An earlier listen -tls's CA certificate at -ca-out is replaced whole by
// the new one, which the printed fingerprint is of, leaving nothing else
// in the directory: running the README's command twice works.
func TestListen_CAOutReplacesTheCAOfAnEarlierListen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ca.pem")
	var first []byte
	var mode os.FileMode
	t.Run("first", func(t *testing.T) {
		_, out := startListen(t, "-tls", "-ca-out", path)
		got, _ := trusted(t, out)
		assert.Equal(t, path, got)
		first = mustReadFile(t, path)
		fi, err := os.Stat(path)
		require.NoError(t, err)
		mode = fi.Mode()
	})
	t.Run("again", func(t *testing.T) {
		_, out := startListen(t, "-tls", "-ca-out", path)
		got, _ := trusted(t, out) // checks the fingerprint printed is the file's
		assert.Equal(t, path, got)
		assert.NotEqual(t, first, mustReadFile(t, path), "the new CA's certificate")
	})
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left behind")
	assert.Equal(t, "ca.pem", entries[0].Name())
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, mode, fi.Mode(), "the permissions it had")
}
