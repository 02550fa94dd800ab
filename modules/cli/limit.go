package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/limit"
)

// limitCommands are the per tenant and global limits (docs/OPERATIONS.md, "Limits").
func limitCommands() []Command {
	var b strings.Builder
	b.WriteString("The lowest of a task's own, the tenant's and the global limit applies\n" +
		"(docs/OPERATIONS.md, \"Limits\"). Durations are written 30m or 2h, amounts in\nUSD as 2.50.\n\nLimits:\n")
	for _, d := range limit.Defs {
		fmt.Fprintf(&b, "  %-27s %s: %s\n", d.Name, d.Label, d.Where)
	}
	detail := b.String()
	return []Command{
		define(Command{Name: "limit show", Roles: panelRole, DB: true, Detail: detail,
			Summary: "the global limits, or a tenant's (--tenant) with what applies to it"},
			scopeFlags, func(ctx context.Context, c *Call, o *scopeOption) error { return limitRun(ctx, c, o, nil) }),
		define(Command{Name: "limit set", Args: "NAME VALUE", MinArgs: 2, MaxArgs: 2, Roles: panelRole, DB: true, Detail: detail,
			Summary: "set a global limit, or a tenant's (--tenant): browser concurrency, run time per task, retries, crawl pages per day, model spend per day, …; VALUE none removes it; audited"},
			scopeFlags, limitSet),
	}
}

func limitSet(ctx context.Context, c *Call, o *scopeOption) error {
	def, ok := limit.DefOf(limit.Name(c.Args[0]))
	if !ok {
		return usagef("unknown limit %q; limits: %s", c.Args[0], limit.Names())
	}
	value, set, err := def.Parse(c.Args[1])
	if err != nil {
		return usage(err)
	}
	return limitRun(ctx, c, o, func(pool *pgxpool.Pool, tenant string) error {
		// The enrolled assistants concerned are told at commit, on
		// whichever panel replica holds them (fleet.LimitNotifier).
		if err := limit.Set(ctx, pool, actor(), tenant, def.Name, value, set, fleet.LimitNotifier{}); errors.Is(err, limit.ErrNotTold) {
			// The limit is stored and applies; only the news is late.
			fmt.Fprintf(c.Stderr, "fleetwright limit set: warning: %s (each connected assistant learns it when it next connects)\n", logging.Scrub(err.Error()))
		} else if err != nil {
			return err
		}
		scope := "global"
		if o.tenant != "" {
			scope = "tenant " + o.tenant
		}
		if set {
			fmt.Fprintf(c.Stdout, "%s: %s set to %s\n", scope, def.Name, def.Format(value))
		} else {
			fmt.Fprintf(c.Stdout, "%s: %s removed\n", scope, def.Name)
		}
		return nil
	})
}

// limitRun runs change (if any) on the scope --tenant names, then shows the limits.
func limitRun(ctx context.Context, c *Call, o *scopeOption, change func(pool *pgxpool.Pool, tenant string) error) error {
	return inScope(ctx, c, o.tenant, limit.Global, func(pool *pgxpool.Pool, tenant string) error {
		if change != nil {
			if err := change(pool, tenant); err != nil {
				return err
			}
		}
		return showLimits(ctx, pool, tenant, c.Stdout)
	})
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
