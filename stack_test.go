package webhook_test

import (
	"context"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

// queueFrames is the stack a durable queue's job holds above
// Sender.Attempt, less what this test's own frames hold (its goroutine's
// function and the closure that calls Attempt, about 0.5 KiB): River
// v0.51's executor and middleware chain hold 1.9 KiB and riverhook's
// Worker.Work 0.7 KiB, measured by a goroutine dump of a worker process on
// amd64 (2,624 bytes from the goroutine's base to Attempt's frame).
const queueFrames = 2304

// A durable queue runs each attempt on a goroutine of its own that lives
// for one job: River starts one per job, with the smallest stack, which its
// own decoding of the job grows to 8 KiB. A goroutine whose stack runs out
// gets a new one twice the size, and every frame on it is copied and
// adjusted: at the depth of a round trip, a cost as large as the Sender's
// own work in the attempt (issue 28's profiles: about 10 µs a delivery).
// The Sender's frames above the round trip are kept small (delivery.request
// builds the request in a frame of its own, Attempt's steps are calls), so
// that an attempt made below a queue's frames fits in 8 KiB. Without that,
// the round trip's select needed 0.1 KiB more than 8 KiB, and every job's
// stack was copied there.
func TestAttempt_FitsTheStackOfAQueuesJob(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector doubles the stack's guard, and its calls add frames")
	}
	if runtime.GOARCH != "amd64" {
		t.Skip("the frames' sizes were measured on amd64")
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	s := faultSender(t, pool, nil)
	conn := webhook.Connection{Name: "stack", URL: srv.URL + "/hook", Secret: testSecret}
	body := []byte(`{"event":"user.identified"}`)
	ctx := context.Background()
	// The first attempt dials; a queue's jobs reuse the connection.
	first := s.Attempt(ctx, conn, webhook.EventUserIdentified, body, 1)
	require.True(t, first.OK(), "%+v", first)

	for i := range 3 { // each on a new goroutine, as a queue's jobs are
		type outcome struct {
			a     webhook.Attempt
			moved bool
		}
		got := make(chan outcome)
		go func() {
			growStackTo8KiB()
			var o outcome
			o.moved = belowQueueFrames(func() { o.a = s.Attempt(ctx, conn, webhook.EventUserIdentified, body, 1) })
			got <- o
		}()
		o := <-got
		require.True(t, o.a.OK(), "attempt %d: %+v", i, o.a)
		require.False(t, o.moved, "attempt %d: the goroutine's stack was grown (copied) during the attempt, below %d bytes of a queue's frames", i, queueFrames)
	}
}

// growStackTo8KiB grows the calling goroutine's stack to 8 KiB, as River's
// decoding of a job does before the job's Work.
//
//go:noinline
func growStackTo8KiB() {
	var pad [6 << 10]byte
	keep(pad[:])
}

// belowQueueFrames calls f below queueFrames bytes of stack and reports
// whether the goroutine's stack moved (was grown) while f ran: a local's
// address, kept as a number, changes only when the stack is copied.
//
//go:noinline
func belowQueueFrames(f func()) bool {
	var pad [queueFrames]byte
	keep(pad[:])
	before := uintptr(unsafe.Pointer(&pad[0]))
	f()
	return uintptr(unsafe.Pointer(&pad[0])) != before
}

//go:noinline
func keep(b []byte) { b[len(b)-1]++ }
