package claim_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// Every warm actor answers an offer at once: through the engine (where the
// first request of a replica asks Postgres and the others wait for its
// answer), 72 racers for one job still yield exactly one lease and 71
// "held"; and a NOT_SENT release lets the next racer lease it at once.
func TestEngineRaceOneStatementPerJob(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	b.useRace(t, b.tenant, "72 lease requests for one job compete: the race path")
	b.job(t, b.tenant, "RACE-1")
	var wg sync.WaitGroup
	var granted atomic.Int64
	var winner claim.Holder
	var token int64
	var mu sync.Mutex
	start := make(chan struct{})
	for i := 0; i < 72; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := claim.Holder{Agent: uuid(), Worker: "actor"}
			<-start
			r := b.engine.Lease(ctx, b.tenant, h, wire.LeaseRequest{RequestID: "r", Worker: "actor", Key: "RACE-1"})
			if r.Granted {
				granted.Add(1)
				mu.Lock()
				winner, token = h, r.Token
				mu.Unlock()
			} else {
				require.Equal(t, wire.ReasonHeld, r.Reason)
			}
		}()
	}
	close(start)
	wg.Wait()
	require.EqualValues(t, 1, granted.Load())

	act := b.engine.Act(ctx, b.tenant, winner, wire.ActRequest{RequestID: "a", Worker: "actor", Key: "RACE-1", Token: token})
	require.True(t, act.OK, act.Reason)
	ack := b.engine.Outcome(ctx, b.tenant, winner, wire.Outcome{RequestID: "o", Worker: "actor", Key: "RACE-1",
		Token: token, OperationID: act.OperationID, Result: wire.ResultNotSent}, claim.Offset{})
	require.True(t, ack.OK, ack.Reason)
	other := claim.Holder{Agent: uuid(), Worker: "actor"}
	r := b.engine.Lease(ctx, b.tenant, other, wire.LeaseRequest{RequestID: "r2", Worker: "actor", Key: "RACE-1"})
	require.True(t, r.Granted, "a NOT_SENT job is leasable again at once: %s", r.Reason)
	require.Greater(t, r.Token, token)
}
