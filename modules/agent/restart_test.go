package agent

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/agent/store"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// An agent killed mid-action leaves the operation in its journal, in
// flight (journaled before acting). On its next start it reports that
// action to the panel as UNKNOWN, marked FromJournal, and keeps the report
// in its outbox until the panel acknowledges it — across another restart.
// In both dispatch modes (the action began from a grant, or from a lease
// and the fenced act).
func TestRestartReportsJournaledActionUnknown(t *testing.T) {
	for _, mode := range dispatchModes {
		t.Run(mode, func(t *testing.T) { restartReportsUnknown(t, mode) })
	}
}

func restartReportsUnknown(t *testing.T, mode string) {
	ctx := context.Background()
	s, creds := boardAccount(t)
	p := newClaimPanel(t, s.URL(), creds)
	p.noAck.Store(true)
	loads, err := s.Publish(ctx, 1, nil)
	require.NoError(t, err)
	key := loads[0].ID

	// What the killed agent had done: leased and started acting (or was
	// granted the job, ACTING at once), journaled.
	var l struct {
		Token       int64
		OperationID string
	}
	if mode == claim.DispatchAssign {
		g := p.grant(t, loads[0], "h1", 10*time.Second)
		l.Token, l.OperationID = g.Token, g.OperationID
	} else {
		p.record(ctx, key)
		lease, err := p.claims.Lease(ctx, claim.LeaseRequest{Tenant: p.tenant, Key: key, Holder: p.holder("h1"), For: 10 * time.Second})
		require.NoError(t, err)
		_, err = p.claims.StartActing(ctx, p.tenant, key, lease.Token, p.holder("h1"), 15*time.Second)
		require.NoError(t, err)
		l.Token, l.OperationID = lease.Token, lease.OperationID
	}
	stateDir := filepath.Join(t.TempDir(), "state")
	st, err := store.Open(ctx, stateDir)
	require.NoError(t, err)
	require.NoError(t, st.BeginAction(ctx, l.OperationID, key, "h1", l.Token, time.Now()))
	require.NoError(t, st.Close())

	stop, _ := runAgent(t, p, stateDir)
	o := p.outcome(t, 15*time.Second)
	// No worker is signed in: a look-up answers, but never as complete.
	require.NoError(t, p.send(wire.Lookup{RequestID: "lk-1"}))
	select {
	case lr := <-p.lookups:
		require.False(t, lr.Complete)
		require.NotEmpty(t, lr.Error)
	case <-time.After(10 * time.Second):
		t.Fatal("no lookup result")
	}
	require.Equal(t, wire.ResultUnknown, o.Result)
	require.True(t, o.FromJournal)
	require.Equal(t, key, o.Key)
	require.Equal(t, l.Token, o.Token)
	require.Equal(t, "h1", o.Worker)
	require.Equal(t, l.OperationID, o.OperationID)
	stop()

	st, err = store.Open(ctx, stateDir)
	require.NoError(t, err)
	inflight, err := st.InFlightActions(ctx)
	require.NoError(t, err)
	require.Empty(t, inflight, "the action is now journaled as unknown")
	queued, err := st.Outbox(ctx)
	require.NoError(t, err)
	require.Len(t, queued, 1, "unacknowledged: kept")
	require.NoError(t, st.Close())

	// Next start: the report is sent again and, acknowledged, leaves.
	p.noAck.Store(false)
	stop, _ = runAgent(t, p, stateDir)
	o2 := p.outcome(t, 15*time.Second)
	require.Equal(t, o.RequestID, o2.RequestID, "the same report, not a new one")
	require.True(t, o2.FromJournal)
	require.Eventually(t, func() bool {
		st, err := store.Open(ctx, stateDir)
		if err != nil {
			return false
		}
		defer st.Close()
		q, err := st.Outbox(ctx)
		return err == nil && len(q) == 0
	}, 10*time.Second, 100*time.Millisecond, "an acknowledged report leaves the outbox")
	stop()
}
