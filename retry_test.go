package webhook_test

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

// roundTripFunc is an in-memory transport: inside a synctest bubble, its
// waits and the client's timeouts run on the fake clock.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func answer(status int, header ...string) *http.Response {
	h := http.Header{}
	for i := 0; i+1 < len(header); i += 2 {
		h.Set(header[i], header[i+1])
	}
	return &http.Response{StatusCode: status, Status: http.StatusText(status), Header: h,
		Body: io.NopCloser(strings.NewReader("{}"))}
}

// fakeSender returns a Sender with the default policy and timeout whose
// transport is rt.
func fakeSender(t *testing.T, rt roundTripFunc, retry *webhook.RetryPolicy) *webhook.Sender {
	s, err := webhook.NewSender(&webhook.SenderOptions{Client: &http.Client{Transport: rt}, Retry: retry})
	require.NoError(t, err)
	return s
}

var fakeConn = webhook.Connection{Name: "crm", URL: "https://crm.example.com/hooks", Secret: testSecret}

// ignoreVolatile leaves errors and response bodies to other assertions.
var ignoreVolatile = cmpopts.IgnoreFields(webhook.Attempt{}, "Err", "ResponseBody")

func TestSend_DefaultScheduleOnFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		s := fakeSender(t, func(*http.Request) (*http.Response, error) { return answer(500), nil }, nil)
		res, err := s.Send(context.Background(), fakeConn, samplePayload())
		require.Error(t, err)
		want := []webhook.Attempt{
			{N: 1, Start: t0, Timestamp: t0.UnixMilli(), StatusCode: 500, Kind: webhook.KindStatus, Retry: true, RetryIn: time.Second},
			{N: 2, Start: t0.Add(1 * time.Second), Timestamp: t0.Add(1 * time.Second).UnixMilli(), StatusCode: 500, Kind: webhook.KindStatus, Retry: true, RetryIn: 2 * time.Second},
			{N: 3, Start: t0.Add(3 * time.Second), Timestamp: t0.Add(3 * time.Second).UnixMilli(), StatusCode: 500, Kind: webhook.KindStatus, Retry: true, RetryIn: 4 * time.Second},
			{N: 4, Start: t0.Add(7 * time.Second), Timestamp: t0.Add(7 * time.Second).UnixMilli(), StatusCode: 500, Kind: webhook.KindStatus},
		}
		if diff := cmp.Diff(want, res.Attempts, ignoreVolatile); diff != "" {
			t.Errorf("attempt log mismatch (-want +got):\n%s", diff)
		}
		assert.Equal(t, 7*time.Second, time.Since(t0), "total time on the fake clock")
	})
}

func TestSend_DefaultTimeoutOnFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		hang := func(r *http.Request) (*http.Response, error) {
			<-r.Context().Done() // a receiver that never answers
			return nil, r.Context().Err()
		}
		s := fakeSender(t, hang, nil)
		res, err := s.Send(context.Background(), fakeConn, samplePayload())
		require.Error(t, err)
		var starts []time.Duration
		for _, a := range res.Attempts {
			assert.Equal(t, webhook.KindTimeout, a.Kind, "attempt %d: %v", a.N, a.Err)
			assert.Equal(t, webhook.DefaultAttemptTimeout, a.Duration, "attempt %d", a.N)
			starts = append(starts, a.Start.Sub(t0))
		}
		assert.Equal(t, []time.Duration{0, 31 * time.Second, 63 * time.Second, 97 * time.Second}, starts)
		assert.Equal(t, 127*time.Second, time.Since(t0))
	})
}

func TestSend_CancelDuringWaitReturnsPromptly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		time.AfterFunc(2500*time.Millisecond, cancel) // during the 2 s wait after attempt 2
		s := fakeSender(t, func(*http.Request) (*http.Response, error) { return answer(503), nil }, nil)
		res, err := s.Send(ctx, fakeConn, samplePayload())
		assert.Equal(t, 2500*time.Millisecond, time.Since(t0), "returned as soon as the context was canceled")
		require.ErrorIs(t, err, context.Canceled)
		var de *webhook.DeliveryError
		require.ErrorAs(t, err, &de)
		assert.Len(t, de.Attempts, 2, "the attempts made so far")
		assert.Equal(t, res.Attempts, de.Attempts)
	})
}

func TestSend_CancelDuringAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		time.AfterFunc(time.Second, cancel)
		s := fakeSender(t, func(r *http.Request) (*http.Response, error) {
			<-r.Context().Done()
			return nil, r.Context().Err()
		}, nil)
		res, err := s.Send(ctx, fakeConn, samplePayload())
		require.ErrorIs(t, err, context.Canceled)
		require.Len(t, res.Attempts, 1)
		assert.Equal(t, webhook.KindCanceled, res.Attempts[0].Kind)
		assert.False(t, res.Attempts[0].Retry)
	})
}

func TestSend_NoRetryPastTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
		defer cancel()
		s := fakeSender(t, func(*http.Request) (*http.Response, error) { return answer(500), nil }, nil)
		res, err := s.Send(ctx, fakeConn, samplePayload())
		require.Error(t, err)
		// Attempt 1 at 0 s, wait 1 s, attempt 2 at 1 s; a 2 s wait would end at
		// 3 s, past the deadline, so the delivery stops at once.
		assert.Equal(t, []bool{true, false}, retries(res.Attempts))
		assert.Equal(t, time.Second, time.Since(t0))
	})
}

// TestSend_DeadlineUsesTheProcessClock pins that an injected clock, which
// only stamps attempts, does not decide whether the deadline covers a wait.
func TestSend_DeadlineUsesTheProcessClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		skewed := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC) // synctest starts at 2000-01-01
		s, err := webhook.NewSender(&webhook.SenderOptions{
			Client: &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) { return answer(500), nil })},
			Now:    func() time.Time { return skewed }, // a year ahead of the deadline's clock
		})
		require.NoError(t, err)
		res, err := s.Send(ctx, fakeConn, samplePayload())
		require.Error(t, err)
		assert.Len(t, res.Attempts, 4, "every retry fits in the hour")
		// A frozen clock: each attempt's timestamp passes the one before, so
		// that no retry repeats a signature.
		assert.Equal(t, skewed.UnixMilli()+3, res.Attempts[3].Timestamp, "the injected clock stamps the attempts")
	})
}

func TestWithRetryAfter(t *testing.T) {
	tests := []struct {
		name       string
		retryAfter string
		wantWait   time.Duration
	}{
		{"seconds", "3", 3 * time.Second},
		{"capped", "120", 10 * time.Second},
		{"2^32 seconds capped", "4294967296", 10 * time.Second},
		{"past time.Duration capped", "9223372037", 10 * time.Second},
		{"past uint64 capped", "99999999999999999999999999", 10 * time.Second},
		{"a sign is not a number", "+5", time.Second},
		{"zero", "0", 0},
		{"HTTP date", "Sat, 01 Jan 2000 00:00:05 GMT", 5 * time.Second}, // synctest starts at 2000-01-01 00:00 UTC
		{"garbage falls back", "soon", time.Second},
		{"absent falls back", "", time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				policy := &webhook.RetryPolicy{
					MaxRetries: 1,
					Backoff:    webhook.WithRetryAfter(webhook.ExponentialBackoff(time.Second, time.Minute), 10*time.Second),
				}
				calls := 0
				s := fakeSender(t, func(*http.Request) (*http.Response, error) {
					calls++
					if calls == 1 {
						return answer(http.StatusTooManyRequests, "Retry-After", tc.retryAfter), nil
					}
					return answer(200), nil
				}, policy)
				t0 := time.Now()
				res, err := s.Send(context.Background(), fakeConn, samplePayload())
				require.NoError(t, err)
				assert.Equal(t, tc.wantWait, res.Attempts[0].RetryIn)
				assert.Equal(t, tc.wantWait, time.Since(t0))
			})
		})
	}
}

func TestSend_RetryAfterNeverPastTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		policy := &webhook.RetryPolicy{MaxRetries: 3, Backoff: webhook.WithRetryAfter(webhook.ExponentialBackoff(time.Second, time.Minute), time.Hour)}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s := fakeSender(t, func(*http.Request) (*http.Response, error) {
			return answer(http.StatusServiceUnavailable, "Retry-After", "600"), nil
		}, policy)
		t0 := time.Now()
		res, err := s.Send(ctx, fakeConn, samplePayload())
		require.Error(t, err)
		assert.Len(t, res.Attempts, 1)
		assert.Zero(t, time.Since(t0), "gave up at once instead of waiting past the deadline")
	})
}

func TestRetryPolicy_ShouldRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		policy := webhook.DefaultRetryPolicy()
		policy.ShouldRetry = func(resp *http.Response, err error) bool {
			return resp == nil || resp.StatusCode >= 500 // a 4xx is final
		}
		statuses := []int{503, 400}
		calls := 0
		s := fakeSender(t, func(*http.Request) (*http.Response, error) {
			calls++
			return answer(statuses[calls-1]), nil
		}, policy)
		res, err := s.Send(context.Background(), fakeConn, samplePayload())
		require.Error(t, err)
		assert.Equal(t, []bool{true, false}, retries(res.Attempts))
	})
}

func TestRetryPolicy_ZeroRetries(t *testing.T) {
	calls := 0
	s := fakeSender(t, func(*http.Request) (*http.Response, error) { calls++; return answer(500), nil }, &webhook.RetryPolicy{})
	_, err := s.Send(context.Background(), fakeConn, samplePayload())
	require.Error(t, err)
	assert.Equal(t, 1, calls)
}

func TestExponentialBackoff(t *testing.T) {
	b := webhook.ExponentialBackoff(time.Second, 10*time.Second)
	var got []time.Duration
	for retry := 1; retry <= 6; retry++ {
		got = append(got, b(retry, nil))
	}
	assert.Equal(t, []time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}, got)
	assert.Equal(t, 10*time.Second, b(1000, nil), "no overflow for large retry numbers")
}

func TestWithJitter(t *testing.T) {
	b := webhook.WithJitter(webhook.ExponentialBackoff(time.Second, time.Minute), 0.5)
	seen := map[time.Duration]bool{}
	for range 200 {
		d := b(3, nil) // 4 s before jitter
		require.GreaterOrEqual(t, d, 2*time.Second)
		require.LessOrEqual(t, d, 4*time.Second)
		seen[d] = true
	}
	assert.Greater(t, len(seen), 1, "jitter must vary the wait")
	assert.Equal(t, 4*time.Second, webhook.WithJitter(webhook.ExponentialBackoff(time.Second, time.Minute), 0)(3, nil))
}

func TestSend_ErrorsMatchWithErrorsAs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := fakeSender(t, func(*http.Request) (*http.Response, error) { return nil, errors.New("boom") }, &webhook.RetryPolicy{})
		_, err := s.Send(context.Background(), fakeConn, samplePayload())
		var de *webhook.DeliveryError
		require.ErrorAs(t, err, &de)
		assert.Equal(t, webhook.KindOther, de.Attempts[0].Kind)
		assert.Contains(t, err.Error(), "boom")
	})
}

func TestExponentialBackoff_SaturatesInsteadOfOverflowing(t *testing.T) {
	b := webhook.ExponentialBackoff(time.Second, math.MaxInt64)
	prev := time.Duration(0)
	for retry := 1; retry <= 200; retry++ {
		d := b(retry, nil)
		require.GreaterOrEqual(t, d, prev, "retry %d: got %v after %v, want a wait that never shrinks", retry, d, prev)
		prev = d
	}
	assert.Equal(t, time.Duration(math.MaxInt64), prev)
	assert.Equal(t, time.Duration(0), webhook.ExponentialBackoff(-time.Second, time.Minute)(3, nil), "a negative base waits 0")
	assert.Equal(t, time.Duration(0), webhook.ExponentialBackoff(time.Second, -time.Minute)(3, nil), "a negative limit waits 0")
}

func TestWithJitter_OddFractions(t *testing.T) {
	base := webhook.ExponentialBackoff(time.Second, math.MaxInt64)
	for _, fraction := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -1, 2} {
		b := webhook.WithJitter(base, fraction)
		for _, retry := range []int{1, 3, 40, 100} {
			d := b(retry, nil)
			want := base(retry, nil)
			assert.GreaterOrEqual(t, d, time.Duration(0), "fraction %v retry %d", fraction, retry)
			assert.LessOrEqual(t, d, want, "fraction %v retry %d", fraction, retry)
			if math.IsNaN(fraction) || fraction <= 0 {
				assert.Equal(t, want, d, "fraction %v is 0: no jitter", fraction)
			}
		}
	}
}

// A 410 Gone says the endpoint is gone for good (Standard Webhooks): it is
// not retried, whatever the policy, and its error matches ErrEndpointGone.
func TestSend_GoneIsNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := fakeSender(t, func(*http.Request) (*http.Response, error) { return answer(http.StatusGone), nil }, webhook.DefaultRetryPolicy())
		res, err := s.Send(context.Background(), fakeConn, samplePayload())
		require.ErrorIs(t, err, webhook.ErrEndpointGone)
		require.Len(t, res.Attempts, 1, "not retried")
		assert.False(t, res.Attempts[0].Retry)
		assert.Contains(t, res.Attempts[0].Err.Error(), "webhook: receiver answered")
		a := s.Attempt(context.Background(), fakeConn, webhook.EventUserIdentified, []byte(`{}`), 1)
		assert.False(t, a.Retry, "a queue does not retry it either")
	})
}
