package fleet

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
)

// ErrNotTenantAgent is returned for an agent id that is not one of the tenant's
// agents: unknown, malformed, or another tenant's.
var ErrNotTenantAgent = errors.New("fleet: no such agent in this tenant")

var uuidRe = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// AgentInTenant reports whether agentID is one of tenant's agents (retired
// ones included). The check is explicit, in the tenant's scope: the
// commands table's foreign key would accept another tenant's agent id.
func (s *Store) AgentInTenant(ctx context.Context, tenant, agentID string) (bool, error) {
	if !uuidRe.MatchString(agentID) {
		return false, nil
	}
	var ok bool
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM agents WHERE id = $1 AND tenant_id = $2)`, agentID, tenant).Scan(&ok)
	})
	if err != nil {
		return false, fmt.Errorf("fleet: agent lookup: %w", err)
	}
	return ok, nil
}
