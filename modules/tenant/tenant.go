// Package tenant is the operators' clients: creating a tenant, and reading
// tenants (who they are, the cell each is routed to, its claim switches)
// for the claim engine, the console and the commands. Its pages are
// tenant/web.
package tenant

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
)

// Tenant is one row of tenants: its identity, the cell it is routed to and
// its claim switches.
type Tenant struct {
	ID, Slug, Name   string
	Cell             string
	Paused           bool
	DailyBookingCap  *int
	ReviewAboveCents *int64
	// DispatchMode is race or assign (claim.DispatchRace, claim.DispatchAssign).
	DispatchMode string
	CreatedAt    time.Time
}

// FieldErrors are validation messages by form field.
type FieldErrors map[string]string

func (f FieldErrors) Error() string { return fmt.Sprintf("tenant: invalid %v", map[string]string(f)) }

var slugRe = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,62}$`)

const cols = `id::text, slug, name, cell, paused, daily_booking_cap, review_above_cents, dispatch_mode, created_at`

func scan(r pgx.CollectableRow) (Tenant, error) {
	var t Tenant
	err := r.Scan(&t.ID, &t.Slug, &t.Name, &t.Cell, &t.Paused, &t.DailyBookingCap, &t.ReviewAboveCents, &t.DispatchMode, &t.CreatedAt)
	return t, err
}

// Create stores a new tenant, audited on the system chain and as the first
// entry of the tenant's own chain.
func Create(ctx context.Context, pool *pgxpool.Pool, slug, name string, by audit.Entry) (Tenant, error) {
	t := Tenant{Slug: strings.TrimSpace(slug), Name: strings.TrimSpace(name)}
	fe := FieldErrors{}
	if !slugRe.MatchString(t.Slug) {
		fe["slug"] = "2 to 63 lower-case letters, digits and dashes, starting with a letter or digit"
	}
	if t.Name == "" || len(t.Name) > 200 {
		fe["name"] = "enter a name of up to 200 characters"
	}
	if len(fe) > 0 {
		return t, fe
	}
	err := audit.InSystem(ctx, pool, func(tx pgx.Tx) error {
		// The dispatch mode is the column's default (assign since migration
		// 0140); the entry records which one this tenant started with.
		rows, err := tx.Query(ctx, `INSERT INTO tenants (slug, name) VALUES ($1, $2) RETURNING `+cols, t.Slug, t.Name)
		if err != nil {
			return err
		}
		got, err := pgx.CollectExactlyOneRow(rows, scan)
		if err != nil {
			return err
		}
		t = got
		by.Action, by.Target, by.Detail = "tenant.created", t.Slug, map[string]any{"tenant_id": t.ID, "name": t.Name, "dispatch_mode": t.DispatchMode}
		return audit.Append(ctx, tx, by)
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		return t, FieldErrors{"slug": "this slug is taken"}
	}
	if err != nil {
		return t, fmt.Errorf("tenant: create: %w", err)
	}
	err = db.InTenant(ctx, pool, t.ID, func(tx pgx.Tx) error { return audit.Append(ctx, tx, by) })
	if err != nil {
		return t, fmt.Errorf("tenant: create: %w", err)
	}
	return t, nil
}

// Querier is a pool or a transaction: the admin pages read the tenants
// inside the audited cross-tenant transaction, the rest on the pool.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// List returns every tenant, by slug. The tenants table is installation
// data, not under row-level security; the claim sweeps walk it.
func List(ctx context.Context, q Querier) ([]Tenant, error) {
	rows, err := q.Query(ctx, `SELECT `+cols+` FROM tenants ORDER BY slug`)
	if err != nil {
		return nil, fmt.Errorf("tenant: list: %w", err)
	}
	out, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return nil, fmt.Errorf("tenant: list: %w", err)
	}
	return out, nil
}

// BySlug finds a tenant by its slug.
func BySlug(ctx context.Context, q Querier, slug string) (Tenant, error) {
	return where(ctx, q, "slug", slug)
}

// ByID finds a tenant by its id.
func ByID(ctx context.Context, q Querier, id string) (Tenant, error) {
	return where(ctx, q, "id::text", id)
}

func where(ctx context.Context, q Querier, col, v string) (Tenant, error) {
	rows, err := q.Query(ctx, `SELECT `+cols+` FROM tenants WHERE `+col+` = $1`, v)
	if err != nil {
		return Tenant{}, fmt.Errorf("tenant: read: %w", err)
	}
	t, err := pgx.CollectExactlyOneRow(rows, scan)
	if errors.Is(err, pgx.ErrNoRows) {
		return Tenant{}, fmt.Errorf("tenant: no tenant %q", v)
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("tenant: read: %w", err)
	}
	return t, nil
}
