package riverhook

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// This file holds what riverhook relies on of River (v0.51) beyond its
// documented API, each assumption in one place and pinned by a test in
// river_test.go that fails if River changes it.

// discardAfterThisRun makes River discard job when the run returns an
// error, whatever runs it has left: River's executor decides between a
// retry and a discard on the row it handed to Work, comparing Attempt with
// MaxAttempts after the run (TestRiver/DiscardsWhenMaxAttemptsIsWrittenDuringTheRun).
func discardAfterThisRun(job *river.Job[Args]) { job.MaxAttempts = job.Attempt }

// River asks NextRetry with the very *river.Job it handed to Work, right
// after Work returns an error, unless an ErrorHandler cancelled the job:
// the Worker keys the retry it computed by that pointer
// (TestRiver/AsksNextRetryWithTheJobWorkGot).
type retryKey = *river.Job[Args]

// rescuedError is the error River's rescuer adds to a job whose run it
// found stuck, in internal/maintenance/job_rescuer.go: a run whose only
// error is this one had its process die (TestRiver/RescuerErrorText).
// River decides what to do with a rescued job the way riverhook's
// [Worker.NextRetry] answers for it: now, since the Worker never saw it fail.
const rescuedError = "Stuck job rescued by JobRescuer"

// cancelPrefix starts the text River keeps for a run that returned
// river.JobCancel(err): rivertype.JobCancelError's Error
// (TestRiver/JobCancelErrorText).
const cancelPrefix = "JobCancelError: "

// cancelledText returns the error of a run that cancelled its job, without
// River's prefix, and whether text is one.
func cancelledText(text string) (string, bool) {
	return strings.CutPrefix(text, cancelPrefix)
}

// cancelStamp is what River writes in a job's metadata when it is
// cancelled from outside the run (client.JobCancel, River UI): the time,
// under "cancel_attempted_at", in riverdriver's SQL
// (TestRiver/CancelStampsMetadata).
type cancelStamp struct {
	CancelAttemptedAt time.Time `json:"cancel_attempted_at"`
}

// cancelAttemptedAt returns when job was cancelled from outside its run,
// or zero.
func cancelAttemptedAt(job *rivertype.JobRow) time.Time {
	var meta cancelStamp
	json.Unmarshal(job.Metadata, &meta) //nolint:errcheck // River wrote it; unreadable means no stamp
	return meta.CancelAttemptedAt
}

// stopping reports whether ctx was cancelled by the client stopping (Stop's
// SoftStopTimeout, StopAndCancel): River then puts back the job of a run
// whose error wraps the context's, uncounted, without asking NextRetry. A
// job cancelled in River (JobCancel) is no such stop: its context's cause
// is river.ErrJobCancelledRemotely; its timeout neither
// (TestRiver/StopPutsTheJobBackUncounted).
func stopping(ctx context.Context) bool {
	return errors.Is(ctx.Err(), context.Canceled) && !errors.Is(context.Cause(ctx), river.ErrJobCancelledRemotely)
}
