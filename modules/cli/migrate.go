package cli

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/migrations"
)

func migrateCommands() []Command {
	return []Command{
		define(Command{Name: "migrate", Roles: []string{"panel"}, DB: true,
			Summary: "apply database migrations (embedded cluster under --data-dir, or --database-url) and exit",
			Detail: "With --database-url the application role is --database-app-url's user (the embedded one without).\n" +
				"The embedded cluster is migrated only while no panel holds --data-dir (a starting panel migrates it itself)."},
			nil, migrate),
	}
}

// migrate applies migrations against --database-url, or the embedded cluster.
func migrate(ctx context.Context, c *Call, _ *struct{}) error {
	m, log := c.Meta, c.Meta.Logger()
	ownerURL, appRole := m.DatabaseURL, embedded.AppRole
	if ownerURL == "" {
		lock, err := embedded.LockDataDir(m.DataDir, "fleetwright migrate")
		if err != nil {
			return err
		}
		defer lock.Release()
		pg, err := embedded.StartPostgres(ctx, embedded.PostgresConfig{Dir: filepath.Join(m.DataDir, "postgres"), Logger: log})
		if err != nil {
			return err
		}
		defer pg.Stop()
		ownerURL = pg.OwnerURL()
	} else if m.DatabaseAppURL != "" {
		u, err := userOf(m.DatabaseAppURL)
		if err != nil {
			return usage(err)
		}
		appRole = u
	}
	pool, err := db.Open(ctx, ownerURL, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := db.Migrate(ctx, pool, migrations.FS, appRole, c.build.Version, log); err != nil {
		return err
	}
	fmt.Fprintln(c.Stdout, "migrations up to date")
	return nil
}
