package fleet

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// PinInstallKey pins key as the agent's installation key if none is pinned
// yet (its first welcome on protocol v4, or the first after an admin accepted
// a new installation) and returns the pinned key: key itself, another key
// pinned earlier, or "" when none is pinned and key is not a valid one. A
// pin is audited.
func (s *Store) PinInstallKey(ctx context.Context, a Agent, key, remote string) (string, error) {
	if _, err := wire.ParseInstallKey(key); err != nil {
		key = ""
	}
	var pinned *string
	err := db.InTenant(ctx, s.pool, a.Tenant, func(tx pgx.Tx) error {
		if key != "" {
			tag, err := tx.Exec(ctx, `UPDATE agents SET install_key = $2, install_key_pinned_at = now()
				WHERE id = $1 AND install_key IS NULL AND retired_at IS NULL`, a.ID, key)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 1 {
				if err := audit.Append(ctx, tx, audit.Entry{Actor: "agent " + a.Name, IP: remote,
					Action: "fleet.agent.install_key_pinned", Target: "agent " + a.ID,
					Detail: map[string]any{"agent_id": a.ID, "install_key": key}}); err != nil {
					return err
				}
			}
		}
		return tx.QueryRow(ctx, `SELECT install_key FROM agents WHERE id = $1`, a.ID).Scan(&pinned)
	})
	if err != nil {
		return "", fmt.Errorf("fleet: pin installation key: %w", err)
	}
	if pinned == nil {
		return "", nil
	}
	return *pinned, nil
}

// AcceptNewInstallation forgets an agent's pinned installation key, so the
// next hello pins whatever key it carries: for an agent whose state dir was
// lost or moved to a new host. Whoever holds the agent's token at that
// moment can then receive the account's credentials, which is why the console
// offers it to admins only, with a second confirmation (see SECURITY.md).
func (s *Store) AcceptNewInstallation(ctx context.Context, tenant, agentID string, by audit.Entry) error {
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		var old *string
		err := tx.QueryRow(ctx, `UPDATE agents a SET install_key = NULL, install_key_pinned_at = NULL
			FROM agents o WHERE a.id = $1 AND o.id = a.id AND a.retired_at IS NULL RETURNING o.install_key`, agentID).Scan(&old)
		if errors.Is(err, pgx.ErrNoRows) {
			return errors.New("no such live agent")
		}
		if err != nil {
			return err
		}
		by.Action, by.Target = "fleet.agent.new_installation", "agent "+agentID
		by.Detail = map[string]any{"agent_id": agentID, "previous_install_key": old}
		return audit.Append(ctx, tx, by)
	})
	if err != nil {
		return fmt.Errorf("fleet: accept a new installation: %w", err)
	}
	return nil
}

// AgentName returns the name of a live agent of the tenant.
func (s *Store) AgentName(ctx context.Context, tenant, agentID string) (string, error) {
	var name string
	err := db.TenantRow(ctx, s.pool, tenant, `SELECT name FROM agents WHERE id::text = $1 AND retired_at IS NULL`, agentID).Scan(&name)
	if err != nil {
		return "", fmt.Errorf("fleet: agent name: %w", err)
	}
	return name, nil
}
