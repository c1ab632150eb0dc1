package riverhook

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"

	"github.com/signedhook/webhook"
)

// BenchmarkAttemptLog is what the attempt log costs a run in this process:
// reading the log of the job's earlier runs from its metadata, adding the
// attempt, and encoding the log for River (which encodes the metadata
// update once more). The database stores the larger metadata besides.
func BenchmarkAttemptLog(b *testing.B) {
	failed := webhook.Attempt{N: 1, Start: time.Now(), Duration: 3 * time.Millisecond, Timestamp: 1795338000125, StatusCode: 503,
		Kind: webhook.KindStatus, Err: errors.New("webhook: receiver answered 503 Service Unavailable"),
		ResponseBody: []byte(`{"error":"busy"}`), Retry: true, RetryIn: time.Second}
	for _, earlier := range []int{0, 3} {
		var entries []logEntry
		for i := range earlier {
			failed.N = i + 1
			entries = append(entries, newLogEntry(failed, i+1))
		}
		out, err := json.Marshal(attemptLog{Attempts: entries})
		if err != nil {
			b.Fatal(err)
		}
		metadata, err := json.Marshal(map[string]json.RawMessage{"output": out})
		if err != nil {
			b.Fatal(err)
		}
		if earlier == 0 {
			metadata = []byte(`{}`)
		}
		job := &rivertype.JobRow{ID: 1, Attempt: earlier + 1, Metadata: metadata}
		delivered := webhook.Attempt{N: earlier + 1, Start: time.Now(), Duration: 610 * time.Microsecond, Timestamp: 1795338000125, StatusCode: 200}
		b.Run("earlier="+strconv.Itoa(earlier), func(b *testing.B) {
			benchmarkAttemptLog(b, job, delivered)
		})
	}
}

func benchmarkAttemptLog(b *testing.B, job *rivertype.JobRow, delivered webhook.Attempt) {
	b.ReportAllocs()
	for b.Loop() {
		entries, err := readLog(job)
		if err != nil {
			b.Fatal(err)
		}
		entries = append(entries, interrupted(job, entries, job.Attempt-1)...)
		entries = append(entries, newLogEntry(delivered, job.Attempt))
		// As Worker.record and River: the log, River's RecordOutput
		// encoding it once more, and the metadata update.
		out, err := marshalLog(entries)
		if err == nil {
			out, err = json.Marshal(json.RawMessage(out))
		}
		if err == nil {
			_, err = json.Marshal(map[string]any{"output": json.RawMessage(out)})
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// TestLogKept holds logKept to logEntry's fields: each is kept by an
// erasure or one of the two texts it replaces, so that a field added later
// is not erased, or kept, by mistake.
func TestLogKept(t *testing.T) {
	var names []string
	typ := reflect.TypeFor[logEntry]()
	for i := range typ.NumField() {
		names = append(names, strings.Split(typ.Field(i).Tag.Get("json"), ",")[0])
	}
	assert.ElementsMatch(t, append(slices.Clone(logKept), "error", "response"), names)
}

// A run of probes keeps its last entry, but never one signed after the one
// it would replace (another process's clock behind): signAfter reads the
// latest timestamp sent from the log (a review's finding).
func TestAppendProbe_KeepsTheLatestTimestampSent(t *testing.T) {
	attempt := logEntry{N: 1, Kind: "status", Timestamp: 50}
	entries := appendProbe([]logEntry{attempt}, logEntry{N: 2, Probe: true, Timestamp: 100})
	entries = appendProbe(entries, logEntry{N: 2, Probe: true, Timestamp: 120})
	if len(entries) != 2 || entries[1].Timestamp != 120 {
		t.Fatalf("a later probe replaces the one before: %+v", entries)
	}
	entries = appendProbe(entries, logEntry{N: 2, Probe: true, Timestamp: 90})
	if len(entries) != 3 || entries[1].Timestamp != 120 || entries[2].Timestamp != 90 {
		t.Fatalf("a probe signed earlier is kept beside it: %+v", entries)
	}
}

// TestInterrupted_ARunAfterAPlaceCutIsLoggedWhenRescued: an attempt its run
// cut as its place in flight was lost snoozed the job, and River gave the
// run's number back. A next run with that number, killed and rescued by
// River, is an interrupted attempt; without the rescue, no run was cut.
func TestInterrupted_ARunAfterAPlaceCutIsLoggedWhenRescued(t *testing.T) {
	cutAt := newLogEntry(webhook.Attempt{N: 1, Start: time.Now(), Kind: webhook.KindInterrupted, Err: errPlaceLost}, 1)
	entries := []logEntry{cutAt}
	rescued := &rivertype.JobRow{Attempt: 2, Errors: []rivertype.AttemptError{{Attempt: 1, Error: rescuedError}}}
	got := interrupted(rescued, entries, 1)
	if assert.Len(t, got, 1, "the rescued run after the cut") {
		assert.Equal(t, logEntry{N: 1, Run: 1, Kind: string(webhook.KindInterrupted)}, got[0])
	}
	assert.Empty(t, interrupted(&rivertype.JobRow{Attempt: 1}, entries, 1), "the run that cut its attempt is the log's last")
}
