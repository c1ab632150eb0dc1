package riverhook

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
)

// This file holds erasure: a user's personal data out of the job rows.

// ErrErased is returned by [Resend] and [Recover] for a delivery whose body
// was erased: there is nothing left to send.
var ErrErased = errors.New("riverhook: the delivery's body was erased")

// EraseBodies removes the body (the payload, with the user's email, name
// and phone) from the jobs of the given deliveries that have ended,
// delivered or not, and returns how many it erased. Their attempt logs stay:
// a log entry holds no part of the body, only the receiver's answer. A
// delivery still under way keeps its body, which its next attempt signs
// and sends: erase it once it has ended, or cancel it first
// (client.JobCancel). An erased delivery cannot be resent ([ErrErased]).
//
// Call it for the deliveries of a user who asked to be forgotten (the
// service knows which delivery ids carried that user), or for every
// delivery once it has ended, to keep personal data out of River's tables
// and River UI at all: see the package documentation, "Retention and
// personal data". It is one UPDATE, in tx with [EraseBodiesTx].
func EraseBodies[TTx any](ctx context.Context, client *river.Client[TTx], deliveryIDs []string) (int, error) {
	return erase(ctx, client.Driver().GetExecutor(), client.Schema(), deliveryIDs)
}

// EraseBodiesTx is [EraseBodies] in tx.
func EraseBodiesTx[TTx any](ctx context.Context, client *river.Client[TTx], tx TTx, deliveryIDs []string) (int, error) {
	return erase(ctx, client.Driver().UnwrapExecutor(tx), client.Schema(), deliveryIDs)
}

func erase(ctx context.Context, exec riverdriver.Executor, schema string, deliveryIDs []string) (int, error) {
	if len(deliveryIDs) == 0 {
		return 0, nil
	}
	sql := `WITH erased AS (UPDATE ` + jobTable(schema) + ` SET args = (args - 'payload_base64') || '{"erased": true}'::jsonb
		WHERE kind = $1 AND state IN ('completed', 'discarded', 'cancelled')
		AND args->>'delivery_id' = ANY($2::text[])
		AND args ? 'payload_base64' RETURNING 1) SELECT count(*) FROM erased`
	var n int
	if err := exec.QueryRow(ctx, sql, Kind, deliveryIDs).Scan(&n); err != nil {
		return 0, fmt.Errorf("riverhook: erasing the bodies of %d deliveries: %w", len(deliveryIDs), err)
	}
	return n, nil
}

// jobTable is River's job table in schema ("" for the search path), quoted.
func jobTable(schema string) string {
	if schema == "" {
		return "river_job"
	}
	return `"` + strings.ReplaceAll(schema, `"`, `""`) + `".river_job`
}
