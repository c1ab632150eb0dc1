package riverhook

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gate is a batcher's run that records each batch and, for the first,
// waits until released: the calls made meanwhile queue behind it.
type gate struct {
	mu      sync.Mutex
	batches [][]int
	started chan struct{} // closed when the first batch runs
	release chan struct{}
	ctxErrs []error
}

func newGate() *gate {
	return &gate{started: make(chan struct{}), release: make(chan struct{})}
}

func (g *gate) run(ctx context.Context, reqs []int) ([]int, error) {
	g.mu.Lock()
	first := len(g.batches) == 0
	g.batches = append(g.batches, append([]int(nil), reqs...))
	g.ctxErrs = append(g.ctxErrs, ctx.Err())
	g.mu.Unlock()
	if first {
		close(g.started)
		<-g.release
	}
	res := make([]int, len(reqs))
	for i, r := range reqs {
		if r < 0 {
			panic("a negative request")
		}
		res[i] = 2 * r
	}
	return res, nil
}

// queued waits, in a synctest bubble, until every goroutine of it is
// blocked, and checks that n calls wait in b's queue.
func queued(t *testing.T, b *batcher[int, int], n int) {
	t.Helper()
	synctest.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Len(t, b.queue, n)
}

func TestBatcher_CallsMadeWhileOneRunsShareTheNextStatement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate()
		b := &batcher[int, int]{run: g.run, max: 4, lanes: 1}
		ctx := context.Background()
		results := make([]int, 11)
		var wg sync.WaitGroup
		call := func(i int) {
			defer wg.Done()
			res, err := b.do(ctx, i)
			assert.NoError(t, err)
			results[i] = res
		}
		wg.Add(1)
		go call(0)
		<-g.started
		for i := 1; i <= 10; i++ {
			wg.Add(1)
			go call(i)
			queued(t, b, i) // in order, so that the batches below are known
		}
		close(g.release)
		wg.Wait()

		for i, res := range results {
			assert.Equal(t, 2*i, res, "call %d has its own result", i)
		}
		assert.Equal(t, [][]int{{0}, {1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10}}, g.batches,
			"11 calls in 4 statements, none over max, in the order they came")
		assert.Zero(t, b.running)
		assert.Empty(t, b.queue)
	})
}

func TestBatcher_ALeadersCancellationFailsNoOtherCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate()
		b := &batcher[int, int]{run: g.run, max: 8}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		done := make(chan error)
		go func() {
			_, err := b.do(ctx, 1) // leads, its context cancelled
			done <- err
		}()
		<-g.started
		go func() {
			_, err := b.do(context.Background(), 2)
			done <- err
		}()
		queued(t, b, 1)
		close(g.release)
		require.NoError(t, <-done)
		require.NoError(t, <-done)
		assert.Equal(t, []error{nil, nil}, g.ctxErrs, "each statement runs whatever its leader's context")
	})
}

func TestBatcher_APanicFailsItsStatementsCallsAndTheNextRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate()
		b := &batcher[int, int]{run: g.run, max: 2}
		ctx := context.Background()
		type outcome struct {
			req      int
			res      int
			err      error
			panicked any
		}
		outcomes := make(chan outcome, 5)
		call := func(req int) {
			o := outcome{req: req}
			defer func() {
				o.panicked = recover()
				outcomes <- o
			}()
			o.res, o.err = b.do(ctx, req)
		}
		go call(1)
		<-g.started
		go call(-1) // leads the second statement, which panics
		queued(t, b, 1)
		go call(3)
		queued(t, b, 2)
		go call(4) // the third statement's
		queued(t, b, 3)
		close(g.release)

		got := map[int]outcome{}
		for range 4 {
			o := <-outcomes
			got[o.req] = o
		}
		assert.Equal(t, 2, got[1].res)
		assert.NotNil(t, got[-1].panicked, "the panic goes on in its leader's goroutine")
		assert.ErrorIs(t, got[3].err, errBatchPanicked, "its statement's other call fails")
		assert.Nil(t, got[3].panicked)
		assert.Equal(t, 8, got[4].res, "the next statement runs")
		assert.NoError(t, got[4].err)
		assert.Zero(t, b.running)
	})
}

func TestBatcher_AShortAnswerFailsEveryCall(t *testing.T) {
	b := &batcher[int, int]{run: func(context.Context, []int) ([]int, error) { return nil, nil }, max: 2}
	_, err := b.do(context.Background(), 1)
	assert.Error(t, err)
	b = &batcher[int, int]{run: func(context.Context, []int) ([]int, error) { return nil, errors.New("down") }, max: 2}
	_, err = b.do(context.Background(), 1)
	assert.EqualError(t, err, "down")
}

// TestBatcher_ACallWaitingBehindASlowStatementOpensALane: with two lanes,
// a call waits behind a running statement, and opens the second lane once
// it has waited stallAfter; a third waits for one of the two, however
// long, and runs in its lane when it ends.
func TestBatcher_ACallWaitingBehindASlowStatementOpensALane(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const stallAfter = 5 * time.Millisecond
		release := map[int]chan struct{}{0: make(chan struct{}), 1: make(chan struct{})}
		var mu sync.Mutex
		var batches [][]int
		run := func(_ context.Context, reqs []int) ([]int, error) {
			mu.Lock()
			batches = append(batches, append([]int(nil), reqs...))
			mu.Unlock()
			if ch, ok := release[reqs[0]]; ok {
				<-ch
			}
			return reqs, nil
		}
		b := &batcher[int, int]{run: run, max: 8, lanes: 2, stallAfter: stallAfter}
		var wg sync.WaitGroup
		call := func(i int) {
			wg.Go(func() {
				res, err := b.do(context.Background(), i)
				assert.NoError(t, err)
				assert.Equal(t, i, res)
			})
			synctest.Wait()
		}
		got := func() [][]int {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(batches)
		}
		state := func() (queued, running int) {
			b.mu.Lock()
			defer b.mu.Unlock()
			return len(b.queue), b.running
		}
		call(0)
		call(1)
		assert.Equal(t, [][]int{{0}}, got(), "the second waits behind the first")
		time.Sleep(stallAfter - time.Nanosecond)
		synctest.Wait()
		assert.Equal(t, [][]int{{0}}, got(), "for stallAfter")
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		assert.Equal(t, [][]int{{0}, {1}}, got(), "then opens the second lane")
		call(2)
		time.Sleep(time.Minute)
		synctest.Wait()
		queued, _ := state()
		assert.Equal(t, 1, queued, "the third waits: both lanes are taken")
		close(release[1])
		synctest.Wait()
		assert.Equal(t, [][]int{{0}, {1}, {2}}, got(), "the third runs once the second has ended")
		_, running := state()
		assert.Equal(t, 1, running, "the first still runs")
		close(release[0])
		wg.Wait()
		_, running = state()
		assert.Zero(t, running)
	})
}
