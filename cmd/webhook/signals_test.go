package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// TestListen_UnderNohupKeepsSIGHUPIgnored: a listen started with SIGHUP
// ignored (nohup, or a shell's trap ” HUP) was asked to outlive its
// terminal: it leaves SIGHUP ignored. Catching it, which ends listen
// cleanly in a terminal, made "nohup webhook listen &" end when the ssh
// session dropped (review). Linux shows the signals a process ignores and
// catches in /proc.
func TestListen_UnderNohupKeepsSIGHUPIgnored(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc")
	}
	cmd := exec.Command("sh", "-c", `trap '' HUP; exec "$0" "$@"`, os.Args[0], "--", "listen", "-addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "WEBHOOK_TEST_RUN_MAIN=1", "WEBHOOK_SECRET="+testSecret)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := bufio.NewScanner(out)
	for lines.Scan() && !strings.HasPrefix(lines.Text(), "listening on") { // its signals are set by then
	}
	status, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/status")
	require.NoError(t, err)
	mask := func(name string) uint64 {
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, name+":\t"); ok {
				m, err := strconv.ParseUint(v, 16, 64)
				require.NoError(t, err)
				return m
			}
		}
		t.Fatalf("no %s in /proc/pid/status", name)
		return 0
	}
	const hup = 1 << (syscall.SIGHUP - 1)
	assert.NotZero(t, mask("SigIgn")&hup, "SIGHUP ignored, as nohup asked")
	assert.Zero(t, mask("SigCgt")&hup, "SIGHUP caught: listen under nohup would end on it")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	for lines.Scan() {
	}
	assert.NoError(t, cmd.Wait())
}
