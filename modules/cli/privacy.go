package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/modules/privacy"
	"github.com/fleetwright/fleetwright/modules/tenant"
)

// privacyCommands export or erase a tenant's or a person's data
// (docs/OPERATIONS.md, "Export and erase").
func privacyCommands() []Command {
	const detail = `Give exactly one of --tenant or --email. docs/OPERATIONS.md ("Export and
erase") says what each covers; both are audited.`
	return []Command{
		define(Command{Name: "privacy export", Roles: panelRole, DB: true, Detail: detail,
			Summary: `write a tenant's (--tenant) or a person's (--email) data as JSON Lines ({"table":…,"row":{…}}) to --out or stdout; secrets left out; audited`},
			func(s *config.Set, o *privacyOptions) {
				privacyFlags(s, o)
				s.String(&o.out, "out", "", "", "write to this file (created 0600, it must not exist yet; default: standard output)")
			}, privacyExport),
		define(Command{Name: "privacy erase", Roles: panelRole, DB: true, Detail: detail,
			Summary: "delete a tenant's data (its audit chain stays, sealed) or disable and anonymise a person's account; --confirm repeats the slug or address; audited"},
			func(s *config.Set, o *privacyOptions) {
				privacyFlags(s, o)
				s.String(&o.confirm, "confirm", "", "", "repeat the tenant's slug or the person's address to confirm the erase")
			}, privacyErase),
	}
}

type privacyOptions struct {
	tenant, email, out, confirm string
}

func privacyFlags(s *config.Set, o *privacyOptions) {
	s.String(&o.tenant, "tenant", "", "", "the tenant (slug)")
	s.String(&o.email, "email", "", "", "the person (their sign-in address)")
}

func (o *privacyOptions) check() error {
	if (o.tenant == "") == (o.email == "") {
		return usagef("give exactly one of --tenant or --email")
	}
	return nil
}

func privacyExport(ctx context.Context, c *Call, o *privacyOptions) error {
	if err := o.check(); err != nil {
		return err
	}
	return c.Meta.AppAndOwner(ctx, func(app, owner *pgxpool.Pool) error {
		var w io.Writer = c.Stdout
		if o.out != "" {
			f, err := os.OpenFile(o.out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return fmt.Errorf("--out: %w (it must not exist yet)", err)
			}
			defer f.Close()
			w = f
		}
		if o.email != "" {
			n, err := privacy.ExportUser(ctx, owner, actor(), o.email, w)
			if err == nil && o.out != "" {
				fmt.Fprintf(c.Stdout, "exported %d rows of %s to %s\n", n, o.email, o.out)
			}
			return err
		}
		t, err := tenant.BySlug(ctx, app, o.tenant)
		if err != nil {
			return err
		}
		counts, err := privacy.ExportTenant(ctx, app, actor(), t.ID, w)
		if err != nil || o.out == "" {
			return err
		}
		printCounts(c.Stdout, "exported", o.tenant, counts)
		return nil
	})
}

func privacyErase(ctx context.Context, c *Call, o *privacyOptions) error {
	if err := o.check(); err != nil {
		return err
	}
	if o.confirm != o.tenant+o.email {
		return usagef("nothing erased: --confirm must repeat %q", o.tenant+o.email)
	}
	return c.Meta.AppAndOwner(ctx, func(app, owner *pgxpool.Pool) error {
		if o.email != "" {
			if err := privacy.EraseUser(ctx, owner, actor(), o.email); err != nil {
				return err
			}
			fmt.Fprintf(c.Stdout, "erased %s: account disabled and anonymised, sessions and grants deleted; audit entries stay sealed\n", o.email)
			return nil
		}
		t, err := tenant.BySlug(ctx, app, o.tenant)
		if err != nil {
			return err
		}
		counts, err := privacy.EraseTenant(ctx, owner, actor(), t.ID)
		if err != nil {
			return err
		}
		printCounts(c.Stdout, "erased", o.tenant, counts)
		return nil
	})
}

// printCounts writes the rows per table an export or erase touched.
func printCounts(w io.Writer, verb, tenant string, counts map[string]int) {
	tables := make([]string, 0, len(counts))
	for k := range counts {
		tables = append(tables, k)
	}
	sort.Strings(tables)
	for _, k := range tables {
		if counts[k] > 0 {
			fmt.Fprintf(w, "  %s: %d rows\n", k, counts[k])
		} else if counts[k] < 0 {
			fmt.Fprintf(w, "  %s: not readable by the application role, left out\n", k)
		}
	}
	fmt.Fprintf(w, "%s tenant %s\n", verb, tenant)
}
