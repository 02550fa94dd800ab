package claim_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/cell"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// offers records what the gateway would fan out, per tenant.
type offers struct {
	mu  sync.Mutex
	got map[string][]wire.Offer
}

func (o *offers) Offer(_ context.Context, tenant string, off wire.Offer) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got[tenant] = append(o.got[tenant], off)
}

func (o *offers) has(tenant, key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, x := range o.got[tenant] {
		if x.Job.Key == key {
			return true
		}
	}
	return false
}

func (o *offers) count(tenant, key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, x := range o.got[tenant] {
		if x.Job.Key == key {
			n++
		}
	}
	return n
}

func startRedis(t *testing.T, dir string) *embedded.Redis {
	t.Helper()
	r, err := embedded.StartRedis(context.Background(), embedded.RedisConfig{Dir: dir})
	require.NoError(t, err)
	return r
}

// TestCellsFailAlone: two tenants on two cells, each a real Redis server.
// Stopping one cell's Redis stops only its tenant's claims; the other keeps
// claiming; when the Redis comes back the cell resumes by itself. In both
// dispatch modes (assign: the job is granted to a warm actor; race: offered
// and leased).
func TestCellsFailAlone(t *testing.T) {
	for _, mode := range bothModes {
		t.Run(mode, func(t *testing.T) { cellsFailAlone(t, mode) })
	}
}

func cellsFailAlone(t *testing.T, mode string) {
	b := setup(t)
	ctx := context.Background()
	base := testenv.Dir(t)
	dirA, dirB := filepath.Join(base, "cell-a-"+uuid()[:8]), filepath.Join(base, "cell-b-"+uuid()[:8])
	ra, rb := startRedis(t, dirA), startRedis(t, dirB)
	t.Cleanup(func() { ra.Stop(); rb.Stop() })

	require.NoError(t, cell.PutCell(ctx, b.db.App, cell.Def{Name: "cell-a", RedisURL: ra.URL(0)}))
	require.NoError(t, cell.PutCell(ctx, b.db.App, cell.Def{Name: "cell-b", RedisURL: rb.URL(0)}))
	tenantB := b.newTenant(t, "delta")
	require.NoError(t, cell.RouteTenant(ctx, b.db.App, b.tenant, "cell-a"))
	require.NoError(t, cell.RouteTenant(ctx, b.db.App, tenantB, "cell-b"))

	got := b.dispatchIn(t, b.engine, mode, b.tenant, tenantB)
	reg := prometheus.NewRegistry()
	m := cell.New(b.db.App, b.engine.CellConfig(cell.Config{DefaultRedisURL: testenv.RedisURL(t), Consumer: "replica-1",
		Reload: 200 * time.Millisecond, ReclaimIdle: time.Second, Log: testenv.Logger(t), Registerer: reg}))
	b.engine.SetCells(m)
	require.NoError(t, m.Start(ctx))
	t.Cleanup(m.Stop)
	if mode == claim.DispatchAssign {
		waitWarm(t, b.engine, b.tenant, 1)
		waitWarm(t, b.engine, tenantB, 1)
	}

	agent := uuid()
	seq := 0
	// sight reports a job through the engine as a watcher would, and
	// returns its key.
	sight := func(tenant string) (string, error) {
		seq++
		key := fmt.Sprintf("LD-%04d", seq)
		det := wire.Detected{Worker: "watcher-1", Sightings: []wire.Sighting{{SeenAt: time.Now(), Job: wire.Job{
			Key: key, PublishedAt: time.Now().Add(-time.Second), ExpiresAt: time.Now().Add(10 * time.Minute),
			Origin: "Dallas, TX", Destination: "Atlanta, GA", Miles: 780, RateCents: 200000}}}}
		return key, b.engine.Detected(ctx, tenant, agent, det, claim.Offset{})
	}

	// Both cells claim.
	for _, tn := range []string{b.tenant, tenantB} {
		key, err := sight(tn)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return got.reached(tn, key) }, 5*time.Second, 10*time.Millisecond)
		require.True(t, got.claimed(t, tn, key))
		// A second sighting of the same job (another watcher) is dropped.
		det := wire.Detected{Worker: "watcher-2", Sightings: []wire.Sighting{{SeenAt: time.Now(), Job: wire.Job{Key: key}}}}
		require.NoError(t, b.engine.Detected(ctx, tn, agent, det, claim.Offset{}))
	}
	// Real time, not an event: what is shown is that the duplicates lead
	// nowhere, so a wrongful grant or offer gets a moment to show.
	time.Sleep(200 * time.Millisecond)
	if mode == claim.DispatchAssign {
		require.Len(t, got.ra.grants(), 2, "duplicate sightings are not granted again")
		require.False(t, got.offered(b.tenant, "LD-0001"), "a granted job is not offered")
	} else {
		require.Equal(t, 1, got.offers.count(b.tenant, "LD-0001"), "duplicate sightings are not offered again")
	}

	// Cell A's Redis goes away.
	ra.Stop()
	require.Eventually(t, func() bool { return m.Failing("cell-a") }, 10*time.Second, 20*time.Millisecond, "cell A reported failing")
	_, err := sight(b.tenant)
	require.ErrorIs(t, err, cell.ErrFailing, "tenant A's sightings stop")
	require.False(t, m.Failing("cell-b"))
	keyB, err := sight(tenantB)
	require.NoError(t, err, "tenant B keeps claiming")
	require.Eventually(t, func() bool { return got.reached(tenantB, keyB) }, 5*time.Second, 10*time.Millisecond)
	require.True(t, got.claimed(t, tenantB, keyB))
	status := m.Status()
	require.Len(t, status, 3)
	require.True(t, status[0].Failing, "the console sees cell-a failing")
	require.NotContains(t, status[0].RedisURL, "@"+"x", "no password shown")

	// It comes back on the same socket and password: the cell resumes by
	// itself, with no call from the test.
	ra = startRedis(t, dirA)
	require.Eventually(t, func() bool { return !m.Failing("cell-a") }, 15*time.Second, 50*time.Millisecond, "cell A restored")
	// Assign: a Redis that came back empty lost the warm lists; they are
	// published again within a period (until then a job would be offered).
	if mode == claim.DispatchAssign {
		waitWarm(t, b.engine, b.tenant, 1)
	}
	var keyA string
	require.Eventually(t, func() bool {
		k, err := sight(b.tenant)
		if err != nil {
			return false
		}
		keyA = k
		return true
	}, 5*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool { return got.reached(b.tenant, keyA) }, 5*time.Second, 10*time.Millisecond)
	require.True(t, got.claimed(t, b.tenant, keyA), "tenant A claims again")
}

// TestFiltersDecideOfferAndLease: a job the tenant's filters refuse is
// neither offered nor granted, and a lease of it is refused by Postgres even
// if an actor asks. In both dispatch modes.
func TestFiltersDecideOfferAndLease(t *testing.T) {
	for _, mode := range bothModes {
		t.Run(mode, func(t *testing.T) { filtersDecide(t, mode) })
	}
}

func filtersDecide(t *testing.T, mode string) {
	b := setup(t)
	ctx := context.Background()
	tenant := b.newTenantBare(t, "picky")
	_, err := b.engine.PutFilter(ctx, testActor, tenant, claim.Filter{Name: "reefers from TX", Enabled: true,
		Origins: []string{"TX"}, Equipment: []string{"Reefer"}, MinRatePerMileCents: 250})
	require.NoError(t, err)
	got := b.dispatchIn(t, b.engine, mode, tenant)
	m := cell.New(b.db.App, b.engine.CellConfig(cell.Config{DefaultRedisURL: testenv.RedisURL(t), Log: testenv.Logger(t)}))
	b.engine.SetCells(m)
	require.NoError(t, m.Start(ctx))
	t.Cleanup(m.Stop)
	if mode == claim.DispatchAssign {
		waitWarm(t, b.engine, tenant, 1)
	}
	agent := uuid()
	det := func(key, equipment string) {
		require.NoError(t, b.engine.Detected(ctx, tenant, agent, wire.Detected{Worker: "w", Sightings: []wire.Sighting{{
			SeenAt: time.Now(), Job: wire.Job{Key: key, Origin: "Austin, TX", Equipment: equipment, Miles: 100, RateCents: 30000}}}},
			claim.Offset{}))
	}
	det("WANTED", "Reefer")
	det("UNWANTED", "Flatbed")
	require.Eventually(t, func() bool { return got.reached(tenant, "WANTED") }, 5*time.Second, 10*time.Millisecond)
	// Real time, not an event: what is shown is that the refused job goes
	// nowhere, so a wrongful grant or offer gets a moment to show.
	time.Sleep(300 * time.Millisecond)
	require.False(t, got.reached(tenant, "UNWANTED"))
	require.False(t, got.offered(tenant, "UNWANTED"))
	h := claim.Holder{Agent: agent, Worker: "a"}
	lr := b.engine.Lease(ctx, tenant, h, wire.LeaseRequest{RequestID: "1", Worker: "a", Key: "UNWANTED"})
	require.Equal(t, wire.ReasonUnknownJob, lr.Reason, "never recorded: nothing to lease")
	// Even a recorded job is refused by Postgres when the filters say no
	// (say, a filter edited after it was queued).
	b.job(t, tenant, "RECORDED-FLATBED", func(j *wire.Job) { j.Equipment = "Flatbed" })
	lr = b.engine.Lease(ctx, tenant, h, wire.LeaseRequest{RequestID: "2", Worker: "a", Key: "RECORDED-FLATBED"})
	require.Equal(t, wire.ReasonFiltered, lr.Reason)
	_, err = b.store.Grant(ctx, claim.GrantRequest{Job: claim.QueuedJob{Tenant: tenant, Cell: "default",
		Job: wire.Job{Key: "RECORDED-FLATBED"}}, Holder: h, SendWithin: 5 * time.Second, HardTimeout: 15 * time.Second})
	require.Equal(t, claim.ReasonFiltered, reason(t, err), "nor granted")
	require.True(t, got.claimed(t, tenant, "WANTED"))
}

// TestCapAndReview: the daily cap refuses further leases and actions;
// review mode holds an expensive job until an operator approves it.
func TestCapAndReview(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	one, cents := 1, int64(300000)
	require.NoError(t, b.store.SetLimits(ctx, testActor, b.tenant, claim.Limits{DailyBookingCap: &one}))
	h := claim.Holder{Agent: uuid(), Worker: "a"}
	b.job(t, b.tenant, "C1")
	b.job(t, b.tenant, "C2")
	l1 := b.engine.Lease(ctx, b.tenant, h, wire.LeaseRequest{RequestID: "1", Worker: "a", Key: "C1"})
	require.True(t, l1.Granted)
	l2 := b.engine.Lease(ctx, b.tenant, h, wire.LeaseRequest{RequestID: "2", Worker: "a", Key: "C2"})
	require.Equal(t, wire.ReasonCapReached, l2.Reason)
	require.True(t, b.engine.Act(ctx, b.tenant, h, wire.ActRequest{RequestID: "a", Worker: "a", Key: "C1", Token: l1.Token}).OK)
	require.NoError(t, b.store.SetLimits(ctx, testActor, b.tenant, claim.Limits{ReviewAboveCents: &cents}))

	b.job(t, b.tenant, "BIG", func(j *wire.Job) { j.RateCents = 500000 })
	lr := b.engine.Lease(ctx, b.tenant, h, wire.LeaseRequest{RequestID: "3", Worker: "a", Key: "BIG"})
	require.Equal(t, wire.ReasonReview, lr.Reason)
	rv, err := b.store.Reviews(ctx, b.tenant, 10)
	require.NoError(t, err)
	require.Len(t, rv, 1)
	require.Equal(t, "PENDING", rv[0].State)
	require.NoError(t, b.store.Decide(ctx, audit.Entry{Actor: "ann@fleet.test"}, b.tenant, "BIG", true))
	lr = b.engine.Lease(ctx, b.tenant, h, wire.LeaseRequest{RequestID: "4", Worker: "a", Key: "BIG"})
	require.True(t, lr.Granted, lr.Reason)
	log, err := b.store.AuditLog(ctx, b.tenant, "claim.review.approve", 5)
	require.NoError(t, err)
	require.Len(t, log, 1)
	require.Equal(t, "ann@fleet.test", log[0].Actor)
}
