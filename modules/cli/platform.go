package cli

import (
	"context"
	"errors"
	"fmt"
	"os"

	pspec "github.com/fleetwright/fleetwright/modules/platform/spec"
)

// platformCommands are the platform specs (docs/ADAPTERS.md).
func platformCommands() []Command {
	return []Command{
		define(Command{Name: "platform validate", Args: "FILE…", MinArgs: 1, MaxArgs: Many, Roles: panelRole,
			Summary: "check platform spec files (docs/ADAPTERS.md): each error as path:line: field.path: what is wrong; exit 1 on any"},
			nil, platformValidate),
		platformCheckCommand(),
		platformProposeCommand(),
	}
}

func platformValidate(_ context.Context, c *Call, _ *struct{}) error {
	failed := false
	for _, f := range c.Args {
		src, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintf(c.Stderr, "fleetwright platform validate: %v\n", err)
			failed = true
			continue
		}
		s, err := pspec.Parse(f, src)
		var errs *pspec.Errors
		if errors.As(err, &errs) {
			for _, fe := range errs.List {
				fmt.Fprintln(c.Stderr, errs.Line(fe))
			}
			fmt.Fprintf(c.Stderr, "%s: %d error(s)\n", f, len(errs.List))
			failed = true
			continue
		}
		keys := "stated: not honoured"
		switch id := s.Idempotency; {
		case id.Read != nil:
			keys = "read from " + id.Read.Request.Method + " " + id.Read.Request.URL
		case *id.Honoured:
			keys = "stated: honoured"
		}
		fmt.Fprintf(c.Stdout, "%s: ok: platform %q (version %d): %d sign-in step(s), feed paged by %s, %d booking rule(s), bookings paged by %s, idempotency keys %s\n",
			f, s.Name, s.Version, len(s.SignIn.Steps), s.Feed.Paging.Kind, len(s.Booking.Results), s.Bookings.Paging.Kind, keys)
	}
	if failed {
		return exit(ExitFailed)
	}
	return nil
}
