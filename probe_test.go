package webhook_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

// blockedAfter refuses connections until blocked, then fails as the
// private-network guard does (the host name now resolves to a private
// address), or hangs until the request's context is done.
type blockedAfter struct {
	blocked, hang atomic.Bool
}

func (b *blockedAfter) RoundTrip(r *http.Request) (*http.Response, error) {
	switch {
	case b.hang.Load():
		<-r.Context().Done()
		return nil, r.Context().Err()
	case b.blocked.Load():
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: webhook.ErrBlockedDestination}
	}
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
}

// A queue's probe refused by the private-network guard, or cut by the
// caller's ctx, is no wait for the endpoint: no retry follows, as decide
// says of KindBlocked and KindCanceled (a review's finding: a queue that
// follows Retry retried a blocked destination for ever).
func TestHealth_AQueuesProbeBlockedOrCanceledIsNoWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ep := &blockedAfter{}
		var ch changes
		s := healthSender(t, ep, &ch, nil)
		body, err := json.Marshal(samplePayload())
		require.NoError(t, err)
		for range 3 {
			a := s.Attempt(context.Background(), fakeConn, webhook.EventUserIdentified, body, 1)
			require.Equal(t, webhook.KindRefused, a.Kind)
		}
		ep.blocked.Store(true)
		for i := range 5 {
			time.Sleep(50 * time.Second) // a probe is due
			a := s.Attempt(context.Background(), fakeConn, webhook.EventUserIdentified, body, 1)
			require.Equal(t, webhook.KindBlocked, a.Kind)
			assert.False(t, a.Probe, "a probe that found no endpoint down is no wait for it")
			assert.False(t, a.Retry, "probe %d: a blocked destination is not retried (RetryIn %v)", i, a.RetryIn)
		}

		ep.hang.Store(true)
		time.Sleep(50 * time.Second)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Second, cancel)
		a := s.Attempt(ctx, fakeConn, webhook.EventUserIdentified, body, 1)
		require.Equal(t, webhook.KindCanceled, a.Kind)
		assert.False(t, a.Probe)
		assert.False(t, a.Retry, "the caller's cancellation is not retried (RetryIn %v)", a.RetryIn)
	})
}
