package cli

import (
	"context"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/modules/bench"
)

// benchRoles: bench starts what it measures (or uses the URLs it is given)
// on one machine, like the demo.
var benchRoles = []string{"panel", "demo"}

func benchCommands() []Command {
	return []Command{
		define(Command{Name: "bench", Roles: benchRoles,
			Summary: "measure the claim path's floor (bare durable insert, loopback round trip) and the claim path through a real panel in every dispatch mode, with the ratios (--quick, --json)",
			Detail: "Measures, in one run on this machine, the floor of the claim path (bare durable INSERT … ON CONFLICT\n" +
				"of this Postgres, one loopback WebSocket round trip) and the whole claim path through a real panel with\n" +
				"protocol-only agents, in every dispatch mode this build has; prints leases/s, the ratio to the bare\n" +
				"inserts and detect→act_sent next to the floor (docs/BENCHMARKS.md). Exit 1 when the run itself failed."},
			func(s *config.Set, cfg *bench.Config) { cfg.Register(s) }, runBench),
	}
}

func runBench(ctx context.Context, c *Call, cfg *bench.Config) error {
	if err := cfg.Validate(c.Flags.Given); err != nil {
		return usage(err)
	}
	rep, err := bench.Run(ctx, *cfg, c.Stdout, c.Stderr)
	if err != nil {
		return err
	}
	rep.WriteText(c.Stdout)
	if cfg.JSON != "" {
		return rep.WriteJSON(cfg.JSON)
	}
	return nil
}
