package webhooktest

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/signedhook/webhook"
)

// NewRequest returns a delivery of p as the service sends it, for a
// receiver's handler: a POST to "/webhooks" with the JSON body, Content-Type
// and all three X-Service-* headers, signed with secret at time at. Give a
// time more than 5 minutes ago, or ahead, for an expired or a future
// delivery (the zero time.Time is one too: see SignedHeader).
//
// Two requests are two deliveries, as the sender would make them: a request
// that would carry a signature made before in this process (the same
// secret and body, built in the same millisecond) is signed a millisecond
// later, as the sender signs a retry, so that a receiver handles it rather
// than acknowledging it as a copy. [Duplicate] makes a copy on purpose.
//
// It panics if p cannot be encoded, as httptest.NewRequest panics on bad
// input.
func NewRequest(secret string, p webhook.Payload, at time.Time) *http.Request {
	body, err := json.Marshal(p)
	if err != nil {
		panic("webhooktest: encoding payload: " + err.Error())
	}
	return NewRawRequest(secret, p.Event, body, at)
}

// NewRawRequest is NewRequest for a body encoded already, sent with event in
// the X-Service-Event header.
func NewRawRequest(secret, event string, body []byte, at time.Time) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/webhooks", bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil } // for Duplicate once r is served
	for name, values := range SignedHeader(secret, event, body, at) {
		r.Header[name] = values
	}
	return r
}

// SignedHeader returns the headers of a delivery of body signed with secret
// at time at: Content-Type, X-Service-Event, X-Service-Timestamp and
// X-Service-Signature. With another body, they make a tampered delivery.
// A time before 1970 (the zero time.Time) is signed at 1970, the earliest
// time the header holds: an expired delivery too.
// As with NewRequest, a signature made before in this process is never made
// again: the timestamp moves on to the first millisecond not signed at for
// that secret and body, at the cost of one search however many were.
func SignedHeader(secret, event string, body []byte, at time.Time) http.Header {
	ts := signatures.next(signedKey(secret, body), max(at.UnixMilli(), 0)) // the header holds no sign
	sig := webhook.Sign(secret, ts, body)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set(webhook.HeaderEvent, event)
	h.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts, 10))
	h.Set(webhook.HeaderSignature, sig)
	return h
}

// Duplicate returns a copy of the delivery r: the same method, URL, headers
// and body, so the same signature. It is what a proxy's or a load
// balancer's retry, or a queue that stored the request, sends again: a
// receiver acknowledges it without handling it twice. r's body is read and
// restored, so r can still be served; of a request of this package's (its
// NewRequest's, or a copy Duplicate made) that was served already (its body
// read), the copy has the body it was built with.
func Duplicate(r *http.Request) *http.Request {
	var body []byte
	if r.Body != nil {
		var err error
		body, err = io.ReadAll(r.Body)
		if (err != nil || int64(len(body)) != r.ContentLength) && r.GetBody != nil {
			// Served already: a handler read the body, or the verifying
			// middleware released it.
			var rc io.ReadCloser
			if rc, err = r.GetBody(); err == nil {
				body, err = io.ReadAll(rc)
			}
		}
		if err != nil {
			panic("webhooktest: Duplicate: reading the body: " + err.Error())
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	c := httptest.NewRequest(r.Method, r.URL.String(), bytes.NewReader(body))
	c.Header = r.Header.Clone()
	c.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil } // a copy of it, once served
	return c
}

// signatures are the timestamps this package signed, per secret and body
// (one signature is one secret, body and timestamp), so that it signs none
// twice. The timestamps of a key are kept as runs: a test or a benchmark
// signing one body again and again, at one instant or at the clock's,
// costs one run, and each signature a search, not a scan of those before.
// Beyond maxRuns runs of a key, the two closest merge: the timestamps
// between are skipped, never signed twice. Beyond maxKeys/2 keys signed
// since, a key's runs are forgotten (the generation before goes whole).
var signatures = &issued{cur: make(map[[sha256.Size]byte][]run)}

const (
	maxKeys = 1 << 16
	maxRuns = 16
)

// run is the timestamps lo to hi, Unix ms, both included.
type run struct{ lo, hi int64 }

type issued struct {
	mu       sync.Mutex
	cur, old map[[sha256.Size]byte][]run // each sorted, runs apart (not adjacent)
}

// signedKey is what a signature's secret and body are remembered by.
func signedKey(secret string, body []byte) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(secret)))
	h.Write(n[:])
	h.Write([]byte(secret))
	h.Write(body)
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}

// next returns the first timestamp from at on that key was not signed at,
// and records it.
func (s *issued) next(key [sha256.Size]byte, at int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	runs, ok := s.cur[key]
	if !ok {
		runs = s.old[key]
		if len(s.cur) >= maxKeys/2 {
			s.old, s.cur = s.cur, make(map[[sha256.Size]byte][]run)
		}
	}
	ts := at
	if i, _ := slices.BinarySearchFunc(runs, at, func(r run, t int64) int { return cmp.Compare(r.hi, t) }); i < len(runs) && runs[i].lo <= at {
		ts = runs[i].hi + 1 // free: runs are apart
	}
	j, _ := slices.BinarySearchFunc(runs, ts, func(r run, t int64) int { return cmp.Compare(r.lo, t) }) // the first run after ts
	joinLeft := j > 0 && runs[j-1].hi == ts-1
	joinRight := j < len(runs) && runs[j].lo == ts+1
	switch {
	case joinLeft && joinRight:
		runs[j-1].hi = runs[j].hi
		runs = slices.Delete(runs, j, j+1)
	case joinLeft:
		runs[j-1].hi = ts
	case joinRight:
		runs[j].lo = ts
	default:
		runs = slices.Insert(runs, j, run{ts, ts})
	}
	if len(runs) > maxRuns {
		k := 0
		for i := 1; i < len(runs)-1; i++ {
			if runs[i+1].lo-runs[i].hi < runs[k+1].lo-runs[k].hi {
				k = i
			}
		}
		runs[k].hi = runs[k+1].hi
		runs = slices.Delete(runs, k+1, k+2)
	}
	s.cur[key] = runs
	return ts
}
