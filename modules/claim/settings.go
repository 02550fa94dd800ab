package claim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
)

// dbInTenant runs fn in a transaction scoped to tenant, or unscoped (only
// fleet-wide rows visible) when tenant is empty.
func dbInTenant(ctx context.Context, s *Store, tenant string, fn func(pgx.Tx) error) error {
	if tenant == "" {
		return pgx.BeginFunc(ctx, s.pool, fn)
	}
	return db.InTenant(ctx, s.pool, tenant, fn)
}

// Tenant is a tenant's claim settings.
type Tenant struct {
	ID, Slug, Name   string
	Cell             string
	Paused           bool
	DailyBookingCap  *int
	ReviewAboveCents *int64
}

// Tenants lists every tenant with its claim settings.
func (s *Store) Tenants(ctx context.Context) ([]Tenant, error) {
	rows, err := s.pool.Query(ctx, `SELECT id::text, slug, name, cell, paused, daily_booking_cap, review_above_cents
		FROM tenants ORDER BY slug`)
	if err != nil {
		return nil, fmt.Errorf("claim: tenants: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Tenant, error) {
		var t Tenant
		err := r.Scan(&t.ID, &t.Slug, &t.Name, &t.Cell, &t.Paused, &t.DailyBookingCap, &t.ReviewAboveCents)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim: tenants: %w", err)
	}
	return out, nil
}

// TenantBySlug finds a tenant by its slug.
func (s *Store) TenantBySlug(ctx context.Context, slug string) (Tenant, error) {
	var t Tenant
	err := s.pool.QueryRow(ctx, `SELECT id::text, slug, name, cell, paused, daily_booking_cap, review_above_cents
		FROM tenants WHERE slug = $1`, slug).
		Scan(&t.ID, &t.Slug, &t.Name, &t.Cell, &t.Paused, &t.DailyBookingCap, &t.ReviewAboveCents)
	if errors.Is(err, pgx.ErrNoRows) {
		return Tenant{}, fmt.Errorf("claim: no tenant %q", slug)
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("claim: tenant: %w", err)
	}
	return t, nil
}

// FleetPaused reports the global pause switch.
func (s *Store) FleetPaused(ctx context.Context) (bool, error) {
	var p bool
	if err := s.pool.QueryRow(ctx, `SELECT paused FROM fleet_switches`).Scan(&p); err != nil {
		return false, fmt.Errorf("claim: pause switch: %w", err)
	}
	return p, nil
}

// SetPaused turns a pause switch on or off, audited: the fleet's when tenant
// is empty, else the tenant's. Paused means no new lease and no LEASED →
// ACTING (both checked inside those statements); actions already started
// finish and are reported.
func (s *Store) SetPaused(ctx context.Context, a Auditor, actor, tenant string, paused bool) error {
	action := "claim.resume"
	if paused {
		action = "claim.pause"
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if tenant == "" {
			if _, err := tx.Exec(ctx, `UPDATE fleet_switches SET paused = $1, updated_at = now()`, paused); err != nil {
				return err
			}
			return a.Audit(ctx, tx, AuditEntry{Actor: actor, Action: action, Subject: "fleet"})
		}
		tag, err := tx.Exec(ctx, `UPDATE tenants SET paused = $2 WHERE id = $1`, tenant, paused)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("no tenant %s", tenant)
		}
		if _, err := tx.Exec(ctx, "SELECT set_config('app.tenant_id', $1, true)", tenant); err != nil {
			return err
		}
		return a.Audit(ctx, tx, AuditEntry{Tenant: tenant, Actor: actor, Action: action, Subject: "tenant"})
	})
	if err != nil {
		return fmt.Errorf("claim: pause: %w", err)
	}
	return nil
}

// Limits are a tenant's cap and review threshold (nil: none).
type Limits struct {
	DailyBookingCap  *int   `json:"daily_booking_cap"`
	ReviewAboveCents *int64 `json:"review_above_cents"`
}

// SetLimits changes a tenant's daily booking cap and review threshold, audited.
func (s *Store) SetLimits(ctx context.Context, a Auditor, actor, tenant string, l Limits) error {
	if (l.DailyBookingCap != nil && *l.DailyBookingCap < 0) || (l.ReviewAboveCents != nil && *l.ReviewAboveCents < 0) {
		return errors.New("claim: the cap and the review threshold cannot be negative")
	}
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE tenants SET daily_booking_cap = $2, review_above_cents = $3 WHERE id = $1`,
			tenant, l.DailyBookingCap, l.ReviewAboveCents)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("no tenant %s", tenant)
		}
		return a.Audit(ctx, tx, AuditEntry{Tenant: tenant, Actor: actor, Action: "claim.limits", Detail: l})
	})
	if err != nil {
		return fmt.Errorf("claim: limits: %w", err)
	}
	return nil
}

// Review is a lease waiting for (or given) an operator's decision.
type Review struct {
	Key         string
	RateCents   int64
	State       string
	RequestedAt time.Time
	DecidedAt   *time.Time
	DecidedBy   *string
}

func (s *Store) requestReview(ctx context.Context, tenant, key string, rate int64) error {
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO claim_reviews (tenant_id, job_key, rate_cents) VALUES ($1, $2, $3)
			ON CONFLICT DO NOTHING`, tenant, key, rate)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		return DBAuditor{}.Audit(ctx, tx, AuditEntry{Tenant: tenant, Actor: "claim-engine", Action: "claim.review.request",
			Subject: key, Detail: map[string]int64{"rate_cents": rate}})
	})
	if err != nil {
		return fmt.Errorf("claim: request review: %w", err)
	}
	return nil
}

// Reviews lists a tenant's reviews, pending first.
func (s *Store) Reviews(ctx context.Context, tenant string, limit int) ([]Review, error) {
	var out []Review
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT job_key, rate_cents, state, requested_at, decided_at, decided_by
			FROM claim_reviews ORDER BY state <> 'PENDING', requested_at DESC LIMIT $1`, limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Review, error) {
			var v Review
			err := r.Scan(&v.Key, &v.RateCents, &v.State, &v.RequestedAt, &v.DecidedAt, &v.DecidedBy)
			return v, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim: reviews: %w", err)
	}
	return out, nil
}

// Decide approves or rejects a pending review, audited. An approved job may
// be leased (the engine offers it again); a rejected one never is.
func (s *Store) Decide(ctx context.Context, a Auditor, actor, tenant, key string, approve bool) error {
	state, action := "REJECTED", "claim.review.reject"
	if approve {
		state, action = "APPROVED", "claim.review.approve"
	}
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE claim_reviews SET state = $3, decided_at = now(), decided_by = $4
			WHERE tenant_id = $1 AND job_key = $2 AND state = 'PENDING'`, tenant, key, state, actor)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return errors.New("no pending review of that job")
		}
		return a.Audit(ctx, tx, AuditEntry{Tenant: tenant, Actor: actor, Action: action, Subject: key})
	})
	if err != nil {
		return fmt.Errorf("claim: review: %w", err)
	}
	return nil
}

// auditFleet records a fleet-wide change (cells, routing) in its own
// transaction.
func auditFleet(ctx context.Context, e *Engine, actor, action, subject string, detail any) error {
	return pgx.BeginFunc(ctx, e.store.pool, func(tx pgx.Tx) error {
		return e.cfg.Auditor.Audit(ctx, tx, AuditEntry{Actor: actor, Action: action, Subject: subject, Detail: detail})
	})
}
