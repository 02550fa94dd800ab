package claim

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// AuditEntry is one audited mutation or piece of claim evidence.
type AuditEntry struct {
	// Tenant is empty for fleet-wide actions (the global pause, cells).
	Tenant  string
	Actor   string // "operator:<name>", "cli:<user>", "reconciler", "sweeper"
	Action  string // e.g. claim.pause, claim.reconcile.confirm
	Subject string
	Detail  any // JSON-encoded; never a secret
}

// Auditor writes audit entries inside the caller's transaction, so a change
// and its record commit together. The console's audit log implements it once
// merged; DBAuditor is the claim engine's own minimal log until then.
type Auditor interface {
	Audit(ctx context.Context, tx pgx.Tx, e AuditEntry) error
}

// DBAuditor appends to the claim_audit table (append-only for the
// application role: UPDATE and DELETE are revoked).
type DBAuditor struct{}

// Audit implements Auditor.
func (DBAuditor) Audit(ctx context.Context, tx pgx.Tx, e AuditEntry) error {
	detail := []byte("{}")
	if e.Detail != nil {
		b, err := json.Marshal(e.Detail)
		if err != nil {
			return fmt.Errorf("claim: audit detail: %w", err)
		}
		detail = b
	}
	var tenant any
	if e.Tenant != "" {
		tenant = e.Tenant
	}
	_, err := tx.Exec(ctx, `INSERT INTO claim_audit (tenant_id, actor, action, subject, detail) VALUES ($1, $2, $3, $4, $5)`,
		tenant, e.Actor, e.Action, e.Subject, detail)
	if err != nil {
		return fmt.Errorf("claim: audit: %w", err)
	}
	return nil
}

// AuditRecord is a stored audit entry.
type AuditRecord struct {
	ID      int64
	Tenant  string
	Actor   string
	Action  string
	Subject string
	Detail  string
	At      time.Time
}

// AuditLog reads the latest entries visible in the tenant's scope (its own
// and the fleet-wide ones), newest first.
func (s *Store) AuditLog(ctx context.Context, tenant, action string, limit int) ([]AuditRecord, error) {
	var out []AuditRecord
	err := dbInTenant(ctx, s, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id, COALESCE(tenant_id::text, ''), actor, action, subject, detail::text, at
			FROM claim_audit WHERE ($1 = '' OR action = $1) ORDER BY id DESC LIMIT $2`, action, limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditRecord, error) {
			var a AuditRecord
			err := r.Scan(&a.ID, &a.Tenant, &a.Actor, &a.Action, &a.Subject, &a.Detail, &a.At)
			return a, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim: audit log: %w", err)
	}
	return out, nil
}
