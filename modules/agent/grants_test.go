package agent

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// grant records the load and grants it to the agent's worker through the
// real claim store (the claim is ACTING), and returns the grant message the
// panel would send.
func (p *claimPanel) grant(t *testing.T, l *board.Load, worker string, within time.Duration) wire.LeaseGrant {
	t.Helper()
	now := time.Now()
	g, err := p.claims.Grant(context.Background(), claim.GrantRequest{Job: claim.QueuedJob{Tenant: p.tenant, Cell: "default",
		Job: wire.Job{Key: l.ID, PublishedAt: l.PublishedAt, ExpiresAt: l.ExpiresAt}, SeenAt: now, QueuedAt: now},
		Holder: p.holder(worker), SendWithin: within, HardTimeout: time.Duration(p.hardMS) * time.Millisecond})
	require.NoError(t, err)
	return wire.LeaseGrant{GrantID: uuid(), Worker: worker, Job: wire.Job{Key: l.ID, PublishedAt: l.PublishedAt, ExpiresAt: l.ExpiresAt},
		Token: g.Token, OperationID: g.OperationID, BookingKey: g.BookingKey, KeysHonoured: g.KeysHonoured,
		GrantedAt: g.GrantedAt, SendBy: g.SendBy, SendWithinMillis: g.SendWithin.Milliseconds(), HardTimeoutMillis: p.hardMS,
		SeenAt: now, QueuedAt: now, Cell: "default"}
}

// dispatchModes are the panel's two ways of handing a job to an actor, for
// tests of guarantees that hold in both (assign, the default of a new
// tenant, first).
var dispatchModes = []string{claim.DispatchAssign, claim.DispatchRace}

// dispatch hands the load to the worker the mode's way: a grant (assign:
// the claim is ACTING already; the actor passes its gate and books) or an
// offer (race: the actor leases, acts and books).
func (p *claimPanel) dispatch(t *testing.T, mode string, l *board.Load, worker string) {
	t.Helper()
	if mode == claim.DispatchAssign {
		require.NoError(t, p.send(p.grant(t, l, worker, 5*time.Second)))
		return
	}
	p.offer(t, l)
}

// TestHTTPActorActsOnGrants: in assign mode the panel grants a job to one
// actor (the claim is already ACTING); the actor journals, passes its gate —
// the local send-by and the panel's read-only fenced check — books with the
// job's booking key and reports. A grant past its send-by (by the agent's
// clock, or by the database's while the message claims otherwise), with a
// wrong token, or while paused is answered NOT_SENT and never reaches the
// board.
func TestHTTPActorActsOnGrants(t *testing.T) {
	ctx := context.Background()
	s, creds := boardAccount(t, func(c *board.Config) { c.IdempotencyKeys = true })
	p := newClaimPanel(t, s.URL(), creds, wire.WorkerSpec{Name: "h1", Kind: KindHTTPActor})
	require.NoError(t, p.claims.SetHonoursIdempotency(ctx, audit.Entry{Actor: "admin"}, p.tenant, "sandbox", true))
	runAgent(t, p, "")
	p.waitConnected(t)
	p.event(t, "session_refreshed", 20*time.Second)
	loads, err := s.Publish(ctx, 5, nil)
	require.NoError(t, err)

	g := p.grant(t, loads[0], "h1", 5*time.Second)
	require.NoError(t, p.send(g))
	o := p.outcome(t, 20*time.Second)
	require.Equal(t, wire.ResultConfirmed, o.Result, o.Detail)
	require.Equal(t, g.Token, o.Token)
	require.Equal(t, g.OperationID, o.OperationID)
	c, err := p.claims.Get(ctx, p.tenant, loads[0].ID)
	require.NoError(t, err)
	require.Equal(t, claim.Confirmed, c.State)
	bk := s.Bookings("acme")
	require.Len(t, bk, 1)
	require.True(t, g.KeysHonoured)
	require.Equal(t, g.BookingKey, bk[0].IdempotencyKey, "the job's booking key is the Idempotency-Key")
	require.EqualValues(t, 1, p.gates.Load(), "one gate check for the booking")
	requests := s.Stats().BookingRequests

	notSent := func(g wire.LeaseGrant, why string) {
		t.Helper()
		require.NoError(t, p.send(g))
		o := p.outcome(t, 20*time.Second)
		require.Equal(t, g.Job.Key, o.Key)
		require.Equalf(t, wire.ResultNotSent, o.Result, "%s: %s", why, o.Detail)
		require.Equalf(t, requests, s.Stats().BookingRequests, "%s: nothing reached the board", why)
	}
	// Past its send-by on the agent's clock: answered at once, no gate.
	late := p.grant(t, loads[1], "h1", 5*time.Second)
	late.SendBy = time.Now().Add(-time.Second)
	gates := p.gates.Load()
	notSent(late, "past its send-by")
	require.Equal(t, gates, p.gates.Load(), "no gate check for a grant already late")
	c, err = p.claims.Get(ctx, p.tenant, loads[1].ID)
	require.NoError(t, err)
	require.Equal(t, claim.Released, c.State, "NOT_SENT releases the grant")

	// Past its send-by by the database clock, though the message says it
	// is not: the panel's gate refuses it.
	stale := p.grant(t, loads[2], "h1", 300*time.Millisecond)
	require.Eventually(t, func() bool {
		var past bool
		err := db.TenantRow(ctx, p.db.App, p.tenant, `SELECT clock_timestamp() > lease_expires_at FROM claims WHERE target_job_key = $1`, loads[2].ID).Scan(&past)
		return err == nil && past
	}, 10*time.Second, 10*time.Millisecond, "the database clock passed the grant's send-by")
	stale.SendBy = time.Now().Add(5 * time.Second)
	notSent(stale, "past its send-by by the database clock")

	// A wrong token never passes the gate.
	wrong := p.grant(t, loads[3], "h1", 5*time.Second)
	right := wrong.Token
	wrong.Token += 1000
	notSent(wrong, "a wrong token")
	c, err = p.claims.Get(ctx, p.tenant, loads[3].ID)
	require.NoError(t, err)
	require.Equal(t, claim.Acting, c.State, "the real grant is untouched")
	require.Equal(t, right, c.Token)

	// Paused: NOT_SENT, nothing sent.
	p.command(t, wire.Pause{CommandID: "c-pause", Reason: "test"}, "c-pause")
	notSent(p.grant(t, loads[4], "h1", 5*time.Second), "paused")

	// A grant for an actor this agent does not run: NOT_SENT at once.
	require.NoError(t, p.send(wire.Resume{CommandID: "c-resume"}))
	more, err := s.Publish(ctx, 1, nil)
	require.NoError(t, err)
	notSent(p.grant(t, more[0], "nobody", 5*time.Second), "an unknown actor")
	require.EqualValues(t, 0, s.Stats().DuplicateConfirmations)
}
