package claim_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// TestClaimActionsLandInTheAuditLog: an outcome is audited with the lease's
// and the action's facts (token, holder, operation id, times), and so is a
// lease the sweeper releases; the grants themselves are in claim_transitions.
// The pages are tested in claim/web, through the panel's real router.
func TestClaimActionsLandInTheAuditLog(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	h := claim.Holder{Agent: uuid(), Worker: "actor-7"}
	b.job(t, b.tenant, "LD-AUD")
	lr := b.engine.Lease(ctx, b.tenant, h, wire.LeaseRequest{RequestID: "1", Worker: h.Worker, Key: "LD-AUD"})
	require.True(t, lr.Granted)
	require.True(t, b.engine.Act(ctx, b.tenant, h, wire.ActRequest{RequestID: "2", Worker: h.Worker, Key: "LD-AUD", Token: lr.Token}).OK)
	sent := time.Now()
	ok := sent.Add(150 * time.Millisecond)
	require.True(t, b.engine.Outcome(ctx, b.tenant, h, wire.Outcome{RequestID: "3", Worker: h.Worker, Key: "LD-AUD", Token: lr.Token,
		Result: wire.ResultConfirmed, SentAt: &sent, ConfirmedAt: &ok}, claim.Offset{}).OK)

	log, err := b.store.AuditLog(ctx, b.tenant, "claim.outcome", 5)
	require.NoError(t, err)
	require.Len(t, log, 1)
	require.Equal(t, "agent:"+h.Agent+"/actor-7", log[0].Actor)
	require.Equal(t, "LD-AUD", log[0].Target)
	var d map[string]any
	require.NoError(t, json.Unmarshal([]byte(log[0].Detail), &d))
	require.Equal(t, "CONFIRMED", d["state"])
	require.Equal(t, "CONFIRMED", d["reported"])
	require.EqualValues(t, lr.Token, d["token"])
	require.Equal(t, lr.OperationID, d["operation_id"])
	require.NotNil(t, d["act_started_at"], "the fenced start of the action is in the record")

	// A repeated report changes nothing and adds no entry.
	require.True(t, b.engine.Outcome(ctx, b.tenant, h, wire.Outcome{RequestID: "4", Worker: h.Worker, Key: "LD-AUD", Token: lr.Token,
		Result: wire.ResultConfirmed, SentAt: &sent, ConfirmedAt: &ok}, claim.Offset{}).OK)
	log, err = b.store.AuditLog(ctx, b.tenant, "claim.outcome", 5)
	require.NoError(t, err)
	require.Len(t, log, 1)

	// A lease left unused expires; the sweeper releases it, audited.
	b.job(t, b.tenant, "LD-IDLE")
	l, err := b.store.Lease(ctx, claim.LeaseRequest{Tenant: b.tenant, Key: "LD-IDLE", Holder: h, For: 50 * time.Millisecond})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, released, err := b.store.Sweep(ctx, b.tenant)
		require.NoError(t, err)
		return released == 1
	}, 5*time.Second, 30*time.Millisecond)
	log, err = b.store.AuditLog(ctx, b.tenant, "claim.released", 5)
	require.NoError(t, err)
	require.Len(t, log, 1)
	require.Equal(t, "sweeper", log[0].Actor)
	require.Contains(t, log[0].Detail, `"token": `+jsonInt(l.Token))
}

func jsonInt(v int64) string {
	b, _ := json.Marshal(v)
	return string(b)
}
