package claim

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/cell"
)

// Cell changes are installation-wide: each is audited in the system chain in
// the transaction that makes it (a tenant's move also in the tenant's own
// chain, so its operators see it), then applied on this replica at once; the
// other replicas reload within their reload period.

// PutCell creates a cell or changes its Redis URL. The URL is audited without
// its password.
func (e *Engine) PutCell(ctx context.Context, by audit.Entry, d cell.Def) error {
	if err := cell.CheckDef(d); err != nil {
		return Invalid(err.Error())
	}
	// A master name the Sentinels do not know is a typo, not an outage:
	// refused. Sentinels that do not answer are an outage: the cell is
	// saved and shows failing until they do.
	if err := cell.CheckSentinels(ctx, d.RedisURL); errors.Is(err, cell.ErrUnknownMaster) {
		return Invalid(err.Error())
	}
	err := audit.InSystem(ctx, e.store.pool, func(tx pgx.Tx) error {
		if err := cell.PutCell(ctx, tx, d); err != nil {
			return err
		}
		return appendAudit(ctx, tx, by, "cell.put", d.Name, map[string]any{"redis_url": cell.RedactURL(d.RedisURL)})
	})
	if err != nil {
		return fmt.Errorf("claim: put cell: %w", err)
	}
	return e.reloadCells(ctx)
}

// DeleteCell removes a cell no tenant is routed to.
func (e *Engine) DeleteCell(ctx context.Context, by audit.Entry, name string) error {
	if name == cell.DefaultCell {
		return Invalid("the default cell cannot be deleted")
	}
	err := audit.InSystem(ctx, e.store.pool, func(tx pgx.Tx) error {
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM cells WHERE name = $1`, name).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return Invalid("there is no cell " + name)
		}
		if err := cell.DeleteCell(ctx, tx, name); err != nil {
			return err
		}
		return appendAudit(ctx, tx, by, "cell.delete", name, nil)
	})
	var inv Invalid
	switch {
	case errors.As(err, &inv):
		return inv
	case errors.Is(err, cell.ErrInUse):
		return Invalid("tenants are routed to " + name + "; move them first")
	case err != nil:
		return fmt.Errorf("claim: delete cell: %w", err)
	}
	return e.reloadCells(ctx)
}

// RouteTenant moves a tenant to a cell.
func (e *Engine) RouteTenant(ctx context.Context, by audit.Entry, tenant, name string) error {
	var from string
	err := audit.InSystem(ctx, e.store.pool, func(tx pgx.Tx) error {
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM cells WHERE name = $1`, name).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return Invalid("there is no cell " + name)
		}
		if err := tx.QueryRow(ctx, `SELECT cell FROM tenants WHERE id::text = $1`, tenant).Scan(&from); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return Invalid("there is no such tenant")
			}
			return err
		}
		if err := cell.RouteTenant(ctx, tx, tenant, name); err != nil {
			return err
		}
		return appendAudit(ctx, tx, by, "cell.route", tenant, map[string]any{"from": from, "to": name})
	})
	var inv Invalid
	if errors.As(err, &inv) {
		return inv
	}
	if err != nil {
		return fmt.Errorf("claim: route tenant: %w", err)
	}
	err = db.InTenant(ctx, e.store.pool, tenant, func(tx pgx.Tx) error {
		return appendAudit(ctx, tx, by, "cell.route", "tenant", map[string]any{"from": from, "to": name})
	})
	if err != nil {
		return fmt.Errorf("claim: route tenant: %w", err)
	}
	return e.reloadCells(ctx)
}

func (e *Engine) reloadCells(ctx context.Context) error {
	if cm := e.Cells(); cm != nil {
		return cm.Reload(ctx)
	}
	return nil
}
