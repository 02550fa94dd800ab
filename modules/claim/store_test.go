package claim_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/claim"
)

// TestContention: 72 racers released by a barrier contend for each of 50
// keys, 5 rounds; each round exactly one lease per key, and every key's
// token rises from round to round. Winners release (NOT_SENT) between rounds
// so the same keys are leased again.
func TestContention(t *testing.T) {
	const racers, keys, rounds = 72, 50, 5
	b := setup(t)
	ctx := context.Background()
	agents := make([]string, 8)
	for i := range agents {
		agents[i] = uuid()
	}
	keyName := func(k int) string { return fmt.Sprintf("LD-%03d", k) }
	for k := range keys {
		b.job(t, b.tenant, keyName(k))
	}
	type grant struct {
		racer int
		lease claim.Lease
	}
	last := map[string]int64{}
	for round := range rounds {
		var mu sync.Mutex
		won := map[string][]grant{}
		var errs []error
		start := make(chan struct{})
		var wg sync.WaitGroup
		for r := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for k := range keys {
					l, err := b.store.Lease(ctx, claim.LeaseRequest{Tenant: b.tenant, Key: keyName(k),
						Holder: holderN(agents, r), For: time.Minute})
					mu.Lock()
					switch {
					case err == nil:
						won[l.Key] = append(won[l.Key], grant{r, l})
					case reasonOf(err) != claim.ReasonHeld:
						errs = append(errs, err)
					}
					mu.Unlock()
				}
			}()
		}
		close(start)
		wg.Wait()
		require.Empty(t, errs, "round %d: only 'held' refusals expected", round)
		require.Len(t, won, keys, "round %d: every key leased", round)
		tokens := map[int64]bool{}
		for key, gs := range won {
			require.Lenf(t, gs, 1, "round %d key %s: exactly one lease", round, key)
			tok := gs[0].lease.Token
			require.Greaterf(t, tok, last[key], "round %d key %s: token rises", round, key)
			require.False(t, tokens[tok], "tokens are unique")
			tokens[tok] = true
			last[key] = tok
			require.Equal(t, round+1, gs[0].lease.Attempt)
		}
		// Release every key for the next round through the real path.
		for key, gs := range won {
			h := holderN(agents, gs[0].racer)
			_, err := b.store.StartActing(ctx, b.tenant, key, gs[0].lease.Token, h, 10*time.Second)
			require.NoError(t, err)
			require.NoError(t, b.store.Report(ctx, b.tenant, key, gs[0].lease.Token, h, claim.Outcome{Result: claim.NotSent}))
		}
	}
	// The transition log agrees: per key, rounds × (lease, acting, released).
	var n int
	require.NoError(t, db.InTenant(ctx, b.db.App, b.tenant, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT count(*) FROM claim_transitions WHERE to_state = 'LEASED'`).Scan(&n)
	}))
	require.Equal(t, keys*rounds, n)
}

func reasonOf(err error) string {
	if r, ok := err.(*claim.Refusal); ok {
		return r.Reason
	}
	return err.Error()
}

// TestFencing: an expired lease cannot act (the database clock decides); a
// re-lease gets a higher token and the old one is refused everywhere; a
// token presented by another agent is refused; a pause between lease and
// ACTING refuses the ACTING.
func TestFencing(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	a1 := claim.Holder{Agent: uuid(), Worker: "actor-1"}
	a2 := claim.Holder{Agent: uuid(), Worker: "actor-1"} // same worker name, another agent
	b.job(t, b.tenant, "LD-1")

	// Long enough that the next statement runs inside it on a busy machine
	// (150 ms was not), short enough to wait out below.
	short, err := b.store.Lease(ctx, claim.LeaseRequest{Tenant: b.tenant, Key: "LD-1", Holder: a1, For: 1500 * time.Millisecond})
	require.NoError(t, err)
	require.LessOrEqual(t, short.Remaining, 1500*time.Millisecond)
	// While the lease runs, nobody else gets it.
	_, err = b.store.Lease(ctx, claim.LeaseRequest{Tenant: b.tenant, Key: "LD-1", Holder: a2, For: time.Minute})
	require.Equal(t, claim.ReasonHeld, reason(t, err))
	// Postgres's clock decides: wait until it has passed the lease's end.
	require.Eventually(t, func() bool {
		var past bool
		err := db.TenantRow(ctx, b.db.App, b.tenant, `SELECT clock_timestamp() > lease_expires_at FROM claims WHERE target_job_key = $1`, "LD-1").Scan(&past)
		return err == nil && past
	}, 10*time.Second, 10*time.Millisecond, "the database clock passed the lease's end")
	_, err = b.store.StartActing(ctx, b.tenant, "LD-1", short.Token, a1, 10*time.Second)
	require.Equal(t, claim.ReasonExpired, reason(t, err))

	// The expired lease is re-leased to a2 with a higher token.
	re, err := b.store.Lease(ctx, claim.LeaseRequest{Tenant: b.tenant, Key: "LD-1", Holder: a2, For: time.Minute})
	require.NoError(t, err)
	require.Greater(t, re.Token, short.Token)
	require.Equal(t, 2, re.Attempt)

	// The old token is refused everywhere: acting, reporting, by the engine.
	_, err = b.store.StartActing(ctx, b.tenant, "LD-1", short.Token, a1, 10*time.Second)
	require.Equal(t, claim.ReasonStaleToken, reason(t, err))
	// A stale TAKEN, NOT_SENT or UNKNOWN is a definitive refusal (a stale
	// CONFIRMED is evidence: TestLateConfirmedOfAnEarlierAttempt).
	for _, r := range []claim.State{claim.Taken, claim.NotSent, claim.Unknown} {
		err = b.store.Report(ctx, b.tenant, "LD-1", short.Token, a1, claim.Outcome{Result: r})
		require.Equal(t, claim.ReasonStaleToken, reason(t, err), r)
	}
	ar := b.engine.Act(ctx, b.tenant, a1, actReq("LD-1", short.Token))
	require.False(t, ar.OK)
	require.Equal(t, "stale_token", ar.Reason)

	// The current token presented by another agent (or worker) is refused.
	_, err = b.store.StartActing(ctx, b.tenant, "LD-1", re.Token, a1, 10*time.Second)
	require.Equal(t, claim.ReasonNotHolder, reason(t, err))
	_, err = b.store.StartActing(ctx, b.tenant, "LD-1", re.Token, claim.Holder{Agent: a2.Agent, Worker: "actor-2"}, 10*time.Second)
	require.Equal(t, claim.ReasonNotHolder, reason(t, err))

	// A pause between lease and ACTING refuses the ACTING: the tenant's,
	// then the fleet's; after resume the same lease may act.
	require.NoError(t, b.store.SetPaused(ctx, testActor, b.tenant, true))
	_, err = b.store.StartActing(ctx, b.tenant, "LD-1", re.Token, a2, 10*time.Second)
	require.Equal(t, claim.ReasonPaused, reason(t, err))
	require.NoError(t, b.store.SetPaused(ctx, testActor, b.tenant, false))
	require.NoError(t, b.store.SetPaused(ctx, testActor, "", true))
	_, err = b.store.StartActing(ctx, b.tenant, "LD-1", re.Token, a2, 10*time.Second)
	require.Equal(t, claim.ReasonPaused, reason(t, err))
	b.job(t, b.tenant, "LD-2")
	_, err = b.store.Lease(ctx, claim.LeaseRequest{Tenant: b.tenant, Key: "LD-2", Holder: a1, For: time.Minute})
	require.Equal(t, claim.ReasonPaused, reason(t, err), "no new lease while paused")
	require.NoError(t, b.store.SetPaused(ctx, testActor, "", false))
	g, err := b.store.StartActing(ctx, b.tenant, "LD-1", re.Token, a2, 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, re.OperationID, g.OperationID)

	// ACTING is never re-leased, even once its lease time has passed.
	_, err = b.store.Lease(ctx, claim.LeaseRequest{Tenant: b.tenant, Key: "LD-1", Holder: a1, For: time.Minute})
	require.Equal(t, claim.ReasonHeld, reason(t, err))

	// Pauses are audited.
	log, err := b.store.AuditLog(ctx, b.tenant, "", 10)
	require.NoError(t, err)
	var actions []string
	for _, a := range log {
		actions = append(actions, a.Action)
	}
	require.Subset(t, actions, []string{"claim.pause", "claim.resume"})
}

// TestTransitionsMatchTrigger: the Go table and the database trigger agree
// on every pair of stored states.
func TestTransitionsMatchTrigger(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	super, err := db.Open(ctx, b.db.SuperURL, 2)
	require.NoError(t, err)
	defer super.Close()
	// paths reach each state from LEASED through legal moves.
	paths := map[claim.State][]claim.State{
		claim.Leased:    {},
		claim.Acting:    {claim.Acting},
		claim.Confirmed: {claim.Acting, claim.Confirmed},
		claim.Taken:     {claim.Acting, claim.Taken},
		claim.Unknown:   {claim.Acting, claim.Unknown},
		claim.Released:  {claim.Released},
	}
	n := 0
	for _, from := range claim.Stored {
		for _, to := range claim.Stored {
			n++
			key := fmt.Sprintf("K-%d", n)
			_, err := super.Exec(ctx, `INSERT INTO claims (tenant_id, target_job_key, state, token, holder_agent, holder_worker,
				operation_id, lease_expires_at, leased_at) VALUES ($1, $2, 'LEASED', nextval('claim_token'), $3, 'w',
				gen_random_uuid(), now() + interval '1 minute', now())`, b.tenant, key, uuid())
			require.NoError(t, err)
			for _, s := range paths[from] {
				_, err := super.Exec(ctx, `UPDATE claims SET state = $3 WHERE tenant_id = $1 AND target_job_key = $2`, b.tenant, key, string(s))
				require.NoError(t, err, "path to %s", from)
			}
			// A transition changes the state; a re-lease and late evidence
			// (LEASED or RELEASED → CONFIRMED) take a new token.
			q := `UPDATE claims SET state = $3 WHERE tenant_id = $1 AND target_job_key = $2`
			if from == to || claim.FreshToken(from, to) {
				q = `UPDATE claims SET state = $3, token = nextval('claim_token') WHERE tenant_id = $1 AND target_job_key = $2`
			}
			_, err = super.Exec(ctx, q, b.tenant, key, string(to))
			require.Equalf(t, claim.Legal(from, to), err == nil, "%s → %s: Go says legal=%v, database said %v", from, to, claim.Legal(from, to), err)
		}
	}
	// The fresh token is required, not optional: late evidence keeping the
	// token would let the current holder's act statement through.
	for _, from := range []claim.State{claim.Leased, claim.Released} {
		key := "F-" + string(from)
		_, err := super.Exec(ctx, `INSERT INTO claims (tenant_id, target_job_key, state, token, holder_agent, holder_worker,
			operation_id, lease_expires_at, leased_at) VALUES ($1, $2, 'LEASED', nextval('claim_token'), $3, 'w',
			gen_random_uuid(), now() + interval '1 minute', now())`, b.tenant, key, uuid())
		require.NoError(t, err)
		if from == claim.Released {
			_, err = super.Exec(ctx, `UPDATE claims SET state = 'RELEASED' WHERE tenant_id = $1 AND target_job_key = $2`, b.tenant, key)
			require.NoError(t, err)
		}
		_, err = super.Exec(ctx, `UPDATE claims SET state = 'CONFIRMED' WHERE tenant_id = $1 AND target_job_key = $2`, b.tenant, key)
		require.ErrorContains(t, err, "fresh fencing token", "%s → CONFIRMED with the same token", from)
		require.True(t, claim.FreshToken(from, claim.Confirmed))
	}
	// A release given up after an UNKNOWN is never leased again: Go and
	// the trigger agree.
	for _, outcome := range []string{"RELEASED", "NOT_SENT", claim.GivenUp} {
		key := "G-" + outcome
		_, err := super.Exec(ctx, `INSERT INTO claims (tenant_id, target_job_key, state, token, holder_agent, holder_worker,
			operation_id, lease_expires_at, leased_at) VALUES ($1, $2, 'LEASED', nextval('claim_token'), $3, 'w',
			gen_random_uuid(), now() + interval '1 minute', now())`, b.tenant, key, uuid())
		require.NoError(t, err)
		_, err = super.Exec(ctx, `UPDATE claims SET state = 'RELEASED', outcome = $3 WHERE tenant_id = $1 AND target_job_key = $2`,
			b.tenant, key, outcome)
		require.NoError(t, err)
		_, err = super.Exec(ctx, `UPDATE claims SET state = 'LEASED', token = nextval('claim_token') WHERE tenant_id = $1 AND target_job_key = $2`,
			b.tenant, key)
		require.Equalf(t, claim.LegalWith(claim.Released, claim.Leased, outcome), err == nil, "RELEASED (%s) → LEASED: database said %v", outcome, err)
	}
	// A grant is never made from a release given up, nor without a fresh token.
	for _, outcome := range []string{"RELEASED", claim.GivenUp} {
		key := "R-" + outcome
		_, err := super.Exec(ctx, `INSERT INTO claims (tenant_id, target_job_key, state, token, holder_agent, holder_worker,
			operation_id, lease_expires_at, leased_at) VALUES ($1, $2, 'LEASED', nextval('claim_token'), $3, 'w',
			gen_random_uuid(), now() + interval '1 minute', now())`, b.tenant, key, uuid())
		require.NoError(t, err)
		_, err = super.Exec(ctx, `UPDATE claims SET state = 'RELEASED', outcome = $3 WHERE tenant_id = $1 AND target_job_key = $2`,
			b.tenant, key, outcome)
		require.NoError(t, err)
		_, err = super.Exec(ctx, `UPDATE claims SET state = 'ACTING' WHERE tenant_id = $1 AND target_job_key = $2`, b.tenant, key)
		require.ErrorContains(t, err, "claim:", "RELEASED (%s) → ACTING with the same token", outcome)
		_, err = super.Exec(ctx, `UPDATE claims SET state = 'ACTING', token = nextval('claim_token') WHERE tenant_id = $1 AND target_job_key = $2`,
			b.tenant, key)
		require.Equalf(t, claim.LegalWith(claim.Released, claim.Acting, outcome), err == nil, "RELEASED (%s) → ACTING: database said %v", outcome, err)
	}
	// A row starts LEASED, or ACTING (a grant) with its start and deadline.
	for _, s := range claim.Stored {
		_, err := super.Exec(ctx, `INSERT INTO claims (tenant_id, target_job_key, state, token, holder_agent, holder_worker,
			operation_id, lease_expires_at, leased_at, act_started_at, act_deadline) VALUES ($1, $2, $3, nextval('claim_token'), $4, 'w',
			gen_random_uuid(), now(), now(), now(), now() + interval '1 minute')`, b.tenant, "I-"+string(s), string(s), uuid())
		require.Equal(t, slices.Contains(claim.Initial, s), err == nil, "insert as %s: %v", s, err)
	}
	_, err = super.Exec(ctx, `INSERT INTO claims (tenant_id, target_job_key, state, token, holder_agent, holder_worker,
		operation_id, lease_expires_at, leased_at) VALUES ($1, 'I-ACTING-bare', 'ACTING', nextval('claim_token'), $2, 'w',
		gen_random_uuid(), now(), now())`, b.tenant, uuid())
	require.ErrorContains(t, err, "illegal transition", "a grant without its start and deadline")
	// Tokens never go backwards.
	_, err = super.Exec(ctx, `UPDATE claims SET token = token - 1 WHERE tenant_id = $1 AND target_job_key = 'I-LEASED'`, b.tenant)
	require.ErrorContains(t, err, "backwards")
	keys := make([]string, 0, len(claim.Transitions))
	for s := range claim.Transitions {
		keys = append(keys, string(s))
	}
	sort.Strings(keys)
	t.Logf("checked %d pairs; states with moves: %v", n, keys)
}

func TestFilterRuleMatchesDatabase(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	i := func(v int) *int { return &v }
	filters := []claim.Filter{
		{Name: "tx out", Enabled: true, Origins: []string{"TX"}},
		{Name: "lane", Enabled: true, Origins: []string{"dallas, tx"}, Destinations: []string{"ga", "fl"}},
		{Name: "reefer", Enabled: true, Equipment: []string{"Reefer"}},
		{Name: "rate", Enabled: true, MinRatePerMileCents: 300},
		{Name: "weight", Enabled: true, MaxWeightLbs: i(30000)},
		{Name: "miles", Enabled: true, MinMiles: i(100), MaxMiles: i(500)},
		{Name: "off", Enabled: false},
	}
	jobs := []func(*wireJob){
		func(j *wireJob) {},
		func(j *wireJob) { j.Origin = "Fresno, CA"; j.Equipment = "Reefer" },
		func(j *wireJob) { j.Destination = "Miami, FL"; j.RateCents = 300 * 780 },
		func(j *wireJob) { j.RateCents = 300*780 - 1 },
		func(j *wireJob) { j.Miles = 0 },
		func(j *wireJob) { j.WeightLbs = 30000; j.Miles = 450; j.Origin = "" },
		func(j *wireJob) { j.Origin = "Austin,TX  " },
		func(j *wireJob) { j.Miles = 501; j.WeightLbs = 30001; j.Equipment = "reefer " },
	}
	for fi, f := range filters {
		tenant := b.newTenantBare(t, fmt.Sprintf("f%d", fi))
		_, err := b.engine.PutFilter(ctx, testActor, tenant, f)
		require.NoError(t, err)
		stored, err := b.store.Filters(ctx, tenant)
		require.NoError(t, err)
		for ji, mod := range jobs {
			key := fmt.Sprintf("J-%d", ji)
			var j wireJob
			b.job(t, tenant, key, func(w *wireJob) { mod(w); j = *w })
			var dbSays bool
			require.NoError(t, db.InTenant(ctx, b.db.App, tenant, func(tx pgx.Tx) error {
				return tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM claim_filters f, claim_jobs j
					WHERE j.job_key = $1 AND claim_filter_matches(f, j))`, key).Scan(&dbSays)
			}))
			require.Equalf(t, dbSays, claim.Wanted(stored, j), "filter %q job %d (%+v)", f.Name, ji, j)
		}
	}
}
