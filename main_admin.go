package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/modules/claim"
)

// adminCommands are the claim engine's one-shot subcommands.
var adminCommands = []struct{ name, help string }{
	{"admin pause", "pause claiming: no new lease, no new action (the whole fleet, or --tenant SLUG); audited"},
	{"admin resume", "resume claiming (the whole fleet, or --tenant SLUG); audited"},
}

// adminOptions are the flags of the admin subcommands.
type adminOptions struct {
	tenant string
}

func registerAdminFlags(s *config.Set, a *adminOptions) {
	s.String(&a.tenant, "tenant", "FLEET_ADMIN_TENANT", "",
		"tenant slug for admin pause/resume (empty: the whole fleet)", config.Roles("admin pause", "admin resume"))
}

// adminPause flips a pause switch from the command line. It connects with
// --database-app-url (or --database-url), or, with neither, to the embedded
// cluster under --data-dir when no panel is running on it (a running panel
// holds the data dir: use its console then).
func adminPause(ctx context.Context, o options, pause bool, stdout io.Writer, log *slog.Logger) error {
	url := o.panel.DatabaseAppURL
	if url == "" {
		url = o.panel.DatabaseURL
	}
	if url == "" {
		lock, err := embedded.LockDataDir(o.dataDir, "fleetwright admin")
		if errors.Is(err, embedded.ErrLocked) {
			return fmt.Errorf("admin: a panel is running on %s: pause from its console (Claim settings), or pass --database-url", o.dataDir)
		}
		if err != nil {
			return err
		}
		defer lock.Release()
		pg, err := embedded.StartPostgres(ctx, embedded.PostgresConfig{Dir: filepath.Join(o.dataDir, "postgres"), Logger: log})
		if err != nil {
			return err
		}
		defer pg.Stop()
		url = pg.AppURL()
	}
	pool, err := db.Open(ctx, url, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	st := claim.NewStore(pool, nil)
	tenant, scope := "", "the whole fleet"
	if o.admin.tenant != "" {
		t, err := st.TenantBySlug(ctx, o.admin.tenant)
		if err != nil {
			return err
		}
		tenant, scope = t.ID, "tenant "+t.Slug
	}
	actor := "cli:" + os.Getenv("USER")
	if err := st.SetPaused(ctx, claim.DBAuditor{}, actor, tenant, pause); err != nil {
		return err
	}
	if pause {
		fmt.Fprintln(stdout, "paused:", scope, "(no new lease or action; actions in flight finish)")
	} else {
		fmt.Fprintln(stdout, "resumed:", scope)
	}
	return nil
}

func init() { commands = append(commands, adminCommands...) }
