package riverhook

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

// fullPlaces is a fleet whose places are all held by other processes.
type fullPlaces struct{}

func (fullPlaces) Take(context.Context, string, int, int64, time.Duration) (int, bool, error) {
	return 0, false, nil
}
func (fullPlaces) Give(context.Context, string, int, int64) error { return nil }

// TestWorker_AJobWithoutAFleetPlaceAtItsSlotWaitsAtTheFront: as over the
// bound in one process, a job that comes at its slot and finds every place
// of the fleet held waits among the jobs whose slot passed, not behind the
// whole backlog again (its slot was forgotten when it passed the process's
// own bound).
func TestWorker_AJobWithoutAFleetPlaceAtItsSlotWaitsAtTheFront(t *testing.T) {
	sender, err := webhook.NewSender(nil)
	require.NoError(t, err)
	w, err := NewWorker(sender, func(context.Context, string) (webhook.Connection, error) { return webhook.Connection{}, nil },
		&WorkerOptions{MaxInFlightPerConnection: 8, Places: fullPlaces{}, SnoozeFor: time.Second})
	require.NoError(t, err)
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	w.now = func() time.Time { return now }
	try := func(id int64) time.Duration {
		job := &river.Job[Args]{JobRow: &rivertype.JobRow{ID: id}, Args: Args{ConnectionID: "c"}}
		_, ok := w.acquire(job)
		require.True(t, ok, "under the process's own bound")
		defer w.release("c")
		wait, give, ok := w.takePlace(context.Background(), job)
		require.False(t, ok)
		require.Nil(t, give)
		return wait
	}
	const spacing = time.Second * 7 / 8 / 8
	for i := range int64(5) {
		assert.Equal(t, time.Duration(i+1)*spacing, try(i+1))
	}
	now = now.Add(spacing) // job 1's slot: still no place
	assert.Equal(t, spacing, try(1), "at the front, not behind jobs 2 to 5")
}
