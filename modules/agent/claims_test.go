package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// The HTTP actor signs in over HTTP, takes an offer, wins the lease in
// Postgres, starts acting through the fenced statement, books with the
// job's booking key as the Idempotency-Key, and reports CONFIRMED; a second
// offer for the same load is not leased again; a look-up answers from the
// signed-in session with proof of completeness.
func TestHTTPActorBooks(t *testing.T) {
	ctx := context.Background()
	s, creds := boardAccount(t, func(c *board.Config) { c.IdempotencyKeys = true })
	p := newClaimPanel(t, s.URL(), creds, wire.WorkerSpec{Name: "h1", Kind: KindHTTPActor})
	// The board honours keys, and the tenant's setting says so.
	require.NoError(t, p.claims.SetHonoursIdempotency(ctx, audit.Entry{Actor: "admin"}, p.tenant, "sandbox", true))
	stateDir := filepath.Join(t.TempDir(), "state")
	stop, logs := runAgent(t, p, stateDir)
	p.waitConnected(t)
	p.event(t, "session_refreshed", 20*time.Second)

	loads, err := s.Publish(ctx, 2, nil)
	require.NoError(t, err)
	p.offer(t, loads[0])
	o := p.outcome(t, 20*time.Second)
	require.Equal(t, wire.ResultConfirmed, o.Result, o.Detail)
	require.Equal(t, loads[0].ID, o.Key)
	require.NotNil(t, o.SentAt)
	require.False(t, o.FromJournal)

	c, err := p.claims.Get(ctx, p.tenant, loads[0].ID)
	require.NoError(t, err)
	require.Equal(t, claim.Confirmed, c.State)
	require.Equal(t, o.OperationID, c.OperationID)
	bk := s.Bookings("acme")
	require.Len(t, bk, 1)
	require.Equal(t, loads[0].ID, bk[0].LoadID)
	var bookingKey string
	require.NoError(t, db.TenantRow(ctx, p.db.App, p.tenant, `SELECT booking_key::text FROM claim_jobs WHERE job_key = $1`, loads[0].ID).Scan(&bookingKey))
	require.Equal(t, bookingKey, bk[0].IdempotencyKey, "the job's booking key travels as the idempotency key")
	require.NotEqual(t, c.OperationID, bk[0].IdempotencyKey, "not the lease's operation id")

	// The same job offered again: Postgres refuses a second lease.
	p.offer(t, loads[0])
	p.offer(t, loads[1])
	o2 := p.outcome(t, 20*time.Second)
	require.Equal(t, loads[1].ID, o2.Key, "only the second load is acted on")
	require.Equal(t, wire.ResultConfirmed, o2.Result)
	require.EqualValues(t, 0, s.Stats().DuplicateConfirmations)
	require.EqualValues(t, 2, s.Stats().BookingRequests)

	// The reconciler's look-up goes through the signed-in session.
	require.NoError(t, p.send(wire.Lookup{RequestID: "lk-1", Keys: []string{loads[0].ID}}))
	select {
	case lr := <-p.lookups:
		require.True(t, lr.Complete, lr.Error)
		require.Len(t, lr.Bookings, 1)
		require.Equal(t, loads[0].ID, lr.Bookings[0].Key)
	case <-time.After(10 * time.Second):
		t.Fatal("no lookup result")
	}

	// A paused agent starts no new action; resumed, it acts again.
	p.command(t, wire.Pause{CommandID: "c-pause", Reason: "test"}, "c-pause")
	more, err := s.Publish(ctx, 1, nil)
	require.NoError(t, err)
	p.offer(t, more[0])
	select {
	case o := <-p.outcomes:
		t.Fatalf("a paused agent acted: %+v", o)
	case <-time.After(1500 * time.Millisecond):
	}
	_, err = p.claims.Get(ctx, p.tenant, more[0].ID)
	require.Error(t, err, "not even leased")
	p.command(t, wire.Resume{CommandID: "c-resume"}, "c-resume")
	p.offer(t, more[0])
	require.Equal(t, wire.ResultConfirmed, p.outcome(t, 20*time.Second).Result)

	// Acknowledged outcomes leave the outbox; cookies sit in the 0600 store.
	require.Eventually(t, func() bool {
		raw, _ := os.ReadFile(filepath.Join(stateDir, "agent.db"))
		return len(raw) > 0
	}, 5*time.Second, 50*time.Millisecond)
	fi, err := os.Stat(filepath.Join(stateDir, "agent.db"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	stop()
	noSecrets(t, logs, creds, stateDir)
}
