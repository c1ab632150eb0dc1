package main

import (
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An operator who interrupts a worker waits as long as an attempt may take
// (40 s with the defaults). Pressing Ctrl-C again, the usual way to say
// "now", must stop it at once, with the attempts in flight put back
// uncounted (River's StopAndCancel), as River's own graceful-shutdown
// example escalates. durable work ignores every signal after the first:
// the operator's only way out is kill -9, which leaves the jobs to the
// rescuer (a minute and more, and an interrupted attempt each).
func TestAdvisory_SecondInterruptStopsAtOnce(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	f := newFixture(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-arrived:
		default:
			close(arrived)
		}
		<-r.Context().Done() // never answers: the attempt takes its whole timeout
		panic(http.ErrAbortHandler)
	}))
	f.durable(t, "enqueue", "-n", "1")
	w := f.startWorker(t) // the default -attempt-timeout: 30 s
	select {
	case <-arrived:
	case <-time.After(time.Minute):
		t.Fatal("the attempt did not arrive within a minute")
	}

	done := make(chan error, 1)
	go func() {
		for range w.lines {
		}
		done <- w.cmd.Wait()
	}()
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGINT))
	again := time.NewTicker(250 * time.Millisecond) // Ctrl-C, again and again
	defer again.Stop()
	deadline := time.After(10 * time.Second)
	for stopped := false; !stopped; {
		select {
		case <-again.C:
			w.cmd.Process.Signal(syscall.SIGINT)
		case <-done:
			stopped = true
		case <-deadline:
			t.Fatal("durable work still runs 10 s after repeated interrupts")
		}
	}
	jobs := f.jobs(t)
	require.Len(t, jobs, 1)
	assert.Equal(t, rivertype.JobStateAvailable, jobs[0].State, "put back")
	assert.Equal(t, 0, jobs[0].Attempt, "uncounted")
}
