package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/modules/privacy"
	"github.com/fleetwright/fleetwright/modules/tenant"
)

const privacyUsage = `Usage: fleetwright privacy SUBCOMMAND (--tenant SLUG | --email ADDRESS) [flags]

  export    write the tenant's or the person's data as JSON Lines ({"table":…,"row":{…}}) to --out or stdout; secrets left out; audited
  erase     delete the tenant's data (its audit chain stays, sealed) or disable and anonymise the person's account; needs --confirm
            repeating the slug or address; audited

docs/OPERATIONS.md ("Export and erase") says what each covers. The database
flags are the admin commands' (--data-dir, --database-url, --database-app-url).
`

type privacyOptions struct {
	email, out, confirm string
}

// runPrivacy is `fleetwright privacy export|erase`.
func runPrivacy(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, privacyUsage)
		return 0
	}
	sub := args[0]
	if sub != "export" && sub != "erase" {
		fmt.Fprintf(stderr, "fleetwright: unknown command \"privacy %s\"; privacy takes: export, erase (see fleetwright privacy --help)\n", sub)
		return 2
	}
	var o adminOptions
	var p privacyOptions
	s := adminFlags(&o, "privacy "+sub)
	s.String(&o.tenant, "tenant", "", "", "the tenant (slug)")
	s.String(&p.email, "email", "", "", "the person (their sign-in address)")
	if sub == "export" {
		s.String(&p.out, "out", "", "", "write to this file (created 0600; default: standard output)")
	} else {
		s.String(&p.confirm, "confirm", "", "", "repeat the tenant's slug or the person's address to confirm the erase")
	}
	rest, err := s.Parse(args[1:], os.Getenv)
	if errors.Is(err, config.ErrHelp) {
		fmt.Fprint(stdout, privacyUsage+"\nFlags:\n")
		s.PrintDefaults(stdout)
		return 0
	}
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "fleetwright privacy %s: %v (see fleetwright privacy --help)\n", sub, err)
		return 2
	case len(rest) > 0:
		fmt.Fprintf(stderr, "fleetwright privacy %s: unexpected argument %q\n", sub, rest[0])
		return 2
	case (o.tenant == "") == (p.email == ""):
		fmt.Fprintf(stderr, "fleetwright privacy %s: give exactly one of --tenant or --email\n", sub)
		return 2
	case sub == "erase" && p.confirm != o.tenant+p.email:
		fmt.Fprintf(stderr, "fleetwright privacy erase: nothing erased: --confirm must repeat %q\n", o.tenant+p.email)
		return 2
	}
	log := logging.New(stderr, logging.Options{Format: o.logFormat, Level: level(o.logLevel)})
	ctx, stop := signalContext()
	defer stop()
	by := cliActor()
	err = withDB(ctx, o, log, true, func(app, owner *pgxpool.Pool) error {
		var w io.Writer = stdout
		if p.out != "" {
			f, err := os.OpenFile(p.out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return fmt.Errorf("--out: %w (it must not exist yet)", err)
			}
			defer f.Close()
			w = f
		}
		if p.email != "" {
			if sub == "export" {
				n, err := privacy.ExportUser(ctx, owner, by, p.email, w)
				if err == nil && p.out != "" {
					fmt.Fprintf(stdout, "exported %d rows of %s to %s\n", n, p.email, p.out)
				}
				return err
			}
			if err := privacy.EraseUser(ctx, owner, by, p.email); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "erased %s: account disabled and anonymised, sessions and grants deleted; audit entries stay sealed\n", p.email)
			return nil
		}
		t, err := tenant.BySlug(ctx, app, o.tenant)
		if err != nil {
			return err
		}
		var counts map[string]int
		verb := "exported"
		if sub == "export" {
			counts, err = privacy.ExportTenant(ctx, app, by, t.ID, w)
		} else {
			verb = "erased"
			counts, err = privacy.EraseTenant(ctx, owner, by, t.ID)
		}
		if err != nil {
			return err
		}
		if sub == "export" && p.out == "" {
			return nil
		}
		tables := make([]string, 0, len(counts))
		for k := range counts {
			tables = append(tables, k)
		}
		sort.Strings(tables)
		for _, k := range tables {
			if counts[k] > 0 {
				fmt.Fprintf(stdout, "  %s: %d rows\n", k, counts[k])
			} else if counts[k] < 0 {
				fmt.Fprintf(stdout, "  %s: not readable by the application role, left out\n", k)
			}
		}
		fmt.Fprintf(stdout, "%s tenant %s\n", verb, o.tenant)
		return nil
	})
	if err != nil {
		fmt.Fprintf(stderr, "fleetwright privacy %s: %s\n", sub, logging.Scrub(err.Error()))
		return 1
	}
	return 0
}
