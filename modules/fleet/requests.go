package fleet

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/limit"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// The account_requests_hour limit is enforced by the agents (each counts
// its account's requests to the platform, docs/OPERATIONS.md "Requests per
// account per hour"): the panel sends it in welcome and configure, and a
// change reaches the connected agents at once through LimitNotifier, from
// the console or the CLI.

// RequestLimit is the request budget that applies to the tenant's
// accounts: the lowest of the tenant's and the global limit (nil: none).
func (s *Store) RequestLimit(ctx context.Context, tenant string) (*wire.RequestLimit, error) {
	return requestLimit(ctx, s.pool, tenant)
}

func requestLimit(ctx context.Context, pool *pgxpool.Pool, tenant string) (*wire.RequestLimit, error) {
	l, err := limit.Load(ctx, pool, tenant)
	if err != nil {
		return nil, fmt.Errorf("fleet: request limit: %w", err)
	}
	e := l.Get(limit.AccountRequestsPerHour)
	if !e.Set {
		return nil, nil
	}
	return &wire.RequestLimit{PerHour: e.Value, From: e.From}, nil
}

// configureFor builds a configure command's message for a: its
// configuration read now, with the limits that apply now.
func (s *Store) configureFor(ctx context.Context, id string, a Agent, cfg wire.Config) (wire.Configure, error) {
	lim, err := s.AssistantLimits(ctx, a.Tenant)
	if err != nil {
		return wire.Configure{}, err
	}
	req, err := s.RequestLimit(ctx, a.Tenant)
	if err != nil {
		return wire.Configure{}, err
	}
	return wire.Configure{CommandID: id, Config: cfg, AssistantLimits: lim, RequestLimit: req}, nil
}

// tellAgentsOfLimit queues a configure command for every live agent of the
// tenant (not the enrolled assistants: they get their own) in tx, woken at
// commit. The command reads the limit when it is sent; agents not connected
// learn it at their next welcome.
func tellAgentsOfLimit(ctx context.Context, tx pgx.Tx, tenant string, by audit.Entry) error {
	b, _ := json.Marshal(CommandBody{Reason: "request limit changed"})
	rows, err := tx.Query(ctx, `INSERT INTO agent_commands (tenant_id, agent_id, kind, body, created_by)
		SELECT tenant_id, id, $2, $3, $4 FROM agents
		WHERE tenant_id = $1 AND retired_at IS NULL AND last_seen IS NOT NULL AND assistant_report IS NULL
		RETURNING agent_id::text`, tenant, CmdConfigure, b, by.Actor)
	if err != nil {
		return fmt.Errorf("fleet: tell agents: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("fleet: tell agents: %w", err)
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, id) FROM unnest($2::text[]) AS id`, NotifyChannel, ids); err != nil {
		return fmt.Errorf("fleet: tell agents: %w", err)
	}
	return nil
}
