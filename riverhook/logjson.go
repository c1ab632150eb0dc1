package riverhook

import (
	"encoding/json"
	"strconv"
	"time"
)

// This file writes the attempt log's JSON without reflection, byte for
// byte what encoding/json writes for it (FuzzMarshalLog holds the two
// equal): every run of a delivery records its log, and encoding/json's
// reflection over the entries was most of what the Worker's own code cost
// a delivery, beside River's and the Sender's.

// marshalLog returns the JSON of attemptLog{Attempts: entries}.
func marshalLog(entries []logEntry) ([]byte, error) {
	if entries == nil {
		return []byte(`{"attempts":null}`), nil
	}
	b := make([]byte, 0, 32+192*len(entries))
	b = append(b, `{"attempts":[`...)
	for i := range entries {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = appendEntry(b, &entries[i]); !ok {
			return json.Marshal(attemptLog{Attempts: entries})
		}
	}
	return append(b, "]}"...), nil
}

// entryLen returns the length of e's JSON.
func entryLen(e *logEntry) int {
	if b, ok := appendEntry(make([]byte, 0, 256), e); ok {
		return len(b)
	}
	b, _ := json.Marshal(e)
	return len(b)
}

// appendEntry appends e's JSON, as encoding/json writes it, and reports
// whether it could: false for a start it leaves to time's MarshalJSON (not
// UTC, or a year RFC 3339 cannot write).
func appendEntry(b []byte, e *logEntry) ([]byte, bool) {
	b = append(b, `{"n":`...)
	b = strconv.AppendInt(b, int64(e.N), 10)
	b = append(b, `,"run":`...)
	b = strconv.AppendInt(b, int64(e.Run), 10)
	b = append(b, `,"kind":`...)
	b = appendJSONString(b, e.Kind)
	if !e.Start.IsZero() {
		if y := e.Start.Year(); e.Start.Location() != time.UTC || y < 0 || y > 9999 {
			return b, false
		}
		b = append(b, `,"start":"`...)
		b = e.Start.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	if e.Status != 0 {
		b = append(b, `,"status":`...)
		b = strconv.AppendInt(b, int64(e.Status), 10)
	}
	if e.Took != "" {
		b = append(b, `,"took":`...)
		b = appendJSONString(b, e.Took)
	}
	if e.Timestamp != 0 {
		b = append(b, `,"timestamp":`...)
		b = strconv.AppendInt(b, e.Timestamp, 10)
	}
	if e.RetryIn != "" {
		b = append(b, `,"retry_in":`...)
		b = appendJSONString(b, e.RetryIn)
	}
	if e.Error != "" {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, e.Error)
	}
	if e.Response != "" {
		b = append(b, `,"response":`...)
		b = appendJSONString(b, e.Response)
	}
	if e.Probe {
		b = append(b, `,"probe":true`...)
	}
	return append(b, '}'), true
}

// appendJSONString appends s as encoding/json writes it: printable ASCII
// with nothing to escape as it is, anything else through encoding/json
// (its escapes, HTML's characters, invalid UTF-8, U+2028 and U+2029).
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
