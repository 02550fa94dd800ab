// Package privacy exports and erases a tenant's or a person's data (GDPR
// access and erasure, docs/LAW_REGISTER.md), each audited. Export writes
// JSON Lines, one row a line ({"table": …, "row": {…}}), from every table
// that holds the subject's rows, with secrets (sealed credentials, token
// and password hashes, TOTP seeds) left out. Erase deletes a tenant's rows
// from every table but its audit chain, whose sealed entries never change
// (they are dropped by retention, behind a checkpoint; the clear client
// addresses beside the chain are erased); a person's account
// is disabled and its email replaced, their sessions and grants deleted.
package privacy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
)

// secretColumn matches the columns an export leaves out.
var secretColumn = regexp.MustCompile(`(?i)(secret|token_hash|password|totp|_box|sealed|private|install_key|api_key|creds)`)

// tenantTables lists the public tables with a tenant_id column.
func tenantTables(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT c.table_name FROM information_schema.columns c
		JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
		WHERE c.table_schema = 'public' AND c.column_name = 'tenant_id' AND t.table_type = 'BASE TABLE' ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("privacy: list tables: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// line is one exported row.
type line struct {
	Table string         `json:"table"`
	Row   map[string]any `json:"row"`
}

func writeRows(ctx context.Context, tx pgx.Tx, enc *json.Encoder, table, where string, args ...any) (int, error) {
	rows, err := tx.Query(ctx, `SELECT to_jsonb(t) FROM `+pgx.Identifier{table}.Sanitize()+` t WHERE `+where, args...)
	if err != nil {
		return 0, fmt.Errorf("privacy: export %s: %w", table, err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var row map[string]any
		if err := rows.Scan(&row); err != nil {
			return n, fmt.Errorf("privacy: export %s: %w", table, err)
		}
		for k := range row {
			if secretColumn.MatchString(k) {
				delete(row, k)
			}
		}
		if err := enc.Encode(line{Table: table, Row: row}); err != nil {
			return n, fmt.Errorf("privacy: export: %w", err)
		}
		n++
	}
	return n, rows.Err()
}

// ExportTenant writes every row of the tenant (its audit chain included)
// to w as JSON Lines, in the tenant's own row-level-security scope, and
// audits the export in the tenant's chain and the system's. It returns the
// rows written per table.
func ExportTenant(ctx context.Context, pool *pgxpool.Pool, by audit.Entry, tenant string, w io.Writer) (map[string]int, error) {
	counts := map[string]int{}
	enc := json.NewEncoder(w)
	err := db.InTenant(ctx, pool, tenant, func(tx pgx.Tx) error {
		tables, err := tenantTables(ctx, tx)
		if err != nil {
			return err
		}
		if _, err := writeRows(ctx, tx, enc, "tenants", "id = $1", tenant); err != nil {
			return err
		}
		for _, t := range tables {
			// A read the application role may not make (no grant) is
			// left out by name, never silently.
			if _, err := tx.Exec(ctx, "SAVEPOINT e"); err != nil {
				return err
			}
			n, err := writeRows(ctx, tx, enc, t, "tenant_id = $1", tenant)
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "42501" {
				if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT e"); err != nil {
					return err
				}
				counts[t] = -1
				continue
			}
			if err != nil {
				return err
			}
			counts[t] = n
		}
		by.Action, by.Target, by.Detail = "tenant.export", "tenant data", map[string]any{"rows": total(counts)}
		return audit.Append(ctx, tx, by)
	})
	if err != nil {
		return counts, err
	}
	err = audit.InSystem(ctx, pool, func(tx pgx.Tx) error {
		return audit.Append(ctx, tx, audit.Entry{ActorID: by.ActorID, Actor: by.Actor, IP: by.IP, Action: "tenant.export", Target: tenant,
			Detail: map[string]any{"rows": total(counts)}})
	})
	return counts, err
}

func total(c map[string]int) int {
	n := 0
	for _, v := range c {
		if v > 0 {
			n += v
		}
	}
	return n
}

// EraseTenant deletes every row of the tenant, the tenant itself last,
// through owner (the role that owns the tables: the application role may
// not delete claim history), in one transaction. Its audit chain stays:
// sealed entries never change; retention drops them behind a checkpoint.
// The erase is audited in the tenant's chain and in the system's. It
// returns the rows deleted per table.
func EraseTenant(ctx context.Context, owner *pgxpool.Pool, by audit.Entry, tenant string) (map[string]int, error) {
	counts := map[string]int{}
	err := pgx.BeginFunc(ctx, owner, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('app.tenant_id', $1, true)", tenant); err != nil {
			return err
		}
		var slug string
		if err := tx.QueryRow(ctx, `SELECT slug FROM tenants WHERE id = $1`, tenant).Scan(&slug); err != nil {
			return fmt.Errorf("privacy: erase: %w", err)
		}
		by.Action, by.Target, by.Detail = "tenant.erase", "tenant data", map[string]any{"slug": slug}
		if err := audit.Append(ctx, tx, by); err != nil {
			return err
		}
		tables, err := tenantTables(ctx, tx)
		if err != nil {
			return err
		}
		var left []string
		for _, t := range tables {
			if !strings.HasPrefix(t, "audit_") {
				left = append(left, t)
			}
		}
		// Foreign keys decide the order: a table still referenced fails
		// and is tried again in the next pass.
		for pass := 0; len(left) > 0; pass++ {
			if pass > len(tables) {
				sort.Strings(left)
				return fmt.Errorf("privacy: erase: rows still referenced in %s", strings.Join(left, ", "))
			}
			var again []string
			for _, t := range left {
				if _, err := tx.Exec(ctx, "SAVEPOINT e"); err != nil {
					return err
				}
				tag, err := tx.Exec(ctx, `DELETE FROM `+pgx.Identifier{t}.Sanitize()+` WHERE tenant_id = $1`, tenant)
				var pe *pgconn.PgError
				if errors.As(err, &pe) && pe.Code == "23503" {
					if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT e"); err != nil {
						return err
					}
					again = append(again, t)
					continue
				}
				if err != nil {
					return fmt.Errorf("privacy: erase %s: %w", t, err)
				}
				counts[t] += int(tag.RowsAffected())
			}
			left = again
		}
		// The chain stays, but the clear client addresses beside it are
		// no sealed part of it: they go with the tenant (the entries keep
		// only their keyed hashes).
		tag, err := tx.Exec(ctx, `DELETE FROM audit_addresses WHERE tenant_id = $1`, tenant)
		if err != nil {
			return fmt.Errorf("privacy: erase client addresses: %w", err)
		}
		counts["audit_addresses"] = int(tag.RowsAffected())
		if _, err := tx.Exec(ctx, `DELETE FROM tenant_grants WHERE tenant_id = $1`, tenant); err != nil {
			return fmt.Errorf("privacy: erase grants: %w", err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM tenants WHERE id = $1`, tenant); err != nil {
			return fmt.Errorf("privacy: erase tenant: %w", err)
		}
		if _, err := tx.Exec(ctx, "SELECT set_config('app.tenant_id', $1, true)", audit.System); err != nil {
			return err
		}
		return audit.Append(ctx, tx, audit.Entry{ActorID: by.ActorID, Actor: by.Actor, IP: by.IP, Action: "tenant.erase", Target: tenant,
			Detail: map[string]any{"slug": slug, "rows": total(counts)}})
	})
	if err != nil {
		return counts, fmt.Errorf("privacy: erase tenant: %w", err)
	}
	return counts, nil
}

// ExportUser writes a person's account (without its password hash and
// TOTP seed), their grants and sessions, and the audit entries they made in
// every chain with those entries' clear client addresses while kept, as
// JSON Lines; audited on the system chain.
func ExportUser(ctx context.Context, owner *pgxpool.Pool, by audit.Entry, email string, w io.Writer) (int, error) {
	enc := json.NewEncoder(w)
	n := 0
	var id string
	err := pgx.BeginFunc(ctx, owner, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT id::text FROM users WHERE lower(email) = lower($1)`, email).Scan(&id); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("privacy: no user with email %q", email)
			}
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT set_config('app.user_id', $1, true)", id); err != nil {
			return err
		}
		for _, q := range []struct{ table, where string }{{"users", "id = $1"}, {"tenant_grants", "user_id = $1"}, {"sessions", "user_id = $1"}} {
			c, err := writeRows(ctx, tx, enc, q.table, q.where, id)
			n += c
			if err != nil {
				return err
			}
		}
		// Each chain in its own scope: the owner is under row-level
		// security too.
		rows, err := tx.Query(ctx, `SELECT $1::text UNION SELECT id::text FROM tenants UNION SELECT chain::text FROM audit_chains`, audit.System)
		if err != nil {
			return err
		}
		chains, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, c := range chains {
			if _, err := tx.Exec(ctx, "SELECT set_config('app.tenant_id', $1, true)", c); err != nil {
				return err
			}
			k, err := writeRows(ctx, tx, enc, "audit_log", "tenant_id = $1 AND actor_id = $2", c, id)
			n += k
			if err != nil {
				return err
			}
			// The clear client addresses of those entries, while kept.
			k, err = writeRows(ctx, tx, enc, "audit_addresses",
				"tenant_id = $1 AND entry_id IN (SELECT id FROM audit_log WHERE tenant_id = $1 AND actor_id = $2)", c, id)
			n += k
			if err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, "SELECT set_config('app.tenant_id', $1, true)", audit.System); err != nil {
			return err
		}
		by.Action, by.Target, by.Detail = "user.export", id, map[string]any{"rows": n}
		return audit.Append(ctx, tx, by)
	})
	return n, err
}

// EraseUser disables a person's account and replaces its email, password
// hash and TOTP seed, and deletes their sessions, grants and sign-in
// throttle rows, and the clear client addresses of the audit entries they
// made; audited on the system chain. Those entries keep their email and
// the keyed hash of the address: sealed entries never change (the
// legal-obligation exception, docs/LAW_REGISTER.md) until retention drops
// them.
func EraseUser(ctx context.Context, owner *pgxpool.Pool, by audit.Entry, email string) error {
	return pgx.BeginFunc(ctx, owner, func(tx pgx.Tx) error {
		var id string
		if err := tx.QueryRow(ctx, `SELECT id::text FROM users WHERE lower(email) = lower($1)`, email).Scan(&id); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("privacy: no user with email %q", email)
			}
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT set_config('app.user_id', $1, true)", id); err != nil {
			return err
		}
		lower := strings.ToLower(email)
		stmts := []struct {
			sql string
			arg string
		}{
			{`DELETE FROM sessions WHERE user_id = $1`, id},
			// The sign-in throttle keys name the account by its email.
			{`DELETE FROM auth_throttle WHERE position($1 in lower(key)) > 0`, lower},
			{`UPDATE users SET email = 'erased-' || id || '@erased.invalid', password_hash = '!', totp_secret = NULL,
				disabled_at = COALESCE(disabled_at, now()), updated_at = now() WHERE id = $1`, id},
		}
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s.sql, s.arg); err != nil {
				return fmt.Errorf("privacy: erase user: %w", err)
			}
		}
		// Grants are deleted in each tenant's scope (row-level security).
		rows, err := tx.Query(ctx, `SELECT tenant_id::text FROM tenant_grants WHERE user_id = $1`, id)
		if err != nil {
			return err
		}
		grants, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, g := range grants {
			if _, err := tx.Exec(ctx, "SELECT set_config('app.tenant_id', $1, true)", g); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `DELETE FROM tenant_grants WHERE user_id = $1 AND tenant_id = $2`, id, g); err != nil {
				return fmt.Errorf("privacy: erase grants: %w", err)
			}
		}
		// The clear client addresses of the entries they made, in every
		// chain; the entries keep their keyed hashes.
		addresses, err := eraseAddresses(ctx, tx, id)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT set_config('app.tenant_id', $1, true)", audit.System); err != nil {
			return err
		}
		by.Action, by.Target, by.Detail = "user.erase", id, map[string]any{"client_addresses": addresses}
		return audit.Append(ctx, tx, by)
	})
}

// eraseAddresses deletes the clear client addresses of the audit entries
// the user made, each chain in its own scope, and returns how many.
func eraseAddresses(ctx context.Context, tx pgx.Tx, userID string) (int, error) {
	rows, err := tx.Query(ctx, `SELECT $1::text UNION SELECT id::text FROM tenants UNION SELECT chain::text FROM audit_chains`, audit.System)
	if err != nil {
		return 0, fmt.Errorf("privacy: erase client addresses: %w", err)
	}
	chains, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("privacy: erase client addresses: %w", err)
	}
	n := 0
	for _, c := range chains {
		if _, err := tx.Exec(ctx, "SELECT set_config('app.tenant_id', $1, true)", c); err != nil {
			return n, err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM audit_addresses WHERE tenant_id = $1
			AND entry_id IN (SELECT id FROM audit_log WHERE tenant_id = $1 AND actor_id = $2)`, c, userID)
		if err != nil {
			return n, fmt.Errorf("privacy: erase client addresses: %w", err)
		}
		n += int(tag.RowsAffected())
	}
	return n, nil
}
