package claim

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
)

// One booking identity per job (docs/CLAIMS.md): the panel's record of a
// job carries a booking key, written once, that every attempt of the job
// sends as its Idempotency-Key; whether the tenant's platform honours such
// keys is a per-platform tenant setting that only an admin changes.

// DefaultPlatform is the platform a worker books on when its settings name
// none (the agent's default adapter).
const DefaultPlatform = "sandbox"

// PlatformSetting is a tenant's setting for one platform it books on.
type PlatformSetting struct {
	Platform string
	// HonoursIdempotency: the platform replays a repeated Idempotency-Key
	// instead of booking again. Default false.
	HonoursIdempotency bool
	// InUse: a worker of one of the tenant's accounts books on it.
	InUse     bool
	UpdatedAt *time.Time
	UpdatedBy string
}

// HonoursIdempotency reports whether the tenant's platforms honour
// idempotency keys: true only when every platform the tenant books on is set
// to honour them (a platform nobody set does not). The claim engine's
// re-offer after an UNKNOWN may rely on it; the lease result carries it so
// the agent's adapter can check it against the platform's own status.
func (s *Store) HonoursIdempotency(ctx context.Context, tenant string) (bool, error) {
	var ok bool
	if err := db.TenantRow(ctx, s.pool, tenant, `SELECT claim_keys_honoured($1)`, tenant).Scan(&ok); err != nil {
		return false, fmt.Errorf("claim: idempotency setting: %w", err)
	}
	return ok, nil
}

// PlatformSettings lists the platforms the tenant books on and any other
// platform it has a setting for, by name.
func (s *Store) PlatformSettings(ctx context.Context, tenant string) ([]PlatformSetting, error) {
	var out []PlatformSetting
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			WITH used AS (SELECT name FROM claim_tenant_platforms($1) p(name))
			SELECT n.name, COALESCE(s.honours_idempotency, false), n.name IN (SELECT name FROM used),
			       s.updated_at, COALESCE(s.updated_by, '')
			FROM (SELECT name FROM used UNION SELECT platform FROM claim_platform_settings WHERE tenant_id = $1) n
			LEFT JOIN claim_platform_settings s ON s.tenant_id = $1 AND s.platform = n.name
			ORDER BY n.name`, tenant)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (PlatformSetting, error) {
			var p PlatformSetting
			err := r.Scan(&p.Platform, &p.HonoursIdempotency, &p.InUse, &p.UpdatedAt, &p.UpdatedBy)
			return p, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim: platform settings: %w", err)
	}
	return out, nil
}

var platformName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,39}$`)

// SetHonoursIdempotency records whether platform honours idempotency keys
// for the tenant, audited in the tenant's chain (claim.platform.idempotency).
// The caller checks that by is an admin.
func (s *Store) SetHonoursIdempotency(ctx context.Context, by audit.Entry, tenant, platform string, honours bool) error {
	platform = strings.ToLower(strings.TrimSpace(platform))
	if !platformName.MatchString(platform) {
		return Invalid("a platform name is 1 to 40 lowercase letters, digits, '-' or '_' (for example \"sandbox\")")
	}
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		var before *bool
		if err := tx.QueryRow(ctx, `SELECT honours_idempotency FROM claim_platform_settings
			WHERE tenant_id = $1 AND platform = $2`, tenant, platform).Scan(&before); err != nil && err != pgx.ErrNoRows {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO claim_platform_settings (tenant_id, platform, honours_idempotency, updated_at, updated_by)
			VALUES ($1, $2, $3, now(), $4)
			ON CONFLICT (tenant_id, platform) DO UPDATE SET honours_idempotency = EXCLUDED.honours_idempotency,
			    updated_at = EXCLUDED.updated_at, updated_by = EXCLUDED.updated_by`,
			tenant, platform, honours, by.Actor); err != nil {
			return err
		}
		return appendAudit(ctx, tx, by, "claim.platform.idempotency", "platform "+platform,
			map[string]any{"platform": platform, "honours_idempotency": honours, "before": before})
	})
	if err != nil {
		return fmt.Errorf("claim: platform setting: %w", err)
	}
	return nil
}

// keysHonoured is the engine's short-lived copy of each tenant's setting,
// for the offers it publishes (the lease result reads the database).
func (e *Engine) keysHonoured(ctx context.Context, tenant string) bool {
	e.kmu.Lock()
	c, ok := e.keys[tenant]
	e.kmu.Unlock()
	if ok && e.cfg.Clock.Since(c.at) < e.cfg.FilterCacheTTL {
		return c.on
	}
	on, err := e.store.HonoursIdempotency(ctx, tenant)
	if err != nil {
		// The lease result carries the database's answer; an offer's copy
		// only lets an agent skip a lease it would refuse.
		return c.on
	}
	e.kmu.Lock()
	if e.keys == nil {
		e.keys = map[string]cachedKeys{}
	}
	e.keys[tenant] = cachedKeys{on: on, at: e.cfg.Clock.Now()}
	e.kmu.Unlock()
	return on
}

type cachedKeys struct {
	on bool
	at time.Time
}

// SetHonoursIdempotency changes the setting (audited) and applies it to
// this replica's offers at once.
func (e *Engine) SetHonoursIdempotency(ctx context.Context, by audit.Entry, tenant, platform string, honours bool) error {
	defer func() {
		e.kmu.Lock()
		delete(e.keys, tenant)
		e.kmu.Unlock()
	}()
	return e.store.SetHonoursIdempotency(ctx, by, tenant, platform, honours)
}
