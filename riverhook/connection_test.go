package riverhook_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
	"github.com/signedhook/webhook/webhooktest"
)

func TestWorker_SendTestMakesTheSenderAttemptToTheResolvedConnection(t *testing.T) {
	t.Parallel()
	srv := webhooktest.NewServer(secret, nil)
	t.Cleanup(srv.Close)
	srv.Script(webhooktest.Status(503))
	w := newTestWorker(t, srv, nil, nil)
	ctx := context.Background()

	res, err := w.SendTest(ctx, "crm")
	var de *webhook.DeliveryError
	require.ErrorAs(t, err, &de, "a failed test is the Sender's failure")
	require.Len(t, res.Attempts, 1, "a test is never retried")
	assert.Equal(t, 503, res.Attempts[0].StatusCode)
	assert.Contains(t, res.Attempts[0].Diagnosis(), "503")

	res, err = w.SendTest(ctx, "crm")
	require.NoError(t, err)
	require.Len(t, res.Attempts, 1)
	assert.True(t, res.Attempts[0].OK())
	got := srv.Deliveries()
	require.Len(t, got, 2)
	require.NoError(t, got[1].Err, "signed as a delivery is")
	p, err := webhook.ParsePayload(got[1].Body)
	require.NoError(t, err)
	assert.True(t, p.IsSendTest())
}

// TestWorker_SendTestBytesSendsTheChosenEvent: a dashboard's Send Test of
// an event of the service's own, with the body it chose, byte for byte,
// through the Worker's Resolver and Sender, whatever the connection
// subscribes to; an event name or body that cannot be sent sends nothing.
func TestWorker_SendTestBytesSendsTheChosenEvent(t *testing.T) {
	t.Parallel()
	srv := webhooktest.NewServer(secret, nil)
	t.Cleanup(srv.Close)
	c := srv.Connection()
	c.Events = []string{webhook.EventUserIdentified}
	w := newWorker(t, srv.Sender(nil), newResolver(map[string]webhook.Connection{"crm": c}).resolve, nil)
	ctx := context.Background()

	body := []byte(`{"event":"deal.closed","deal":{"id":"deal_test","amount":1}}`)
	res, err := w.SendTestBytes(ctx, "crm", "deal.closed", body)
	require.NoError(t, err)
	require.Len(t, res.Attempts, 1)
	got := srv.Deliveries()
	require.Len(t, got, 1)
	require.NoError(t, got[0].Err, "signed as a delivery is")
	assert.Equal(t, "deal.closed", got[0].Header.Get(webhook.HeaderEvent))
	assert.Equal(t, body, got[0].Body)

	_, err = w.SendTestBytes(ctx, "gone", "deal.closed", body)
	require.Error(t, err)
	_, err = w.SendTestBytes(ctx, "crm", "deal.closed\n", body)
	require.ErrorIs(t, err, webhook.ErrInvalidPayload)
	_, err = w.SendTestBytes(ctx, "crm", "deal.closed", []byte(`{"deal":`))
	require.ErrorIs(t, err, webhook.ErrInvalidPayload)
	assert.Len(t, srv.Deliveries(), 1, "nothing more was sent")
}

func TestWorker_SendTestNamesAConnectionThatDoesNotResolveByIDAlone(t *testing.T) {
	t.Parallel()
	srv := webhooktest.NewServer(secret, nil)
	t.Cleanup(srv.Close)
	leak := errors.New("select failed for https://crm.example/hook/s3cr3t")
	w := newWorker(t, srv.Sender(nil), func(_ context.Context, id string) (webhook.Connection, error) {
		if id == "gone" {
			return webhook.Connection{}, riverhook.ErrConnectionGone
		}
		return webhook.Connection{}, leak
	}, &riverhook.WorkerOptions{Logger: quietLogger()})
	ctx := context.Background()

	_, err := w.SendTest(ctx, "gone")
	require.ErrorIs(t, err, riverhook.ErrConnectionGone)
	_, err = w.SendTest(ctx, "broken")
	require.ErrorIs(t, err, leak, "wrapped, for errors.Is")
	assert.NotContains(t, err.Error(), "s3cr3t")
	assert.Contains(t, err.Error(), `"broken"`)
	_, _, _, err = w.EndpointHealth(ctx, "broken")
	require.ErrorIs(t, err, leak)
	assert.Empty(t, srv.Deliveries())
}

func TestWorker_EndpointHealthReportsTheConnectionsOriginAndURLOnly(t *testing.T) {
	t.Parallel()
	srv := webhooktest.NewServer(secret, nil)
	t.Cleanup(srv.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := srv.Connection()
	dead.URL = "https://" + ln.Addr().String() + "/hooks/s3cr3t-path"
	require.NoError(t, ln.Close()) // refused from now on
	sender := srv.Sender(&webhook.SenderOptions{Health: &webhook.HealthOptions{DownAfter: 1}})
	w := newWorker(t, sender, newResolver(map[string]webhook.Connection{"crm": srv.Connection(), "dead": dead}).resolve, nil)
	ctx := context.Background()

	a := sender.Attempt(ctx, dead, webhook.EventUserIdentified, []byte(`{}`), 1)
	require.Equal(t, webhook.KindRefused, a.Kind)

	endpoint, _, failing, err := w.EndpointHealth(ctx, "dead")
	require.NoError(t, err)
	assert.Equal(t, "https://"+ln.Addr().String(), endpoint)
	require.Len(t, failing, 1)
	assert.True(t, failing[0].Down)
	assert.Equal(t, endpoint, failing[0].Endpoint)
	assert.False(t, strings.Contains(failing[0].String(), "s3cr3t"))

	endpoint, _, failing, err = w.EndpointHealth(ctx, "crm")
	require.NoError(t, err)
	assert.Equal(t, srv.Connection().Endpoint(), endpoint)
	assert.Empty(t, failing, "another endpoint's failures are not this one's")
}

// TestWorker_EventsAreTheResolvedConnectionsSubscriptions: what a
// dashboard offers to test is what the Resolver says the connection
// subscribes to, none meaning every event; a connection that does not
// resolve is named by id alone.
func TestWorker_EventsAreTheResolvedConnectionsSubscriptions(t *testing.T) {
	t.Parallel()
	srv := webhooktest.NewServer(secret, nil)
	t.Cleanup(srv.Close)
	billing := srv.Connection()
	billing.Events = []string{"invoice.paid"}
	w := newWorker(t, srv.Sender(nil), newResolver(map[string]webhook.Connection{"crm": srv.Connection(), "billing": billing}).resolve,
		&riverhook.WorkerOptions{Logger: quietLogger()})
	ctx := context.Background()

	events, err := w.Events(ctx, "billing")
	require.NoError(t, err)
	assert.Equal(t, []string{"invoice.paid"}, events)
	events, err = w.Events(ctx, "crm")
	require.NoError(t, err)
	assert.Empty(t, events, "every event")
	_, err = w.Events(ctx, "gone")
	require.ErrorIs(t, err, riverhook.ErrConnectionGone)
	assert.Empty(t, srv.Deliveries(), "nothing is sent")
}
