package claim

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
)

// Durability is a tenant's durability setting and the installation's hold.
type Durability struct {
	// SingleNodeOK: the tenant knowingly accepts single-node durability —
	// while the cluster has no synchronous standby its claims go on,
	// committed on the primary alone (a lost primary then loses them).
	SingleNodeOK bool
	// Hold is why new leases and actions are held ("" when they are not);
	// HeldSince when the hold began.
	Hold      string
	HeldSince *time.Time
}

// Durability reads a tenant's setting and the hold.
func (s *Store) Durability(ctx context.Context, tenant string) (Durability, error) {
	var d Durability
	var hold *string
	err := db.TenantRow(ctx, s.pool, tenant, `SELECT t.single_node_ok, f.durability_hold, f.durability_hold_since
		FROM tenants t, fleet_switches f WHERE t.id = $1`, tenant).Scan(&d.SingleNodeOK, &hold, &d.HeldSince)
	if err != nil {
		return d, fmt.Errorf("claim: durability: %w", err)
	}
	if hold != nil {
		d.Hold = *hold
	}
	return d, nil
}

// SetSingleNodeOK records whether the tenant accepts single-node durability
// (audited in its chain). The panel's durability check reads it at its next
// sweep; the lease and act statements read it at once.
func (s *Store) SetSingleNodeOK(ctx context.Context, by audit.Entry, tenant string, ok bool) error {
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE tenants SET single_node_ok = $2 WHERE id = $1 AND single_node_ok IS DISTINCT FROM $2`, tenant, ok)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		return appendAudit(ctx, tx, by, "claim.single_node_ok", "tenant", map[string]any{"single_node_ok": ok})
	})
	if err != nil {
		return fmt.Errorf("claim: single-node durability: %w", err)
	}
	return nil
}
