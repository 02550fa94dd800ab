package claim_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/cell"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// replicaActors is one replica's gateway as assignment sees it: the warm
// actors it holds and the grants handed to their connections (the real
// gateway is exercised in modules/fleet; here the engine and the cells run
// on a real Postgres and a real Redis).
type replicaActors struct {
	tenant string
	// tenants, when set, all have these actors (tenant is then unused).
	tenants []string
	mu      sync.Mutex
	actors  []claim.WarmActor
	got     []wire.LeaseGrant
	// gotFor is the tenant of each grant in got.
	gotFor []string
	// gone: connections no longer here (the grant is not delivered).
	gone map[string]bool
}

func (r *replicaActors) WarmActors() map[string][]claim.WarmActor {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.tenants) > 0 {
		out := map[string][]claim.WarmActor{}
		for _, t := range r.tenants {
			out[t] = append([]claim.WarmActor(nil), r.actors...)
		}
		return out
	}
	return map[string][]claim.WarmActor{r.tenant: append([]claim.WarmActor(nil), r.actors...)}
}

func (r *replicaActors) Grant(_ context.Context, tenant string, a claim.WarmActor, g wire.LeaseGrant) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gone[a.Conn] {
		return claim.ErrNotDelivered
	}
	r.got = append(r.got, g)
	r.gotFor = append(r.gotFor, tenant)
	return nil
}

// grantOf is the grant of the tenant's job, if one was delivered.
func (r *replicaActors) grantOf(tenant, key string) (wire.LeaseGrant, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, g := range r.got {
		if g.Job.Key == key && r.gotFor[i] == tenant {
			return g, true
		}
	}
	return wire.LeaseGrant{}, false
}

func (r *replicaActors) grants() []wire.LeaseGrant {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]wire.LeaseGrant(nil), r.got...)
}

// assignReplica starts one replica's engine and cell manager (consumer
// name) on the bundle's database and the shared Redis, in assign mode,
// holding actors.
func assignReplica(t *testing.T, b *bundle, name string, e *claim.Engine, actors []claim.WarmActor) *replicaActors {
	t.Helper()
	ctx := context.Background()
	ra := &replicaActors{tenant: b.tenant, actors: actors, gone: map[string]bool{}}
	e.SetAssign(ra, ra)
	e.SetOfferer(&offers{got: map[string][]wire.Offer{}})
	m := cell.New(b.db.App, e.CellConfig(cell.Config{DefaultRedisURL: testenv.RedisURL(t), Consumer: name, Log: testenv.Logger(t)}))
	e.SetCells(m)
	require.NoError(t, m.Start(ctx))
	t.Cleanup(m.Stop)
	wctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go e.RunWarm(wctx)
	return ra
}

// waitWarm waits until the tenant's cell holds a non-empty warm list from
// at least replicas replicas: until then assign mode has no actor to choose
// and a job would be offered instead of granted.
func waitWarm(t *testing.T, e *claim.Engine, tenant string, replicas int) {
	t.Helper()
	require.Eventually(t, func() bool {
		m := e.Cells()
		if m == nil {
			return false
		}
		lists, err := m.Warm(context.Background(), tenant)
		if err != nil {
			return false
		}
		n := 0
		for _, body := range lists {
			if len(body) > len("[]") {
				n++
			}
		}
		return n >= replicas
	}, 10*time.Second, 10*time.Millisecond, "the warm actors of %d replica(s) are published", replicas)
}

func actorsN(prefix string, n int) []claim.WarmActor {
	out := make([]claim.WarmActor, n)
	agent := uuid()
	for i := range out {
		out[i] = claim.WarmActor{Agent: agent, Conn: uuid(), Worker: fmt.Sprintf("%s-%02d", prefix, i), Kind: "http_actor",
			Account: prefix, RTTMicros: int64(200 + i)}
	}
	return out
}

func entry(tenant, key string) cell.Entry {
	now := time.Now()
	return cell.Entry{Tenant: tenant, Job: wire.Job{Key: key, PublishedAt: now.Add(-time.Second), ExpiresAt: now.Add(time.Hour),
		Origin: "Dallas, TX", Destination: "Atlanta, GA", Miles: 780, RateCents: 200000}, SeenAt: now, QueuedAt: now}
}

func claimRow(t *testing.T, b *bundle, key string) (state string, token int64, attempts int) {
	t.Helper()
	require.NoError(t, db.InTenant(context.Background(), b.db.App, b.tenant, func(tx pgx.Tx) error {
		return tx.QueryRow(context.Background(), `SELECT state, token, (SELECT count(*) FROM claim_attempts a
			WHERE a.tenant_id = c.tenant_id AND a.target_job_key = c.target_job_key) FROM claims c
			WHERE target_job_key = $1`, key).Scan(&state, &token, &attempts)
	}))
	return
}

// TestTwoReplicasNeverGrantAJobTwice: two replicas in assign mode, each
// holding its own actors, both dispatch every job at once (a stream entry
// handled twice: a reclaim racing the first consumer). Each job is recorded
// and granted exactly once — one ACTING claim, one attempt, one grant
// delivered across both replicas — and the grant reaches the replica that
// holds the chosen actor.
func TestTwoReplicasNeverGrantAJobTwice(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	require.NoError(t, b.engine.SetDispatchMode(ctx, testActor, b.tenant, claim.DispatchAssign))
	e2, err := claim.NewEngine(b.store, claim.Config{Log: testenv.Logger(t)})
	require.NoError(t, err)
	r1 := assignReplica(t, b, "replica-1", b.engine, actorsN("one", 4))
	r2 := assignReplica(t, b, "replica-2", e2, actorsN("two", 4))
	// Both replicas' lists are published.
	waitWarm(t, b.engine, b.tenant, 1)
	waitWarm(t, e2, b.tenant, 1)

	const jobs = 40
	var wg sync.WaitGroup
	for i := range jobs {
		en := entry(b.tenant, fmt.Sprintf("LD-%03d", i))
		for _, e := range []*claim.Engine{b.engine, e2, b.engine, e2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				require.NoError(t, e.Dispatch(ctx, "default", en))
			}()
		}
	}
	wg.Wait()
	require.Eventually(t, func() bool { return len(r1.grants())+len(r2.grants()) >= jobs }, 5*time.Second, 10*time.Millisecond)
	// Real time, not an event: what is shown is that no second grant of a
	// job arrives, so a late one through the cell gets a moment to show.
	time.Sleep(300 * time.Millisecond)
	perKey := map[string]int{}
	crossed := 0
	for _, r := range []*replicaActors{r1, r2} {
		for _, g := range r.grants() {
			perKey[g.Job.Key]++
			if (r == r1) != (len(g.Worker) > 3 && g.Worker[:3] == "one") {
				crossed++
			}
		}
	}
	require.Len(t, perKey, jobs)
	for key, n := range perKey {
		require.Equalf(t, 1, n, "job %s granted %d times", key, n)
		state, _, attempts := claimRow(t, b, key)
		require.Equal(t, "ACTING", state)
		require.Equal(t, 1, attempts, "one attempt per job")
	}
	require.Zero(t, crossed, "each grant reached the replica holding its actor")
	require.NotEmpty(t, r1.grants(), "replica 1's actors were chosen")
	require.NotEmpty(t, r2.grants(), "replica 2's actors were chosen")
}

// TestGrantIsOneConditionalInsert: 72 dispatchers grant the same jobs to 72
// different actors at once; each job is granted to exactly one, and a
// grant given up or acting is never granted again.
func TestGrantIsOneConditionalInsert(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	now := time.Now()
	const racers, keys = 72, 20
	var mu sync.Mutex
	won := map[string]int{}
	var errs []error
	start := make(chan struct{})
	var wg sync.WaitGroup
	for r := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for k := range keys {
				q := claim.QueuedJob{Tenant: b.tenant, Cell: "default", Job: wire.Job{Key: fmt.Sprintf("G-%02d", k),
					ExpiresAt: now.Add(time.Hour)}, SeenAt: now, QueuedAt: now}
				_, err := b.store.Grant(ctx, claim.GrantRequest{Job: q, Holder: claim.Holder{Agent: uuid(), Worker: fmt.Sprintf("a-%d", r)},
					SendWithin: 5 * time.Second, HardTimeout: 15 * time.Second})
				mu.Lock()
				switch {
				case err == nil:
					won[q.Job.Key]++
				case reasonOf(err) != claim.ReasonHeld:
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	require.Empty(t, errs)
	require.Len(t, won, keys)
	for k, n := range won {
		require.Equalf(t, 1, n, "%s granted %d times", k, n)
	}
}

// TestGateCheck: the gate's read-only fenced check passes only for the
// grant's token and holder, while ACTING, unpaused and before the send-by
// time by the database clock; it writes nothing.
func TestGateCheck(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	now := time.Now()
	h := claim.Holder{Agent: uuid(), Worker: "actor-1"}
	grant := func(key string, within time.Duration) claim.Grant {
		g, err := b.store.Grant(ctx, claim.GrantRequest{Job: claim.QueuedJob{Tenant: b.tenant, Cell: "default",
			Job: wire.Job{Key: key, ExpiresAt: now.Add(time.Hour)}, SeenAt: now, QueuedAt: now},
			Holder: h, SendWithin: within, HardTimeout: 15 * time.Second})
		require.NoError(t, err)
		return g
	}
	g := grant("GATE-1", 5*time.Second)
	require.True(t, g.Recorded, "the grant recorded the job")
	require.Equal(t, 5*time.Second, g.SendWithin)
	require.WithinDuration(t, g.GrantedAt.Add(20*time.Second), g.ActDeadline, time.Millisecond, "deadline = send-by + hard timeout")
	require.NoError(t, b.store.GateCheck(ctx, b.tenant, "GATE-1", g.Token, h, 100*time.Millisecond))
	refused := func(key string, token int64, hh claim.Holder) string {
		t.Helper()
		return reason(t, b.store.GateCheck(ctx, b.tenant, key, token, hh, 100*time.Millisecond))
	}
	require.Equal(t, claim.ReasonStaleToken, refused("GATE-1", g.Token+1, h), "a wrong token never passes")
	require.Equal(t, claim.ReasonStaleToken, refused("GATE-1", g.Token-1, h))
	require.Equal(t, claim.ReasonNotHolder, refused("GATE-1", g.Token, claim.Holder{Agent: h.Agent, Worker: "actor-2"}))
	require.Equal(t, claim.ReasonNotHolder, refused("GATE-1", g.Token, claim.Holder{Agent: uuid(), Worker: h.Worker}))

	// Past its send-by time (by the database clock) the grant is refused.
	short := grant("GATE-2", 300*time.Millisecond)
	require.NoError(t, b.store.GateCheck(ctx, b.tenant, "GATE-2", short.Token, h, 0))
	// The database clock passes the send-by (the gate check reads, so it
	// can be asked until then).
	require.Eventually(t, func() bool {
		var r *claim.Refusal
		err := b.store.GateCheck(ctx, b.tenant, "GATE-2", short.Token, h, 100*time.Millisecond)
		return errors.As(err, &r) && r.Reason == claim.ReasonExpired
	}, 10*time.Second, 10*time.Millisecond, "a grant past its send-by is not acted on")
	// The margin counts: within the margin of the send-by, refused too.
	near := grant("GATE-3", time.Second)
	require.Equal(t, claim.ReasonExpired, reason(t, b.store.GateCheck(ctx, b.tenant, "GATE-3", near.Token, h, 2*time.Second)))
	require.NoError(t, b.store.GateCheck(ctx, b.tenant, "GATE-3", near.Token, h, 100*time.Millisecond))

	// Either pause switch closes the gate; resumed, it opens again.
	require.NoError(t, b.store.SetPaused(ctx, testActor, b.tenant, true))
	require.Equal(t, claim.ReasonPaused, refused("GATE-1", g.Token, h))
	require.NoError(t, b.store.SetPaused(ctx, testActor, b.tenant, false))
	require.NoError(t, b.store.SetPaused(ctx, testActor, "", true))
	require.Equal(t, claim.ReasonPaused, refused("GATE-1", g.Token, h))
	require.NoError(t, b.store.SetPaused(ctx, testActor, "", false))
	require.NoError(t, b.store.GateCheck(ctx, b.tenant, "GATE-1", g.Token, h, 100*time.Millisecond))

	// Through the engine, as the gateway asks it.
	res := b.engine.Gate(ctx, b.tenant, h, wire.GateCheck{RequestID: "g", Worker: h.Worker, Key: "GATE-1", Token: g.Token + 7})
	require.False(t, res.OK)
	require.Equal(t, wire.ReasonStaleToken, res.Reason)
	res = b.engine.Gate(ctx, b.tenant, h, wire.GateCheck{RequestID: "g", Worker: h.Worker, Key: "GATE-1", Token: g.Token})
	require.True(t, res.OK, res.Reason)

	// Settled (NOT_SENT), the grant's gate is closed for good.
	ack := b.engine.Outcome(ctx, b.tenant, h, wire.Outcome{RequestID: "o", Worker: h.Worker, Key: "GATE-1", Token: g.Token,
		OperationID: g.OperationID, Result: wire.ResultNotSent}, claim.Offset{})
	require.True(t, ack.OK, ack.Reason)
	require.Equal(t, claim.ReasonWrongState, refused("GATE-1", g.Token, h))
	state, _, attempts := claimRow(t, b, "GATE-1")
	require.Equal(t, "RELEASED", state)
	require.Equal(t, 1, attempts)

	// A released job is granted again with a fresh token (a new attempt);
	// the old token's gate stays closed.
	again := grant("GATE-1", 5*time.Second)
	require.Greater(t, again.Token, g.Token)
	require.False(t, again.Recorded, "the job's record stands")
	require.Equal(t, claim.ReasonStaleToken, refused("GATE-1", g.Token, h))
	require.NoError(t, b.store.GateCheck(ctx, b.tenant, "GATE-1", again.Token, h, 100*time.Millisecond))
	_, _, attempts = claimRow(t, b, "GATE-1")
	require.Equal(t, 2, attempts)
}

// TestGrantPastDeadlineBecomesUnknown: a grant with no outcome is never
// taken back; past its action deadline the sweeper makes it UNKNOWN (with
// its reconcile job), as for any action in doubt.
func TestGrantPastDeadlineBecomesUnknown(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	now := time.Now()
	h := claim.Holder{Agent: uuid(), Worker: "actor-1"}
	_, err := b.store.Grant(ctx, claim.GrantRequest{Job: claim.QueuedJob{Tenant: b.tenant, Cell: "default",
		Job: wire.Job{Key: "SILENT", ExpiresAt: now.Add(time.Hour)}, SeenAt: now, QueuedAt: now},
		Holder: h, SendWithin: 100 * time.Millisecond, HardTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, b.engine.SweepAll(ctx))
	state, _, _ := claimRow(t, b, "SILENT")
	require.Equal(t, "ACTING", state, "not taken back before its deadline")
	// Past its deadline by the database clock, a sweep takes it back.
	require.Eventually(t, func() bool {
		require.NoError(t, b.engine.SweepAll(ctx))
		state, _, _ = claimRow(t, b, "SILENT")
		return state == "UNKNOWN"
	}, 10*time.Second, 20*time.Millisecond, "a sweep past the deadline makes it UNKNOWN")
}

// TestBatchWithAConflictingJobGrantsTheRest: one transaction grants a
// batch; a job already held and one expired are refused, the others are
// granted — a refusal never rolls back the rest. Two batches of the same
// keys in opposite orders, run at once, never deadlock (keys are sorted)
// and grant each job once.
func TestBatchWithAConflictingJobGrantsTheRest(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	now := time.Now()
	req := func(key string, exp time.Time) claim.GrantRequest {
		return claim.GrantRequest{Job: claim.QueuedJob{Tenant: b.tenant, Cell: "default", Job: wire.Job{Key: key, ExpiresAt: exp},
			SeenAt: now, QueuedAt: now}, Holder: claim.Holder{Agent: uuid(), Worker: "a-" + key},
			SendWithin: 5 * time.Second, HardTimeout: 15 * time.Second}
	}
	later := now.Add(time.Hour)
	_, err := b.store.Grant(ctx, req("B-2", later))
	require.NoError(t, err)
	reqs := []claim.GrantRequest{req("B-5", later), req("B-2", later), req("B-4", now.Add(-time.Minute)), req("B-1", later), req("B-3", later)}
	res, err := b.store.GrantBatch(ctx, b.tenant, reqs)
	require.NoError(t, err)
	require.Len(t, res, 5)
	for i, r := range res {
		key := reqs[i].Job.Job.Key
		switch key {
		case "B-2":
			require.Equal(t, claim.ReasonHeld, reason(t, r.Err), "the held job is refused")
		case "B-4":
			require.Equal(t, claim.ReasonUnknownJob, reason(t, r.Err), "the expired job is refused")
		default:
			require.NoError(t, r.Err, key)
			require.Equal(t, key, r.Grant.Key)
			require.Positive(t, r.Grant.Token)
			state, token, _ := claimRow(t, b, key)
			require.Equal(t, "ACTING", state, key)
			require.Equal(t, r.Grant.Token, token)
		}
	}
	_, err = b.store.GrantBatch(ctx, b.tenant, []claim.GrantRequest{req("D-1", later), req("D-1", later)})
	require.ErrorContains(t, err, "twice")

	for round := range 5 {
		var fwd, rev []claim.GrantRequest
		for k := range 30 {
			fwd = append(fwd, req(fmt.Sprintf("C-%d-%02d", round, k), later))
			rev = append([]claim.GrantRequest{req(fmt.Sprintf("C-%d-%02d", round, k), later)}, rev...)
		}
		var wg sync.WaitGroup
		results := make([][]claim.GrantResult, 2)
		errs := make([]error, 2)
		for i, batch := range [][]claim.GrantRequest{fwd, rev} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = b.store.GrantBatch(ctx, b.tenant, batch)
			}()
		}
		wg.Wait()
		require.NoError(t, errs[0], "round %d", round)
		require.NoError(t, errs[1], "round %d", round)
		won := map[string]int{}
		for _, rs := range results {
			for _, r := range rs {
				if r.Err == nil {
					won[r.Grant.Key]++
				} else {
					require.Equal(t, claim.ReasonHeld, reason(t, r.Err))
				}
			}
		}
		require.Len(t, won, 30, "round %d: every job granted", round)
		for k, n := range won {
			require.Equalf(t, 1, n, "round %d: %s granted %d times", round, k, n)
		}
	}
}
