package riverhook

import (
	"encoding/json"
	"regexp"
	"strconv"
	"time"

	"github.com/riverqueue/river/rivertype"
)

// This file reads what the earlier riverhook left in the jobs queued before
// an upgrade: the attempts they made, so that the policy's numbering goes
// on and the attempt log starts with them. (Args.UnmarshalJSON reads their
// args.) The earlier riverhook kept each failed attempt as an error of the
// job, "riverhook: attempt 2 failed (status, status 500): webhook: ...",
// and the last attempt of the job as its output, a legacyOutcome.

// legacyOutcome is a job's output as the earlier riverhook recorded it: the
// attempt its last run made. Kind is empty for a delivered one.
type legacyOutcome struct {
	Attempt    int    `json:"attempt"`
	StatusCode int    `json:"status_code"`
	Kind       string `json:"kind"`
	DurationNs int64  `json:"duration_ns"`
	Timestamp  int64  `json:"timestamp"`
	RetryInNs  int64  `json:"retry_in_ns"`
}

// legacyFailed matches the error of a failed attempt of the earlier
// riverhook, also as River keeps a cancel's: its kind, status and error.
var legacyFailed = regexp.MustCompile(`(?s)^(?:` + regexp.QuoteMeta(cancelPrefix) + `)?riverhook: attempt \d+ failed \(([^,()]*), status (\d+)\): (.*)$`)

// legacyLog returns the attempt log of a job the earlier riverhook ran,
// whose output out is: one entry for each failed attempt in the job's
// errors, one for the attempt its output records when that one was
// delivered, and the runs cut between them, numbered as the policy counts
// the attempts made. The output's details (duration, timestamp, retry
// wait) go to the entry of its run. Nil for a job of this riverhook.
func legacyLog(job *rivertype.JobRow, out []byte) []logEntry {
	var entries []logEntry
	for _, e := range job.Errors {
		m := legacyFailed.FindStringSubmatch(e.Error)
		if m == nil {
			continue
		}
		status, _ := strconv.Atoi(m[2])
		entries = append(entries, logEntry{Run: e.Attempt, Kind: m[1], Start: e.At.UTC().Round(time.Microsecond), Status: status,
			Error: cutJSON(m[3], maxErrorBytes)})
	}
	var last legacyOutcome
	if len(out) > 0 && json.Unmarshal(out, &last) == nil && last.Attempt > 0 {
		i := len(entries) - 1
		for i >= 0 && entries[i].Run != last.Attempt {
			i--
		}
		if i < 0 && last.Kind == "" {
			entries = append(entries, logEntry{Run: last.Attempt, Kind: kindDelivered, Status: last.StatusCode})
			i = len(entries) - 1
		}
		if i >= 0 {
			e := &entries[i]
			e.Took, e.Timestamp = tookText(time.Duration(last.DurationNs)), last.Timestamp
			if last.RetryInNs > 0 {
				e.RetryIn = time.Duration(last.RetryInNs).String()
			}
		}
	}
	var log []logEntry // with the runs cut between the attempts
	for _, e := range entries {
		log = append(log, interrupted(job, log, e.Run-1)...)
		e.N = attemptsMade(log) + 1
		log = append(log, e)
	}
	return log
}
