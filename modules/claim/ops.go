package claim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// QueuedJob is the panel's record of a queued job.
type QueuedJob struct {
	Tenant       string
	Cell         string
	Job          wire.Job
	SeenAt       time.Time
	QueuedAt     time.Time
	ClockErrorMS int64
	// BoardClockErrorMS: see cell.Entry (nil: not measured).
	BoardClockErrorMS *int64
	Agent             string
	Worker            string
	// AfterUnknown (Unleased only): released after an UNKNOWN where the
	// platform honours idempotency keys; offered again only after a fresh
	// complete look-up (Engine.reoffer).
	AfterUnknown bool
}

// RecordJob writes the panel's record of a job the first time it is queued
// (ON CONFLICT DO NOTHING: the first record stands, so a later sighting
// cannot change the facts the filters are checked against). It reports
// whether this call wrote it.
func (s *Store) RecordJob(ctx context.Context, q QueuedJob) (bool, error) {
	var key string
	err := db.TenantRow(ctx, s.pool, q.Tenant, recordJobSQL, recordJobArgs(q)...).Scan(&key)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("claim: record job %s: %w", q.Job.Key, err)
	}
	return true, nil
}

// JobRecord reads the panel's record of a job.
func (s *Store) JobRecord(ctx context.Context, tenant, key string) (QueuedJob, error) {
	q := QueuedJob{Tenant: tenant}
	var pub, exp *time.Time
	err := db.TenantRow(ctx, s.pool, tenant, `SELECT job_key, cell, origin, destination, equipment, weight_lbs, miles,
		rate_cents, published_at, expires_at, seen_at, queued_at, clock_error_ms, board_clock_error_ms FROM claim_jobs
		WHERE tenant_id = $1 AND job_key = $2`, tenant, key).
		Scan(&q.Job.Key, &q.Cell, &q.Job.Origin, &q.Job.Destination, &q.Job.Equipment, &q.Job.WeightLbs, &q.Job.Miles,
			&q.Job.RateCents, &pub, &exp, &q.SeenAt, &q.QueuedAt, &q.ClockErrorMS, &q.BoardClockErrorMS)
	if err != nil {
		return QueuedJob{}, fmt.Errorf("claim: job %s: %w", key, err)
	}
	if pub != nil {
		q.Job.PublishedAt = *pub
	}
	if exp != nil {
		q.Job.ExpiresAt = *exp
	}
	return q, nil
}

// LostResult counts what AgentLost changed.
type LostResult struct {
	Unknown  []string // keys that were ACTING: now UNKNOWN, each with a reconcile job
	Released []string // keys that were only LEASED: released (acting needs the panel)
}

// AgentLost handles an agent connection that is gone: the claims it holds
// through that connection (conn; every claim of the agent when conn is
// empty) are settled — ACTING ones become UNKNOWN with their reconcile jobs
// in the same transaction (the board may have committed), LEASED ones are
// released (they cannot move to ACTING without the panel, so nothing of them
// can reach the board). Claims the same agent holds through a newer
// connection are never touched.
func (s *Store) AgentLost(ctx context.Context, tenant, agent, conn string) (LostResult, error) {
	var res LostResult
	var connArg any
	if conn != "" {
		connArg = conn
	}
	// $3 NULL: the whole agent (no connection known).
	const ofConn = ` AND ($3::uuid IS NULL OR holder_conn = $3::uuid)`
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `UPDATE claims SET state = 'UNKNOWN', outcome = 'UNKNOWN',
			outcome_detail = 'the agent lost its connection while acting'
			WHERE tenant_id = $1 AND holder_agent = $2 AND state = 'ACTING'`+ofConn+` RETURNING `+settledCols, tenant, agent, connArg)
		if err != nil {
			return err
		}
		moved, err := collectSettled(rows)
		if err != nil {
			return err
		}
		for _, m := range moved {
			if err := s.enqueueReconcile(ctx, tx, tenant, m.Key, m.Token); err != nil {
				return err
			}
			if err := appendAudit(ctx, tx, actorGateway, "claim.unknown", m.Key, m.detail()); err != nil {
				return err
			}
			res.Unknown = append(res.Unknown, m.Key)
		}
		rows, err = tx.Query(ctx, `UPDATE claims SET state = 'RELEASED', outcome = 'RELEASED',
			outcome_detail = 'the agent lost its connection before acting', settled_at = clock_timestamp()
			WHERE tenant_id = $1 AND holder_agent = $2 AND state = 'LEASED'`+ofConn+` RETURNING `+settledCols, tenant, agent, connArg)
		if err != nil {
			return err
		}
		freed, err := collectSettled(rows)
		if err != nil {
			return err
		}
		for _, m := range freed {
			if err := appendAudit(ctx, tx, actorGateway, "claim.released", m.Key, m.detail()); err != nil {
				return err
			}
			res.Released = append(res.Released, m.Key)
		}
		return nil
	})
	if err != nil {
		return LostResult{}, fmt.Errorf("claim: agent lost: %w", err)
	}
	return res, nil
}

// Resolution is how the reconciler settles an UNKNOWN claim.
type Resolution struct {
	Confirm bool
	// ConfirmedAt is the board's booking time (Confirm only).
	ConfirmedAt time.Time
	// GiveUp (a release only): booking the job again is not safe (the
	// platform does not honour idempotency keys), so the release is final —
	// outcome GIVEN_UP, never leased again. Either way the job is watched
	// until its load expires, so a late commit is still found.
	GiveUp   bool
	Evidence any
}

// ErrTooEarly refuses a release before grace has passed since the action
// started, by the database clock.
var ErrTooEarly = errors.New("claim: grace has not passed since the action started")

// Resolve settles an UNKNOWN claim (still holding token) as CONFIRMED or
// RELEASED, with the evidence audited in the same transaction. A release is
// refused with ErrTooEarly before act_started_at + grace by the database
// clock; a claim no longer UNKNOWN with that token is a *Refusal.
func (s *Store) Resolve(ctx context.Context, tenant, key string, token int64, grace time.Duration, r Resolution) error {
	var n int64
	var early bool
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		var q string
		args := []any{tenant, key, token}
		action := "claim.reconcile.release"
		if r.Confirm {
			action = "claim.reconcile.confirm"
			q = `UPDATE claims SET state = 'CONFIRMED', outcome = 'CONFIRMED', settled_at = clock_timestamp(),
				confirmed_at = COALESCE(confirmed_at, $4), outcome_detail = 'reconciled: the board has our booking'
				WHERE tenant_id = $1 AND target_job_key = $2 AND token = $3 AND state = 'UNKNOWN'`
			args = append(args, nullTime(r.ConfirmedAt))
		} else {
			q = `UPDATE claims SET state = 'RELEASED', settled_at = clock_timestamp(),
				outcome = CASE WHEN $5 THEN 'GIVEN_UP' ELSE 'RELEASED' END,
				outcome_detail = CASE WHEN $5
				    THEN 'given up after an unknown outcome: a complete look-up found no booking after grace, and the platform does not honour idempotency keys'
				    ELSE 'reconciled: a complete look-up found no booking after grace' END
				WHERE tenant_id = $1 AND target_job_key = $2 AND token = $3 AND state = 'UNKNOWN' AND NOT late_evidence
				  AND act_started_at + make_interval(secs => $4) <= clock_timestamp()`
			args = append(args, grace.Seconds(), r.GiveUp)
			if r.GiveUp {
				action = "claim.reconcile.give_up"
			}
		}
		tag, err := tx.Exec(ctx, q, args...)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		if n == 0 {
			if !r.Confirm {
				err := tx.QueryRow(ctx, `SELECT state = 'UNKNOWN' AND token = $3 AND NOT late_evidence FROM claims
					WHERE tenant_id = $1 AND target_job_key = $2`, tenant, key, token).Scan(&early)
				if err != nil && !errors.Is(err, pgx.ErrNoRows) {
					return err
				}
			}
			return nil
		}
		if err := appendAudit(ctx, tx, actorReconciler, action, key, map[string]any{"token": token, "evidence": r.Evidence}); err != nil {
			return err
		}
		if !r.Confirm {
			// The released attempt's fate stays in doubt until the load
			// expires: the job is looked up again with backoff.
			_, err := s.watchIfInDoubt(ctx, tx, tenant, key)
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("claim: resolve %s: %w", key, err)
	}
	if n == 0 {
		if early {
			return ErrTooEarly
		}
		c, err := s.Get(ctx, tenant, key)
		if err != nil {
			return &Refusal{Reason: ReasonMissing}
		}
		if c.Token != token {
			return &Refusal{Reason: ReasonStaleToken, State: c.State}
		}
		return &Refusal{Reason: ReasonWrongState, State: c.State}
	}
	return nil
}

// GraceLeft is how long until grace has passed since the action started, by
// the database clock (0 or less: passed).
func (s *Store) GraceLeft(ctx context.Context, tenant, key string, grace time.Duration) (time.Duration, error) {
	var ms int64
	err := db.TenantRow(ctx, s.pool, tenant, `SELECT COALESCE((extract(epoch FROM
		act_started_at + make_interval(secs => $3) - clock_timestamp()) * 1000)::bigint, 0)
		FROM claims WHERE tenant_id = $1 AND target_job_key = $2`, tenant, key, grace.Seconds()).Scan(&ms)
	if err != nil {
		return 0, fmt.Errorf("claim: grace: %w", err)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// Stranded re-enqueues a reconcile job for every UNKNOWN claim of the tenant
// older than minAge (a job River discarded after its last attempt); unique
// jobs make a repeat harmless.
func (s *Store) Stranded(ctx context.Context, tenant string, minAge time.Duration) (int, error) {
	n := 0
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT target_job_key, token FROM claims c WHERE tenant_id = $1 AND state = 'UNKNOWN'
			AND COALESCE(act_started_at, leased_at) < clock_timestamp() - make_interval(secs => $2)
			AND NOT EXISTS (SELECT 1 FROM river_job r WHERE r.kind = 'claim.reconcile'
			    AND r.state IN ('available','pending','retryable','running','scheduled')
			    AND r.args->>'tenant' = $1::text AND r.args->>'key' = c.target_job_key)`, tenant, minAge.Seconds())
		if err != nil {
			return err
		}
		var key string
		var token int64
		var todo []ReconcileArgs
		if _, err := pgx.ForEachRow(rows, []any{&key, &token}, func() error {
			todo = append(todo, ReconcileArgs{Tenant: tenant, Key: key, Token: token})
			return nil
		}); err != nil {
			return err
		}
		for _, a := range todo {
			if err := s.enqueueReconcile(ctx, tx, a.Tenant, a.Key, a.Token); err != nil {
				return err
			}
		}
		n = len(todo)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("claim: stranded: %w", err)
	}
	return n, nil
}

// Archive moves the tenant's settled claims (CONFIRMED, TAKEN, RELEASED)
// whose load expired on the board more than margin ago into claims_archive,
// and forgets expired job records. A key is never forgotten while its load
// can still be booked: a late sighting would book it again. Claims without a
// known expiry are kept. The expiry is the board's clock and the comparison
// the database's: margin must be at least the clock error bound the engine
// tolerates (NewEngine refuses a smaller ArchiveMargin).
func (s *Store) Archive(ctx context.Context, tenant string, margin time.Duration) (int, error) {
	var n int64
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		// By column name (through jsonb), not position: columns added to
		// claims later land after archived_at in claims_archive.
		tag, err := tx.Exec(ctx, `WITH moved AS (
				DELETE FROM claims WHERE tenant_id = $1 AND state IN ('CONFIRMED','TAKEN','RELEASED')
				  AND load_expires_at < clock_timestamp() - make_interval(secs => $2)
				RETURNING *)
			INSERT INTO claims_archive SELECT r.* FROM moved m,
			    jsonb_populate_record(NULL::claims_archive, to_jsonb(m) || jsonb_build_object('archived_at', clock_timestamp())) r`,
			tenant, margin.Seconds())
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		_, err = tx.Exec(ctx, `DELETE FROM claim_jobs j WHERE tenant_id = $1
			AND expires_at < clock_timestamp() - make_interval(secs => $2)
			AND NOT EXISTS (SELECT 1 FROM claims c WHERE c.tenant_id = j.tenant_id AND c.target_job_key = j.job_key)`,
			tenant, margin.Seconds())
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("claim: archive: %w", err)
	}
	return int(n), nil
}

// Duplicate is a load the board shows booked more than once for the client.
type Duplicate struct {
	Key      string
	Bookings int
	Evidence string
	FoundAt  time.Time
}

// RecordDuplicate stores board evidence of a duplicate confirmation (the
// highest count seen wins), audited when new or grown.
func (s *Store) RecordDuplicate(ctx context.Context, tenant, key string, bookings []wire.Booking) (bool, error) {
	if len(bookings) < 2 {
		return false, nil
	}
	grown := false
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO claim_duplicates (tenant_id, job_key, bookings, evidence)
			VALUES ($1, $2, $3, $4) ON CONFLICT (tenant_id, job_key) DO UPDATE
			SET bookings = EXCLUDED.bookings, evidence = EXCLUDED.evidence, found_at = now()
			WHERE claim_duplicates.bookings < EXCLUDED.bookings`, tenant, key, len(bookings), bookings)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		grown = true
		return appendAudit(ctx, tx, actorDuplicates, "claim.duplicate", key, map[string]any{"bookings": bookings})
	})
	if err != nil {
		return false, fmt.Errorf("claim: record duplicate: %w", err)
	}
	return grown, nil
}

// DuplicateConfirmations is the tenant's count of extra bookings the board
// showed (each load booked n times counts n − 1), and the loads concerned.
func (s *Store) DuplicateConfirmations(ctx context.Context, tenant string) (int, []Duplicate, error) {
	var out []Duplicate
	total := 0
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT job_key, bookings, evidence::text, found_at FROM claim_duplicates ORDER BY found_at DESC`)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Duplicate, error) {
			var d Duplicate
			err := r.Scan(&d.Key, &d.Bookings, &d.Evidence, &d.FoundAt)
			total += d.Bookings - 1
			return d, err
		})
		return err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("claim: duplicates: %w", err)
	}
	return total, out, nil
}

// Recent lists a tenant's claims leased within the window, newest first,
// optionally only one state or one worker.
func (s *Store) Recent(ctx context.Context, tenant string, window time.Duration, state State, worker string, limit int) ([]Claim, error) {
	var out []Claim
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+claimCols+` FROM claims
			WHERE tenant_id = $1 AND leased_at >= clock_timestamp() - make_interval(secs => $2)
			  AND ($3 = '' OR state = $3) AND ($4 = '' OR holder_worker = $4)
			ORDER BY leased_at DESC LIMIT $5`, tenant, window.Seconds(), string(state), worker, limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, scanClaim)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim: recent: %w", err)
	}
	return out, nil
}

// Unleased lists the tenant's queued jobs that nobody holds: never leased, or
// RELEASED (NOT_SENT, an expired lease, a reconciled release not given up),
// queued between
// window and olderThan ago and not expired on the board — the jobs worth
// offering again.
func (s *Store) Unleased(ctx context.Context, tenant string, olderThan, window time.Duration, limit int) ([]QueuedJob, error) {
	var out []QueuedJob
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			SELECT j.cell, j.job_key, j.origin, j.destination, j.equipment, j.weight_lbs, j.miles, j.rate_cents,
			       j.published_at, j.expires_at, j.seen_at, j.queued_at, COALESCE(`+afterUnknown("c")+`, false)
			FROM claim_jobs j
			LEFT JOIN claims c ON c.tenant_id = j.tenant_id AND c.target_job_key = j.job_key
			WHERE (c.tenant_id IS NULL OR (c.state = 'RELEASED' AND c.outcome IS DISTINCT FROM 'GIVEN_UP'))
			  AND j.queued_at < clock_timestamp() - make_interval(secs => $1)
			  AND j.queued_at > clock_timestamp() - make_interval(secs => $2)
			  AND (j.expires_at IS NULL OR j.expires_at > clock_timestamp())
			ORDER BY j.queued_at LIMIT $3`, olderThan.Seconds(), window.Seconds(), limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			q := QueuedJob{Tenant: tenant}
			var published, expires *time.Time
			if err := rows.Scan(&q.Cell, &q.Job.Key, &q.Job.Origin, &q.Job.Destination, &q.Job.Equipment, &q.Job.WeightLbs,
				&q.Job.Miles, &q.Job.RateCents, &published, &expires, &q.SeenAt, &q.QueuedAt, &q.AfterUnknown); err != nil {
				return err
			}
			if published != nil {
				q.Job.PublishedAt = *published
			}
			if expires != nil {
				q.Job.ExpiresAt = *expires
			}
			out = append(out, q)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("claim: unleased jobs: %w", err)
	}
	return out, nil
}
