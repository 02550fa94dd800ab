package claim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// Dispatch modes, a per-tenant setting (docs/CLAIMS.md, "Dispatch modes").
const (
	// DispatchRace offers each queued job to every warm actor of the tenant;
	// the first lease request Postgres grants wins.
	DispatchRace = "race"
	// DispatchAssign has the dispatcher choose one warm actor and grant it
	// the job in the transaction that records the job (one commit); the grant
	// travels to the replica holding the actor's connection as lease_grant
	// (protocol v4). Agents before v4 keep getting offers.
	DispatchAssign = "assign"
)

// DispatchModes lists the modes in the order the settings page shows them.
var DispatchModes = []string{DispatchRace, DispatchAssign}

// ValidDispatchMode reports whether mode is a dispatch mode.
func ValidDispatchMode(mode string) bool {
	return mode == DispatchRace || mode == DispatchAssign
}

// DispatchMode reads the tenant's dispatch mode.
func (s *Store) DispatchMode(ctx context.Context, tenant string) (string, error) {
	var mode string
	if err := s.pool.QueryRow(ctx, `SELECT dispatch_mode FROM tenants WHERE id = $1`, tenant).Scan(&mode); err != nil {
		return "", fmt.Errorf("claim: dispatch mode: %w", err)
	}
	return mode, nil
}

// SetDispatchMode sets the tenant's dispatch mode, audited in the tenant's
// chain as claim.dispatch_mode with the value before. The caller checks
// that by is an admin (the console's route asks settings.manage). A test or
// bench harness calls it (or Engine.SetDispatchMode) directly.
func (s *Store) SetDispatchMode(ctx context.Context, by audit.Entry, tenant, mode string) error {
	if !ValidDispatchMode(mode) {
		return Invalid(`the dispatch mode is "race" (every warm actor may ask for each job) or "assign" (the panel chooses one actor per job)`)
	}
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		var before string
		err := tx.QueryRow(ctx, `SELECT dispatch_mode FROM tenants WHERE id = $1 FOR UPDATE`, tenant).Scan(&before)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("no tenant %s", tenant)
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE tenants SET dispatch_mode = $2 WHERE id = $1`, tenant, mode); err != nil {
			return err
		}
		return appendAudit(ctx, tx, by, "claim.dispatch_mode", "tenant", map[string]any{"dispatch_mode": mode, "before": before})
	})
	if err != nil {
		return fmt.Errorf("claim: dispatch mode: %w", err)
	}
	return nil
}

// OldProtocolAgents counts the tenant's connected agents that speak a
// protocol without lease_grant (before v4). In assign mode they cannot be
// granted a job: they are offered jobs only while no v4 actor of the tenant
// is warm (docs/CLAIMS.md, "Warm actors"); the settings page says so.
func (s *Store) OldProtocolAgents(ctx context.Context, tenant string) (int, error) {
	var n int
	err := db.TenantRow(ctx, s.pool, tenant, `SELECT count(*) FROM agents
		WHERE connected AND retired_at IS NULL AND protocol < $1`, wire.V4).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("claim: agents before protocol v4: %w", err)
	}
	return n, nil
}

type cachedMode struct {
	mode string
	at   time.Time
}

// dispatchMode is the engine's short-lived copy of a tenant's mode (as the
// filters: an edit applies within FilterCacheTTL on every replica, at once
// on the one that made it). On a read failure the last known mode stands,
// else race: race is always safe, it only costs speed.
func (e *Engine) dispatchMode(ctx context.Context, tenant string) string {
	e.dmu.Lock()
	c, ok := e.modes[tenant]
	e.dmu.Unlock()
	if ok && e.cfg.Clock.Since(c.at) < e.cfg.FilterCacheTTL {
		return c.mode
	}
	mode, err := e.store.DispatchMode(ctx, tenant)
	if err != nil {
		if c.mode != "" {
			return c.mode
		}
		return DispatchRace
	}
	e.dmu.Lock()
	if e.modes == nil {
		e.modes = map[string]cachedMode{}
	}
	e.modes[tenant] = cachedMode{mode: mode, at: e.cfg.Clock.Now()}
	e.dmu.Unlock()
	return mode
}

// SetDispatchMode changes the tenant's dispatch mode (audited) and applies
// it on this replica at once; other replicas follow within FilterCacheTTL.
func (e *Engine) SetDispatchMode(ctx context.Context, by audit.Entry, tenant, mode string) error {
	defer func() {
		e.dmu.Lock()
		delete(e.modes, tenant)
		e.dmu.Unlock()
	}()
	return e.store.SetDispatchMode(ctx, by, tenant, mode)
}
