package claim

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
)

// The claim engine records its changes in the console's hash-chained audit
// log (modules/audit): audit.Append inside the transaction that makes the
// change, in the tenant's chain (db.InTenant) or the system's
// (audit.InSystem) for fleet-wide changes. What is audited where is in
// docs/CLAIMS.md ("Audit").

// System actors: the parts of the panel that change claims on their own.
var (
	actorSweeper    = audit.Entry{Actor: "sweeper"}
	actorReconciler = audit.Entry{Actor: "reconciler"}
	actorEngine     = audit.Entry{Actor: "claim-engine"}
	actorDuplicates = audit.Entry{Actor: "duplicate-sweep"}
	actorGateway    = audit.Entry{Actor: "gateway"}
)

// agentActor names an authenticated agent's worker. It has no user id: the
// actor_id column is for console users.
func agentActor(h Holder) audit.Entry {
	return audit.Entry{Actor: "agent:" + h.Agent + "/" + h.Worker}
}

// appendAudit fills the action, target and detail of by and appends it.
func appendAudit(ctx context.Context, tx pgx.Tx, by audit.Entry, action, target string, detail any) error {
	by.Action, by.Target = action, target
	d, err := asDetail(detail)
	if err != nil {
		return err
	}
	by.Detail = d
	return audit.Append(ctx, tx, by)
}

// asDetail turns a struct or map into the audit entry's JSON detail.
func asDetail(v any) (map[string]any, error) {
	switch d := v.(type) {
	case nil:
		return nil, nil
	case map[string]any:
		return d, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("claim: audit detail: %w", err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		// Not an object (a list): keep it under one key.
		return map[string]any{"value": json.RawMessage(b)}, nil
	}
	return out, nil
}

// AuditRecord is an entry of the audit log as the claim pages show it.
type AuditRecord struct {
	ID     int64
	Actor  string
	Action string
	Target string
	Detail string
	At     time.Time
}

// perClaim are the actions recorded once per claim (outcomes, sweeps): the
// claims page shows those claims; the settings pages show the rest.
const perClaim = `('claim.outcome', 'claim.unknown', 'claim.released')`

// SettingsLog reads the latest changes of settings, reviews, reconciliation
// and duplicates in one chain, newest first: the audit minus the per-claim
// entries.
func (s *Store) SettingsLog(ctx context.Context, tenant string, limit int) ([]AuditRecord, error) {
	return s.auditLog(ctx, tenant, "", true, limit)
}

// AuditLog reads the latest claim and cell entries of one chain — a tenant's,
// or the system's when tenant is audit.System — newest first, optionally one
// action only.
func (s *Store) AuditLog(ctx context.Context, tenant, action string, limit int) ([]AuditRecord, error) {
	return s.auditLog(ctx, tenant, action, false, limit)
}

func (s *Store) auditLog(ctx context.Context, tenant, action string, settingsOnly bool, limit int) ([]AuditRecord, error) {
	var out []AuditRecord
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id, actor, action, target, detail::text, at FROM audit_log
			WHERE (action LIKE 'claim.%' OR action LIKE 'cell.%' OR action = 'fleet.agents.configure')
			  AND ($1 = '' OR action = $1) AND NOT ($3 AND action IN `+perClaim+`)
			ORDER BY id DESC LIMIT $2`, action, limit, settingsOnly)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditRecord, error) {
			var a AuditRecord
			err := r.Scan(&a.ID, &a.Actor, &a.Action, &a.Target, &a.Detail, &a.At)
			return a, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim: audit log: %w", err)
	}
	return out, nil
}
