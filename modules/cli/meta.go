package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/migrations"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/tenant"
)

// Meta is the flags every command on the panel's database shares (as
// nomad's commands share their Meta): where the database is, and how the
// command logs.
type Meta struct {
	DataDir, DatabaseURL, DatabaseAppURL string
	LogFormat, LogLevel                  string
	stderr                               io.Writer
	// release is the binary's version, recorded with the migrations it applies.
	release string
}

func (m *Meta) flags(s *config.Set) {
	s.String(&m.DataDir, "data-dir", "FLEET_DATA_DIR", "./var", "the panel's data directory (its embedded Postgres and the audit anchors)")
	s.String(&m.DatabaseURL, "database-url", "FLEET_DATABASE_URL", "", "owner role's Postgres URL; empty uses the embedded cluster under --data-dir")
	s.String(&m.DatabaseAppURL, "database-app-url", "FLEET_DATABASE_APP_URL", "", "application role's Postgres URL (required with --database-url)")
	s.Enum(&m.LogFormat, "log-format", "FLEET_LOG_FORMAT", "text", []string{"text", "json"}, "log line format")
	s.Enum(&m.LogLevel, "log-level", "FLEET_LOG_LEVEL", "warn", []string{"debug", "info", "warn", "error"}, "lowest level logged")
}

// Logger is the command's logger, on its standard error.
func (m *Meta) Logger() *slog.Logger {
	return logging.New(m.stderr, logging.Options{Format: m.LogFormat, Level: Level(m.LogLevel)})
}

// App runs fn on a pool of the application role: --database-app-url, or
// the embedded cluster — started here (and migrated) when no panel runs, or
// the running panel's when its data directory is locked.
func (m *Meta) App(ctx context.Context, fn func(*pgxpool.Pool) error) error {
	return m.pools(ctx, false, func(app, _ *pgxpool.Pool) error { return fn(app) })
}

// AppAndOwner is App that also connects as the owner role (erasing a
// tenant deletes history the application role may not).
func (m *Meta) AppAndOwner(ctx context.Context, fn func(app, owner *pgxpool.Pool) error) error {
	return m.pools(ctx, true, fn)
}

func (m *Meta) pools(ctx context.Context, owner bool, fn func(app, owner *pgxpool.Pool) error) error {
	log := m.Logger()
	appURL, ownerURL := m.DatabaseAppURL, m.DatabaseURL
	if m.DatabaseURL != "" && appURL == "" {
		return usage(errors.New("--database-url needs --database-app-url (FLEET_DATABASE_APP_URL)"))
	}
	if m.DatabaseURL == "" {
		pgDir := filepath.Join(m.DataDir, "postgres")
		lock, err := embedded.LockDataDir(m.DataDir, "a fleetwright command")
		switch {
		case err == nil:
			defer lock.Release()
			pg, err := embedded.StartPostgres(ctx, embedded.PostgresConfig{Dir: pgDir, Logger: log})
			if err != nil {
				return err
			}
			defer pg.Stop()
			own, err := db.Open(ctx, pg.OwnerURL(), 2)
			if err != nil {
				return err
			}
			err = db.Migrate(ctx, own, migrations.FS, embedded.AppRole, m.release, log)
			own.Close()
			if err != nil {
				return err
			}
			appURL, ownerURL = pg.AppURL(), pg.OwnerURL()
		case errors.Is(err, embedded.ErrLocked):
			pg, err := embedded.Attach(ctx, pgDir)
			if err != nil {
				return err
			}
			appURL, ownerURL = pg.AppURL(), pg.OwnerURL()
		default:
			return err
		}
	}
	pool, err := db.Open(ctx, appURL, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := db.CheckAppRole(ctx, pool); err != nil {
		return err
	}
	var own *pgxpool.Pool
	if owner {
		if own, err = db.Open(ctx, ownerURL, 2); err != nil {
			return err
		}
		defer own.Close()
	}
	return fn(pool, own)
}

// Level parses a --log-level value (already checked by its flag).
func Level(s string) slog.Level {
	var l slog.Level
	_ = l.UnmarshalText([]byte(s))
	return l
}

// userOf returns the role name in a Postgres URL without echoing the URL.
func userOf(url string) (string, error) {
	c, err := pgx.ParseConfig(url)
	if err != nil {
		return "", errors.New("malformed database URL (check FLEET_DATABASE_APP_URL)")
	}
	return c.User, nil
}

// actor is who the audit log records for a command: the person at the
// terminal, as far as the environment says.
func actor() audit.Entry {
	who := "cli"
	if u := os.Getenv("SUDO_USER"); u != "" {
		who = "cli:" + u
	} else if u := os.Getenv("USER"); u != "" {
		who = "cli:" + u
	}
	return audit.Entry{Actor: who}
}

// secretLine reads the first line of standard input, a secret (what names
// it for the error), and tells the logging layer to redact it.
func secretLine(c *Call, what string) (string, error) {
	line, err := bufio.NewReader(c.Stdin).ReadString('\n')
	if err != nil && (!errors.Is(err, io.EOF) || line == "") {
		return "", fmt.Errorf("read %s from standard input: %w", what, err)
	}
	line = strings.TrimRight(line, "\r\n")
	logging.RegisterSecret(line)
	return line, nil
}

// inScope runs fn on the application role's pool with the id of the tenant
// slug names, or global when slug is empty.
func inScope(ctx context.Context, c *Call, slug, global string, fn func(pool *pgxpool.Pool, tenant string) error) error {
	if slug == "" {
		return c.Meta.App(ctx, func(pool *pgxpool.Pool) error { return fn(pool, global) })
	}
	return withTenant(ctx, c, slug, func(pool *pgxpool.Pool, t tenant.Tenant) error { return fn(pool, t.ID) })
}

// withTenant runs fn on the application role's pool with the tenant slug
// names.
func withTenant(ctx context.Context, c *Call, slug string, fn func(pool *pgxpool.Pool, t tenant.Tenant) error) error {
	return c.Meta.App(ctx, func(pool *pgxpool.Pool) error {
		t, err := tenant.BySlug(ctx, pool, slug)
		if err != nil {
			return err
		}
		return fn(pool, t)
	})
}

// scopeOption is the --tenant flag of a command on a tenant's settings or
// the global ones.
type scopeOption struct{ tenant string }

func scopeFlags(s *config.Set, o *scopeOption) {
	s.String(&o.tenant, "tenant", "FLEET_ADMIN_TENANT", "", "the tenant (slug); empty: the global ones")
}
