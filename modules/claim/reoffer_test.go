package claim_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/cell"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// An offer nobody answered (every actor busy, or the message lost) is made
// again by the leader's sweep while the job is unheld and not expired; a
// leased job is not offered again, and a released one is.
func TestUnansweredJobsAreOfferedAgain(t *testing.T) {
	b := setup(t, func(c *claim.Config) { c.ReofferAfter = 200 * time.Millisecond })
	ctx := context.Background()
	b.useRace(t, b.tenant, "offers and their re-offers are the race path (assign re-grants: TestSweepRegrantsInAssignMode)")
	got := &offers{got: map[string][]wire.Offer{}}
	b.engine.SetOfferer(got)
	m := cell.New(b.db.App, b.engine.CellConfig(cell.Config{DefaultRedisURL: testenv.RedisURL(t), Log: testenv.Logger(t)}))
	b.engine.SetCells(m)
	require.NoError(t, m.Start(ctx))
	t.Cleanup(m.Stop)
	agent := uuid()
	for _, key := range []string{"LOST", "TAKEN-BY-US"} {
		require.NoError(t, b.engine.Detected(ctx, b.tenant, agent, wire.Detected{Worker: "w", Sightings: []wire.Sighting{{
			SeenAt: time.Now(), Job: wire.Job{Key: key, ExpiresAt: time.Now().Add(time.Hour)}}}}, claim.Offset{}))
	}
	require.Eventually(t, func() bool { return got.has(b.tenant, "LOST") && got.has(b.tenant, "TAKEN-BY-US") },
		5*time.Second, 10*time.Millisecond, "first offers")
	h := claim.Holder{Agent: uuid(), Worker: "actor"}
	lr := b.engine.Lease(ctx, b.tenant, h, wire.LeaseRequest{RequestID: "1", Worker: "actor", Key: "TAKEN-BY-US"})
	require.True(t, lr.Granted, lr.Reason)

	// Once the job is ReofferAfter old by the database clock, a sweep
	// offers it again (sweeping before then does nothing).
	require.Eventually(t, func() bool {
		require.NoError(t, b.engine.SweepAll(ctx))
		return got.count(b.tenant, "LOST") >= 2
	}, 10*time.Second, 20*time.Millisecond, "the unanswered job is offered again")
	require.Equal(t, 1, got.count(b.tenant, "TAKEN-BY-US"), "a held job is not")

	// NOT_SENT releases it: the next sweep offers it again.
	act := b.engine.Act(ctx, b.tenant, h, wire.ActRequest{RequestID: "2", Worker: "actor", Key: "TAKEN-BY-US", Token: lr.Token})
	require.True(t, act.OK, act.Reason)
	ack := b.engine.Outcome(ctx, b.tenant, h, wire.Outcome{RequestID: "3", Worker: "actor", Key: "TAKEN-BY-US", Token: lr.Token,
		OperationID: act.OperationID, Result: wire.ResultNotSent}, claim.Offset{})
	require.True(t, ack.OK)
	require.NoError(t, b.engine.SweepAll(ctx))
	require.Eventually(t, func() bool { return got.count(b.tenant, "TAKEN-BY-US") >= 2 }, 5*time.Second, 10*time.Millisecond)
}
