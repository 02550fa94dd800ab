// Package db opens the panel's Postgres pools and applies migrations.
package db

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"regexp"
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
// pgx's default (4 on two cores) is far too small for a claim engine. tune,
// when given, adjusts the pool's configuration before it opens (a hook run
// on every acquire, for instance).
func Open(ctx context.Context, url string, maxConns int32, tune ...func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("db: parse url: %s", redactURLError(err))
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	cfg.MaxConnIdleTime = 5 * time.Minute
	cfg.ConnConfig.OnNotice = markCanceledSyncWait
	for _, f := range tune {
		f(cfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("db: open pool: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		hosts := Hosts(cfg.ConnConfig)
		if len(hosts) > 1 && cfg.ConnConfig.ValidateConnect != nil {
			return nil, fmt.Errorf("db: none of %s accepted a session as %s with target_session_attrs=%s: each is down or refuses it (a standby is read-only). "+
				"Check that the cluster has a primary (patronictl list) and that the URL names its members: %w",
				strings.Join(hosts, ", "), cfg.ConnConfig.User, sessionAttrs(url), err)
		}
		return nil, fmt.Errorf("db: connect to %s as %s: %w", strings.Join(hosts, ", "), cfg.ConnConfig.User, err)
	}
	return pool, nil
}

var sessionAttrsRE = regexp.MustCompile(`target_session_attrs=([a-z-]+)`)

// sessionAttrs is the URL's target_session_attrs (for an error message).
func sessionAttrs(url string) string {
	if m := sessionAttrsRE.FindStringSubmatch(url); m != nil {
		return m[1]
	}
	return "?"
}

// Hosts lists the host:port of every server a connection configuration
// names (a multi-host URL has several; pgx tries them in order).
func Hosts(c *pgx.ConnConfig) []string {
	out := []string{hostPort(c.Host, c.Port)}
	for _, f := range c.Fallbacks {
		if h := hostPort(f.Host, f.Port); h != out[len(out)-1] {
			out = append(out, h)
		}
	}
	return out
}

func hostPort(h string, p uint16) string {
	if strings.HasPrefix(h, "/") {
		return h
	}
	return fmt.Sprintf("%s:%d", h, p)
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
// not race. It runs as the owner role; appRole receives data privileges;
// release (the binary's version) is recorded with each migration it applies.
//
// A schema holding a version that files do not ship was written by a newer
// release: Migrate refuses it (an *UnknownMigrationError) before changing
// anything, since this binary cannot know what that migration means.
func Migrate(ctx context.Context, pool *pgxpool.Pool, files fs.FS, appRole, release string, log *slog.Logger) error {
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
	// The release column came later than the table: added in place, so a
	// schema of any release can name the release that wrote each version.
	if _, err := conn.Exec(ctx, `ALTER TABLE schema_migrations ADD COLUMN IF NOT EXISTS release text`); err != nil {
		return fmt.Errorf("db: migrate: %w", err)
	}
	names, err := fs.Glob(files, "*.sql")
	if err != nil {
		return fmt.Errorf("db: migrate: %w", err)
	}
	sort.Strings(names)
	shipped := map[string]bool{}
	for _, name := range names {
		shipped[strings.TrimSuffix(name, ".sql")] = true
	}
	applied := map[string]bool{}
	var unknown []UnknownMigration
	rows, err := conn.Query(ctx, "SELECT version, coalesce(release, ''), applied_at FROM schema_migrations ORDER BY version")
	if err != nil {
		return fmt.Errorf("db: migrate: %w", err)
	}
	for rows.Next() {
		var m UnknownMigration
		if err := rows.Scan(&m.Version, &m.Release, &m.AppliedAt); err != nil {
			return fmt.Errorf("db: migrate: %w", err)
		}
		applied[m.Version] = true
		if !shipped[m.Version] {
			unknown = append(unknown, m)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("db: migrate: %w", err)
	}
	if len(unknown) > 0 {
		return &UnknownMigrationError{Migrations: unknown, Release: release}
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
			_, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, release) VALUES ($1, nullif($2, ''))", version, release)
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

// UnknownMigration is a version recorded in schema_migrations that this
// binary does not ship.
type UnknownMigration struct {
	Version string
	// Release is the version of the binary that applied it ("" when it was
	// applied before releases were recorded).
	Release   string
	AppliedAt time.Time
}

// UnknownMigrationError refuses a schema written by a newer release.
type UnknownMigrationError struct {
	Migrations []UnknownMigration
	// Release is this binary's version.
	Release string
}

func (e *UnknownMigrationError) Error() string {
	var b strings.Builder
	b.WriteString("db: the database's schema is newer than this binary: it holds ")
	for i, m := range e.Migrations {
		if i > 0 {
			b.WriteString(", ")
		}
		by := "an unrecorded release"
		if m.Release != "" {
			by = "release " + m.Release
		}
		fmt.Fprintf(&b, "migration %s (applied by %s on %s)", m.Version, by, m.AppliedAt.UTC().Format(time.DateOnly))
	}
	this := e.Release
	if this == "" {
		this = "unknown"
	}
	fmt.Fprintf(&b, ", which this binary (release %s) does not ship; nothing was changed. "+
		"Run the release that applied it, or a newer one; to go back to this release, restore the backup taken before the upgrade "+
		"(docs/DEPLOY.md, \"Upgrades\")", this)
	return b.String()
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
