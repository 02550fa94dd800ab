package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/limit"
	"github.com/fleetwright/fleetwright/modules/tenant"
)

const limitUsage = `Usage: fleetwright limit SUBCOMMAND [flags]

  show [--tenant T]              the global limits, or a tenant's with what applies to it
  set NAME VALUE [--tenant T]    set a global limit, or a tenant's (--tenant); VALUE "none" removes it; audited

The lowest of a task's own, the tenant's and the global limit applies
(docs/OPERATIONS.md, "Limits"). Durations are written 30m or 2h, amounts in
USD as 2.50. The database flags are the admin commands' (--data-dir,
--database-url, --database-app-url).
`

// runLimit is `fleetwright limit show|set`.
func runLimit(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, limitUsage+"\nLimits:\n")
		for _, d := range limit.Defs {
			fmt.Fprintf(stdout, "  %-27s %s: %s\n", d.Name, d.Label, d.Where)
		}
		return 0
	}
	sub := args[0]
	if sub != "show" && sub != "set" {
		fmt.Fprintf(stderr, "fleetwright: unknown command \"limit %s\"; limit takes: show, set (see fleetwright limit --help)\n", sub)
		return 2
	}
	var o adminOptions
	s := adminFlags(&o, "limit "+sub)
	s.String(&o.tenant, "tenant", "FLEET_ADMIN_TENANT", "", "the tenant (slug); empty: the global limits")
	var pos []string
	rest := args[1:]
	for {
		r, err := s.Parse(rest, os.Getenv)
		if errors.Is(err, config.ErrHelp) {
			fmt.Fprint(stdout, limitUsage+"\nFlags:\n")
			s.PrintDefaults(stdout)
			return 0
		}
		if err != nil {
			fmt.Fprintf(stderr, "fleetwright limit %s: %v (see fleetwright limit --help)\n", sub, err)
			return 2
		}
		if len(r) == 0 {
			break
		}
		pos, rest = append(pos, r[0]), r[1:]
	}
	want := map[string]int{"show": 0, "set": 2}[sub]
	if len(pos) != want {
		fmt.Fprintf(stderr, "fleetwright limit %s: takes %d argument(s), got %d (see fleetwright limit --help)\n", sub, want, len(pos))
		return 2
	}
	var def limit.Def
	var value int64
	var set bool
	if sub == "set" {
		var ok bool
		if def, ok = limit.DefOf(limit.Name(pos[0])); !ok {
			fmt.Fprintf(stderr, "fleetwright limit set: unknown limit %q; limits: %s\n", pos[0], limit.Names())
			return 2
		}
		var err error
		if value, set, err = def.Parse(pos[1]); err != nil {
			fmt.Fprintf(stderr, "fleetwright limit set: %v\n", err)
			return 2
		}
	}
	log := logging.New(stderr, logging.Options{Format: o.logFormat, Level: level(o.logLevel)})
	ctx, stop := signalContext()
	defer stop()
	err := withAppDB(ctx, o, log, func(pool *pgxpool.Pool) error {
		tenantID := limit.Global
		if o.tenant != "" {
			t, err := tenant.BySlug(ctx, pool, o.tenant)
			if err != nil {
				return err
			}
			tenantID = t.ID
		}
		if sub == "set" {
			// The enrolled assistants concerned are told at commit, on
			// whichever panel replica holds them (fleet.LimitNotifier).
			if err := limit.Set(ctx, pool, cliActor(), tenantID, def.Name, value, set, fleet.LimitNotifier{}); errors.Is(err, limit.ErrNotTold) {
				// The limit is stored and applies; only the news is late.
				fmt.Fprintf(stderr, "fleetwright limit set: warning: %s (each connected assistant learns it when it next connects)\n", logging.Scrub(err.Error()))
			} else if err != nil {
				return err
			}
			scope := "global"
			if o.tenant != "" {
				scope = "tenant " + o.tenant
			}
			if set {
				fmt.Fprintf(stdout, "%s: %s set to %s\n", scope, def.Name, def.Format(value))
			} else {
				fmt.Fprintf(stdout, "%s: %s removed\n", scope, def.Name)
			}
		}
		return showLimits(ctx, pool, tenantID, stdout)
	})
	if err != nil {
		fmt.Fprintf(stderr, "fleetwright limit %s: %s\n", sub, logging.Scrub(err.Error()))
		return 1
	}
	return 0
}

func showLimits(ctx context.Context, pool *pgxpool.Pool, tenant string, stdout io.Writer) error {
	l, err := limit.Load(ctx, pool, tenant)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	if tenant == limit.Global {
		fmt.Fprintln(tw, "LIMIT\tGLOBAL")
	} else {
		fmt.Fprintln(tw, "LIMIT\tTENANT\tGLOBAL\tAPPLIES")
	}
	val := func(d limit.Def, m map[limit.Name]int64) string {
		if v, ok := m[d.Name]; ok {
			return d.Format(v)
		}
		return "none"
	}
	for _, d := range limit.Defs {
		if tenant == limit.Global {
			fmt.Fprintf(tw, "%s\t%s\n", d.Name, val(d, l.Global))
			continue
		}
		e, applies := l.Get(d.Name), "no limit"
		if e.Set {
			applies = d.Format(e.Value) + " (" + e.From + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", d.Name, val(d, l.Tenant), val(d, l.Global), applies)
	}
	return tw.Flush()
}
