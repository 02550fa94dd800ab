// Package db opens the panel's Postgres pools and applies migrations.
package db

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// migrationLockKey is the advisory lock that serialises migrations across
// panels starting at once ("fleetwright" in ASCII, truncated).
const migrationLockKey int64 = 0x666c656574777269

// Open returns a pool of at most maxConns connections, checked with a ping.
// pgx's default (4 on two cores) is far too small for a claim engine.
func Open(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("db: parse url: %s", redactURLError(err))
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	cfg.MaxConnIdleTime = 5 * time.Minute
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("db: open pool: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("db: connect to %s as %s: %w", cfg.ConnConfig.Host, cfg.ConnConfig.User, err)
	}
	return pool, nil
}

// redactURLError keeps a password in a malformed URL out of the error.
func redactURLError(err error) string {
	s := err.Error()
	if i := strings.Index(s, "://"); i >= 0 {
		return "malformed database URL (check FLEET_DATABASE_URL)"
	}
	return s
}

// Migrate applies every pending migration from files, then River's own
// migrations, under a session advisory lock so panels starting together do
// not race. It runs as the owner role; appRole receives data privileges.
func Migrate(ctx context.Context, pool *pgxpool.Pool, files fs.FS, appRole string, log *slog.Logger) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("db: migrate: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrationLockKey); err != nil {
		return fmt.Errorf("db: migrate: take lock: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", migrationLockKey)
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    text PRIMARY KEY,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("db: migrate: %w", err)
	}
	names, err := fs.Glob(files, "*.sql")
	if err != nil {
		return fmt.Errorf("db: migrate: %w", err)
	}
	sort.Strings(names)
	applied := map[string]bool{}
	rows, err := conn.Query(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return fmt.Errorf("db: migrate: %w", err)
	}
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return fmt.Errorf("db: migrate: %w", err)
		}
		applied[v] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("db: migrate: %w", err)
	}
	role := pgx.Identifier{appRole}.Sanitize()
	for _, name := range names {
		version := strings.TrimSuffix(name, ".sql")
		if applied[version] {
			continue
		}
		body, err := fs.ReadFile(files, name)
		if err != nil {
			return fmt.Errorf("db: migrate: %w", err)
		}
		sql := strings.ReplaceAll(string(body), "${app_role}", role)
		if err := pgx.BeginFunc(ctx, conn.Conn(), func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version) VALUES ($1)", version)
			return err
		}); err != nil {
			return fmt.Errorf("db: migration %s: %w", name, err)
		}
		log.Info("migration applied", "version", version)
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return fmt.Errorf("db: river migrator: %w", err)
	}
	res, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return fmt.Errorf("db: river migrations: %w", err)
	}
	if len(res.Versions) > 0 {
		log.Info("river migrations applied", "count", len(res.Versions))
	}
	return nil
}

// CheckAppRole refuses a runtime role that would bypass row-level security:
// a superuser, a BYPASSRLS role, or the owner of the database's tables.
func CheckAppRole(ctx context.Context, pool *pgxpool.Pool) error {
	var user string
	var super, bypass bool
	err := pool.QueryRow(ctx, `SELECT current_user, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user`).
		Scan(&user, &super, &bypass)
	if err != nil {
		return fmt.Errorf("db: check role: %w", err)
	}
	if super || bypass {
		return fmt.Errorf("db: the panel's database role %q is a superuser or BYPASSRLS, so row-level security would not apply: connect with an application role (FLEET_DATABASE_APP_URL) that is neither", user)
	}
	var owned int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tableowner = current_user`).Scan(&owned); err != nil {
		return fmt.Errorf("db: check role: %w", err)
	}
	if owned > 0 {
		return fmt.Errorf("db: the panel's database role %q owns %d tables, so row-level security would not apply to it: connect with an application role (FLEET_DATABASE_APP_URL) that owns nothing", user, owned)
	}
	return nil
}
