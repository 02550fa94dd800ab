package cli

import (
	"context"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/modules/loadtest"
)

func loadtestCommands() []Command {
	return []Command{
		define(Command{Name: "loadtest", Roles: benchRoles,
			Summary: "run the whole fleet on this machine under a chaos schedule and report duplicates, lost and phantom claims, leaks and latency (--workers, --duration, --rate, --chaos, --json)",
			Detail: "Runs the whole fleet on this machine under a chaos schedule and reports against the board's ground truth\n" +
				"(docs/LOADTEST.md). Exit 1 when the report shows a failure or the run itself failed."},
			func(s *config.Set, cfg *loadtest.Config) { cfg.Register(s) }, runLoadtest),
	}
}

func runLoadtest(ctx context.Context, c *Call, cfg *loadtest.Config) error {
	if err := cfg.Validate(); err != nil {
		return usage(err)
	}
	rep, err := loadtest.Run(ctx, *cfg, c.Stdout, c.Stderr)
	if err != nil {
		return err
	}
	rep.WriteText(c.Stdout)
	if cfg.JSON != "" {
		if err := rep.WriteJSON(cfg.JSON); err != nil {
			return err
		}
	}
	if rep.Failed {
		return exit(ExitFailed)
	}
	return nil
}
