package webhook

import (
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

// This file holds the retry policy: RetryPolicy, the default schedule and
// the backoff helpers.

// RetryPolicy decides whether a failed attempt is retried and how long the
// [Sender] waits before the retry. Whatever the policy, a delivery is never
// retried after a 410 Gone ([ErrEndpointGone]), after its context is done,
// after a destination was refused before sending ([KindBlocked]), or when
// the wait would end past the context's deadline.
type RetryPolicy struct {
	// MaxRetries is how many retries may follow the first attempt: a
	// delivery makes at most MaxRetries+1 requests. Zero means no retry.
	MaxRetries int

	// Backoff returns the wait before retry number retry (1 for the first
	// retry). resp is the failed attempt's response, or nil when there was
	// none; its body has already been read. Nil means the default schedule:
	// 1 s, 2 s, 4 s, doubling up to one minute.
	Backoff BackoffFunc

	// ShouldRetry reports whether a failed attempt is retried: resp is its
	// response (nil when none came, body already read) and err the failure.
	// It is not called for a success (a 2xx answer) nor for the failures
	// that are never retried. Nil means every other failure is retried.
	ShouldRetry func(resp *http.Response, err error) bool
}

// BackoffFunc returns the wait before retry number retry (1 for the first
// retry); resp is the failed attempt's response, or nil when there was none.
type BackoffFunc func(retry int, resp *http.Response) time.Duration

// DefaultRetryPolicy returns the service's schedule: 3 retries after the
// first attempt, waiting exactly 1 s, 2 s and 4 s, retrying every failure
// but a 410 Gone ([ErrEndpointGone]).
// Each call returns a new policy that the caller may change.
func DefaultRetryPolicy() *RetryPolicy {
	return &RetryPolicy{MaxRetries: 3, Backoff: defaultBackoff}
}

var defaultBackoff = ExponentialBackoff(time.Second, time.Minute)

// ExponentialBackoff returns a BackoffFunc waiting base before the first
// retry and doubling the wait for each further retry, up to limit. The wait
// saturates at limit, whatever the retry number; a negative base or limit
// waits 0.
func ExponentialBackoff(base, limit time.Duration) BackoffFunc {
	base, limit = max(base, 0), max(limit, 0)
	return func(retry int, _ *http.Response) time.Duration {
		d := min(base, limit)
		for i := 1; i < retry && d < limit; i++ {
			if d > limit/2 { // doubling would pass the limit, or overflow
				return limit
			}
			d *= 2
		}
		return d
	}
}

// WithJitter returns a BackoffFunc that waits a random duration between
// (1-fraction) and 1 times what b returns, so that many senders failing at
// once do not retry in step. fraction is clamped to [0, 1]; NaN counts as 0.
func WithJitter(b BackoffFunc, fraction float64) BackoffFunc {
	if math.IsNaN(fraction) {
		fraction = 0
	}
	fraction = min(max(fraction, 0), 1)
	return func(retry int, resp *http.Response) time.Duration {
		d := max(b(retry, resp), 0)
		if fraction == 0 {
			return d
		}
		// float64(d) may round up past d for the largest durations: clamp.
		cut := min(time.Duration(float64(d)*fraction*rand.Float64()), d)
		return d - cut
	}
}

// WithRetryAfter returns a BackoffFunc that waits what a response's
// Retry-After header asks (seconds of any size, or an HTTP date), at most
// limit, and falls back to b when there is no usable header. Either way the
// [Sender] does not start a retry that its context's deadline cannot cover.
func WithRetryAfter(b BackoffFunc, limit time.Duration) BackoffFunc {
	return func(retry int, resp *http.Response) time.Duration {
		if resp != nil {
			if d, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
				return min(d, limit)
			}
		}
		return b(retry, resp)
	}
}

// isDigits reports whether v is one or more ASCII digits, as Retry-After's
// delay-seconds is (no sign, no space).
func isDigits(v string) bool {
	for i := range len(v) {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
	}
	return v != ""
}

func retryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if isDigits(v) {
		// delay-seconds of any size: a wait past what a Duration holds is
		// the longest one, which the limit then caps.
		secs, err := strconv.ParseUint(v, 10, 64)
		if err != nil || secs > uint64(math.MaxInt64/time.Second) {
			return math.MaxInt64, true
		}
		return time.Duration(secs) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(at.Sub(now), 0), true
	}
	return 0, false
}
