package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/retention"
)

// retentionCommands say how long each kind of a tenant's data is kept
// (docs/OPERATIONS.md, "Retention").
func retentionCommands() []Command {
	var b strings.Builder
	b.WriteString("A tenant's setting wins over the global one, which wins over the default\n" +
		"(docs/OPERATIONS.md, \"Retention\"). Audit entries are dropped only behind a\ncheckpoint anchored under --data-dir/audit.\n\nKinds (default):\n")
	for _, d := range retention.Defs {
		fmt.Fprintf(&b, "  %-15s %s (%s); always kept: %s\n", d.Kind, d.Label, retention.FormatDays(d.Default), d.Keeps)
	}
	detail := b.String()
	return []Command{
		define(Command{Name: "retention show", Roles: panelRole, DB: true, Detail: detail,
			Summary: "how long each kind of data is kept: the global settings, or a tenant's (--tenant) with what applies"},
			scopeFlags, retentionShow),
		define(Command{Name: "retention set", Args: "KIND DAYS", MinArgs: 2, MaxArgs: 2, Roles: panelRole, DB: true, Detail: detail,
			Summary: "keep KIND for DAYS days (forever, or default to fall back): agent events, screenshots, claim archive, crawl data, alarms, audit entries; global without --tenant; audited"},
			scopeFlags, retentionSet),
		define(Command{Name: "retention run", Roles: panelRole, DB: true, Detail: detail,
			Summary: "prune everything past retention now (the panel does it daily, --retention-cron)"},
			nil, retentionRun),
	}
}

func retentionShow(ctx context.Context, c *Call, o *scopeOption) error {
	return inScope(ctx, c, o.tenant, retention.Global, func(pool *pgxpool.Pool, tenant string) error { return showRetention(ctx, pool, tenant, c.Stdout) })
}

func retentionSet(ctx context.Context, c *Call, o *scopeOption) error {
	kind := retention.Kind(c.Args[0])
	if _, ok := retention.DefOf(kind); !ok {
		return usagef("unknown kind %q; kinds: %s", c.Args[0], retention.Kinds())
	}
	days, set, err := retention.ParseDays(c.Args[1])
	if err != nil {
		return usage(err)
	}
	return inScope(ctx, c, o.tenant, retention.Global, func(pool *pgxpool.Pool, tenant string) error {
		if err := retention.Set(ctx, pool, actor(), tenant, kind, days, set); err != nil {
			return err
		}
		return showRetention(ctx, pool, tenant, c.Stdout)
	})
}

func retentionRun(ctx context.Context, c *Call, _ *struct{}) error {
	log := c.Meta.Logger()
	return c.Meta.App(ctx, func(pool *pgxpool.Pool) error {
		p := &retention.Pruner{DB: pool, Anchor: audit.NewAnchor(audit.AnchorFile(c.Meta.DataDir), log), Log: log}
		rep, err := p.Run(ctx)
		printPruned(ctx, pool, c.Stdout, rep)
		return err
	})
}

func showRetention(ctx context.Context, pool *pgxpool.Pool, tenant string, stdout io.Writer) error {
	st, err := retention.Load(ctx, pool, tenant)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tKEPT\tFROM")
	for _, d := range retention.Defs {
		days, from := st.Days(d.Kind)
		if tenant == retention.Global && from == "tenant" {
			from = "global"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", d.Kind, retention.FormatDays(days), from)
	}
	return tw.Flush()
}

func printPruned(ctx context.Context, pool *pgxpool.Pool, stdout io.Writer, rep retention.Report) {
	slugs := map[string]string{retention.Global: "system"}
	if rows, err := pool.Query(ctx, `SELECT id::text, slug FROM tenants`); err == nil {
		for rows.Next() {
			var id, slug string
			if rows.Scan(&id, &slug) == nil {
				slugs[id] = slug
			}
		}
		rows.Close()
	}
	var ids []string
	for id := range rep.Tenants {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return slugs[ids[i]] < slugs[ids[j]] })
	for _, id := range ids {
		for _, d := range retention.Defs {
			if n := rep.Tenants[id][d.Kind]; n > 0 {
				fmt.Fprintf(stdout, "%s: %s: %d pruned\n", slugs[id], d.Kind, n)
			}
		}
	}
	if len(rep.AddressKeys) > 0 {
		fmt.Fprintf(stdout, "client-address keys deleted: %s (their audit entries' address hashes link to nothing now)\n", strings.Join(rep.AddressKeys, ", "))
	}
	fmt.Fprintf(stdout, "retention: %d rows pruned\n", rep.Total())
}
