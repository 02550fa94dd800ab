package claim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/fleetwright/fleetwright/app/db"
)

// Holder is the worker a lease belongs to. The panel fills it from the
// authenticated agent, never from a message.
type Holder struct {
	Agent  string // agent id (uuid)
	Worker string // the worker's name inside that agent
	// Conn is the agent connection the request came on (uuid; empty when
	// unknown). A lease, and an action started, belong to it: when it ends
	// only its claims are settled (ConnLost).
	Conn string
}

// LeaseRequest asks for the lease of one job. The job's facts and its first
// three timestamps come from the panel's record of the queued job
// (claim_jobs), never from the request.
type LeaseRequest struct {
	Tenant string
	Key    string
	Holder Holder
	// For is the lease's length, counted by the database clock.
	For time.Duration
}

// Lease is a granted lease.
type Lease struct {
	Key         string
	Token       int64
	OperationID string
	LeasedAt    time.Time
	ExpiresAt   time.Time
	// Remaining is the lease time left as the database computed it when it
	// granted the lease; the actor's conservative deadline starts from it.
	Remaining time.Duration
	Attempt   int
	// BookingKey is the job's booking identity, the same on every lease of
	// the job: the actor sends it as the Idempotency-Key.
	BookingKey string
	// KeysHonoured is the tenant's setting (HonoursIdempotency) when the
	// lease was granted.
	KeysHonoured bool
}

// ErrNotGranted means another worker holds the job, it is settled, or a pause
// switch is on: there is nothing to act on.
var ErrNotGranted = errors.New("claim: lease not granted")

// Refusal explains why a statement did nothing.
type Refusal struct {
	// Reason is one of the Reason* constants.
	Reason string
	State  State
}

// Refusal reasons (the wire constants for the same cases are in modules/wire).
const (
	ReasonHeld       = "held"
	ReasonPaused     = "paused"
	ReasonUnknownJob = "unknown_job"
	ReasonFiltered   = "filtered"
	ReasonCapReached = "cap_reached"
	ReasonReview     = "review"
	ReasonStaleToken = "stale_token"
	ReasonNotHolder  = "not_holder"
	ReasonWrongState = "wrong_state"
	ReasonExpired    = "expired"
	ReasonMissing    = "missing"
	ReasonConflict   = "conflict"
	// ReasonNotDurable: the durability hold is on (the cluster has no
	// synchronous standby) and the tenant did not accept single-node
	// durability. Agents hear it as paused.
	ReasonNotDurable = "not_durable"
	// ReasonPlatformReview: the holder's account runs a platform that is
	// not a shipped sandbox and has no recorded review
	// (docs/LAW_REGISTER.md). Agents hear it as paused.
	ReasonPlatformReview = "platform_review"
)

func (r *Refusal) Error() string {
	if r.State != "" {
		return fmt.Sprintf("claim: refused (%s, state %s)", r.Reason, r.State)
	}
	return "claim: refused (" + r.Reason + ")"
}

// Is makes errors.Is(err, ErrNotGranted) true for every refusal.
func (r *Refusal) Is(target error) bool { return target == ErrNotGranted }

// Enqueuer inserts a job inside a transaction (River's client satisfies it).
type Enqueuer interface {
	InsertTx(ctx context.Context, tx pgx.Tx, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
}

// Store runs the claim statements.
type Store struct {
	pool   *pgxpool.Pool
	river  Enqueuer
	agents AgentNotifier
	// observer hears what applied evidence did (the engine's metrics and
	// conflict alarm); bound is the engine's clock error bound.
	observer func(EvidenceResult)
	bound    time.Duration
	// honours overrides HonoursIdempotencyKeys (tests).
	honours func(ctx context.Context, tenant string) (bool, error)
	gate    DurabilityGate
}

// DurabilityGate answers, from the panel's latest durability check, whether
// a tenant's lease and act statements are refused before they are sent (the
// hold is on and the tenant did not accept single-node durability: sent,
// they would wait for a standby that is not there, under strict synchronous
// mode) and whether they commit on the primary alone (the hold is on and the
// tenant accepted that). The statements read the hold themselves too.
type DurabilityGate func(tenant string) (refuse, local bool)

// SetDurabilityGate attaches the panel's durability check (nil: none, the
// embedded single node).
func (s *Store) SetDurabilityGate(g DurabilityGate) { s.gate = g }

// durability answers the gate for tenant; commit is the synchronous_commit
// the statement's transaction sets ("" with no gate: the server's own).
func (s *Store) durability(tenant string) (refuse bool, commit string) {
	if s.gate == nil {
		return false, ""
	}
	refuse, local := s.gate(tenant)
	if local {
		return refuse, "local"
	}
	// Set explicitly: while the hold is on, the panel's other writes commit
	// locally (so the console does not wait for a standby), and a claim
	// statement must never inherit that from its connection.
	return refuse, "on"
}

// commitSQL sets the synchronous_commit of the rest of the implicit
// transaction ($1: on, or local for a tenant that accepted single-node
// durability while the hold is on).
const commitSQL = `SELECT set_config('synchronous_commit', $1, true)`

// NewStore returns a store on the application role's pool; river inserts the
// reconcile job of every UNKNOWN in the same transaction.
func NewStore(pool *pgxpool.Pool, river Enqueuer) *Store {
	return &Store{pool: pool, river: river}
}

// SetEnqueuer sets the River client once it exists (its workers need the
// engine, the engine's store needs the client).
func (s *Store) SetEnqueuer(river Enqueuer) { s.river = river }

// Pool is the store's pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// dayStart is the start of the current UTC day by the database clock: the
// daily cap's window.
const dayStart = `(date_trunc('day', clock_timestamp() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')`

// capOK is true while the tenant may start one more claim that could become
// a booking today.
const capOK = `(t.daily_booking_cap IS NULL OR (SELECT count(*) FROM claims x WHERE x.tenant_id = $1
      AND x.state IN ('LEASED','ACTING','UNKNOWN','CONFIRMED') AND x.leased_at >= ` + dayStart + `
      AND x.target_job_key <> $2) < t.daily_booking_cap)`

// durableOK is true while the cluster promises that a commit is on two
// nodes (no durability hold), or the tenant (alias t) knowingly accepted
// single-node durability. Read inside the lease and act statements, as the
// pause switch is, so a hold set by any replica stops every replica's next
// statement.
const durableOK = `((SELECT durability_hold FROM fleet_switches) IS NULL OR t.single_node_ok)`

// platformOK is true while the holder agent's account runs a shipped
// sandbox spec or a platform with a recorded review in force
// (modules/platform/registry, docs/LAW_REGISTER.md): a real target claims
// nothing before its review. Read inside the lease, grant and act
// statements as the pause switch is; agent is the statement's parameter
// holding the holder agent.
func platformOK(agent string) string { return `platform_claims_ok(` + agent + `::uuid)` }

// wantedSQL is true when one of the tenant's enabled filters matches the
// panel's record of the job (the same rule as Filter.Match).
const wantedSQL = `EXISTS (SELECT 1 FROM claim_filters f WHERE f.tenant_id = $1 AND claim_filter_matches(f, j))`

// reviewOK is true when the job needs no review or an operator approved it.
const reviewOK = `(t.review_above_cents IS NULL OR j.rate_cents <= t.review_above_cents
      OR EXISTS (SELECT 1 FROM claim_reviews r WHERE r.tenant_id = $1 AND r.job_key = $2 AND r.state = 'APPROVED'))`

// afterUnknown is true for a claim row (alias a) released by the reconciler
// after an UNKNOWN: its attempt acted, and the outcome is a release (not
// NOT_SENT, whose attempt provably never sent).
func afterUnknown(a string) string {
	return `(` + a + `.outcome IN ('RELEASED', 'GIVEN_UP') AND ` + a + `.act_started_at IS NOT NULL)`
}

// reLeasable is true for a claim row (alias a) that may be leased again: a
// lease that expired unused, or a release; never one given up after an
// UNKNOWN, and one released after an UNKNOWN only within p seconds of a
// fresh complete look-up that found no booking (Store.Clear, run by the
// re-offer where the platform honours idempotency keys).
func reLeasable(a, p string) string {
	return `((` + a + `.state = 'LEASED' AND ` + a + `.lease_expires_at < clock_timestamp())
      OR (` + a + `.state = 'RELEASED' AND ` + a + `.outcome IS DISTINCT FROM 'GIVEN_UP'
          AND NOT (` + afterUnknown(a) + ` AND (` + a + `.cleared_at IS NULL
                   OR ` + a + `.cleared_at < clock_timestamp() - make_interval(secs => ` + p + `)))))`
}

// leaseSQL grants the first lease with an insert, and a re-lease only from
// RELEASED (not given up; cleared by a fresh look-up when it followed an
// UNKNOWN) or LEASED-and-expired, by one conditional upsert: ACTING and
// UNKNOWN are never re-leased. At READ COMMITTED a concurrent insert of the
// same key waits for the first to commit and then re-checks the condition
// against the committed row, so exactly one racer gets a row back. The pause
// switches, the tenant's filters (against the panel's record of the job, so
// Redis can never make a tenant book a load it did not want), the load's
// expiry, the daily cap and review are read in the same statement.
var leaseSQL = `
INSERT INTO claims AS c (tenant_id, target_job_key, state, token, holder_agent, holder_worker, operation_id,
                    lease_expires_at, leased_at, published_at, seen_at, queued_at, clock_error_ms, board_clock_error_ms, load_expires_at, cell)
SELECT $1, $2, 'LEASED', nextval('claim_token'), $3, $4, $7::uuid,
       clock_timestamp() + make_interval(secs => $5), clock_timestamp(),
       j.published_at, j.seen_at, j.queued_at, j.clock_error_ms, j.board_clock_error_ms, j.expires_at, j.cell
FROM claim_jobs j JOIN tenants t ON t.id = j.tenant_id
WHERE j.tenant_id = $1 AND j.job_key = $2
  AND NOT (SELECT paused FROM fleet_switches) AND NOT t.paused AND ` + durableOK + `
  AND ` + platformOK("$3") + `
  -- A restored database holds the tenant's leases until its bookings
  -- have been looked up (restore.go).
  AND NOT claim_restore_held($1)
  AND (j.expires_at IS NULL OR j.expires_at > clock_timestamp())
  -- A loser that already sees a live claim stops here, without queueing
  -- for the row lock; the ON CONFLICT condition below still decides.
  AND NOT EXISTS (SELECT 1 FROM claims x WHERE x.tenant_id = $1 AND x.target_job_key = $2
      AND NOT ` + reLeasable("x", "$6") + `)
  AND ` + wantedSQL + `
  AND ` + capOK + `
  AND ` + reviewOK + `
ON CONFLICT (tenant_id, target_job_key) DO UPDATE SET
    state = 'LEASED', token = EXCLUDED.token, holder_agent = EXCLUDED.holder_agent,
    holder_worker = EXCLUDED.holder_worker, operation_id = EXCLUDED.operation_id,
    lease_expires_at = EXCLUDED.lease_expires_at, leased_at = EXCLUDED.leased_at,
    published_at = EXCLUDED.published_at, seen_at = EXCLUDED.seen_at,
    queued_at = EXCLUDED.queued_at, clock_error_ms = EXCLUDED.clock_error_ms,
    board_clock_error_ms = EXCLUDED.board_clock_error_ms,
    load_expires_at = EXCLUDED.load_expires_at, cell = EXCLUDED.cell,
    act_deadline = NULL, act_started_at = NULL, act_sent_at = NULL, confirmed_at = NULL,
    outcome = NULL, outcome_detail = NULL, settled_at = NULL, attempts = c.attempts + 1,
    late_evidence = false, evidence_token = NULL, cleared_at = NULL
WHERE ` + reLeasable("c", "$6") + `
RETURNING token, operation_id::text, leased_at, lease_expires_at,
          (extract(epoch FROM lease_expires_at - clock_timestamp()) * 1000)::bigint, attempts,
          (SELECT booking_key::text FROM claim_jobs WHERE tenant_id = $1 AND job_key = $2), claim_keys_honoured($1)`

// Lease tries to win the job for req.Holder. When it is not granted the error
// is a *Refusal saying why (held, paused, unknown_job, filtered, cap_reached,
// review); errors.Is(err, ErrNotGranted) holds for all of them.
//
// The statement and the diagnosis of a refusal travel in one round trip:
// the diagnosis runs after the lease statement, with its own snapshot (READ
// COMMITTED), so a loser sees the winner's committed row.
func (s *Store) Lease(ctx context.Context, req LeaseRequest) (Lease, error) {
	if req.For <= 0 {
		return Lease{}, errors.New("claim: lease length must be positive")
	}
	refuse, commit := s.durability(req.Tenant)
	if refuse {
		return Lease{}, &Refusal{Reason: ReasonNotDurable}
	}
	l := Lease{Key: req.Key}
	op := newOperationID()
	var remainingMS int64
	b := &pgx.Batch{}
	b.Queue("SELECT set_config('app.tenant_id', $1, true), set_config('app.conn', $2, true)", req.Tenant, req.Holder.Conn)
	if commit != "" {
		b.Queue(commitSQL, commit)
	}
	b.Queue(leaseSQL, req.Tenant, req.Key, req.Holder.Agent, req.Holder.Worker, req.For.Seconds(), ClearanceFor.Seconds(), op)
	b.Queue(leaseDiagSQL, req.Tenant, req.Key, ClearanceFor.Seconds(), req.Holder.Agent)
	br := db.SendBatch(ctx, s.pool, b)
	defer br.Close()
	lost := func(err error) (Lease, error) {
		if !unknownCommit(err) {
			return Lease{}, fmt.Errorf("claim: lease %s: %w", req.Key, err)
		}
		br.Close()
		l, found, serr := s.settleLease(ctx, req, op)
		switch {
		case serr != nil:
			return Lease{}, fmt.Errorf("claim: lease %s: %w", req.Key, serr)
		case !found:
			return Lease{}, fmt.Errorf("claim: lease %s: %w (%v)", req.Key, ErrCommitLost, err)
		}
		return l, nil
	}
	if _, err := br.Exec(); err != nil {
		return lost(err)
	}
	if commit != "" {
		if _, err := br.Exec(); err != nil {
			return lost(err)
		}
	}
	err := br.QueryRow().Scan(&l.Token, &l.OperationID, &l.LeasedAt, &l.ExpiresAt, &remainingMS, &l.Attempt,
		&l.BookingKey, &l.KeysHonoured)
	if err == nil {
		l.Remaining = time.Duration(remainingMS) * time.Millisecond
		// The implicit transaction commits at the batch's end: only a
		// clean close says it did.
		if err := br.Close(); err != nil {
			return lost(err)
		}
		return l, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return lost(err)
	}
	var d leaseDiag
	err = scanDiag(br.QueryRow(), &d)
	if errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, &Refusal{Reason: ReasonUnknownJob}
	}
	if err != nil {
		return Lease{}, fmt.Errorf("claim: lease %s: %w", req.Key, err)
	}
	br.Close()
	return Lease{}, s.leaseRefusal(ctx, req.Tenant, req.Key, d)
}

type leaseDiag struct {
	globalPaused, tenantPaused, haveJob, expired, wanted, capFine, reviewFine bool
	rate                                                                      int64
	state                                                                     *string
	// blocked: a release that may not be leased again (given up, or not
	// cleared by a fresh look-up after an UNKNOWN), or a tenant held after
	// a restore.
	blocked bool
	// held: the durability hold stops this tenant.
	held bool
	// unreviewed: the holder's platform is a real target without a
	// recorded review.
	unreviewed bool
}

// scanDiag reads leaseDiagSQL's row.
func scanDiag(r pgx.Row, d *leaseDiag) error {
	return r.Scan(&d.globalPaused, &d.tenantPaused, &d.haveJob, &d.expired, &d.wanted, &d.capFine,
		&d.reviewFine, &d.rate, &d.state, &d.blocked, &d.held, &d.unreviewed)
}

var leaseDiagSQL = `
SELECT (SELECT paused FROM fleet_switches), t.paused, j.job_key IS NOT NULL,
       COALESCE(j.expires_at <= clock_timestamp(), false),
       j.job_key IS NOT NULL AND ` + wantedSQL + `, ` + capOK + `,
       j.job_key IS NULL OR ` + reviewOK + `, COALESCE(j.rate_cents, 0),
       (SELECT state FROM claims WHERE tenant_id = $1 AND target_job_key = $2),
       COALESCE((SELECT x.state = 'RELEASED' AND NOT ` + reLeasable("x", "$3") + ` FROM claims x
                 WHERE x.tenant_id = $1 AND x.target_job_key = $2), false) OR claim_restore_held($1),
       NOT ` + durableOK + `, NOT ` + platformOK("$4") + `
FROM tenants t LEFT JOIN claim_jobs j ON j.tenant_id = t.id AND j.job_key = $2
WHERE t.id = $1`

// leaseRefusal names the reason of a refused lease from its diagnosis. A
// job that needs review gets a pending review row here.
func (s *Store) leaseRefusal(ctx context.Context, tenant, key string, d leaseDiag) error {
	var st State
	if d.state != nil {
		st = State(*d.state)
	}
	switch {
	case d.globalPaused || d.tenantPaused:
		return &Refusal{Reason: ReasonPaused, State: st}
	case d.held:
		return &Refusal{Reason: ReasonNotDurable, State: st}
	case d.unreviewed:
		return &Refusal{Reason: ReasonPlatformReview, State: st}
	case !d.haveJob || d.expired:
		return &Refusal{Reason: ReasonUnknownJob, State: st}
	case st != "" && st != Released && st != Leased, d.blocked:
		return &Refusal{Reason: ReasonHeld, State: st}
	case !d.wanted:
		return &Refusal{Reason: ReasonFiltered, State: st}
	case !d.capFine:
		return &Refusal{Reason: ReasonCapReached, State: st}
	case !d.reviewFine:
		if err := s.requestReview(ctx, tenant, key, d.rate); err != nil {
			return err
		}
		return &Refusal{Reason: ReasonReview, State: st}
	}
	return &Refusal{Reason: ReasonHeld, State: st}
}

// ActGrant is the permission to send the action.
type ActGrant struct {
	OperationID string
	Deadline    time.Time // the hard action deadline by the database clock
}

// startActingSQL is the one fenced statement before the click: token, holder,
// state, both pause switches and lease expiry by the database clock, so a
// worker that paused past its lease is refused whatever its own clock says.
// The daily cap is checked in it too, exactly: when the tenant has a cap, the
// statement before it in the same implicit transaction takes the tenant's
// advisory lock, so ACTING starts of one tenant count each other.
var startActingSQL = `
UPDATE claims SET state = 'ACTING', act_started_at = clock_timestamp(),
       act_deadline = clock_timestamp() + make_interval(secs => $6)
FROM tenants t
WHERE t.id = $1 AND claims.tenant_id = $1 AND claims.target_job_key = $2 AND claims.token = $3
  AND claims.holder_agent = $4 AND claims.holder_worker = $5 AND claims.state = 'LEASED'
  AND claims.lease_expires_at > clock_timestamp()
  AND NOT (SELECT paused FROM fleet_switches) AND NOT t.paused AND ` + durableOK + `
  AND ` + platformOK("$4") + `
  AND (t.daily_booking_cap IS NULL OR (SELECT count(*) FROM claims x WHERE x.tenant_id = $1
      AND x.state IN ('ACTING','UNKNOWN','CONFIRMED') AND x.leased_at >= ` + dayStart + `) < t.daily_booking_cap)
RETURNING claims.operation_id::text, claims.act_deadline`

// StartActing moves a lease to ACTING, or explains with a *Refusal why not.
// hardTimeout bounds the action: past it the sweeper makes the claim UNKNOWN.
func (s *Store) StartActing(ctx context.Context, tenant, key string, token int64, h Holder, hardTimeout time.Duration) (ActGrant, error) {
	refuse, commit := s.durability(tenant)
	if refuse {
		return ActGrant{}, &Refusal{Reason: ReasonNotDurable}
	}
	var g ActGrant
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('app.tenant_id', $1, true), set_config('app.conn', $2, true),
		(SELECT count(*) FROM (SELECT pg_advisory_xact_lock(hashtextextended(id::text, 7))
		 FROM tenants WHERE id = $1::uuid AND daily_booking_cap IS NOT NULL) l)`, tenant, h.Conn)
	if commit != "" {
		b.Queue(commitSQL, commit)
	}
	b.Queue(startActingSQL, tenant, key, token, h.Agent, h.Worker, hardTimeout.Seconds())
	br := db.SendBatch(ctx, s.pool, b)
	_, err := br.Exec()
	if err == nil && commit != "" {
		_, err = br.Exec()
	}
	if err == nil {
		err = br.QueryRow().Scan(&g.OperationID, &g.Deadline)
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ActGrant{}, s.refusal(ctx, tenant, key, token, h, true)
	}
	if unknownCommit(err) {
		g, found, serr := s.settleActing(ctx, tenant, key, token, h)
		switch {
		case serr != nil:
			return ActGrant{}, fmt.Errorf("claim: start acting %s: %w", key, serr)
		case !found:
			return ActGrant{}, fmt.Errorf("claim: start acting %s: %w (%v)", key, ErrCommitLost, err)
		}
		return g, nil
	}
	if err != nil {
		return ActGrant{}, fmt.Errorf("claim: start acting %s: %w", key, err)
	}
	return g, nil
}

// refusal works out why a fenced statement matched nothing (the slow path).
func (s *Store) refusal(ctx context.Context, tenant, key string, token int64, h Holder, checkLease bool) error {
	var state State
	var tok int64
	var agent, worker string
	var expired, paused, held, capped, unreviewed bool
	err := db.TenantRow(ctx, s.pool, tenant, `
		SELECT c.state, c.token, c.holder_agent::text, c.holder_worker, c.lease_expires_at <= clock_timestamp(),
		       (SELECT paused FROM fleet_switches) OR t.paused, NOT `+durableOK+`,
		       t.daily_booking_cap IS NOT NULL AND (SELECT count(*) FROM claims x WHERE x.tenant_id = $1
		           AND x.state IN ('ACTING','UNKNOWN','CONFIRMED') AND x.leased_at >= `+dayStart+`) >= t.daily_booking_cap,
		       NOT `+platformOK("c.holder_agent")+`
		FROM claims c JOIN tenants t ON t.id = c.tenant_id
		WHERE c.tenant_id = $1 AND c.target_job_key = $2`, tenant, key).
		Scan(&state, &tok, &agent, &worker, &expired, &paused, &held, &capped, &unreviewed)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return &Refusal{Reason: ReasonMissing}
	case err != nil:
		return fmt.Errorf("claim: %w", err)
	case tok != token:
		return &Refusal{Reason: ReasonStaleToken, State: state}
	case agent != h.Agent || worker != h.Worker:
		return &Refusal{Reason: ReasonNotHolder, State: state}
	case checkLease && state != Leased, !checkLease && state != Acting:
		return &Refusal{Reason: ReasonWrongState, State: state}
	case checkLease && paused:
		return &Refusal{Reason: ReasonPaused, State: state}
	case checkLease && held:
		return &Refusal{Reason: ReasonNotDurable, State: state}
	case checkLease && unreviewed:
		return &Refusal{Reason: ReasonPlatformReview, State: state}
	case checkLease && expired:
		return &Refusal{Reason: ReasonExpired, State: state}
	case checkLease && capped:
		return &Refusal{Reason: ReasonCapReached, State: state}
	}
	return &Refusal{Reason: ReasonConflict, State: state}
}

// Outcome is what an actor reports after acting.
type Outcome struct {
	Result State // Confirmed, Taken, NotSent or Unknown
	// SentAt is when the request left the worker (corrected), if it did.
	SentAt time.Time
	// ConfirmedAt is when the board confirmed (corrected), for Confirmed.
	ConfirmedAt time.Time
	Detail      string
}

// ReconcileArgs is the River job that settles one UNKNOWN claim.
type ReconcileArgs struct {
	Tenant string `json:"tenant"`
	Key    string `json:"key"`
	Token  int64  `json:"token"`
}

// Kind implements river.JobArgs.
func (ReconcileArgs) Kind() string { return "claim.reconcile" }

// InsertOpts makes the job unique per claim attempt.
func (ReconcileArgs) InsertOpts() river.InsertOpts {
	// Retried with backoff for as long as it takes (about a week at the
	// default one-minute cap); the sweeper re-enqueues one discarded anyway.
	return river.InsertOpts{Queue: ReconcileQueue, MaxAttempts: 10000, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// Report records an actor's outcome. It checks token, holder and state but
// not expiry: a true CONFIRMED may arrive late (even after the sweeper made
// the claim UNKNOWN). UNKNOWN and its reconcile job are written in one
// transaction, so no UNKNOWN is ever stranded. A CONFIRMED of an earlier
// attempt of the job is never refused: it is applied as late evidence
// (reportSlow); stale TAKEN, NOT_SENT and UNKNOWN are refused.
func (s *Store) Report(ctx context.Context, tenant, key string, token int64, h Holder, o Outcome) error {
	return s.report(ctx, tenant, key, token, h, o, true)
}

// report is Report; lost says whether an outcome of a lease a restore lost
// is still to be recognised (reportLost reports with it false).
func (s *Store) report(ctx context.Context, tenant, key string, token int64, h Holder, o Outcome, lost bool) error {
	var set string
	switch o.Result {
	case Confirmed:
		set = "state = 'CONFIRMED', outcome = 'CONFIRMED', settled_at = clock_timestamp()"
	case Taken:
		set = "state = 'TAKEN', outcome = 'TAKEN', settled_at = clock_timestamp()"
	case NotSent:
		set = "state = 'RELEASED', outcome = 'NOT_SENT', settled_at = clock_timestamp()"
	case Unknown:
		set = "state = 'UNKNOWN', outcome = 'UNKNOWN'"
	default:
		return fmt.Errorf("claim: %q is not an outcome an actor may report", o.Result)
	}
	q := `UPDATE claims SET ` + set + `, act_sent_at = COALESCE($6, act_sent_at), outcome_detail = $8,
		confirmed_at = CASE WHEN $9 THEN COALESCE($7::timestamptz, clock_timestamp()) ELSE confirmed_at END
		WHERE tenant_id = $1 AND target_job_key = $2 AND token = $3 AND holder_agent = $4
		  AND holder_worker = $5 AND NOT late_evidence AND (state = 'ACTING' OR (state = 'UNKNOWN' AND $9))
		RETURNING ` + settledCols
	args := []any{tenant, key, token, h.Agent, h.Worker, nullTime(o.SentAt), nullTime(o.ConfirmedAt), truncate(o.Detail, 500),
		// A true CONFIRMED may arrive after the sweeper made the claim
		// UNKNOWN: it settles it as the reconciler would.
		o.Result == Confirmed}
	var n int64
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		st, err := scanSettled(tx.QueryRow(ctx, q, args...))
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		n = 1
		// One INSERT in this transaction; sealing the chain is asynchronous.
		d := st.detail()
		d["reported"] = string(o.Result)
		if err := appendAudit(ctx, tx, agentActor(h), "claim.outcome", key, d); err != nil {
			return err
		}
		if o.Result == Unknown {
			return s.enqueueReconcile(ctx, tx, tenant, key, token)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("claim: report %s: %w", key, err)
	}
	if n == 0 {
		// A lease of the history a restore lost: evidence, not refused.
		if lost {
			if yes, err := s.lostToken(ctx, token); err != nil || yes {
				if err != nil {
					return err
				}
				return s.reportLost(ctx, tenant, key, token, h, o)
			}
		}
		// A CONFIRMED of another attempt, a claim marked late_evidence, or
		// a refusal: decided under the claim's lock.
		return s.reportSlow(ctx, tenant, key, token, h, o)
	}
	return nil
}

func (s *Store) enqueueReconcile(ctx context.Context, tx pgx.Tx, tenant, key string, token int64) error {
	if _, err := s.river.InsertTx(ctx, tx, ReconcileArgs{Tenant: tenant, Key: key, Token: token}, nil); err != nil {
		return fmt.Errorf("enqueue reconcile: %w", err)
	}
	return nil
}

// Sweep settles what no report will: ACTING past its hard deadline becomes
// UNKNOWN (with its reconcile job, in the same transaction) and LEASED past
// its expiry is RELEASED. It runs for one tenant; the periodic job walks the
// tenants explicitly rather than relying on a policy that sees everything.
func (s *Store) Sweep(ctx context.Context, tenant string) (unknown, released int, err error) {
	err = db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			UPDATE claims SET state = 'UNKNOWN', outcome = 'UNKNOWN',
			       outcome_detail = 'no report before the hard action deadline'
			WHERE tenant_id = $1 AND state = 'ACTING' AND act_deadline < clock_timestamp()
			RETURNING `+settledCols, tenant)
		if err != nil {
			return err
		}
		moved, err := collectSettled(rows)
		if err != nil {
			return err
		}
		for _, st := range moved {
			if err := s.enqueueReconcile(ctx, tx, tenant, st.Key, st.Token); err != nil {
				return err
			}
			if err := appendAudit(ctx, tx, actorSweeper, "claim.unknown", st.Key, st.detail()); err != nil {
				return err
			}
		}
		unknown = len(moved)
		rows, err = tx.Query(ctx, `
			UPDATE claims SET state = 'RELEASED', outcome = 'RELEASED', outcome_detail = 'lease expired unused',
			       settled_at = clock_timestamp()
			WHERE tenant_id = $1 AND state = 'LEASED' AND lease_expires_at < clock_timestamp()
			RETURNING `+settledCols, tenant)
		if err != nil {
			return err
		}
		freed, err := collectSettled(rows)
		if err != nil {
			return err
		}
		for _, st := range freed {
			if err := appendAudit(ctx, tx, actorSweeper, "claim.released", st.Key, st.detail()); err != nil {
				return err
			}
		}
		released = len(freed)
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("claim: sweep: %w", err)
	}
	return unknown, released, nil
}

// settled is what the audit records of a claim when it leaves ACTING or
// LEASED: the lease and the action (whose grant is in claim_transitions)
// are thereby in the hash-chained log too.
type settled struct {
	Key, State, Outcome, Detail string
	Token                       int64
	Agent, Worker, OperationID  string
	LeasedAt                    time.Time
	ActStartedAt, ActSentAt     *time.Time
	ConfirmedAt                 *time.Time
}

const settledCols = `target_job_key, state, COALESCE(outcome, ''), COALESCE(outcome_detail, ''), token,
	holder_agent::text, holder_worker, operation_id::text, leased_at, act_started_at, act_sent_at, confirmed_at`

func scanSettled(r pgx.Row) (settled, error) {
	var st settled
	err := r.Scan(&st.Key, &st.State, &st.Outcome, &st.Detail, &st.Token, &st.Agent, &st.Worker, &st.OperationID,
		&st.LeasedAt, &st.ActStartedAt, &st.ActSentAt, &st.ConfirmedAt)
	return st, err
}

func collectSettled(rows pgx.Rows) ([]settled, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (settled, error) { return scanSettled(r) })
}

func (st settled) detail() map[string]any {
	ts := func(t *time.Time) any {
		if t == nil {
			return nil
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	return map[string]any{"state": st.State, "outcome": st.Outcome, "detail": st.Detail, "token": st.Token,
		"holder_agent": st.Agent, "holder_worker": st.Worker, "operation_id": st.OperationID,
		"leased_at": st.LeasedAt.UTC().Format(time.RFC3339Nano), "act_started_at": ts(st.ActStartedAt),
		"act_sent_at": ts(st.ActSentAt), "confirmed_at": ts(st.ConfirmedAt)}
}

// Claim is a claim row as the console and the reconciler see it.
type Claim struct {
	Tenant, Key                  string
	State                        State
	Token                        int64
	Holder                       Holder
	OperationID                  string
	Outcome, Detail              string
	Attempts                     int
	Cell                         string
	ClockErrorMS                 int64
	LeasedAt                     time.Time
	LeaseExpiresAt               time.Time
	ActStartedAt, ActSentAt      *time.Time
	ConfirmedAt, SettledAt       *time.Time
	PublishedAt, SeenAt, QueueAt *time.Time
	LoadExpiresAt                *time.Time
	// LateEvidence: confirmed from late evidence (or, while ACTING, marked
	// to be settled so); EvidenceToken is the attempt whose booking it is.
	LateEvidence  bool
	EvidenceToken *int64
	// BoardClockErrorMS bounds publish → detect (nil: the platform's
	// clock was not measured; see migrations/0225_board_clock.sql).
	BoardClockErrorMS *int64
}

const claimCols = `tenant_id::text, target_job_key, state, token, holder_agent::text, holder_worker, operation_id::text,
	COALESCE(outcome, ''), COALESCE(outcome_detail, ''), attempts, COALESCE(cell, ''), COALESCE(clock_error_ms, 0),
	leased_at, lease_expires_at, act_started_at, act_sent_at, confirmed_at, settled_at,
	published_at, seen_at, queued_at, load_expires_at, late_evidence, evidence_token, board_clock_error_ms`

func scanClaim(r pgx.CollectableRow) (Claim, error) {
	var c Claim
	err := r.Scan(&c.Tenant, &c.Key, &c.State, &c.Token, &c.Holder.Agent, &c.Holder.Worker, &c.OperationID,
		&c.Outcome, &c.Detail, &c.Attempts, &c.Cell, &c.ClockErrorMS,
		&c.LeasedAt, &c.LeaseExpiresAt, &c.ActStartedAt, &c.ActSentAt, &c.ConfirmedAt, &c.SettledAt,
		&c.PublishedAt, &c.SeenAt, &c.QueueAt, &c.LoadExpiresAt, &c.LateEvidence, &c.EvidenceToken, &c.BoardClockErrorMS)
	return c, err
}

// Get reads one claim.
func (s *Store) Get(ctx context.Context, tenant, key string) (Claim, error) {
	var c Claim
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+claimCols+` FROM claims WHERE tenant_id = $1 AND target_job_key = $2`, tenant, key)
		if err != nil {
			return err
		}
		c, err = pgx.CollectExactlyOneRow(rows, scanClaim)
		return err
	})
	if err != nil {
		return Claim{}, fmt.Errorf("claim: get %s: %w", key, err)
	}
	return c, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
