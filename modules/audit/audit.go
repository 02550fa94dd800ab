// Package audit is the append-only, hash-chained audit log. Append is one
// INSERT inside the caller's own transaction, so a claim or a user change and
// its audit entry commit together; sealing the hash chain happens afterwards
// (Seal, run by a periodic job), so appending never waits on another tenant.
// Each tenant has its own chain, and the system (operators, sign-ins,
// tenants) has one more. The heads of the chains are anchored to an
// append-only file outside the database, and Verify checks entries, seals and
// anchors against each other.
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/db"
)

// System is the chain (the tenant_id) of entries that belong to no tenant.
const System = "00000000-0000-0000-0000-000000000000"

// CrossTenant is the action that opens the explicit cross-tenant path.
const CrossTenant = "admin.cross_tenant"

// Entry is one audited event. Detail must hold no secret: it is shown in the
// console and kept forever.
type Entry struct {
	// ActorID is the acting user's id; empty for the system and the CLI.
	ActorID string
	// Actor names the actor for people: an email, "cli", "system".
	Actor  string
	Action string
	Target string
	Detail map[string]any
	// IP is the client's address (a port is dropped). The chained entry
	// keeps only its keyed hash; the clear address is kept beside the chain
	// until its retention (address.go).
	IP string
}

// Append records e in tx, in the chain of the transaction's tenant: a
// transaction from db.InTenant, or InSystem for the system chain. The entry
// commits or rolls back with the caller's change.
func Append(ctx context.Context, tx pgx.Tx, e Entry) error {
	if e.Actor == "" || e.Action == "" {
		return errors.New("audit: append: actor and action are required")
	}
	detail := []byte("{}")
	if len(e.Detail) > 0 {
		b, err := json.Marshal(e.Detail)
		if err != nil {
			return fmt.Errorf("audit: append: detail: %w", err)
		}
		detail = b
	}
	// The chained row gets the address's keyed hash only; the clear
	// address goes beside the chain (address.go).
	var addr, mac string
	if e.IP != "" {
		addr = NormalizeAddress(e.IP)
		var err error
		if mac, err = addressMac(ctx, tx, addr); err != nil {
			return fmt.Errorf("audit: append %s: %w", e.Action, err)
		}
	}
	var id int64
	err := tx.QueryRow(ctx, `INSERT INTO audit_log (actor_id, actor, action, target, detail, ip_mac)
		VALUES (NULLIF($1, '')::uuid, $2, $3, $4, $5, $6) RETURNING id`, e.ActorID, e.Actor, e.Action, e.Target, detail, mac).Scan(&id)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && (pe.Code == "23502" && pe.ColumnName == "tenant_id" || pe.Code == "42501" && strings.Contains(pe.Message, "row-level security")) {
			return errors.New("audit: append needs a tenant-scoped transaction (db.InTenant or audit.InSystem)")
		}
		return fmt.Errorf("audit: append %s: %w", e.Action, err)
	}
	if addr != "" {
		if _, err := tx.Exec(ctx, `INSERT INTO audit_addresses (entry_id, ip) VALUES ($1, $2)`, id, addr); err != nil {
			return fmt.Errorf("audit: append %s: client address: %w", e.Action, err)
		}
	}
	return nil
}

// InSystem runs fn in a transaction scoped to the system chain.
func InSystem(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
	return db.InTenant(ctx, pool, System, fn)
}

// AcrossTenants is the one way to read across tenants: it records who does it
// and why (an admin.cross_tenant entry on the system chain), and only that
// entry, made by an active admin, opens row-level security for the rest of
// this transaction — Postgres checks it, not this function.
func AcrossTenants(ctx context.Context, pool *pgxpool.Pool, by Entry, fn func(pgx.Tx) error) error {
	by.Action = CrossTenant
	return InSystem(ctx, pool, func(tx pgx.Tx) error {
		if err := Append(ctx, tx, by); err != nil {
			return err
		}
		return fn(tx)
	})
}
