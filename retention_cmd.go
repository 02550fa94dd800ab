package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/retention"
	"github.com/fleetwright/fleetwright/modules/tenant"
)

const retentionUsage = `Usage: fleetwright retention SUBCOMMAND [flags]

  show [--tenant T]             how long each kind of data is kept: the global settings, or a tenant's with what applies
  set KIND DAYS [--tenant T]    keep KIND for DAYS days ("forever", or "default" to fall back); global without --tenant; audited
  run                           prune everything past retention now (the panel does it daily, --retention-cron)

A tenant's setting wins over the global one, which wins over the default
(docs/OPERATIONS.md, "Retention"). Audit entries are dropped only behind a
checkpoint anchored under --data-dir/audit. The database flags are the
admin commands' (--data-dir, --database-url, --database-app-url).
`

// runRetention is `fleetwright retention show|set|run`.
func runRetention(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, retentionUsage+"\nKinds (default):\n")
		for _, d := range retention.Defs {
			fmt.Fprintf(stdout, "  %-15s %s (%s); always kept: %s\n", d.Kind, d.Label, retention.FormatDays(d.Default), d.Keeps)
		}
		return 0
	}
	sub := args[0]
	if sub != "show" && sub != "set" && sub != "run" {
		fmt.Fprintf(stderr, "fleetwright: unknown command \"retention %s\"; retention takes: show, set, run (see fleetwright retention --help)\n", sub)
		return 2
	}
	var o adminOptions
	s := adminFlags(&o, "retention "+sub)
	if sub != "run" {
		s.String(&o.tenant, "tenant", "FLEET_ADMIN_TENANT", "", "the tenant (slug); empty: the global settings")
	}
	var pos []string
	rest := args[1:]
	for {
		r, err := s.Parse(rest, os.Getenv)
		if errors.Is(err, config.ErrHelp) {
			fmt.Fprint(stdout, retentionUsage+"\nFlags:\n")
			s.PrintDefaults(stdout)
			return 0
		}
		if err != nil {
			fmt.Fprintf(stderr, "fleetwright retention %s: %v (see fleetwright retention --help)\n", sub, err)
			return 2
		}
		if len(r) == 0 {
			break
		}
		pos, rest = append(pos, r[0]), r[1:]
	}
	want := map[string]int{"show": 0, "set": 2, "run": 0}[sub]
	if len(pos) != want {
		fmt.Fprintf(stderr, "fleetwright retention %s: takes %d argument(s), got %d (see fleetwright retention --help)\n", sub, want, len(pos))
		return 2
	}
	var kind retention.Kind
	var days int
	var set bool
	if sub == "set" {
		kind = retention.Kind(pos[0])
		if _, ok := retention.DefOf(kind); !ok {
			fmt.Fprintf(stderr, "fleetwright retention set: unknown kind %q; kinds: %s\n", pos[0], retention.Kinds())
			return 2
		}
		var err error
		if days, set, err = retention.ParseDays(pos[1]); err != nil {
			fmt.Fprintf(stderr, "fleetwright %v\n", err)
			return 2
		}
	}
	log := logging.New(stderr, logging.Options{Format: o.logFormat, Level: level(o.logLevel)})
	ctx, stop := signalContext()
	defer stop()
	err := withAppDB(ctx, o, log, func(pool *pgxpool.Pool) error {
		tenantID := retention.Global
		if o.tenant != "" {
			t, err := tenant.BySlug(ctx, pool, o.tenant)
			if err != nil {
				return err
			}
			tenantID = t.ID
		}
		switch sub {
		case "set":
			if err := retention.Set(ctx, pool, cliActor(), tenantID, kind, days, set); err != nil {
				return err
			}
		case "run":
			p := &retention.Pruner{DB: pool, Anchor: audit.NewAnchor(audit.AnchorFile(o.dataDir), log), Log: log}
			rep, err := p.Run(ctx)
			printPruned(ctx, pool, stdout, rep)
			return err
		}
		return showRetention(ctx, pool, tenantID, stdout)
	})
	if err != nil {
		fmt.Fprintf(stderr, "fleetwright retention %s: %s\n", sub, logging.Scrub(err.Error()))
		return 1
	}
	return 0
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
