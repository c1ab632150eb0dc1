package riverhook

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FuzzMarshalLog holds marshalLog to encoding/json's JSON of the same log,
// byte for byte: the log River keeps, the console reads and an erasure
// rewrites is the one it always was.
func FuzzMarshalLog(f *testing.F) {
	f.Add(1, 1, "delivered", int64(1764145140), int64(123456000), true, 200, "1.234ms", int64(1764145140123), "", "", "ok", false, uint8(1))
	f.Add(2, 3, "status", int64(1764145140), int64(0), false, 503, "30s", int64(-1), "2s", "HTTP 503 <b>&\"\\\n\u2028\xff", "Service unavailable …", true, uint8(3))
	f.Add(0, 0, "", int64(0), int64(0), true, 0, "", int64(0), "", "", "", false, uint8(0))
	f.Add(1, 1, "x", int64(-62167219201), int64(999999999), true, 0, "", int64(0), "", "", "", false, uint8(2))
	f.Add(1, 1, "x", int64(253402300800), int64(0), true, 0, "", int64(0), "", "", "", false, uint8(2))
	f.Fuzz(func(t *testing.T, n, run int, kind string, sec, nsec int64, utc bool, status int, took string, ts int64, retryIn, errText, response string, probe bool, count uint8) {
		e := logEntry{N: n, Run: run, Kind: kind, Status: status, Took: took, Timestamp: ts, RetryIn: retryIn, Error: errText, Response: response, Probe: probe}
		if sec != 0 || nsec != 0 {
			e.Start = time.Unix(sec, nsec%1e9).UTC()
			if !utc {
				e.Start = e.Start.In(time.FixedZone("", 3600))
			}
		}
		var entries []logEntry // nil for count 0: "null", as encoding/json writes it
		for i := range int(count % 4) {
			e.N += i
			entries = append(entries, e)
		}
		got, gotErr := marshalLog(entries)
		want, wantErr := json.Marshal(attemptLog{Attempts: entries})
		require.Equal(t, wantErr == nil, gotErr == nil, "%v, encoding/json's %v", gotErr, wantErr)
		require.Equal(t, string(want), string(got))
		if len(entries) > 0 {
			one, _ := json.Marshal(&entries[0])
			require.Equal(t, len(one), entryLen(&entries[0]))
		}
	})
}

// TestMarshalLog_TakesTheWorkersEntriesWithoutEncodingJSON: the entries a
// run writes (UTC starts) go through the fast path, not the fallback the
// fuzz test also covers.
func TestMarshalLog_TakesTheWorkersEntriesWithoutEncodingJSON(t *testing.T) {
	e := logEntry{N: 1, Run: 1, Kind: "delivered", Start: time.Now().UTC().Round(time.Microsecond), Status: 200, Took: "1.2ms", Timestamp: 1}
	_, ok := appendEntry(nil, &e)
	assert.True(t, ok)
	e.Start = e.Start.Local()
	if e.Start.Location() != time.UTC {
		_, ok = appendEntry(nil, &e)
		assert.False(t, ok, "a start not in UTC is time's MarshalJSON's")
	}
}

// TestMarshalLog_WhatTheFuzzHarnessDoesNotBuild holds marshalLog to
// encoding/json for the starts and texts FuzzMarshalLog cannot make: a
// monotonic reading, Local, a named zone, a zone called UTC that is not
// time.UTC, offsets RFC 3339 cannot write, the years' edges, the zero
// instant elsewhere than UTC; every byte, DEL and U+FFFD; the ints' edges.
func TestMarshalLog_WhatTheFuzzHarnessDoesNotBuild(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	now := time.Now()
	starts := []time.Time{now, now.UTC(), now.Local(), now.In(ny), now.In(time.FixedZone("UTC", 0)),
		now.In(time.FixedZone("", 3601)), now.In(time.FixedZone("", 24*3600)), time.Time{}.In(ny), time.Time{}.Add(1),
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Unix(math.MaxInt64, 0).UTC(), time.Unix(math.MinInt64, 0).UTC(), time.Unix(1, 120000).UTC()}
	var every []byte
	for c := range 256 {
		every = append(every, byte(c))
	}
	texts := []string{string(every), "\x7f", "\ufffd", "\u2028\u2029", "é日本🎉", "\xed\xa0\x80", "<a href=\"x\">&amp;</a>"}
	for _, start := range starts {
		for i, text := range texts {
			n := []int{0, 1, -1, math.MaxInt, math.MinInt}[i%5]
			e := logEntry{N: n, Run: -n, Kind: text, Start: start, Status: n, Took: text, Timestamp: int64(n), RetryIn: text, Error: text, Response: text, Probe: n != 0}
			entries := []logEntry{e, e}
			got, gotErr := marshalLog(entries)
			want, wantErr := json.Marshal(attemptLog{Attempts: entries})
			require.Equal(t, wantErr == nil, gotErr == nil, "%v: %v, encoding/json's %v", start, gotErr, wantErr)
			require.Equal(t, string(want), string(got), "%v", start)
			one, _ := json.Marshal(e)
			require.Equal(t, len(one), entryLen(&e), "%v", start)
		}
	}
	got, err := marshalLog([]logEntry{})
	require.NoError(t, err)
	assert.Equal(t, `{"attempts":[]}`, string(got))
}

// BenchmarkMarshalLog writes a one-entry log, as a delivery's first run
// records it: impl=reflect is encoding/json's.
//
//	go test -run '^$' -bench MarshalLog -count 6 . | benchstat -col /impl -
func BenchmarkMarshalLog(b *testing.B) {
	entries := []logEntry{{N: 1, Run: 1, Kind: "delivered", Start: time.Now().UTC().Round(time.Microsecond), Status: 200, Took: "1.234ms", Timestamp: time.Now().UnixMilli()}}
	b.Run("impl=append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := marshalLog(entries); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("impl=reflect", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(attemptLog{Attempts: entries}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
