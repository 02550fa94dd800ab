package claim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/cell"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// Batching under load (docs/CLAIMS.md, "Batches"). The dispatcher takes
// what one read of the cell's stream returns — at most MaxBatch entries, and
// it never waits for more (T = 0): at low load a batch is one job and costs
// no added latency; under load the stream fills while the previous batch
// commits, so batches grow with the load and throughput rises instead of a
// queue. One tenant's assign-mode jobs of a batch are recorded and granted
// in one transaction, keys sorted so two replicas' batches take their row
// locks in the same order and never deadlock. A job's refusal is a statement
// that returns no row: it never rolls back the others. A statement that
// fails (an error, not a refusal) aborts the transaction; then each job is
// granted on its own.

// MaxBatch bounds a batch (the cell's stream read returns at most this).
const MaxBatch = 64

// GrantResult is one job's answer in a batch: its grant, or a *Refusal.
type GrantResult struct {
	Grant Grant
	Err   error
}

// GrantBatch records and grants every request of one tenant in one
// transaction, in key order (requests of another tenant are refused with an
// error). It returns one result per request, in the order given, or an error
// when the transaction failed as a whole (nothing was granted).
func (s *Store) GrantBatch(ctx context.Context, tenant string, reqs []GrantRequest) ([]GrantResult, error) {
	out := make([]GrantResult, len(reqs))
	if len(reqs) == 0 {
		return out, nil
	}
	order := make([]int, len(reqs))
	for i, r := range reqs {
		if r.Job.Tenant != tenant || r.Job.Job.Key == "" || r.Holder.Agent == "" || r.Holder.Worker == "" ||
			r.SendWithin <= 0 || r.HardTimeout <= 0 {
			return nil, fmt.Errorf("claim: grant batch: request %d is not a grant of tenant %s", i, tenant)
		}
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return reqs[order[a]].Job.Job.Key < reqs[order[b]].Job.Job.Key })
	for k := 1; k < len(order); k++ {
		if reqs[order[k]].Job.Job.Key == reqs[order[k-1]].Job.Job.Key {
			return nil, fmt.Errorf("claim: grant batch: job %s twice", reqs[order[k]].Job.Job.Key)
		}
	}
	refuse, commit := s.durability(tenant)
	if refuse {
		for i := range out {
			out[i].Err = &Refusal{Reason: ReasonNotDurable}
		}
		return out, nil
	}
	ops := make([]string, len(reqs))
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('app.tenant_id', $1, true),
		(SELECT count(*) FROM (SELECT pg_advisory_xact_lock(hashtextextended(id::text, 7))
		 FROM tenants WHERE id = $1::uuid AND daily_booking_cap IS NOT NULL) l)`, tenant)
	if commit != "" {
		b.Queue(commitSQL, commit)
	}
	for _, i := range order {
		r := reqs[i]
		ops[i] = newOperationID()
		b.Queue(`SELECT set_config('app.conn', $1, true)`, r.Holder.Conn)
		b.Queue(recordJobSQL, recordJobArgs(r.Job)...)
		b.Queue(grantSQL, tenant, r.Job.Job.Key, r.Holder.Agent, r.Holder.Worker, r.SendWithin.Seconds(), ClearanceFor.Seconds(),
			r.HardTimeout.Seconds(), ops[i])
	}
	br := db.SendBatch(ctx, s.pool, b)
	defer br.Close()
	fail := func(err error) ([]GrantResult, error) {
		if unknownCommit(err) {
			// The batch may have committed: granting its jobs again one by
			// one would find them held by this very batch, and their actors
			// would never hear of their grants. Read back instead.
			br.Close()
			return s.settleBatch(ctx, tenant, reqs, ops, err)
		}
		return nil, fmt.Errorf("claim: grant batch: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		return fail(err)
	}
	if commit != "" {
		if _, err := br.Exec(); err != nil {
			return fail(err)
		}
	}
	var refused []int
	for _, i := range order {
		if _, err := br.Exec(); err != nil {
			return fail(err)
		}
		var recorded string
		if err := br.QueryRow().Scan(&recorded); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fail(err)
		}
		g := Grant{Key: reqs[i].Job.Job.Key, Recorded: recorded != ""}
		var withinMS int64
		err := br.QueryRow().Scan(&g.Token, &g.OperationID, &g.GrantedAt, &g.SendBy, &g.ActDeadline, &withinMS,
			&g.BookingKey, &g.KeysHonoured)
		granted := err == nil
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fail(err)
		}
		g.SendWithin = time.Duration(withinMS) * time.Millisecond
		out[i].Grant = g
		if !granted {
			refused = append(refused, i)
		}
	}
	if err := br.Close(); err != nil {
		return fail(err)
	}
	// Refusals are diagnosed and named after the commit, each in its own
	// round trip: under load nearly every job is granted, and diagnosing
	// every one inside the batch cost the database a statement per job for
	// nothing (review asks for a review in its own transaction, as for a
	// lease).
	for _, i := range refused {
		d, found, err := s.diagnose(ctx, tenant, reqs[i].Job.Job.Key, reqs[i].Holder.Agent)
		switch {
		case err != nil:
			out[i].Err = fmt.Errorf("claim: grant refused, its reason unreadable: %w", err)
		case !found:
			out[i].Err = &Refusal{Reason: ReasonUnknownJob}
		default:
			out[i].Err = s.leaseRefusal(ctx, tenant, reqs[i].Job.Job.Key, d)
		}
	}
	return out, nil
}

// settleBatch settles a grant batch whose commit is unknown (cause): the
// batch is one transaction, so either none of its grants is in the
// database (an error: its jobs may be granted one by one) or it committed,
// and the jobs without a grant row were refused (diagnosed as usual).
func (s *Store) settleBatch(ctx context.Context, tenant string, reqs []GrantRequest, ops []string, cause error) ([]GrantResult, error) {
	found, err := s.settleGrants(ctx, tenant, ops)
	if err != nil {
		return nil, fmt.Errorf("claim: grant batch: %w", err)
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("claim: grant batch: %w (%v)", ErrCommitLost, cause)
	}
	out := make([]GrantResult, len(reqs))
	for i, r := range reqs {
		if g, ok := found[ops[i]]; ok {
			out[i].Grant = g
			continue
		}
		out[i].Grant = Grant{Key: r.Job.Job.Key}
		d, ok, err := s.diagnose(ctx, tenant, r.Job.Job.Key, r.Holder.Agent)
		switch {
		case err != nil:
			out[i].Err = fmt.Errorf("claim: grant refused, its reason unreadable: %w", err)
		case !ok:
			out[i].Err = &Refusal{Reason: ReasonUnknownJob}
		default:
			out[i].Err = s.leaseRefusal(ctx, tenant, r.Job.Job.Key, d)
		}
	}
	return out, nil
}

// diagnose reads why a lease or grant of key was refused (found is false
// when the tenant is gone).
func (s *Store) diagnose(ctx context.Context, tenant, key, agent string) (d leaseDiag, found bool, err error) {
	err = scanDiag(db.TenantRow(ctx, s.pool, tenant, leaseDiagSQL, tenant, key, ClearanceFor.Seconds(), agent), &d)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, false, nil
	}
	if err != nil {
		return d, false, fmt.Errorf("claim: diagnose a refusal: %w", err)
	}
	return d, true, nil
}

// DispatchBatch handles every entry one read of a cell's stream returned:
// race-mode tenants' entries one by one (Dispatch), each assign-mode
// tenant's in one transaction (GrantBatch). It answers one error per entry
// (nil: handled, the entry may be acknowledged).
func (e *Engine) DispatchBatch(ctx context.Context, cellName string, es []cell.Entry) []error {
	errs := make([]error, len(es))
	byTenant := map[string][]int{}
	var tenants []string
	for i, en := range es {
		if e.dispatchMode(ctx, en.Tenant) != DispatchAssign {
			errs[i] = e.Dispatch(ctx, cellName, en)
			continue
		}
		if _, ok := byTenant[en.Tenant]; !ok {
			tenants = append(tenants, en.Tenant)
		}
		byTenant[en.Tenant] = append(byTenant[en.Tenant], i)
	}
	for _, tenant := range tenants {
		e.grantBatch(ctx, cellName, tenant, es, byTenant[tenant], errs)
	}
	return errs
}

// grantBatch grants one tenant's entries of a batch (indexes idx of es).
func (e *Engine) grantBatch(ctx context.Context, cellName, tenant string, es []cell.Entry, idx []int, errs []error) {
	t0 := time.Now()
	filters, err := e.tenantFilters(ctx, tenant)
	if err != nil {
		for _, i := range idx {
			errs[i] = err
		}
		return
	}
	actors, err := e.warmOf(ctx, tenant)
	if err != nil {
		actors = nil
	}
	var reqs []GrantRequest
	var at []int
	var chosen []WarmActor
	seen := map[string]bool{}
	for _, i := range idx {
		en := es[i]
		if !Wanted(filters, en.Job) {
			e.m.dispatched.WithLabelValues("filtered").Inc()
			continue
		}
		q := QueuedJob{Tenant: tenant, Cell: cellName, Job: en.Job, SeenAt: en.SeenAt, QueuedAt: en.QueuedAt,
			ClockErrorMS: en.ClockErrorMS, BoardClockErrorMS: en.BoardClockErrorMS, Agent: en.Agent, Worker: en.Worker}
		a, ok := e.choose(actors, nil)
		if !ok || seen[en.Job.Key] {
			// No warm actor (offered as in race mode), or the same job twice
			// in one read (the second is handled on its own: refused).
			errs[i] = e.Dispatch(ctx, cellName, en)
			continue
		}
		seen[en.Job.Key] = true
		e.noteGrant(a)
		reqs = append(reqs, GrantRequest{Job: q, Holder: Holder{Agent: a.Agent, Worker: a.Worker, Conn: a.Conn},
			SendWithin: e.cfg.LeaseFor, HardTimeout: e.cfg.HardTimeout})
		at = append(at, i)
		chosen = append(chosen, a)
	}
	if len(reqs) == 0 {
		return
	}
	e.m.batch.Observe(float64(len(reqs)))
	res, err := e.store.GrantBatch(ctx, tenant, reqs)
	if err != nil {
		// The transaction failed as a whole: each job on its own, so one
		// bad job cannot hold back the others.
		e.log.Warn("grant batch failed; granting its jobs one by one", "tenant", tenant, "jobs", len(reqs), "err", err)
		for _, i := range at {
			errs[i] = e.Dispatch(ctx, cellName, es[i])
		}
		return
	}
	e.m.panel.WithLabelValues(PanelStepBatch).Observe(time.Since(t0).Seconds())
	cells := e.Cells()
	var pub []cell.Published
	var sent []int
	msgs := make([]wire.LeaseGrant, len(res))
	for k, r := range res {
		if r.Err != nil {
			var ref *Refusal
			if !errors.As(r.Err, &ref) {
				// Refused for a reason that could not be read: the entry stays
				// pending and is dispatched again.
				errs[at[k]] = r.Err
				continue
			}
			e.m.grants.WithLabelValues(wireReason(r.Err)).Inc()
			continue
		}
		e.m.grants.WithLabelValues("granted").Inc()
		e.m.dispatched.WithLabelValues("granted").Inc()
		msg, body, err := e.grantBody(reqs[k].Job, chosen[k], r.Grant)
		if err != nil {
			continue
		}
		pub = append(pub, cell.Published{Replica: chosen[k].Replica, Body: body})
		sent = append(sent, k)
		msgs[k] = msg
	}
	if len(pub) == 0 || cells == nil {
		return
	}
	// One round trip for the batch's grants: one Redis hop each cost a
	// batch of 64 as much as its commit.
	ns, perrs := cells.PublishGrants(ctx, tenant, pub)
	for j, k := range sent {
		e.m.panel.WithLabelValues(PanelStepGrant).Observe(time.Since(t0).Seconds())
		e.published(ctx, reqs[k].Job, chosen[k], msgs[k], ns[j], perrs[j])
	}
}

// grantBody is the lease_grant for a committed grant and the note that
// carries it to the replica holding its actor.
func (e *Engine) grantBody(q QueuedJob, a WarmActor, g Grant) (wire.LeaseGrant, []byte, error) {
	msg := wire.LeaseGrant{GrantID: newID(), Worker: a.Worker, Job: q.Job, Token: g.Token, OperationID: g.OperationID,
		BookingKey: g.BookingKey, KeysHonoured: g.KeysHonoured, GrantedAt: g.GrantedAt, SendBy: g.SendBy,
		SendWithinMillis: g.SendWithin.Milliseconds(), HardTimeoutMillis: e.cfg.HardTimeout.Milliseconds(),
		SeenAt: q.SeenAt, QueuedAt: q.QueuedAt, Cell: q.Cell}
	body, err := json.Marshal(grantNote{Tenant: q.Tenant, Actor: a, Grant: msg, Sent: e.cfg.Clock.Now()})
	return msg, body, err
}

// sendGrant publishes a committed grant to the replica holding its actor.
func (e *Engine) sendGrant(ctx context.Context, cells *cell.Manager, q QueuedJob, a WarmActor, g Grant, t0 time.Time, step string) {
	msg, body, err := e.grantBody(q, a, g)
	if err != nil || cells == nil {
		return
	}
	n, err := cells.PublishGrant(ctx, q.Tenant, a.Replica, body)
	e.m.panel.WithLabelValues(step).Observe(time.Since(t0).Seconds())
	e.published(ctx, q, a, msg, n, err)
}

// published handles a grant's publication: n replicas received it, or err.
func (e *Engine) published(ctx context.Context, q QueuedJob, a WarmActor, msg wire.LeaseGrant, n int64, err error) {
	switch {
	case err != nil:
		// Whether a replica received it is unknown: the grant stands and,
		// with no outcome, becomes UNKNOWN at its deadline (or when the
		// actor's connection ends).
		e.log.Warn("grant not published; it settles by its deadline", "tenant", q.Tenant, "key", q.Job.Key, "err", err)
	case n == 0:
		// No replica subscribed: nothing can deliver it.
		go e.undelivered(context.WithoutCancel(ctx), q.Tenant, a, msg, "no panel replica holds the actor's connection")
	}
}
