package registry_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/factory"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/platform/registry"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// TestReviewGateHoldsLeasesInsideTheStatements: an account moved to a
// real target's spec gets no lease, no grant and starts no action (read
// inside the claim statements, as the pause switch is) until an admin
// records the review; withdrawing it holds them again; the shipped
// sandbox's text needs none.
func TestReviewGateHoldsLeasesInsideTheStatements(t *testing.T) {
	ctx := context.Background()
	d := testenv.DB(t)
	tn := factory.Tenant(t, d, "acme", "Acme")
	fs := factory.Store(t, d)
	acct := factory.Account(t, fs, tn, fleet.AccountInput{Key: "acct-1"})
	agentID, _ := factory.Agent(t, fs, tn, acct, "agent-1")
	rc, err := river.NewClient(riverpgxv5.New(d.App), &river.Config{})
	require.NoError(t, err)
	cs := claim.NewStore(d.App, rc)
	eng, err := claim.NewEngine(cs, claim.Config{Log: testenv.Logger(t)})
	require.NoError(t, err)
	by := audit.Entry{Actor: "admin@fleet.test"}
	_, err = eng.PutFilter(ctx, by, tn, claim.Filter{Name: "everything", Enabled: true})
	require.NoError(t, err)
	st := registry.New(d.App)
	job := func(key string) claim.QueuedJob {
		now := time.Now()
		q := claim.QueuedJob{Tenant: tn, Cell: "default", SeenAt: now, QueuedAt: now,
			Job: wire.Job{Key: key, PublishedAt: now.Add(-time.Second), ExpiresAt: now.Add(10 * time.Minute), RateCents: 100000}}
		_, err := cs.RecordJob(ctx, q)
		require.NoError(t, err)
		return q
	}
	h := claim.Holder{Agent: agentID, Worker: "actor-1"}
	lease := func(key string) (claim.Lease, error) {
		return cs.Lease(ctx, claim.LeaseRequest{Tenant: tn, Key: key, Holder: h, For: time.Minute})
	}
	refusedFor := func(err error) string {
		t.Helper()
		r, ok := err.(*claim.Refusal)
		require.Truef(t, ok, "want a refusal, got %v", err)
		return r.Reason
	}

	// On the built-in sandbox: leases as before.
	job("G-1")
	l1, err := lease("G-1")
	require.NoError(t, err)

	real, _, err := st.Apply(ctx, tn, by, "acme.yaml", []byte(realSource(t)))
	require.NoError(t, err)
	require.NoError(t, st.SetAccount(ctx, tn, by, acct, real.PlatformID, real.Version))

	job("G-2")
	_, err = lease("G-2")
	require.Equal(t, claim.ReasonPlatformReview, refusedFor(err))
	_, err = cs.StartActing(ctx, tn, "G-1", l1.Token, h, time.Minute)
	require.Equal(t, claim.ReasonPlatformReview, refusedFor(err), "a lease taken before the move starts no action either")
	_, err = cs.Grant(ctx, claim.GrantRequest{Job: job("G-3"), Holder: h, SendWithin: time.Second, HardTimeout: time.Second})
	require.Equal(t, claim.ReasonPlatformReview, refusedFor(err), "no assign-mode grant")
	res, err := cs.GrantBatch(ctx, tn, []claim.GrantRequest{{Job: job("G-4"), Holder: h, SendWithin: time.Second, HardTimeout: time.Second}})
	require.NoError(t, err)
	require.Equal(t, claim.ReasonPlatformReview, refusedFor(res[0].Err), "nor in a batch")
	lr := eng.Lease(ctx, tn, h, wire.LeaseRequest{RequestID: "l-G-2", Worker: h.Worker, Key: "G-2"})
	require.False(t, lr.Granted)
	require.Equal(t, wire.ReasonPaused, lr.Reason, "agents hear the gate as a pause")

	_, err = st.RecordReview(ctx, tn, by, real.PlatformID, registry.ReviewInput{Reference: "Written permission, Acme Board, 2026-11-30"})
	require.NoError(t, err)
	_, err = lease("G-2")
	require.NoError(t, err, "the review lifts the gate at the next statement")
	_, err = cs.StartActing(ctx, tn, "G-1", l1.Token, h, time.Minute)
	require.NoError(t, err)

	require.NoError(t, st.WithdrawReview(ctx, tn, by, real.PlatformID))
	_, err = lease("G-3")
	require.Equal(t, claim.ReasonPlatformReview, refusedFor(err), "withdrawn: held again")

	// The shipped sandbox's own text, stored for the tenant, needs none.
	sb, _, err := st.Apply(ctx, tn, by, "sandbox.yaml", []byte(sandboxSource(t)))
	require.NoError(t, err)
	require.NoError(t, st.SetAccount(ctx, tn, by, acct, sb.PlatformID, sb.Version))
	_, err = lease("G-3")
	require.NoError(t, err)
}
