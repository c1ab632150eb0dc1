package riverhook

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// This file holds how a process's calls that come at once share one
// statement (the places' Take and Give): a statement costs its process
// more in writes, reads and wake-ups than in rows, and a busy Worker takes
// and gives places for many attempts at a time.

// batcher runs calls made at once as one statement, without a goroutine of
// its own: a call that finds no statement running runs its own; calls that
// come while one runs wait, and the first of them runs theirs (up to max)
// as one when it has ended. A call that has waited stallAfter opens another
// lane, up to lanes statements at once, and runs the calls waiting with
// it: a statement that is slow (a lock, a checkpoint) holds the calls
// behind it stallAfter, not its whole time, while statements that are
// quick are shared. A call waits for the statements ahead of it and its
// own, each bounded by storeTimeout, whatever its context: a statement
// runs for every call in it, and one caller's cancellation must not fail
// the others, nor leave a place taken for a caller that left.
type batcher[Req, Res any] struct {
	// run runs reqs as one statement, and returns a result per request,
	// in their order.
	run        func(ctx context.Context, reqs []Req) ([]Res, error)
	max        int           // calls in one statement
	lanes      int           // statements running at once, at least 1
	stallAfter time.Duration // how long a call waits before it opens a lane

	mu      sync.Mutex
	running int // statements running
	queue   []*call[Req, Res]
}

// call is one caller's request, and what became of it.
type call[Req, Res any] struct {
	req  Req
	res  Res
	err  error
	done chan struct{} // closed once res and err are set
	lead chan struct{} // closed when this caller is to run batch
	// batch is the calls this caller runs, itself first; set before lead
	// is closed.
	batch []*call[Req, Res]
}

// errBatchPanicked is the error of the calls of a statement whose run
// panicked in another caller's goroutine (the panic goes on there).
var errBatchPanicked = errors.New("riverhook: a statement shared with this call panicked")

// do runs req, alone or with others, and returns its result.
func (b *batcher[Req, Res]) do(ctx context.Context, req Req) (Res, error) {
	c := &call[Req, Res]{req: req, done: make(chan struct{})}
	b.mu.Lock()
	if b.running == 0 {
		b.running++
		b.mu.Unlock()
		c.batch = []*call[Req, Res]{c}
		b.runBatch(ctx, c)
		return c.res, c.err
	}
	c.lead = make(chan struct{})
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	stalled := time.NewTimer(b.stallAfter)
	defer stalled.Stop()
	for {
		select {
		case <-c.done:
			return c.res, c.err
		case <-c.lead:
			b.runBatch(ctx, c)
			return c.res, c.err
		case <-stalled.C:
			if b.openLane(c) {
				b.runBatch(ctx, c)
				return c.res, c.err
			}
		}
	}
}

// openLane makes c, still waiting while the statements ahead have run
// stallAfter, the leader of the calls waiting, in a lane of its own, if
// one is free.
func (b *batcher[Req, Res]) openLane(c *call[Req, Res]) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := slices.Index(b.queue, c)
	if i < 0 || b.running >= max(b.lanes, 1) {
		return false // in a batch already, or every lane taken: its turn comes
	}
	b.running++
	b.queue = slices.Delete(b.queue, i, i+1)
	n := min(len(b.queue), max(b.max, 1)-1)
	c.batch = append([]*call[Req, Res]{c}, b.queue[:n]...)
	b.queue = slices.Clone(b.queue[n:])
	return true
}

// runBatch runs leader's batch, settles every call in it, and hands the
// next batch to the first call queued, if any: also when run panics.
func (b *batcher[Req, Res]) runBatch(ctx context.Context, leader *call[Req, Res]) {
	calls := leader.batch
	settled := false
	defer func() {
		if !settled {
			for _, c := range calls {
				c.err = errBatchPanicked
				close(c.done)
			}
		}
		b.handOn()
	}()
	ctx, cancel := detached(ctx)
	defer cancel()
	reqs := make([]Req, len(calls))
	for i, c := range calls {
		reqs[i] = c.req
	}
	res, err := b.run(ctx, reqs)
	if err == nil && len(res) != len(calls) {
		err = errors.New("riverhook: a statement answered for a different number of calls")
	}
	for i, c := range calls {
		if err != nil {
			c.err = err
		} else {
			c.res = res[i]
		}
		close(c.done)
	}
	settled = true
}

// handOn makes the first queued call the leader of the next batch, in the
// lane of the statement that ended, or frees the lane.
func (b *batcher[Req, Res]) handOn() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.running--
		return
	}
	n := min(len(b.queue), max(b.max, 1))
	next := b.queue[:n:n]
	b.queue = slices.Clone(b.queue[n:])
	next[0].batch = next
	close(next[0].lead)
}
