package claim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/tenant"
)

// Invalid is bad input: its text is meant for the person who typed it, and
// nothing was changed.
type Invalid string

func (e Invalid) Error() string { return string(e) }

// allTenants reads every tenant (the sweeps and the global pause walk
// them); a helper because most functions here name a tenant id "tenant".
func (s *Store) allTenants(ctx context.Context) ([]tenant.Tenant, error) {
	return tenant.List(ctx, s.pool)
}

// FleetPaused reports the global pause switch.
func (s *Store) FleetPaused(ctx context.Context) (bool, error) {
	var p bool
	if err := s.pool.QueryRow(ctx, `SELECT paused FROM fleet_switches`).Scan(&p); err != nil {
		return false, fmt.Errorf("claim: pause switch: %w", err)
	}
	return p, nil
}

// PauseState is a pause switch as people read it: on or off, since when
// and by whom (Since is nil for a switch that is off, or was set before it
// was recorded).
type PauseState struct {
	Paused bool
	Since  *time.Time
	By     string
}

// Words says the switch's state: "Claiming", or "Paused since 20:14 UTC by
// admin@example.com".
func (p PauseState) Words() string {
	if !p.Paused {
		return "Claiming"
	}
	s := "Paused"
	if p.Since != nil {
		if time.Since(*p.Since) > 20*time.Hour {
			s += " since " + p.Since.UTC().Format("Jan 2 15:04 UTC")
		} else {
			s += " since " + p.Since.UTC().Format("15:04 UTC")
		}
	}
	if p.By != "" {
		s += " by " + p.By
	}
	return s
}

// PauseOf reads a pause switch: the fleet's when tenant is empty, else the
// tenant's.
func (s *Store) PauseOf(ctx context.Context, tenant string) (PauseState, error) {
	var p PauseState
	var by *string
	var err error
	if tenant == "" {
		err = s.pool.QueryRow(ctx, `SELECT paused, paused_at, paused_by FROM fleet_switches`).Scan(&p.Paused, &p.Since, &by)
	} else {
		err = db.TenantRow(ctx, s.pool, tenant, `SELECT paused, paused_at, paused_by FROM tenants WHERE id = $1`, tenant).Scan(&p.Paused, &p.Since, &by)
	}
	if err != nil {
		return p, fmt.Errorf("claim: pause switch: %w", err)
	}
	if by != nil {
		p.By = *by
	}
	return p, nil
}

// AgentNotifier tells a tenant's agents that a pause switch changed, inside
// the transaction of the change (tenant scope), so the switch and the news
// commit together. The fleet store implements it (fleet.PauseNotifier):
// every live agent gets a configure command whose pause state is read when
// it is sent, and the connected ones are woken at commit.
type AgentNotifier interface {
	PauseChanged(ctx context.Context, tx pgx.Tx, tenant string, paused bool, by audit.Entry) error
}

// SetAgentNotifier attaches the fleet's notifier (nil: agents learn a pause
// only at their next connection; the database refuses LEASED → ACTING
// either way).
func (s *Store) SetAgentNotifier(n AgentNotifier) { s.agents = n }

// SetPaused turns a pause switch on or off: the fleet's when tenant is empty
// (audited in the system chain), else the tenant's (audited in its chain).
// Paused means no new lease and no LEASED → ACTING (both checked inside those
// statements); actions already started finish and are reported. The agents
// concerned are told (AgentNotifier): the tenant's in the same transaction;
// for the fleet switch, each tenant's agents in that tenant's transaction
// right after the switch commits (the switch is the truth; a notice that
// fails is reported and changes nothing in the database's refusals).
func (s *Store) SetPaused(ctx context.Context, by audit.Entry, tenant string, paused bool) error {
	action := "claim.resume"
	if paused {
		action = "claim.pause"
	}
	if tenant == "" {
		err := audit.InSystem(ctx, s.pool, func(tx pgx.Tx) error {
			// paused_at keeps the moment it was first switched on.
			if _, err := tx.Exec(ctx, `UPDATE fleet_switches SET updated_at = now(),
					paused_at = CASE WHEN NOT $1 THEN NULL WHEN paused THEN paused_at ELSE now() END,
					paused_by = CASE WHEN NOT $1 THEN NULL WHEN paused THEN paused_by ELSE $2 END, paused = $1`, paused, by.Actor); err != nil {
				return err
			}
			return appendAudit(ctx, tx, by, action, "fleet", map[string]any{"scope": "fleet"})
		})
		if err != nil {
			return fmt.Errorf("claim: pause: %w", err)
		}
		if s.agents == nil {
			return nil
		}
		tenants, err := s.allTenants(ctx)
		if err != nil {
			return fmt.Errorf("claim: pause: the switch is set, but the agents were not told: %w", err)
		}
		var first error
		for _, t := range tenants {
			err := db.InTenant(ctx, s.pool, t.ID, func(tx pgx.Tx) error {
				return s.agents.PauseChanged(ctx, tx, t.ID, paused, by)
			})
			if err != nil && first == nil {
				first = fmt.Errorf("claim: pause: the switch is set, but the agents of %s were not told: %w", t.Slug, err)
			}
		}
		return first
	}
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE tenants SET
				paused_at = CASE WHEN NOT $2 THEN NULL WHEN paused THEN paused_at ELSE now() END,
				paused_by = CASE WHEN NOT $2 THEN NULL WHEN paused THEN paused_by ELSE $3 END, paused = $2
			WHERE id = $1`, tenant, paused, by.Actor)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("no tenant %s", tenant)
		}
		if err := appendAudit(ctx, tx, by, action, "tenant", map[string]any{"scope": "tenant"}); err != nil {
			return err
		}
		if s.agents != nil {
			return s.agents.PauseChanged(ctx, tx, tenant, paused, by)
		}
		return nil
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

// SetLimits changes a tenant's daily booking cap and review threshold,
// audited in its chain.
func (s *Store) SetLimits(ctx context.Context, by audit.Entry, tenant string, l Limits) error {
	if (l.DailyBookingCap != nil && *l.DailyBookingCap < 0) || (l.ReviewAboveCents != nil && *l.ReviewAboveCents < 0) {
		return Invalid("the cap and the review threshold cannot be negative")
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
		return appendAudit(ctx, tx, by, "claim.limits", "tenant", l)
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
		return appendAudit(ctx, tx, actorEngine, "claim.review.request", key, map[string]any{"rate_cents": rate})
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

// Decide approves or rejects a pending review, audited in the tenant's
// chain. An approved job may be leased (the engine offers it again); a
// rejected one never is.
func (s *Store) Decide(ctx context.Context, by audit.Entry, tenant, key string, approve bool) error {
	state, action := "REJECTED", "claim.review.reject"
	if approve {
		state, action = "APPROVED", "claim.review.approve"
	}
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE claim_reviews SET state = $3, decided_at = now(), decided_by = $4
			WHERE tenant_id = $1 AND job_key = $2 AND state = 'PENDING'`, tenant, key, state, by.Actor)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return Invalid("there is no pending review of " + key)
		}
		return appendAudit(ctx, tx, by, action, key, nil)
	})
	var inv Invalid
	if errors.As(err, &inv) {
		return inv
	}
	if err != nil {
		return fmt.Errorf("claim: review: %w", err)
	}
	return nil
}
