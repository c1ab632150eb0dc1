package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestListenTLS_RemovesItsCAFileWhenSignalled runs the command in a process
// of its own. listen -tls writes its CA certificate to a temporary file,
// removed at exit: also when the terminal closes or an ssh session drops
// (SIGHUP), which left it behind (review), as on Ctrl-C and SIGTERM.
func TestListenTLS_RemovesItsCAFileWhenSignalled(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			tmp := t.TempDir()
			cmd := exec.Command(os.Args[0], "--", "listen", "-tls", "-addr", "127.0.0.1:0")
			cmd.Env = append(os.Environ(), "WEBHOOK_TEST_RUN_MAIN=1", "TMPDIR="+tmp, "WEBHOOK_SECRET="+testSecret)
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			lines := bufio.NewScanner(out)
			var ca string
			for ca == "" && lines.Scan() {
				if path, ok := strings.CutPrefix(lines.Text(), "the sender must trust the CA certificate in "); ok {
					ca = path
				}
			}
			require.FileExists(t, ca)
			require.NoError(t, cmd.Process.Signal(sig))
			for lines.Scan() { // to its end: the process has exited
			}
			require.NoError(t, cmd.Wait(), "listen ends cleanly on %v", sig)
			left, err := filepath.Glob(filepath.Join(tmp, "*"))
			require.NoError(t, err)
			assert.Empty(t, left, "after %v", sig)
		})
	}
}
