package cli

import (
	"context"
	"fmt"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/modules/agent"
)

func agentCommands() []Command {
	return []Command{
		define(Command{Name: "agent reset-state", Roles: []string{"agent"},
			Summary: "clear a retired agent's state dir (--state-dir) on purpose, so it may start again",
			Detail:  "A retired agent (its account was deleted) refuses to start until its state is cleared."},
			func(s *config.Set, dir *string) {
				s.String(dir, "state-dir", "FLEET_STATE_DIR", "", "the agent's state directory (its --state-dir)")
			},
			func(_ context.Context, c *Call, dir *string) error {
				if *dir == "" {
					return usagef("--state-dir is required")
				}
				if err := agent.ResetState(*dir); err != nil {
					return err
				}
				fmt.Fprintln(c.Stdout, "agent state cleared:", *dir)
				return nil
			}),
	}
}
