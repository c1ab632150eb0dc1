package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/signedhook/webhook/riverhook/internal/testdb"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" { // a worker process of a test's run
		os.Exit(childMain())
	}
	goleak.VerifyTestMain(m)
}

// TestRun_EveryScenarioDeliversEachOnce runs every scenario at a tiny size,
// with worker processes of its own (this test binary run again), and checks
// what holds whatever the code's speed: a line per scenario, every delivery
// arrived exactly once and signed, every job completed. It asserts nothing
// of the figures: they are the program's output, not the test's.
func TestRun_EveryScenarioDeliversEachOnce(t *testing.T) {
	cfg, err := parseFlags([]string{
		"-db", testdb.URL(t),
		"-n", "8", "-latency", "50ms", "-k", "2",
		"-backlog", "10", "-down", "600ms", "-window", "300ms", "-snooze", "100ms", "-probe", "100ms", "-drain-limit", "1m",
		"-cpu-n", "20", "-cpu-conns", "4", "-cpu-warm", "10", "-cpu-rounds", "3",
		"-rate", "100", "-for", "200ms", "-rate-n", "6", "-rates", "20", "-crash-n", "40",
	}, io.Discard)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var out, progress bytes.Buffer
	results, err := run(ctx, cfg, &out, &progress)
	t.Logf("output:\n%s\nprogress:\n%s", &out, &progress)
	require.NoError(t, err)

	want := []string{"bound-mem-1", "bound-2", "outage-mem-1", "outage-2", "rate-20/mem-1", "rate-20/1", "rate-20/2", "crash-2", "cpu/impl=nop-2", "cpu/impl=inprocess-2", "cpu/impl=riverhook-2", "cpu/impl=riverhook-fleet-2",
		"latency/options=fleet/workers=100ms/api=100ms-2", "latency/options=fleet/workers=10ms/api=100ms-2",
		"latency/options=fleet/workers=10ms/api=10ms-2", "latency/options=none/workers=10ms/api=10ms-2"}
	var got []string
	for _, r := range results {
		got = append(got, r.Name)
		assert.NoError(t, r.check(), r.Name)
		assert.Contains(t, out.String(), "BenchmarkFleet/"+r.Name+"\t", "its benchmark line")
	}
	assert.Equal(t, want, got)
	assert.Contains(t, out.String(), "Fleet summary")
	assert.NotContains(t, out.String(), "\n# ", "no run failed its sanity check")
}

func TestParseFlags(t *testing.T) {
	t.Setenv("TEST_DATABASE_URL", "postgres://example")
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"defaults", nil, ""},
		{"an unknown scenario", []string{"-run", "bound,speed"}, `unknown scenario "speed"`},
		{"no processes", []string{"-k", "1,0"}, `"0" is not a number of processes`},
		{"a zero size", []string{"-backlog", "0"}, "-backlog is 0"},
		{"a negative duration", []string{"-window", "-1s"}, "-window is -1s"},
		{"a window longer than the outage", []string{"-down", "5s", "-window", "6s"}, "-window 6s is longer than -down 5s"},
		{"an argument", []string{"bound"}, "unexpected arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseFlags(tc.args, io.Discard)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, scenarios, cfg.Run)
			assert.Equal(t, []int{1, 2, 4}, cfg.Ks)
			assert.Equal(t, "postgres://example", cfg.DB)
		})
	}
}

func TestResult_LineIsABenchmarkLine(t *testing.T) {
	r := result{Name: "bound-2", N: 1000, Metrics: []metric{{15.234567, "deliveries/s"}, {8, "peak-in-flight"}, {0.95123, "x-bound/latency"}}}
	assert.Equal(t, "BenchmarkFleet/bound-2\t1000\t15.23 deliveries/s\t8 peak-in-flight\t0.9512 x-bound/latency", r.line())
	assert.False(t, strings.ContainsAny(r.line(), "\n"))
}

// TestPaced_GivesTheRateAndEveryItemOnce runs paced on a fake clock: the
// items come in order, each once, a hundredth of the rate every 10 ms,
// and the last is due after n/rate.
func TestPaced_GivesTheRateAndEveryItemOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var got []int
		var last time.Duration
		err := paced(context.Background(), 250, 1000, func(from, n int) error {
			for i := from; i < from+n; i++ {
				got = append(got, i)
			}
			last = time.Since(start)
			return nil
		})
		require.NoError(t, err)
		require.Len(t, got, 250)
		for i, v := range got {
			require.Equal(t, i, v)
		}
		assert.Equal(t, 250*time.Millisecond, last, "the 250th of 1,000 a second is due at 249 ms: the tick after")

		calls := 0
		require.NoError(t, paced(context.Background(), 7, 0, func(from, n int) error {
			calls++
			assert.Equal(t, 0, from)
			assert.Equal(t, 7, n)
			return nil
		}))
		assert.Equal(t, 1, calls, "no rate: all at once")
	})
}

// TestBackWithin_IsTheFirstFullWindowAfterTheKill checks the crash
// scenario's recovery time: the arrival that completes the first window
// of width, wholly after the kill, holding need arrivals.
func TestBackWithin_IsTheFirstFullWindowAfterTheKill(t *testing.T) {
	kill := time.Unix(1000, 0)
	at := func(ms ...int) []time.Time {
		var ts []time.Time
		for _, m := range ms {
			ts = append(ts, kill.Add(time.Duration(m)*time.Millisecond))
		}
		return ts
	}
	for _, tc := range []struct {
		name   string
		times  []time.Time
		need   int
		want   time.Duration
		wantOK bool
	}{
		{"full at once", at(-200, -100, 100, 200, 300), 3, 300 * time.Millisecond, true},
		{"arrivals before the kill do not count", at(-300, -200, -100, 1500, 1600, 1700), 3, 1700 * time.Millisecond, true},
		{"a window is shorter than width", at(0, 500, 1000, 1500, 1900), 3, 1900 * time.Millisecond, true},
		{"a window ends at the kill", at(-100, 0, 500, 1100), 3, 0, false},
		{"never full", at(0, 600, 1200, 1800), 3, 0, false},
		{"too few", at(100, 200), 3, 0, false},
		{"one is enough", at(-100, 700), 1, 700 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := backWithin(tc.times, kill, tc.need, time.Second)
			assert.Equal(t, tc.wantOK, ok)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestPerSecond_CountsEachSecondFromTheKill(t *testing.T) {
	kill := time.Unix(1000, 0)
	var times []time.Time
	for _, ms := range []int{-500, 0, 999, 1000, 2500, 2600, 2700, 4200} {
		times = append(times, kill.Add(time.Duration(ms)*time.Millisecond))
	}
	assert.Equal(t, []int{2, 1, 3, 0}, perSecond(times, kill, 4))
}
