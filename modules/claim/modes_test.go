package claim_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// Dispatch modes in the tests (docs/CLAIMS.md, "Dispatch modes"). A new
// tenant dispatches in assign mode, so every test runs in it unless it says
// otherwise. Tests of the race path itself — an offer to every actor, lease
// requests competing — set race explicitly (useRace). Tests of guarantees
// that hold in both modes run in each where it is cheap (bothModes).

// bothModes lists the modes a guarantee is checked in, the default first.
var bothModes = []string{claim.DispatchAssign, claim.DispatchRace}

// useRace puts the tenant in race mode; why says what the test needs of it.
func (b *bundle) useRace(t *testing.T, tenant, why string) {
	t.Helper()
	require.NotEmpty(t, why)
	require.NoError(t, b.engine.SetDispatchMode(context.Background(), testActor, tenant, claim.DispatchRace))
}

// dispatch is what one replica's dispatcher hands on, in either mode:
// offers (race) and grants to warm actors (assign).
type dispatch struct {
	b      *bundle
	mode   string
	offers *offers
	ra     *replicaActors
}

// dispatchIn puts the tenants in mode and attaches to e (whose cells the
// caller attaches and starts) an offer sink and, in assign mode, warm actors
// that every tenant has, published by e.RunWarm (started here; the caller
// waits a publication period, WarmEvery, before the first sighting).
func (b *bundle) dispatchIn(t *testing.T, e *claim.Engine, mode string, tenants ...string) *dispatch {
	t.Helper()
	ctx := context.Background()
	d := &dispatch{b: b, mode: mode, offers: &offers{got: map[string][]wire.Offer{}}}
	for _, tn := range tenants {
		require.NoError(t, e.SetDispatchMode(ctx, testActor, tn, mode))
	}
	e.SetOfferer(d.offers)
	if mode == claim.DispatchAssign {
		d.ra = &replicaActors{tenants: tenants, actors: actorsN("warm", 3), gone: map[string]bool{}}
		e.SetAssign(d.ra, d.ra)
		wctx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		go e.RunWarm(wctx)
	}
	return d
}

// reached reports whether the job reached the actors the mode's way: in
// race mode offered, in assign mode granted (an offer would be the
// fallback for a tenant with no warm actor, which these tests do not have).
func (d *dispatch) reached(tenant, key string) bool {
	if d.mode == claim.DispatchAssign {
		_, ok := d.ra.grantOf(tenant, key)
		return ok
	}
	return d.offers.has(tenant, key)
}

// offered reports whether the job was offered (either mode).
func (d *dispatch) offered(tenant, key string) bool { return d.offers.has(tenant, key) }

// claimed takes the job the mode's way and reports whether it is held: in
// race mode a lease request granted; in assign mode the delivered grant's
// claim is ACTING with its token.
func (d *dispatch) claimed(t *testing.T, tenant, key string) bool {
	t.Helper()
	ctx := context.Background()
	if d.mode == claim.DispatchAssign {
		g, ok := d.ra.grantOf(tenant, key)
		if !ok {
			return false
		}
		c, err := d.b.store.Get(ctx, tenant, key)
		require.NoError(t, err)
		return c.State == claim.Acting && c.Token == g.Token && c.Holder.Worker == g.Worker
	}
	h := claim.Holder{Agent: uuid(), Worker: "actor-1"}
	return d.b.engine.Lease(ctx, tenant, h, wire.LeaseRequest{RequestID: "r", Worker: h.Worker, Key: key}).Granted
}

// TestSweepRegrantsInAssignMode: in assign mode the leader's sweep grants
// (never offers) a queued job nobody holds — one recorded while no actor
// was warm, so it was offered and nobody answered — to a warm actor, timed
// from its own start; a granted job is not granted again.
func TestSweepRegrantsInAssignMode(t *testing.T) {
	b := setup(t, func(c *claim.Config) { c.ReofferAfter = 200 * time.Millisecond })
	ctx := context.Background()
	mode, err := b.store.DispatchMode(ctx, b.tenant)
	require.NoError(t, err)
	require.Equal(t, claim.DispatchAssign, mode, "a new tenant dispatches in assign mode")
	b.job(t, b.tenant, "UNANSWERED")
	ra := assignReplica(t, b, "replica-1", b.engine, actorsN("warm", 2))
	waitWarm(t, b.engine, b.tenant, 1)

	// Once the job is ReofferAfter old by the database clock, a sweep
	// grants it (sweeping before then does nothing; a granted job is
	// ACTING, which no later sweep takes).
	require.Eventually(t, func() bool {
		require.NoError(t, b.engine.SweepAll(ctx))
		c, err := b.store.Get(ctx, b.tenant, "UNANSWERED")
		return err == nil && c.State == claim.Acting
	}, 10*time.Second, 20*time.Millisecond, "the sweep grants the unanswered job")
	require.Eventually(t, func() bool { _, ok := ra.grantOf(b.tenant, "UNANSWERED"); return ok }, 5*time.Second,
		10*time.Millisecond, "the grant reaches the warm actor")
	g, _ := ra.grantOf(b.tenant, "UNANSWERED")
	c, err := b.store.Get(ctx, b.tenant, "UNANSWERED")
	require.NoError(t, err)
	require.Equal(t, claim.Acting, c.State)
	require.Equal(t, g.Token, c.Token)

	// Real time: the sweep looks again only at jobs older than ReofferAfter
	// (200 ms) by the database clock; then a wrongful second grant, which
	// would arrive through the cell, gets the same moment to show.
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, b.engine.SweepAll(ctx))
	time.Sleep(300 * time.Millisecond)
	require.Len(t, ra.grants(), 1, "a granted job is not granted again")
}

// TestPauseCapAndReviewRefuseAGrant: the grant statement keeps the lease's
// rules in assign mode — either pause switch refuses it, the daily cap is
// counted exactly (a grant starts an action), a job above the review
// threshold waits for an operator and is granted once approved.
func TestPauseCapAndReviewRefuseAGrant(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	grant := func(key string, mod ...func(*wire.Job)) error {
		b.job(t, b.tenant, key, mod...)
		_, err := b.store.Grant(ctx, claim.GrantRequest{Job: claim.QueuedJob{Tenant: b.tenant, Cell: "default", Job: wire.Job{Key: key}},
			Holder: claim.Holder{Agent: uuid(), Worker: "actor-1"}, SendWithin: 5 * time.Second, HardTimeout: 15 * time.Second})
		return err
	}
	require.NoError(t, b.store.SetPaused(ctx, testActor, b.tenant, true))
	require.Equal(t, claim.ReasonPaused, reason(t, grant("P-1")), "the tenant's pause refuses a grant")
	require.NoError(t, b.store.SetPaused(ctx, testActor, b.tenant, false))
	require.NoError(t, b.store.SetPaused(ctx, testActor, "", true))
	require.Equal(t, claim.ReasonPaused, reason(t, grant("P-1")), "the fleet's pause refuses a grant")
	require.NoError(t, b.store.SetPaused(ctx, testActor, "", false))
	require.NoError(t, grant("P-1"), "resumed, it is granted")

	two := 2
	require.NoError(t, b.store.SetLimits(ctx, testActor, b.tenant, claim.Limits{DailyBookingCap: &two}))
	require.NoError(t, grant("C-1"))
	require.Equal(t, claim.ReasonCapReached, reason(t, grant("C-2")), "P-1 and C-1 started today: the cap of two is reached")

	cents := int64(300000)
	require.NoError(t, b.store.SetLimits(ctx, testActor, b.tenant, claim.Limits{ReviewAboveCents: &cents}))
	require.Equal(t, claim.ReasonReview, reason(t, grant("BIG", func(j *wire.Job) { j.RateCents = 500000 })))
	rv, err := b.store.Reviews(ctx, b.tenant, 10)
	require.NoError(t, err)
	require.Len(t, rv, 1)
	require.Equal(t, "PENDING", rv[0].State)
	require.NoError(t, b.store.Decide(ctx, audit.Entry{Actor: "ann@fleet.test"}, b.tenant, "BIG", true))
	require.NoError(t, grant("BIG"), "approved, it is granted")
}

// TestApprovedReviewIsGrantedInAssignMode: a job held for review is refused
// at its grant; the operator's approval dispatches it again at once — in
// assign mode as a grant to a warm actor, not an offer.
func TestApprovedReviewIsGrantedInAssignMode(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	ra := assignReplica(t, b, "replica-1", b.engine, actorsN("warm", 2))
	cents := int64(100000)
	require.NoError(t, b.store.SetLimits(ctx, testActor, b.tenant, claim.Limits{ReviewAboveCents: &cents}))
	waitWarm(t, b.engine, b.tenant, 1)

	require.NoError(t, b.engine.Dispatch(ctx, "default", entry(b.tenant, "BIG")))
	var rv []claim.Review
	require.Eventually(t, func() bool {
		var err error
		rv, err = b.store.Reviews(ctx, b.tenant, 10)
		return err == nil && len(rv) == 1
	}, 10*time.Second, 10*time.Millisecond, "the job is held for review")
	_, granted := ra.grantOf(b.tenant, "BIG")
	require.False(t, granted, "held for review")

	require.NoError(t, b.engine.Decide(ctx, audit.Entry{Actor: "ann@fleet.test"}, b.tenant, "BIG", true))
	require.Eventually(t, func() bool { _, ok := ra.grantOf(b.tenant, "BIG"); return ok }, 5*time.Second, 10*time.Millisecond,
		"approved: granted at once")
	state, _, _ := claimRow(t, b, "BIG")
	require.Equal(t, "ACTING", state)
}
