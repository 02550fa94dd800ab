package cli

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/modules/audit"
)

func auditCommands() []Command {
	return []Command{
		define(Command{Name: "audit verify", Roles: panelRole, DB: true,
			Summary: "check the audit log's hash chains against their seals and the anchors under --data-dir/audit; exit 1 on tampering"},
			nil, verifyAudit),
	}
}

func verifyAudit(ctx context.Context, c *Call, _ *struct{}) error {
	return c.Meta.App(ctx, func(pool *pgxpool.Pool) error {
		path := audit.AnchorFile(c.Meta.DataDir)
		rep, err := audit.Verify(ctx, pool, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.Stdout, "audit verify: %d chains, %d entries (%d not sealed yet), %d anchors from %s\n",
			rep.Chains, rep.Entries, rep.Unsealed, rep.Anchors, path)
		if rep.Checkpoints > 0 {
			fmt.Fprintf(c.Stdout, "audit verify: %d chains verified from a checkpoint (their older entries were dropped by retention)\n", rep.Checkpoints)
		}
		if rep.Restores > 0 {
			fmt.Fprintf(c.Stdout, "audit verify: this database was restored from a backup %d time(s): entries written after a backup are missing from it\n", rep.Restores)
		}
		for _, l := range rep.Lost {
			fmt.Fprintln(c.Stdout, "RESTORED:", l)
		}
		for _, p := range rep.Problems {
			fmt.Fprintln(c.Stdout, "PROBLEM:", p)
		}
		if !rep.OK() {
			return fmt.Errorf("%d problems found: the audit log was tampered with", len(rep.Problems))
		}
		fmt.Fprintln(c.Stdout, "audit verify: OK")
		return nil
	})
}
