package webhook_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

// TestHealth_ANilMarksStoreIsRefusedAtOnce: a store declared and never made
// (a nil *T in HealthOptions.Marks), which NewVerifier refuses for its
// ReplayStore: NewSender took it and read it on a goroutine of its own,
// whose nil-pointer panic ended the process.
func TestHealth_ANilMarksStoreIsRefusedAtOnce(t *testing.T) {
	var m *memoryMarks
	_, err := webhook.NewSender(&webhook.SenderOptions{Health: &webhook.HealthOptions{Marks: m}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "HealthOptions.Marks")
}

type panickingMarks struct{}

func (panickingMarks) Mark(context.Context, webhook.EndpointHealth) error { panic("the store's bug") }

func (panickingMarks) Since(context.Context, time.Time) ([]webhook.EndpointHealth, time.Time, error) {
	panic("the store's bug")
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestHealth_AMarksStoreThatPanicsIsLoggedNotFatal: a panic of the store's
// Since, read off the attempt path where no caller can recover it, ended
// the process; it is logged as a failed read, as OnChange's panics are, and
// the Sender goes on with what it knows.
func TestHealth_AMarksStoreThatPanicsIsLoggedNotFatal(t *testing.T) {
	var logs lockedBuffer
	rt := roundTripFunc(func(*http.Request) (*http.Response, error) { return answer(http.StatusOK), nil })
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: rt},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Health: &webhook.HealthOptions{Marks: panickingMarks{}}})
	require.NoError(t, err)
	_, err = s.Send(context.Background(), fakeConn, samplePayload())
	require.NoError(t, err)
	require.NoError(t, s.Flush(context.Background()))
	assert.Contains(t, logs.String(), "the store's bug")
}

// TestHealth_AMarksStoreThatPanicsStillLetsOnChangeReport: the store's Mark
// is written before OnChange is called; its panic skipped OnChange (the
// change never reached the service) and was logged as OnChange's.
func TestHealth_AMarksStoreThatPanicsStillLetsOnChangeReport(t *testing.T) {
	var logs lockedBuffer
	changes := make(chan webhook.EndpointHealth, 4)
	rt := roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, syscall.ECONNREFUSED })
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: rt}, Retry: &webhook.RetryPolicy{},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Health: &webhook.HealthOptions{DownAfter: 1, Marks: panickingMarks{}, OnChange: func(_ context.Context, h webhook.EndpointHealth) { changes <- h }}})
	require.NoError(t, err)
	_, err = s.Send(context.Background(), fakeConn, samplePayload())
	require.Error(t, err)
	require.NoError(t, s.Flush(context.Background()))
	require.Len(t, changes, 1, "the change is reported")
	assert.True(t, (<-changes).Down)
	assert.NotContains(t, logs.String(), "OnChange panicked")
	assert.Contains(t, logs.String(), "the store's bug")
}
