package riverhook

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"

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
		b := &batcher[int, int]{run: g.run, max: 4}
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
		assert.False(t, b.busy)
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
		assert.False(t, b.busy)
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
