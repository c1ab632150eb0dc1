package main

import (
	"bytes"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/signedhook/webhook"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the quickstart on a 1 ms schedule instead of 1 s, 2 s.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	policy := &webhook.RetryPolicy{MaxRetries: 3, Backoff: func(int, *http.Response) time.Duration { return time.Millisecond }}
	require.NoError(t, run(&out, policy))
	got := out.String()
	rows := regexp.MustCompile(`(?m)^(\d)  +\d{13}  +(\d{3})  +(\w+)`).FindAllStringSubmatch(got, -1)
	require.Len(t, rows, 3, "attempt rows in:\n%s", got)
	assert.Equal(t, []string{"1", "503", "status"}, rows[0][1:])
	assert.Equal(t, []string{"2", "503", "status"}, rows[1][1:])
	assert.Equal(t, []string{"3", "200", "delivered"}, rows[2][1:])
	assert.Contains(t, got, `"email": "ada@example.com"`)
	assert.Contains(t, got, `"id": "usr_8f3a2b"`)
}
