package claim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
)

// GrantRequest asks for one job to be recorded and granted to one chosen
// actor in one transaction (assign mode). The job's facts come from the
// queued entry the first time (the record is written once, ON CONFLICT DO
// NOTHING) and from the panel's record after that, never from an actor.
type GrantRequest struct {
	Job    QueuedJob
	Holder Holder
	// SendWithin: the booking request must leave within this long of the
	// grant, by the database clock (the gate refuses after it).
	SendWithin time.Duration
	// HardTimeout bounds the action after the send-by: the claim's
	// act_deadline is the grant + SendWithin + HardTimeout, past which the
	// sweeper makes it UNKNOWN.
	HardTimeout time.Duration
}

// Grant is a granted job: its claim is ACTING.
type Grant struct {
	Key         string
	Token       int64
	OperationID string
	GrantedAt   time.Time
	SendBy      time.Time
	ActDeadline time.Time
	// SendWithin is SendBy − GrantedAt as the database computed it.
	SendWithin   time.Duration
	BookingKey   string
	KeysHonoured bool
	// Recorded: this transaction wrote the panel's record of the job.
	Recorded bool
}

// capActOK is the daily cap counted exactly, as the act statement counts it
// (the tenant's advisory lock is taken first in the same transaction when a
// cap is set): a grant starts an action.
const capActOK = `(t.daily_booking_cap IS NULL OR (SELECT count(*) FROM claims x WHERE x.tenant_id = $1
      AND x.state IN ('ACTING','UNKNOWN','CONFIRMED') AND x.leased_at >= ` + dayStart + `
      AND x.target_job_key <> $2) < t.daily_booking_cap)`

// grantSQL is the lease statement written ACTING: the first grant is an
// INSERT, a re-grant happens only from RELEASED (not given up; cleared by a
// fresh look-up after an UNKNOWN) or LEASED-and-expired (ON CONFLICT … DO
// UPDATE … WHERE), so one conditional upsert on (tenant, job key) still
// decides between every replica, retry and mode. The pause switches, the
// load's expiry, the tenant's filters against the panel's record, the daily
// cap (exactly) and review are read in the same statement. For a grant
// lease_expires_at is the send-by time and act_deadline the send-by plus the
// hard action timeout.
var grantSQL = `
INSERT INTO claims AS c (tenant_id, target_job_key, state, token, holder_agent, holder_worker, operation_id,
                    lease_expires_at, leased_at, act_started_at, act_deadline,
                    published_at, seen_at, queued_at, clock_error_ms, board_clock_error_ms, load_expires_at, cell)
SELECT $1, $2, 'ACTING', nextval('claim_token'), $3, $4, $8::uuid,
       clock_timestamp() + make_interval(secs => $5), clock_timestamp(), clock_timestamp(),
       clock_timestamp() + make_interval(secs => $5 + $7),
       j.published_at, j.seen_at, j.queued_at, j.clock_error_ms, j.board_clock_error_ms, j.expires_at, j.cell
FROM claim_jobs j JOIN tenants t ON t.id = j.tenant_id
WHERE j.tenant_id = $1 AND j.job_key = $2
  AND NOT (SELECT paused FROM fleet_switches) AND NOT t.paused AND ` + durableOK + `
  AND ` + platformOK("$3") + `
  AND NOT claim_restore_held($1)
  AND (j.expires_at IS NULL OR j.expires_at > clock_timestamp())
  AND NOT EXISTS (SELECT 1 FROM claims x WHERE x.tenant_id = $1 AND x.target_job_key = $2
      AND NOT ` + reLeasable("x", "$6") + `)
  AND ` + wantedSQL + `
  AND ` + capActOK + `
  AND ` + reviewOK + `
ON CONFLICT (tenant_id, target_job_key) DO UPDATE SET
    state = 'ACTING', token = EXCLUDED.token, holder_agent = EXCLUDED.holder_agent,
    holder_worker = EXCLUDED.holder_worker, operation_id = EXCLUDED.operation_id,
    lease_expires_at = EXCLUDED.lease_expires_at, leased_at = EXCLUDED.leased_at,
    act_started_at = EXCLUDED.act_started_at, act_deadline = EXCLUDED.act_deadline,
    published_at = EXCLUDED.published_at, seen_at = EXCLUDED.seen_at,
    queued_at = EXCLUDED.queued_at, clock_error_ms = EXCLUDED.clock_error_ms,
    board_clock_error_ms = EXCLUDED.board_clock_error_ms,
    load_expires_at = EXCLUDED.load_expires_at, cell = EXCLUDED.cell,
    act_sent_at = NULL, confirmed_at = NULL,
    outcome = NULL, outcome_detail = NULL, settled_at = NULL, attempts = c.attempts + 1,
    late_evidence = false, evidence_token = NULL, cleared_at = NULL
WHERE ` + reLeasable("c", "$6") + `
RETURNING token, operation_id::text, leased_at, lease_expires_at, act_deadline,
          (extract(epoch FROM lease_expires_at - leased_at) * 1000)::bigint,
          (SELECT booking_key::text FROM claim_jobs WHERE tenant_id = $1 AND job_key = $2), claim_keys_honoured($1)`

// recordJobSQL is RecordJob's statement (the first record stands).
const recordJobSQL = `
INSERT INTO claim_jobs (tenant_id, job_key, cell, origin, destination, equipment, weight_lbs, miles, rate_cents,
                        published_at, expires_at, seen_at, queued_at, clock_error_ms, seen_by_agent, seen_by_worker,
                        board_clock_error_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
ON CONFLICT DO NOTHING RETURNING job_key`

func recordJobArgs(q QueuedJob) []any {
	j := q.Job
	var agent any
	if q.Agent != "" {
		agent = q.Agent
	}
	return []any{q.Tenant, j.Key, q.Cell, j.Origin, j.Destination, j.Equipment, j.WeightLbs, j.Miles, j.RateCents,
		nullTime(j.PublishedAt), nullTime(j.ExpiresAt), q.SeenAt, q.QueuedAt, q.ClockErrorMS, agent, q.Worker,
		q.BoardClockErrorMS}
}

// Grant records the job and grants it to req.Holder, written ACTING, in one
// transaction: one durable commit between the queued sighting and the
// grant's departure. The tenant scope, the cap's advisory lock, the record,
// the grant and (when refused) the diagnosis travel in one round trip; a
// refusal is a *Refusal as for Lease (review asks for a review).
func (s *Store) Grant(ctx context.Context, req GrantRequest) (Grant, error) {
	if req.SendWithin <= 0 || req.HardTimeout <= 0 {
		return Grant{}, errors.New("claim: grant: send-within and hard timeout must be positive")
	}
	q, h := req.Job, req.Holder
	if q.Tenant == "" || q.Job.Key == "" || h.Agent == "" || h.Worker == "" {
		return Grant{}, errors.New("claim: grant needs a tenant, a job key and a holder")
	}
	refuse, commit := s.durability(q.Tenant)
	if refuse {
		return Grant{}, &Refusal{Reason: ReasonNotDurable}
	}
	g := Grant{Key: q.Job.Key}
	op := newOperationID()
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('app.tenant_id', $1, true), set_config('app.conn', $2, true),
		(SELECT count(*) FROM (SELECT pg_advisory_xact_lock(hashtextextended(id::text, 7))
		 FROM tenants WHERE id = $1::uuid AND daily_booking_cap IS NOT NULL) l)`, q.Tenant, h.Conn)
	if commit != "" {
		b.Queue(commitSQL, commit)
	}
	b.Queue(recordJobSQL, recordJobArgs(q)...)
	b.Queue(grantSQL, q.Tenant, q.Job.Key, h.Agent, h.Worker, req.SendWithin.Seconds(), ClearanceFor.Seconds(),
		req.HardTimeout.Seconds(), op)
	b.Queue(leaseDiagSQL, q.Tenant, q.Job.Key, ClearanceFor.Seconds(), h.Agent)
	br := db.SendBatch(ctx, s.pool, b)
	defer br.Close()
	// A lost connection leaves the grant's commit unknown: it is read back
	// by its operation id, never granted again (see settle.go).
	lost := func(err error) (Grant, error) {
		if !unknownCommit(err) {
			return Grant{}, fmt.Errorf("claim: grant %s: %w", q.Job.Key, err)
		}
		br.Close()
		found, serr := s.settleGrants(ctx, q.Tenant, []string{op})
		if serr != nil {
			return Grant{}, fmt.Errorf("claim: grant %s: %w", q.Job.Key, serr)
		}
		if g, ok := found[op]; ok {
			return g, nil
		}
		return Grant{}, fmt.Errorf("claim: grant %s: %w (%v)", q.Job.Key, ErrCommitLost, err)
	}
	if _, err := br.Exec(); err != nil {
		return lost(err)
	}
	if commit != "" {
		if _, err := br.Exec(); err != nil {
			return lost(err)
		}
	}
	var recorded string
	if err := br.QueryRow().Scan(&recorded); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return lost(err)
	}
	g.Recorded = recorded != ""
	var withinMS int64
	err := br.QueryRow().Scan(&g.Token, &g.OperationID, &g.GrantedAt, &g.SendBy, &g.ActDeadline, &withinMS,
		&g.BookingKey, &g.KeysHonoured)
	if err == nil {
		g.SendWithin = time.Duration(withinMS) * time.Millisecond
		if err := br.Close(); err != nil {
			return lost(err)
		}
		return g, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return lost(err)
	}
	var d leaseDiag
	err = scanDiag(br.QueryRow(), &d)
	if errors.Is(err, pgx.ErrNoRows) {
		return g, &Refusal{Reason: ReasonUnknownJob}
	}
	if err != nil {
		return g, fmt.Errorf("claim: grant %s: %w", q.Job.Key, err)
	}
	if err := br.Close(); err != nil {
		return g, fmt.Errorf("claim: grant %s: %w", q.Job.Key, err)
	}
	return g, s.leaseRefusal(ctx, q.Tenant, q.Job.Key, d)
}

// gateSQL is the gate's fenced check: read-only, one round trip, no commit.
// It answers with what a refusal needs to name its reason.
var gateSQL = `
SELECT c.token, c.holder_agent::text, c.holder_worker, c.state,
       -- A platform review withdrawn after the grant holds its send as
       -- a pause does.
       (SELECT paused FROM fleet_switches) OR t.paused OR NOT ` + platformOK("c.holder_agent") + `,
       clock_timestamp() < c.lease_expires_at - make_interval(secs => $3)
FROM claims c JOIN tenants t ON t.id = c.tenant_id
WHERE c.tenant_id = $1 AND c.target_job_key = $2`

// GateCheck is the last check before a granted action's request leaves:
// token, holder, state ACTING, both pause switches, and the send-by time
// minus margin, all by the database clock. It writes nothing. A refusal is a
// *Refusal (stale_token, not_holder, wrong_state, paused, expired).
func (s *Store) GateCheck(ctx context.Context, tenant, key string, token int64, h Holder, margin time.Duration) error {
	var (
		tok            int64
		agent, worker  string
		state          State
		paused, inTime bool
	)
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('app.tenant_id', $1, true)`, tenant)
	b.Queue(gateSQL, tenant, key, margin.Seconds())
	br := db.SendBatch(ctx, s.pool, b)
	_, err := br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&tok, &agent, &worker, &state, &paused, &inTime)
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return &Refusal{Reason: ReasonMissing}
	case err != nil:
		return fmt.Errorf("claim: gate %s: %w", key, err)
	case tok != token:
		return &Refusal{Reason: ReasonStaleToken, State: state}
	case agent != h.Agent || worker != h.Worker:
		return &Refusal{Reason: ReasonNotHolder, State: state}
	case state != Acting:
		return &Refusal{Reason: ReasonWrongState, State: state}
	case paused:
		return &Refusal{Reason: ReasonPaused, State: state}
	case !inTime:
		return &Refusal{Reason: ReasonExpired, State: state}
	}
	return nil
}
