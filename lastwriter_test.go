package webhook_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/signedhook/webhook"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func userAt(id string, updated time.Time) webhook.Payload {
	p := samplePayload()
	p.User.ID, p.User.UpdatedAt = id, webhook.NewTime(updated)
	return p
}

// TestLastWriterWins_AppliesOnlyNewerVersions delivers a user's updates out
// of order, with copies and a failure: the handler sees only versions newer
// than the last it handled, and a failed one is handled on its retry.
func TestLastWriterWins_AppliesOnlyNewerVersions(t *testing.T) {
	var applied []string
	failNext := false
	on := webhook.LastWriterWins(func(_ context.Context, p webhook.Payload) error {
		if failNext {
			failNext = false
			return errors.New("database unavailable")
		}
		applied = append(applied, p.User.ID+"@"+p.User.UpdatedAt.Format("15:04"))
		return nil
	}, nil)
	ctx := context.Background()
	at := func(hhmm string) time.Time { t, _ := time.Parse("15:04", hhmm); return t }

	steps := []struct {
		p       webhook.Payload
		fail    bool
		wantErr bool
	}{
		{p: userAt("usr_a", at("10:02"))},
		{p: userAt("usr_a", at("10:01"))}, // overtaken: skipped
		{p: userAt("usr_a", at("10:02"))}, // a copy: skipped
		{p: userAt("usr_b", at("09:00"))}, // another key
		{p: userAt("usr_a", at("10:03")), fail: true, wantErr: true},
		{p: userAt("usr_a", at("10:03"))}, // its retry
		{p: userAt("usr_a", time.Time{})}, // no version: no order, handled
	}
	for i, s := range steps {
		failNext = s.fail
		err := on(ctx, s.p)
		assert.Equal(t, s.wantErr, err != nil, "step %d: %v", i, err)
	}
	assert.Equal(t, []string{"usr_a@10:02", "usr_b@09:00", "usr_a@10:03", "usr_a@00:00"}, applied)
}

// TestLastWriterWins_ReportsWhatItDid: OnOutcome hears, for every event
// that ends without an error, whether it was applied, skipped as stale (an
// older version) or skipped as a duplicate (the version handled last).
func TestLastWriterWins_ReportsWhatItDid(t *testing.T) {
	const none webhook.LastWriterOutcome = 0 // an error: nothing reported
	var got []webhook.LastWriterOutcome
	failNext := false
	on := webhook.LastWriterWins(func(context.Context, webhook.Payload) error {
		if failNext {
			failNext = false
			return errors.New("database unavailable")
		}
		return nil
	}, &webhook.LastWriterWinsOptions[webhook.Payload]{
		OnOutcome: func(_ context.Context, p webhook.Payload, o webhook.LastWriterOutcome) {
			got = append(got, o)
		},
	})
	at := func(hhmm string) time.Time { t, _ := time.Parse("15:04", hhmm); return t }

	steps := []struct {
		p    webhook.Payload
		fail bool
		want webhook.LastWriterOutcome
	}{
		{p: userAt("usr_a", at("10:02")), want: webhook.LastWriterApplied},
		{p: userAt("usr_a", at("10:01")), want: webhook.LastWriterStale},
		{p: userAt("usr_a", at("10:02")), want: webhook.LastWriterDuplicate},
		{p: userAt("usr_a", at("10:03")), fail: true, want: none},
		{p: userAt("usr_a", at("10:03")), want: webhook.LastWriterApplied},
		{p: userAt("usr_a", time.Time{}), want: webhook.LastWriterApplied}, // no version: handled
	}
	for i, s := range steps {
		got = nil
		failNext = s.fail
		err := on(context.Background(), s.p)
		assert.Equal(t, s.fail, err != nil, "step %d: %v", i, err)
		var want []webhook.LastWriterOutcome
		if s.want != none {
			want = []webhook.LastWriterOutcome{s.want}
		}
		assert.Equal(t, want, got, "step %d", i)
	}

	for o, want := range map[webhook.LastWriterOutcome]string{
		webhook.LastWriterApplied:   "applied",
		webhook.LastWriterStale:     "stale",
		webhook.LastWriterDuplicate: "duplicate",
		none:                        "LastWriterOutcome(0)",
	} {
		assert.Equal(t, want, o.String())
	}
}

// TestLastWriterWins_OneKeyAtATime races many versions of one key: the
// handler sees them one at a time, each newer than the last it saw.
func TestLastWriterWins_OneKeyAtATime(t *testing.T) {
	var mu sync.Mutex
	var seen []int64
	running := 0
	on := webhook.LastWriterWins(func(_ context.Context, p webhook.Payload) error {
		mu.Lock()
		running++
		assert.Equal(t, 1, running, "two events of one key at once")
		seen = append(seen, p.User.UpdatedAt.UnixMilli())
		mu.Unlock()
		mu.Lock()
		running--
		mu.Unlock()
		return nil
	}, nil)
	base := time.Now()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 200 {
				_ = on(context.Background(), userAt("usr_x", base.Add(time.Duration(r.IntN(1000))*time.Millisecond)))
			}
		})
	}
	wg.Wait()
	require.NotEmpty(t, seen)
	for i := 1; i < len(seen); i++ {
		require.Greater(t, seen[i], seen[i-1], "versions handled in order")
	}
}

// TestLastWriterWins_AWaitForTheKeyEndsWithItsContext: while the handler
// of a user's event hangs (a database that does not answer), the next event
// of that user waits for it; once its request is gone, it returns an error
// at once, rather than hold its goroutine for as long as the first hangs.
func TestLastWriterWins_AWaitForTheKeyEndsWithItsContext(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	on := webhook.LastWriterWins(func(ctx context.Context, p webhook.Payload) error {
		if p.User.UpdatedAt.UnixMilli()%2 == 0 {
			close(entered)
			<-release
		}
		return nil
	}, nil)
	base := time.UnixMilli(1763719200000)
	first := make(chan error, 1)
	go func() { first <- on(context.Background(), userAt("usr_x", base)) }()
	<-entered

	ctx, cancel := context.WithCancelCause(context.Background())
	second := make(chan error, 1)
	go func() { second <- on(ctx, userAt("usr_x", base.Add(time.Millisecond))) }()
	cancel(errors.New("the client went away"))
	select {
	case err := <-second:
		assert.ErrorContains(t, err, "the client went away")
	case <-time.After(10 * time.Second): // a guard: it returns at once, or never
		t.Error("the second event still waits for the first's handler")
		defer func() { <-second }()
	}
	close(release)
	assert.NoError(t, <-first)
	assert.NoError(t, on(context.Background(), userAt("usr_x", base.Add(time.Millisecond))), "the key is free again")
}

// TestLastWriterWins_AKeyFreeIsTakenWhateverTheContext: with no other
// event of its key in hand, an event waits for nothing, and is handled
// whatever its context: one whose client went away was refused as waiting
// for its key about half the time, by a select between the free key and the
// done context (review).
func TestLastWriterWins_AKeyFreeIsTakenWhateverTheContext(t *testing.T) {
	ran := 0
	on := webhook.LastWriterWins(func(context.Context, webhook.Payload) error { ran++; return nil }, nil)
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("the client went away"))
	base := time.UnixMilli(1763719200000)
	for i := range 64 { // each a chance in two to be refused, before
		require.NoError(t, on(ctx, userAt("usr_x", base.Add(time.Duration(i)*time.Millisecond))), "event %d", i)
	}
	assert.Equal(t, 64, ran)
}

type crmEvent struct {
	Contact string
	Seq     int64
}

func TestLastWriterWins_AnyTypeWithItsVersion(t *testing.T) {
	var applied []int64
	store, err := webhook.NewMemoryVersionStore(nil)
	require.NoError(t, err)
	on := webhook.LastWriterWins(func(_ context.Context, e crmEvent) error { applied = append(applied, e.Seq); return nil },
		&webhook.LastWriterWinsOptions[crmEvent]{
			Store:   store,
			Version: func(e crmEvent) (string, time.Time) { return e.Contact, time.UnixMilli(e.Seq) },
		})
	for _, seq := range []int64{3, 1, 4, 1, 5, 2, 6} {
		require.NoError(t, on(context.Background(), crmEvent{"c1", seq}))
	}
	assert.Equal(t, []int64{3, 4, 5, 6}, applied)
	assert.PanicsWithValue(t, "webhook: LastWriterWins needs LastWriterWinsOptions.Version for a webhook_test.crmEvent", func() {
		webhook.LastWriterWins(func(context.Context, crmEvent) error { return nil }, nil)
	})
}

func TestMemoryVersionStore_IsBounded(t *testing.T) {
	s, err := webhook.NewMemoryVersionStore(&webhook.MemoryVersionStoreOptions{MaxKeys: 100})
	require.NoError(t, err)
	ctx := context.Background()
	now := time.Now()
	for i := range 10_000 {
		require.NoError(t, s.Record(ctx, fmt.Sprint("usr_", i), now))
		require.LessOrEqual(t, s.Len(), 100)
	}
	last, ok, _ := s.Last(ctx, "usr_9999")
	assert.True(t, ok && last.Equal(now), "the recent keys are kept")
	require.NoError(t, s.Record(ctx, "usr_9999", now.Add(-time.Hour)))
	last, _, _ = s.Last(ctx, "usr_9999")
	assert.True(t, last.Equal(now), "a version never goes back, got %v", last)
	_, err = webhook.NewMemoryVersionStore(&webhook.MemoryVersionStoreOptions{MaxKeys: -1})
	assert.Error(t, err)
}

// TestMemoryVersionStore_HoldsAtMostMaxKeys for every small MaxKeys.
func TestMemoryVersionStore_HoldsAtMostMaxKeys(t *testing.T) {
	for _, maxKeys := range []int{1, 2, 3, 4, 5} {
		s, err := webhook.NewMemoryVersionStore(&webhook.MemoryVersionStoreOptions{MaxKeys: maxKeys})
		require.NoError(t, err)
		for i := range 20 {
			require.NoError(t, s.Record(context.Background(), fmt.Sprint("usr_", i), testNow))
			require.LessOrEqual(t, s.Len(), maxKeys, "MaxKeys %d, after %d keys", maxKeys, i+1)
		}
	}
}
