package riverhook_test

import (
	"context"
	"testing"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
)

// Args.InsertOpts' doc: a plain client.Insert of Args is unique and tagged
// too. A caller who adds a tag of its own (a tenant, a trace) with River's
// InsertOpts replaces the delivery's tags (River takes InsertOpts.Tags over
// the args'), and ListDeliveries, which finds deliveries by tag, never
// shows that delivery. River's JobListParams.Where can filter on the args
// themselves.
func TestAdvisory_ListDeliveriesShowsAPlainInsertWithTagsOfItsOwn(t *testing.T) {
	t.Parallel()
	pool, schema := testDB(t)
	client := newClient(t, pool, schema, nil, nil)
	ctx := context.Background()
	res, err := client.Insert(ctx, riverhook.Args{ConnectionID: "crm", DeliveryID: "d1", Event: webhook.EventUserIdentified, Body: []byte(`{}`)},
		&river.InsertOpts{Tags: []string{"tenant-42"}})
	require.NoError(t, err)
	got, err := riverhook.ListDeliveries(ctx, client, "crm", 0)
	require.NoError(t, err)
	require.Len(t, got, 1, "the delivery to crm")
	assert.Equal(t, res.Job.ID, got[0].JobID)
}
