package riverhook_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
)

// The environment of a fleet test's child process.
const (
	fleetRole   = "RIVERHOOK_FLEET_ROLE"
	fleetSchema = "RIVERHOOK_FLEET_SCHEMA"
	fleetURL    = "RIVERHOOK_FLEET_URL"
)

// fleetSender returns a Sender on 127.0.0.1 (private addresses allowed)
// sharing the marks in schema, down after downAfter refusals.
func fleetSender(t *testing.T, pool *pgxpool.Pool, schema string, downAfter int) *webhook.Sender {
	t.Helper()
	tr, err := webhook.NewTransport(&webhook.TransportOptions{AllowPrivateNetworks: true, TLSClientConfig: &tls.Config{}})
	require.NoError(t, err)
	s, err := webhook.NewSender(&webhook.SenderOptions{
		Client: &http.Client{Transport: tr},
		Retry:  &webhook.RetryPolicy{},
		Health: &webhook.HealthOptions{DownAfter: downAfter, Marks: riverhook.NewEndpointMarks(pool, schema)},
	})
	require.NoError(t, err)
	t.Cleanup(s.CloseIdleConnections)
	return s
}

// TestFleetChild is the other process of TestFleet_AMarkReachesEveryProcess:
// it runs only as that test's child.
func TestFleetChild(t *testing.T) {
	if os.Getenv(fleetRole) != "marker" {
		t.Skip("the child process of TestFleet_AMarkReachesEveryProcess")
	}
	pool, err := pgxpool.New(context.Background(), os.Getenv("TEST_DATABASE_URL"))
	require.NoError(t, err)
	defer pool.Close()
	s := fleetSender(t, pool, os.Getenv(fleetSchema), 1)
	conn := webhook.Connection{Name: "dead", URL: os.Getenv(fleetURL), Secret: secret}
	_, err = s.Send(context.Background(), conn, payload("d1"))
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.NoError(t, s.Flush(context.Background())) // the mark is written before the process exits
}

// TestFleet_AMarkReachesEveryProcess runs a worker as an OS process of its
// own that finds an endpoint refused and marks it down in PostgreSQL: a
// Sender of this process that was running stops dialling it within a
// second or so, and one made afterwards starts from the mark.
func TestFleet_AMarkReachesEveryProcess(t *testing.T) {
	t.Parallel()
	pool, schema := testDB(t)
	ctx := context.Background()
	require.NoError(t, riverhook.Migrate(ctx, pool, schema))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadURL := "https://" + ln.Addr().String() + "/hooks/T0ken"
	require.NoError(t, ln.Close()) // refused from now on
	dead := webhook.Connection{Name: "dead", URL: deadURL, Secret: secret}
	running := fleetSender(t, pool, schema, 1000) // its own refusals never take it down

	child := exec.Command(os.Args[0], "-test.run", "^TestFleetChild$", "-test.count", "1")
	child.Env = append(os.Environ(), fleetRole+"=marker", fleetSchema+"="+schema, fleetURL+"="+deadURL)
	out, err := child.CombinedOutput()
	require.NoError(t, err, "the child process: %s", out)
	marked := time.Now()

	// The running Sender follows at most a second apart: until then its
	// attempts are dialled, and refused.
	deadline := marked.Add(5 * time.Second)
	var followed time.Duration
	for time.Now().Before(deadline) {
		_, err := running.Send(ctx, dead, payload("d2"))
		if errors.Is(err, webhook.ErrEndpointDown) {
			followed = time.Since(marked)
			break
		}
		require.ErrorIs(t, err, syscall.ECONNREFUSED)
	}
	require.NotZero(t, followed, "the running Sender never followed the mark")
	t.Logf("followed the other process's mark %v after it exited", followed.Round(time.Millisecond))
	assert.Less(t, followed, 2*webhook.DefaultFollowEvery+time.Second, "within a second or so")

	started := fleetSender(t, pool, schema, 1000)
	require.NoError(t, started.Flush(ctx)) // its first read of the marks
	_, err = started.Send(ctx, dead, payload("d3"))
	assert.ErrorIs(t, err, webhook.ErrEndpointDown, "a process starting up starts from the marks")
}
