package claim_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// TestDurabilityHoldInsideStatements: the durability hold, set in the
// database by any replica's check, stops the lease and act statements of
// every replica (read inside them, as the pause switch is) — even one whose
// own gate has not heard of it yet — except for a tenant that accepted
// single-node durability; lifting it lets them through again.
func TestDurabilityHoldInsideStatements(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	h := claim.Holder{Agent: uuid(), Worker: "actor-1"}
	b.job(t, b.tenant, "D-1")
	b.job(t, b.tenant, "D-2")
	l, err := b.store.Lease(ctx, claim.LeaseRequest{Tenant: b.tenant, Key: "D-1", Holder: h, For: time.Minute})
	require.NoError(t, err)

	_, err = b.db.Owner.Exec(ctx, `UPDATE fleet_switches SET durability_hold = 'no synchronous standby', durability_hold_since = now()`)
	require.NoError(t, err)
	_, err = b.store.Lease(ctx, claim.LeaseRequest{Tenant: b.tenant, Key: "D-2", Holder: h, For: time.Minute})
	require.Equal(t, claim.ReasonNotDurable, reason(t, err))
	_, err = b.store.StartActing(ctx, b.tenant, "D-1", l.Token, h, time.Minute)
	require.Equal(t, claim.ReasonNotDurable, reason(t, err), "no new action either")
	lr := b.engine.Lease(ctx, b.tenant, h, wire.LeaseRequest{RequestID: "l-D-2", Worker: h.Worker, Key: "D-2"})
	require.False(t, lr.Granted)
	require.Equal(t, "paused", lr.Reason, "agents hear a hold as a pause")

	require.NoError(t, b.store.SetSingleNodeOK(ctx, testActor, b.tenant, true))
	_, err = b.store.StartActing(ctx, b.tenant, "D-1", l.Token, h, time.Minute)
	require.NoError(t, err, "a tenant that accepted single-node durability goes on")
	require.NoError(t, b.store.SetSingleNodeOK(ctx, testActor, b.tenant, false))

	_, err = b.db.Owner.Exec(ctx, `UPDATE fleet_switches SET durability_hold = NULL, durability_hold_since = NULL`)
	require.NoError(t, err)
	_, err = b.store.Lease(ctx, claim.LeaseRequest{Tenant: b.tenant, Key: "D-2", Holder: h, For: time.Minute})
	require.NoError(t, err, "lifted: leases go through again")

	// The panel's own gate refuses before a statement is sent.
	b.store.SetDurabilityGate(func(string) (bool, bool) { return true, false })
	b.job(t, b.tenant, "D-3")
	_, err = b.store.Lease(ctx, claim.LeaseRequest{Tenant: b.tenant, Key: "D-3", Holder: h, For: time.Minute})
	require.Equal(t, claim.ReasonNotDurable, reason(t, err))
	_, err = b.store.Get(ctx, b.tenant, "D-3")
	require.Error(t, err, "nothing was written")
}
