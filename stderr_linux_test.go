package webhook_test

import (
	"context"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSend_PrintsNothingToStderr redirects file descriptor 2 itself:
// go-retryablehttp's default logger holds the *os.File it saw at start-up,
// so swapping os.Stderr would not catch it.
func TestSend_PrintsNothingToStderr(t *testing.T) {
	capture, err := os.CreateTemp(t.TempDir(), "stderr")
	require.NoError(t, err)
	defer capture.Close()
	saved, err := syscall.Dup(2)
	require.NoError(t, err)
	require.NoError(t, syscall.Dup3(int(capture.Fd()), 2, 0))
	restored := false
	restore := func() {
		if !restored {
			restored = true
			syscall.Dup3(saved, 2, 0)
			syscall.Close(saved)
		}
	}
	defer restore()

	rv := newReceiver(t, 500, 500, 200)
	s := newTestSender(t, rv, nil)
	_, err = s.Send(context.Background(), rv.conn("/"), samplePayload()) // retries, then succeeds
	require.NoError(t, err)
	rv2 := newReceiver(t, 500)
	_, err = s.Send(context.Background(), rv2.conn("/"), samplePayload()) // gives up
	require.Error(t, err)
	s.CloseIdleConnections()
	restore()

	out, err := os.ReadFile(capture.Name())
	require.NoError(t, err)
	require.Empty(t, string(out), "nothing may be printed to stderr")
}
