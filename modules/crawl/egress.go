package crawl

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/egress"
	"github.com/fleetwright/fleetwright/modules/audit"
)

// EgressPolicy is a tenant's egress allowlist.
type EgressPolicy struct {
	// Allow entries admit special-purpose ranges on their own port
	// (127.0.0.0/8:8081; without a port, 80 and 443): egress.ParseEntries.
	Allow []string
	// Ports are the ports beyond 80 and 443 public addresses may use.
	Ports []int
}

// Egress reads a tenant's allowlist (none when unset). It is the Runner's
// Egress.
func (s *Store) Egress(ctx context.Context, tenant string) ([]string, []int) {
	var p EgressPolicy
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT allow, ports FROM tenant_egress`).Scan(&p.Allow, &p.Ports)
	})
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return p.Allow, p.Ports
}

// SetEgress replaces a tenant's allowlist. Only an admin (or the CLI on
// the panel's host) may call it; the change is audited.
func (s *Store) SetEgress(ctx context.Context, tenant string, by audit.Entry, p EgressPolicy) error {
	if _, err := egress.ParseEntries(p.Allow); err != nil {
		return err
	}
	for _, port := range p.Ports {
		if port < 1 || port > 65535 {
			return fmt.Errorf("crawl: port %d is not from 1 to 65535", port)
		}
	}
	if p.Allow == nil {
		p.Allow = []string{}
	}
	if p.Ports == nil {
		p.Ports = []int{}
	}
	return db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO tenant_egress (tenant_id, allow, ports, updated_by) VALUES (app_tenant(), $1, $2, $3)
			ON CONFLICT (tenant_id) DO UPDATE SET allow = EXCLUDED.allow, ports = EXCLUDED.ports, updated_by = EXCLUDED.updated_by, updated_at = now()`,
			p.Allow, p.Ports, by.Actor); err != nil {
			return fmt.Errorf("crawl: set egress allowlist: %w", err)
		}
		by.Action, by.Target = "egress.allowlist.set", "tenant:"+tenant
		by.Detail = map[string]any{"allow": p.Allow, "ports": p.Ports}
		return audit.Append(ctx, tx, by)
	})
}
