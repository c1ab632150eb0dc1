package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDueBy_IsExact: the items due after elapsed at rate a second are
// 1 + elapsed*rate, to the item: the float product rounded down gave one
// fewer (29 at 290 ms at 100 a second), the item a tick late.
func TestDueBy_IsExact(t *testing.T) {
	for _, rate := range []int{1, 3, 7, 100, 333, 1000, 2000, 3000} {
		for ms := int64(0); ms <= 60_000; ms += 10 {
			want := 1 + int(ms*int64(rate)/1000)
			if got := dueBy(time.Duration(ms)*time.Millisecond, rate); got != want {
				t.Fatalf("dueBy(%d ms, %d a second) = %d, want %d", ms, rate, got, want)
			}
		}
	}
	assert.Positive(t, dueBy(2*time.Second, math.MaxInt), "a rate too large for the product: all due, not a negative count")
}

// TestPaced_ReturnsWithTheLastItem: once the last item is given, paced
// returns; it does not wait for one more tick (10 ms more of a round's
// time, counted in its deliveries a second).
func TestPaced_ReturnsWithTheLastItem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		require.NoError(t, paced(context.Background(), 250, 1000, func(int, int) error { return nil }))
		assert.Equal(t, 250*time.Millisecond, time.Since(start))
	})
}

// TestRoundLimit_AddsThePacing: a round's limit is its pacing's time plus
// ten minutes, so that a slow -cpu-rate does not time the in-process
// Sends out (3,000 at 2 a second take 25 minutes).
func TestRoundLimit_AddsThePacing(t *testing.T) {
	assert.Equal(t, 10*time.Minute, roundLimit(3000, 0))
	assert.Equal(t, 10*time.Minute+1499500*time.Millisecond, roundLimit(3000, 2))
	assert.Equal(t, 10*time.Minute, roundLimit(1, 1000))
}

// TestShare_SplitsTheWholeEvenly: the in-process floor's processes get
// shares of the deliveries and of the rate that add up to the whole and
// differ by at most one.
func TestShare_SplitsTheWholeEvenly(t *testing.T) {
	for _, k := range []int{1, 2, 3, 4, 7} {
		for _, n := range []int{0, 1, 2, 5, 999, 1000, 1501, 2000} {
			sum, lo, hi := 0, math.MaxInt, 0
			for j := range k {
				s := share(n, k, j)
				sum, lo, hi = sum+s, min(lo, s), max(hi, s)
			}
			assert.Equal(t, n, sum, "n %d, k %d", n, k)
			assert.LessOrEqual(t, hi-lo, 1, "n %d, k %d", n, k)
		}
	}
}

// fakeFleet is k processes answering as the in-process children do,
// without processes: each records the commands it is sent and answers
// each with answer(j, the command).
func fakeFleet(t *testing.T, k int, answer func(j int, cmd string) childStats) (fleet, [][]string) {
	f := make(fleet, k)
	cmds := make([][]string, k)
	var wg sync.WaitGroup
	for j := range k {
		r, w := io.Pipe()
		p := &proc{cmd: &exec.Cmd{Process: &os.Process{Pid: 1000 + j}}, stdin: w, lines: make(chan string, 4)}
		wg.Go(func() {
			defer close(p.lines)
			s := bufio.NewScanner(r)
			for s.Scan() {
				cmds[j] = append(cmds[j], s.Text())
				line, err := json.Marshal(answer(j, s.Text()))
				if err != nil {
					panic(err)
				}
				p.lines <- string(line)
			}
		})
		f[j] = p
	}
	t.Cleanup(func() {
		for _, p := range f {
			p.stdin.Close()
		}
		wg.Wait()
	})
	return f, cmds
}

// TestSend_GivesTheProcessesTheRoundsPace: the in-process floor's
// processes make a round's deliveries each once, under ids of their own
// (prefix, the process, "-"), a process given none answering its stats,
// and together at the pace River's jobs are inserted at: at no time more
// due than paced gives the whole (one more a process, each starting with
// one), the last due no later than River's last. The shares of both the
// count and the rate, the rate at least 1 a process, made k a second of a
// -cpu-rate under -cpu-k, and of a rate k does not divide (3 over 2: 2
// and 1 a second, each half the deliveries) a round half as long again.
// The answer is the sum of the processes' stats.
func TestSend_GivesTheProcessesTheRoundsPace(t *testing.T) {
	for _, tc := range []struct{ count, rate, k int }{
		{4, 1, 2}, {3000, 3, 2}, {10, 3, 4}, {5, 2, 3}, {1500, 2000, 2}, {1500, 1000, 2}, {1501, 1000, 3},
		{1, 1000, 2}, {100, 1000, 1}, {7, 0, 3}, {1, 0, 2}, {2000, 7, 4},
	} {
		name := fmt.Sprintf("%d at %d a second over %d", tc.count, tc.rate, tc.k)
		f, cmds := fakeFleet(t, tc.k, func(j int, cmd string) childStats {
			return childStats{CPU: time.Duration(j+1) * time.Second, Failed: int64(j), Allocs: 10}
		})
		m := &cpuMeter{b: &bench{cfg: config{CPUConns: 100}}, f: f, inproc: true}
		s, err := m.send(context.Background(), "cpu3-", tc.count, tc.rate)
		require.NoError(t, err, name)
		assert.Equal(t, childStats{CPU: time.Duration(tc.k*(tc.k+1)/2) * time.Second, Failed: int64(tc.k * (tc.k - 1) / 2), Allocs: uint64(10 * tc.k)}, s, name)

		var ns, rates []int
		sum := 0
		for j := range tc.k {
			require.Len(t, cmds[j], 1, name)
			args := strings.Fields(cmds[j][0])
			if args[0] == "stats" {
				continue
			}
			require.Equal(t, "send", args[0], name)
			assert.Equal(t, fmt.Sprintf("cpu3-%d-", j), args[1], name)
			assert.Equal(t, []string{"32", "100"}, args[3:5], name)
			n, err := strconv.Atoi(args[2])
			require.NoError(t, err)
			require.Positive(t, n, "%s: a process given none answers its stats", name)
			sum += n
			if tc.rate == 0 {
				assert.Len(t, args, 5, "%s: at once", name)
				continue
			}
			require.Len(t, args, 6, name)
			r, err := strconv.Atoi(args[5])
			require.NoError(t, err)
			require.Positive(t, r, name)
			ns, rates = append(ns, n), append(rates, r)
		}
		assert.Equal(t, tc.count, sum, "%s: every delivery once", name)
		if tc.rate == 0 {
			continue
		}
		last := 0.0
		for i := range ns {
			last = max(last, float64(ns[i]-1)/float64(rates[i]))
		}
		assert.LessOrEqual(t, last, float64(tc.count)/float64(tc.rate), "%s: the last delivery due after River's (%v s)", name, float64(tc.count-1)/float64(tc.rate))
		for ms := 0; ms <= int(last*1000)+10; ms += 10 {
			elapsed, due := time.Duration(ms)*time.Millisecond, 0
			for i := range ns {
				due += min(ns[i], dueBy(elapsed, rates[i]))
			}
			if whole := min(tc.count, dueBy(elapsed, tc.rate)); due > whole+len(ns)-1 {
				t.Errorf("%s: %d due at %v, where River's pacing has %d", name, due, elapsed, whole)
				break
			}
		}
	}
}
