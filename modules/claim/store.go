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
}

// LeaseRequest asks for the lease of one job.
type LeaseRequest struct {
	Tenant string
	Key    string
	Holder Holder
	// For is the lease's length, counted by the database clock.
	For time.Duration
	// Stage timestamps already known (agent ones corrected by clock offset).
	PublishedAt, SeenAt, QueuedAt time.Time
	ClockError                    time.Duration
	// LoadExpiresAt is when the job disappears from the board; the settled
	// key is kept at least until then.
	LoadExpiresAt time.Time
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
}

// ErrNotGranted means another worker holds the job, it is settled, or a pause
// switch is on: there is nothing to act on.
var ErrNotGranted = errors.New("claim: lease not granted")

// Refusal explains why a fenced statement did nothing.
type Refusal struct {
	Reason string // stale_token, not_holder, wrong_state, expired, paused, missing
	State  State
}

func (r *Refusal) Error() string {
	if r.State != "" {
		return fmt.Sprintf("claim: refused (%s, state %s)", r.Reason, r.State)
	}
	return "claim: refused (" + r.Reason + ")"
}

// Enqueuer inserts a job inside a transaction (River's client satisfies it).
type Enqueuer interface {
	InsertTx(ctx context.Context, tx pgx.Tx, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
}

// Store runs the claim statements.
type Store struct {
	pool  *pgxpool.Pool
	river Enqueuer
}

// NewStore returns a store on the application role's pool; river inserts the
// reconcile job of every UNKNOWN in the same transaction.
func NewStore(pool *pgxpool.Pool, river Enqueuer) *Store {
	return &Store{pool: pool, river: river}
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// leaseSQL grants the first lease with an insert, and a re-lease only from
// RELEASED or LEASED-and-expired, by one conditional upsert: ACTING and
// UNKNOWN are never re-leased. At READ COMMITTED a concurrent insert of the
// same key waits for the first to commit and then re-checks the condition
// against the committed row, so exactly one racer gets a row back. The pause
// switches are read in the same statement.
const leaseSQL = `
INSERT INTO claims AS c (tenant_id, target_job_key, state, token, holder_agent, holder_worker, operation_id,
                    lease_expires_at, leased_at, published_at, seen_at, queued_at, clock_error_ms, load_expires_at)
SELECT $1, $2, 'LEASED', nextval('claim_token'), $3, $4, gen_random_uuid(),
       clock_timestamp() + make_interval(secs => $5), clock_timestamp(), $6, $7, $8, $9, $10
WHERE NOT (SELECT paused FROM fleet_switches)
  AND NOT COALESCE((SELECT paused FROM tenants WHERE id = $1), true)
ON CONFLICT (tenant_id, target_job_key) DO UPDATE SET
    state = 'LEASED', token = EXCLUDED.token, holder_agent = EXCLUDED.holder_agent,
    holder_worker = EXCLUDED.holder_worker, operation_id = EXCLUDED.operation_id,
    lease_expires_at = EXCLUDED.lease_expires_at, leased_at = EXCLUDED.leased_at,
    published_at = COALESCE(EXCLUDED.published_at, c.published_at), seen_at = EXCLUDED.seen_at,
    queued_at = EXCLUDED.queued_at, clock_error_ms = EXCLUDED.clock_error_ms,
    load_expires_at = COALESCE(EXCLUDED.load_expires_at, c.load_expires_at),
    act_deadline = NULL, act_started_at = NULL, act_sent_at = NULL, confirmed_at = NULL,
    outcome = NULL, outcome_detail = NULL, settled_at = NULL, attempts = c.attempts + 1
WHERE c.state = 'RELEASED' OR (c.state = 'LEASED' AND c.lease_expires_at < clock_timestamp())
RETURNING token, operation_id::text, leased_at, lease_expires_at,
          (extract(epoch FROM lease_expires_at - clock_timestamp()) * 1000)::bigint, attempts`

// Lease tries to win the job for req.Holder. It returns ErrNotGranted when
// someone else holds it, it is settled, or the fleet or tenant is paused.
func (s *Store) Lease(ctx context.Context, req LeaseRequest) (Lease, error) {
	if req.For <= 0 {
		return Lease{}, errors.New("claim: lease length must be positive")
	}
	l := Lease{Key: req.Key}
	var remainingMS int64
	err := db.TenantRow(ctx, s.pool, req.Tenant, leaseSQL,
		req.Tenant, req.Key, req.Holder.Agent, req.Holder.Worker, req.For.Seconds(),
		nullTime(req.PublishedAt), nullTime(req.SeenAt), nullTime(req.QueuedAt),
		req.ClockError.Milliseconds(), nullTime(req.LoadExpiresAt),
	).Scan(&l.Token, &l.OperationID, &l.LeasedAt, &l.ExpiresAt, &remainingMS, &l.Attempt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, ErrNotGranted
	}
	if err != nil {
		return Lease{}, fmt.Errorf("claim: lease %s: %w", req.Key, err)
	}
	l.Remaining = time.Duration(remainingMS) * time.Millisecond
	return l, nil
}

// ActGrant is the permission to send the action.
type ActGrant struct {
	OperationID string
	Deadline    time.Time // the hard action deadline by the database clock
}

// startActingSQL is the one fenced statement before the click: token, holder,
// state, both pause switches and lease expiry by the database clock, so a
// worker that paused past its lease is refused whatever its own clock says.
const startActingSQL = `
UPDATE claims SET state = 'ACTING', act_started_at = clock_timestamp(),
       act_deadline = clock_timestamp() + make_interval(secs => $6)
WHERE tenant_id = $1 AND target_job_key = $2 AND token = $3
  AND holder_agent = $4 AND holder_worker = $5 AND state = 'LEASED'
  AND lease_expires_at > clock_timestamp()
  AND NOT (SELECT paused FROM fleet_switches)
  AND NOT (SELECT paused FROM tenants WHERE id = $1)
RETURNING operation_id::text, act_deadline`

// StartActing moves a lease to ACTING, or explains with a *Refusal why not.
// hardTimeout bounds the action: past it the sweeper makes the claim UNKNOWN.
func (s *Store) StartActing(ctx context.Context, tenant, key string, token int64, h Holder, hardTimeout time.Duration) (ActGrant, error) {
	var g ActGrant
	err := db.TenantRow(ctx, s.pool, tenant, startActingSQL, tenant, key, token, h.Agent, h.Worker, hardTimeout.Seconds()).
		Scan(&g.OperationID, &g.Deadline)
	if errors.Is(err, pgx.ErrNoRows) {
		return ActGrant{}, s.refusal(ctx, tenant, key, token, h, true)
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
	var expired, paused bool
	err := db.TenantRow(ctx, s.pool, tenant, `
		SELECT state, token, holder_agent::text, holder_worker, lease_expires_at <= clock_timestamp(),
		       (SELECT paused FROM fleet_switches) OR (SELECT paused FROM tenants WHERE id = $1)
		FROM claims WHERE tenant_id = $1 AND target_job_key = $2`, tenant, key).
		Scan(&state, &tok, &agent, &worker, &expired, &paused)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return &Refusal{Reason: "missing"}
	case err != nil:
		return fmt.Errorf("claim: %w", err)
	case tok != token:
		return &Refusal{Reason: "stale_token", State: state}
	case agent != h.Agent || worker != h.Worker:
		return &Refusal{Reason: "not_holder", State: state}
	case checkLease && state != Leased, !checkLease && state != Acting:
		return &Refusal{Reason: "wrong_state", State: state}
	case checkLease && paused:
		return &Refusal{Reason: "paused", State: state}
	case checkLease && expired:
		return &Refusal{Reason: "expired", State: state}
	}
	return &Refusal{Reason: "conflict", State: state}
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
	return river.InsertOpts{Queue: "reconcile", UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// Report records an actor's outcome. It checks token, holder and state but
// not expiry: a true CONFIRMED may arrive late. UNKNOWN and its reconcile job
// are written in one transaction, so no UNKNOWN is ever stranded.
func (s *Store) Report(ctx context.Context, tenant, key string, token int64, h Holder, o Outcome) error {
	var set string
	switch o.Result {
	case Confirmed:
		set = "state = 'CONFIRMED', outcome = 'CONFIRMED', confirmed_at = COALESCE($7, clock_timestamp()), settled_at = clock_timestamp()"
	case Taken:
		set = "state = 'TAKEN', outcome = 'TAKEN', settled_at = clock_timestamp()"
	case NotSent:
		set = "state = 'RELEASED', outcome = 'NOT_SENT', settled_at = clock_timestamp()"
	case Unknown:
		set = "state = 'UNKNOWN', outcome = 'UNKNOWN'"
	default:
		return fmt.Errorf("claim: %q is not an outcome an actor may report", o.Result)
	}
	q := `UPDATE claims SET ` + set + `, act_sent_at = COALESCE($6, act_sent_at), outcome_detail = $8
		WHERE tenant_id = $1 AND target_job_key = $2 AND token = $3 AND holder_agent = $4
		  AND holder_worker = $5 AND state = 'ACTING'`
	args := []any{tenant, key, token, h.Agent, h.Worker, nullTime(o.SentAt), nullTime(o.ConfirmedAt), truncate(o.Detail, 500)}
	var n int64
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, q, args...)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		if n == 1 && o.Result == Unknown {
			return s.enqueueReconcile(ctx, tx, tenant, key, token)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("claim: report %s: %w", key, err)
	}
	if n == 0 {
		return s.refusal(ctx, tenant, key, token, h, false)
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
			RETURNING target_job_key, token`, tenant)
		if err != nil {
			return err
		}
		type kt struct {
			key   string
			token int64
		}
		var moved []kt
		for rows.Next() {
			var k kt
			if err := rows.Scan(&k.key, &k.token); err != nil {
				return err
			}
			moved = append(moved, k)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, k := range moved {
			if err := s.enqueueReconcile(ctx, tx, tenant, k.key, k.token); err != nil {
				return err
			}
		}
		unknown = len(moved)
		tag, err := tx.Exec(ctx, `
			UPDATE claims SET state = 'RELEASED', outcome = 'RELEASED', outcome_detail = 'lease expired unused',
			       settled_at = clock_timestamp()
			WHERE tenant_id = $1 AND state = 'LEASED' AND lease_expires_at < clock_timestamp()`, tenant)
		released = int(tag.RowsAffected())
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("claim: sweep: %w", err)
	}
	return unknown, released, nil
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
	LeasedAt                     time.Time
	LeaseExpiresAt               time.Time
	ActStartedAt, ActSentAt      *time.Time
	ConfirmedAt, SettledAt       *time.Time
	PublishedAt, SeenAt, QueueAt *time.Time
}

// Get reads one claim.
func (s *Store) Get(ctx context.Context, tenant, key string) (Claim, error) {
	c := Claim{Tenant: tenant, Key: key}
	var outcome, detail *string
	err := db.TenantRow(ctx, s.pool, tenant, `
		SELECT state, token, holder_agent::text, holder_worker, operation_id::text, outcome, outcome_detail,
		       attempts, leased_at, lease_expires_at, act_started_at, act_sent_at, confirmed_at, settled_at,
		       published_at, seen_at, queued_at
		FROM claims WHERE tenant_id = $1 AND target_job_key = $2`, tenant, key).
		Scan(&c.State, &c.Token, &c.Holder.Agent, &c.Holder.Worker, &c.OperationID, &outcome, &detail,
			&c.Attempts, &c.LeasedAt, &c.LeaseExpiresAt, &c.ActStartedAt, &c.ActSentAt, &c.ConfirmedAt, &c.SettledAt,
			&c.PublishedAt, &c.SeenAt, &c.QueueAt)
	if err != nil {
		return Claim{}, fmt.Errorf("claim: get %s: %w", key, err)
	}
	if outcome != nil {
		c.Outcome = *outcome
	}
	if detail != nil {
		c.Detail = *detail
	}
	return c, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
