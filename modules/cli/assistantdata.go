package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/modules/assistant/store"
	"github.com/fleetwright/fleetwright/modules/retention"
)

// The assistant's own data (its SQLite state on the person's machine):
// retention, export and erase, as the panel's retention and privacy
// commands do for a tenant's data.
func assistantDataCommands() []Command {
	stateDir := func(s *config.Set, dir *string) {
		s.String(dir, "state-dir", "FLEET_STATE_DIR", "", "the assistant's state directory (its --state-dir)")
	}
	return []Command{
		define(Command{Name: "assistant retention show", Roles: assistantRole, Detail: retentionDetail,
			Summary: "how long the assistant keeps its tasks and conversations, the page text it read and its screenshots (--state-dir)"},
			func(s *config.Set, o *assistantDataOptions) { stateDir(s, &o.dir) }, assistantRetention),
		define(Command{Name: "assistant retention set", Args: "KIND DAYS", MinArgs: 2, MaxArgs: 2, Roles: assistantRole, Detail: retentionDetail,
			Summary: "keep one kind of the assistant's data DAYS days (1-36500, forever, default) (--state-dir)"},
			func(s *config.Set, o *assistantDataOptions) { stateDir(s, &o.dir) }, assistantRetention),
		define(Command{Name: "assistant retention run", Roles: assistantRole, Detail: retentionDetail,
			Summary: "prune the assistant's data past its retention now (--state-dir)"},
			func(s *config.Set, o *assistantDataOptions) { stateDir(s, &o.dir) }, assistantRetention),
		define(Command{Name: "assistant export", Roles: assistantRole,
			Summary: "export everything the assistant keeps about its person as JSON Lines (--state-dir, --out FILE or stdout); stored secrets by name and sites only"},
			func(s *config.Set, o *assistantDataOptions) {
				stateDir(s, &o.dir)
				s.String(&o.out, "out", "", "", "file to write (mode 0600; default stdout)")
			}, assistantExport),
		define(Command{Name: "assistant erase", Roles: assistantRole,
			Summary: "erase every task, conversation, screenshot, draft, journal entry and stored secret of the assistant (--state-dir, --confirm erase); refused while a task is under way"},
			func(s *config.Set, o *assistantDataOptions) {
				stateDir(s, &o.dir)
				s.String(&o.confirm, "confirm", "", "", `type "erase" to confirm`)
			}, assistantErase),
	}
}

const retentionDetail = "The assistant prunes at start and every hour; only settled tasks (done, failed, stopped) are pruned."

type assistantDataOptions struct{ dir, out, confirm string }

func openAssistantStore(ctx context.Context, dir string) (*store.Store, error) {
	if dir == "" {
		return nil, usagef("--state-dir is required (the assistant's --state-dir)")
	}
	if _, err := os.Stat(filepath.Join(dir, store.FileName)); err != nil {
		return nil, usagef("no assistant state in %s (no %s): give the assistant's own --state-dir", dir, store.FileName)
	}
	return store.Open(ctx, dir)
}

func assistantRetention(ctx context.Context, c *Call, o *assistantDataOptions) error {
	verb := strings.TrimPrefix(c.Name, "assistant retention ")
	var days int
	var ok bool
	if verb == "set" {
		known := slices.ContainsFunc(store.RetentionDefs, func(d store.RetentionDef) bool { return d.Kind == c.Args[0] })
		if !known {
			var kinds []string
			for _, d := range store.RetentionDefs {
				kinds = append(kinds, d.Kind)
			}
			return usagef("unknown kind %q; kinds: %s", c.Args[0], strings.Join(kinds, ", "))
		}
		var err error
		if days, ok, err = retention.ParseDays(c.Args[1]); err != nil {
			return usage(err)
		}
	}
	st, err := openAssistantStore(ctx, o.dir)
	if err != nil {
		return err
	}
	defer st.Close()
	switch verb {
	case "set":
		if err := st.SetRetention(ctx, c.Args[0], days, ok); err != nil {
			return err
		}
	case "run":
		n, err := st.Prune(ctx, time.Now())
		if err != nil {
			return err
		}
		fmt.Fprintf(c.Stdout, "pruned: %d task(s), %d page text(s), %d screenshot(s)\n",
			n[store.RetainConversations], n[store.RetainPageText], n[store.RetainScreenshots])
		return nil
	}
	cur, err := st.Retention(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tKEPT\tDEFAULT\tALWAYS KEPT")
	for _, d := range store.RetentionDefs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", d.Kind, retention.FormatDays(cur[d.Kind]), retention.FormatDays(d.Default), d.Keeps)
	}
	return tw.Flush()
}

func assistantExport(ctx context.Context, c *Call, o *assistantDataOptions) error {
	st, err := openAssistantStore(ctx, o.dir)
	if err != nil {
		return err
	}
	defer st.Close()
	var w io.Writer = c.Stdout
	if o.out != "" {
		f, err := os.OpenFile(o.out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("assistant export: %w (the file must not exist yet)", err)
		}
		defer f.Close()
		w = f
	}
	counts, err := st.Export(ctx, w)
	if err != nil {
		return err
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	fmt.Fprintf(c.Stderr, "exported %d row(s): %d task(s), %d step(s), %d message(s)\n", total, counts["tasks"], counts["steps"], counts["messages"])
	return nil
}

func assistantErase(ctx context.Context, c *Call, o *assistantDataOptions) error {
	if o.confirm != "erase" {
		return usagef(`assistant erase deletes every task, conversation and stored secret of the assistant; add --confirm erase`)
	}
	st, err := openAssistantStore(ctx, o.dir)
	if err != nil {
		return err
	}
	defer st.Close()
	n, err := st.Erase(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.Stdout, "erased: %d task(s), %d step(s), %d message(s), %d secret(s)\n", n["tasks"], n["steps"], n["messages"], n["secrets"])
	return nil
}
