package cli

import (
	"context"
	"fmt"
)

func versionCommands() []Command {
	return []Command{
		define(Command{Name: "version", Summary: "print the build version"}, nil,
			func(_ context.Context, c *Call, _ *struct{}) error {
				fmt.Fprintln(c.Stdout, "fleetwright", c.build.Version)
				return nil
			}),
	}
}
