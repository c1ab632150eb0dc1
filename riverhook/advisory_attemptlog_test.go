package riverhook_test

import (
	"context"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook/riverhook"
)

// ListDeliveries serves a dashboard's GET /connections/{id}/attempts, whose
// limit often comes from the request. Its doc bounds the limit from below
// only (zero or less means 20); a large one must not panic in River's
// JobListParams.First (which allows at most 10,000).
func TestAdvisory_ListDeliveriesLargeLimitDoesNotPanic(t *testing.T) {
	t.Parallel()
	client, err := river.NewClient(riverpgxv5.New(nil), &river.Config{Logger: quietLogger()})
	require.NoError(t, err)
	assert.NotPanics(t, func() {
		riverhook.ListDeliveries(context.Background(), client, "crm", 20_000) //nolint:errcheck // no pool: only the panic matters
	})
}
