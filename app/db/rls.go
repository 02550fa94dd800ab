package db

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// CheckRowSecurity refuses a schema in which a table with a tenant_id
// column lacks enabled and FORCEd row-level security, or a view with one is
// not security_invoker (it would apply its owner's rights, not the
// caller's). It reads the catalogue, so tables that later modules add are
// covered without anyone listing them.
func CheckRowSecurity(ctx context.Context, pool *pgxpool.Pool) error {
	rows, err := pool.Query(ctx, `
		SELECT c.relname, c.relkind::text, c.relrowsecurity, c.relforcerowsecurity,
		       COALESCE('security_invoker=true' = ANY (c.reloptions) OR 'security_invoker=on' = ANY (c.reloptions), false)
		FROM pg_attribute a
		JOIN pg_class c ON c.oid = a.attrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE a.attname = 'tenant_id' AND NOT a.attisdropped AND a.attnum > 0
		  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'
		  AND c.relkind IN ('r', 'p', 'v', 'm')
		ORDER BY c.relname`)
	if err != nil {
		return fmt.Errorf("db: check row security: %w", err)
	}
	defer rows.Close()
	var bad []string
	for rows.Next() {
		var name, kind string
		var enabled, forced, invoker bool
		if err := rows.Scan(&name, &kind, &enabled, &forced, &invoker); err != nil {
			return fmt.Errorf("db: check row security: %w", err)
		}
		switch kind {
		case "v":
			if !invoker {
				bad = append(bad, name+" (view without security_invoker)")
			}
		case "m":
			bad = append(bad, name+" (materialized view: row-level security cannot apply)")
		default:
			if !enabled || !forced {
				bad = append(bad, name+" (row-level security not enabled and forced)")
			}
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("db: check row security: %w", err)
	}
	if len(bad) > 0 {
		return fmt.Errorf("db: tenant data would leak across tenants: %s; every relation with a tenant_id column needs ENABLE and FORCE ROW LEVEL SECURITY (views: WITH (security_invoker = true))", strings.Join(bad, ", "))
	}
	return nil
}
