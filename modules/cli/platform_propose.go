package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/modules/platform/propose"
	pspec "github.com/fleetwright/fleetwright/modules/platform/spec"
)

func platformProposeCommand() Command {
	return define(Command{Name: "platform propose", Roles: panelRole,
		Summary: "draft a platform spec from a recorded session (a HAR file: sign in, watch the board, book one load, open the bookings); every guess is marked in the draft (docs/ADAPTERS.md, \"Drafting a spec from a recorded session\")"},
		func(s *config.Set, o *proposeOptions) {
			s.String(&o.har, "har", "", "", "the recorded session: Chromium DevTools → Network → Save all as HAR with content")
			s.String(&o.out, "out", "", "", "write the draft here (default: standard output)")
			s.String(&o.name, "name", "", "", "the platform's name (default: from the pages' titles)")
		}, platformPropose)
}

type proposeOptions struct {
	har, out, name string
}

const recordHint = "record the session in Chromium's DevTools: Network → Save all as HAR with content"

func platformPropose(_ context.Context, c *Call, o *proposeOptions) error {
	if o.har == "" {
		return usagef("--har is required: the recorded session (%s)", recordHint)
	}
	raw, err := os.ReadFile(o.har)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("--har %s: no such file; %s", o.har, recordHint)
		}
		return fmt.Errorf("--har %s: %w", o.har, errors.Unwrap(err))
	}
	h, err := propose.ReadHAR(raw)
	if err != nil {
		return fmt.Errorf("--har %s: %s", o.har, trimPkg(err))
	}
	d, err := propose.Propose(h, propose.Options{Name: o.name, File: "a recorded session"})
	if err != nil {
		return fmt.Errorf("--har %s: %s", o.har, trimPkg(err))
	}
	// The session's secrets (password, code, cookies, tokens) are never
	// printed: the draft holds variables in their place, and the log's
	// redaction knows them from here on.
	logging.RegisterSecret(d.Secrets...)
	if o.out == "" {
		if _, err := c.Stdout.Write(d.YAML); err != nil {
			return err
		}
	} else if err := os.WriteFile(o.out, d.YAML, 0o600); err != nil {
		return fmt.Errorf("--out %s: %w", o.out, errors.Unwrap(err))
	}
	for _, line := range d.Summary {
		fmt.Fprintln(c.Stderr, line)
	}
	where := "standard output"
	if o.out != "" {
		where = o.out
	}
	var errs *pspec.Errors
	if errors.As(d.Err, &errs) {
		for _, fe := range errs.List {
			fmt.Fprintln(c.Stderr, errs.Line(fe))
		}
		fmt.Fprintf(c.Stderr, "draft written to %s, but it does not validate (%d error(s) above): fix them by hand\n", where, len(errs.List))
		return exit(ExitFailed)
	}
	fmt.Fprintf(c.Stderr, "draft written to %s: %d guess(es) marked \"# guess:\"; read each, then fleetwright platform check FILE --base-url URL --account-file F\n", where, d.Guesses)
	return nil
}

// trimPkg drops the package prefix of a propose error: the command names
// itself.
func trimPkg(err error) string {
	msg := err.Error()
	const p = "propose: "
	for len(msg) > len(p) && msg[:len(p)] == p {
		msg = msg[len(p):]
	}
	return msg
}
