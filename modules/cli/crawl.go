package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/modules/crawl"
	"github.com/fleetwright/fleetwright/modules/crawl/spec"
	"github.com/fleetwright/fleetwright/modules/schedule"
	"github.com/fleetwright/fleetwright/modules/tenant"
)

// crawlCommands are the crawl jobs of a tenant (docs/CRAWL.md).
func crawlCommands() []Command {
	job := func(name, summary string, min, max int, args string) Command {
		return Command{Name: "crawl " + name, Args: args, Summary: summary, Roles: panelRole, DB: true, MinArgs: min, MaxArgs: max}
	}
	return []Command{
		define(Command{Name: "crawl validate", Args: "FILE…", MinArgs: 1, MaxArgs: Many, Roles: panelRole,
			Summary: "check crawl job files (docs/CRAWL.md): every bad field's path and line; exit 1 on any error"},
			nil, crawlValidate),
		define(job("apply", "store each file as its job's next version (unchanged text changes nothing); keeps the job's schedule in step", 1, Many, "FILE…"),
			tenantFlags, func(ctx context.Context, c *Call, o *tenantOption) error {
				return withCrawl(ctx, c, o.tenant, func(svc *crawl.Service, tenant string) error { return crawlApply(ctx, c, svc, tenant) })
			}),
		define(job("run", "queue a run now (a running panel with crawler agents executes it); --wait follows it to its end (exit 1 unless it succeeded)", 1, 1, "NAME"),
			func(s *config.Set, o *runOptions) {
				tenantFlags(s, &o.tenantOption)
				s.Bool(&o.wait, "wait", "", false, "wait for the run to end and print its figures (exit 1 unless it succeeded)")
				s.Duration(&o.timeout, "timeout", "", time.Hour, "with --wait: give up waiting after this long")
			}, func(ctx context.Context, c *Call, o *runOptions) error {
				return withCrawl(ctx, c, o.tenant, func(svc *crawl.Service, tenant string) error { return crawlRun(ctx, c, svc, tenant, o) })
			}),
		define(job("list", "the tenant's jobs, their versions and last runs", 0, 0, ""),
			tenantFlags, func(ctx context.Context, c *Call, o *tenantOption) error {
				return withCrawl(ctx, c, o.tenant, func(svc *crawl.Service, tenant string) error { return crawlList(ctx, c, svc, tenant) })
			}),
		define(job("runs", "a job's runs with their figures, newest first", 1, 1, "NAME"),
			func(s *config.Set, o *runsOptions) {
				tenantFlags(s, &o.tenantOption)
				s.Int(&o.limit, "limit", "", 20, "at most this many runs")
			}, func(ctx context.Context, c *Call, o *runsOptions) error {
				return withCrawl(ctx, c, o.tenant, func(svc *crawl.Service, tenant string) error { return crawlRuns(ctx, c, svc, tenant, o.limit) })
			}),
		define(job("items", "a job's items as a table, JSON Lines or CSV (--format), filtered by --run and --contains", 1, 1, "NAME"),
			func(s *config.Set, o *itemsOptions) {
				tenantFlags(s, &o.tenantOption)
				s.Enum(&o.format, "format", "", "table", []string{"table", "jsonl", "csv"}, "output format")
				s.String(&o.run, "run", "", "", "only the items this run saw")
				s.String(&o.contains, "contains", "", "", "only items whose data contains this text")
				s.Int(&o.limit, "limit", "", 0, "at most this many (0: all)")
			}, func(ctx context.Context, c *Call, o *itemsOptions) error {
				return withCrawl(ctx, c, o.tenant, func(svc *crawl.Service, tenant string) error { return crawlItems(ctx, c, svc, tenant, o) })
			}),
		define(job("pause", "pause a job and its schedule (audited)", 1, 1, "NAME"), tenantFlags, crawlPause(true)),
		define(job("resume", "resume a job and its schedule (audited)", 1, 1, "NAME"), tenantFlags, crawlPause(false)),
		define(job("egress", "set the tenant's egress allowlist: --allow RANGE:PORT…, --port N… (admin; audited; docs/EGRESS.md)", 0, 0, ""),
			func(s *config.Set, o *egressOptions) {
				tenantFlags(s, &o.tenantOption)
				s.List(&o.allow, "allow", "", "admit a special-purpose range or address on one port: 127.0.0.0/8:8081, 10.0.0.5:443, [::1]:8081; without a port, 80 and 443 (repeatable)")
				s.List(&o.ports, "port", "", "an extra port public addresses may use (repeatable)")
			}, crawlEgress),
	}
}

// tenantOption is the --tenant flag of a crawl command.
type tenantOption struct{ tenant string }

func tenantFlags(s *config.Set, o *tenantOption) {
	s.String(&o.tenant, "tenant", "FLEET_ADMIN_TENANT", "", "the tenant (slug)")
}

// withCrawl runs fn with the crawl service on the panel's database and the
// id of the tenant slug names.
func withCrawl(ctx context.Context, c *Call, slug string, fn func(svc *crawl.Service, tenant string) error) error {
	if slug == "" {
		return usagef("--tenant is required")
	}
	err := withTenant(ctx, c, slug, func(pool *pgxpool.Pool, t tenant.Tenant) error {
		rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
		if err != nil {
			return fmt.Errorf("crawl: river: %w", err)
		}
		svc := crawl.NewService(pool, rc, schedule.New(pool, schedule.Config{Log: c.Meta.Logger()}))
		if err := svc.RegisterSchedule(); err != nil {
			return err
		}
		return fn(svc, t.ID)
	})
	var errs *spec.Errors
	if errors.As(err, &errs) {
		printSpecErrors(c.Stderr, errs)
		return exit(ExitFailed)
	}
	return err
}

func printSpecErrors(w io.Writer, errs *spec.Errors) {
	for _, fe := range errs.List {
		fmt.Fprintf(w, "  %s %s\n", errs.File, fe.String())
	}
}

// jobNamed is the job the command's first argument names.
func jobNamed(ctx context.Context, c *Call, svc *crawl.Service, tenant string) (crawl.Job, error) {
	j, err := svc.Store.JobByName(ctx, tenant, c.Args[0])
	if errors.Is(err, crawl.ErrNoJob) {
		return j, fmt.Errorf("no job named %q in this tenant (crawl list shows them)", c.Args[0])
	}
	return j, err
}

func crawlValidate(_ context.Context, c *Call, _ *struct{}) error {
	failed := false
	for _, f := range c.Args {
		src, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintf(c.Stderr, "fleetwright crawl validate: %v\n", err)
			failed = true
			continue
		}
		j, err := spec.Parse(f, src, spec.Options{CheckCron: func(expr, tz string) error {
			_, err := schedule.ParseCron(expr, tz)
			return err
		}})
		var errs *spec.Errors
		if errors.As(err, &errs) {
			fmt.Fprintf(c.Stderr, "%s: %d error(s)\n", f, len(errs.List))
			printSpecErrors(c.Stderr, errs)
			failed = true
			continue
		}
		fmt.Fprintf(c.Stdout, "%s: ok: job %q, render %s, %d start URL(s), %d field(s), item key %v\n",
			f, j.Name, j.Render, len(j.StartURLs()), len(j.Extract.Fields), []string(j.ItemKey))
	}
	if failed {
		return exit(ExitFailed)
	}
	return nil
}

func crawlApply(ctx context.Context, c *Call, svc *crawl.Service, tenant string) error {
	for _, f := range c.Args {
		src, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		j, changed, err := svc.Apply(ctx, tenant, actor(), f, src)
		if err != nil {
			return err
		}
		if changed {
			fmt.Fprintf(c.Stdout, "%s: job %q is now at version %d\n", f, j.Name, j.Version)
		} else {
			fmt.Fprintf(c.Stdout, "%s: job %q unchanged (version %d)\n", f, j.Name, j.Version)
		}
	}
	return nil
}

type runOptions struct {
	tenantOption
	wait    bool
	timeout time.Duration
}

func crawlRun(ctx context.Context, c *Call, svc *crawl.Service, tenant string, o *runOptions) error {
	j, err := jobNamed(ctx, c, svc, tenant)
	if err != nil {
		return err
	}
	id, err := svc.QueueRun(ctx, tenant, j.ID, "cli", actor())
	if err != nil {
		return err
	}
	fmt.Fprintf(c.Stdout, "run %s of job %q (version %d) queued\n", id, j.Name, j.Version)
	if !o.wait {
		return nil
	}
	// The run happens in another process (a panel and its crawler agents):
	// its row is the only news of it, so it is read every half second.
	deadline := time.Now().Add(o.timeout)
	for {
		r, err := svc.Store.Run(ctx, tenant, id)
		if err != nil {
			return err
		}
		if r.State != "queued" && r.State != "running" {
			printRun(c.Stdout, r)
			if r.State != "succeeded" {
				return exit(ExitFailed)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("run %s still %s after %s", id, r.State, o.timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func crawlList(ctx context.Context, c *Call, svc *crawl.Service, tenant string) error {
	jobs, err := svc.Store.Jobs(ctx, tenant)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.Stdout, "%-24s %-7s %-7s %-8s %-22s %s\n", "JOB", "VERSION", "RENDER", "PAUSED", "LAST RUN", "ITEMS")
	for _, j := range jobs {
		last, items := "never", "-"
		if runs, _ := svc.Store.Runs(ctx, tenant, j.ID, 1); len(runs) > 0 {
			last = runs[0].State + " " + runs[0].QueuedAt.UTC().Format("01-02 15:04:05")
			items = strconv.Itoa(runs[0].Items)
		}
		render := "?"
		if j.Spec != nil {
			render = j.Spec.Render
		}
		fmt.Fprintf(c.Stdout, "%-24s %-7d %-7s %-8t %-22s %s\n", j.Name, j.Version, render, j.Paused, last, items)
	}
	return nil
}

type runsOptions struct {
	tenantOption
	limit int
}

func crawlRuns(ctx context.Context, c *Call, svc *crawl.Service, tenant string, limit int) error {
	j, err := jobNamed(ctx, c, svc, tenant)
	if err != nil {
		return err
	}
	runs, err := svc.Store.Runs(ctx, tenant, j.ID, max(limit, 1))
	if err != nil {
		return err
	}
	for _, r := range runs {
		printRun(c.Stdout, r)
	}
	return nil
}

func printRun(w io.Writer, r crawl.Run) {
	dur := ""
	if r.StartedAt != nil && r.FinishedAt != nil {
		dur = r.FinishedAt.Sub(*r.StartedAt).Round(time.Millisecond).String()
	}
	fmt.Fprintf(w, "run %s: %s (%s) pages %d, items %d (new %d, changed %d), errors %d, selector failures %d, bytes %d, %s\n",
		r.ID, r.State, r.Reason, r.Pages, r.Items, r.NewItems, r.ChangedItems, r.Errors, r.SelectorFailures, r.Bytes, dur)
	if r.Captchas > 0 {
		fmt.Fprintf(w, "  %d page(s) showed a captcha: a person must look\n", r.Captchas)
	}
	hosts := make([]string, 0, len(r.Domains))
	for h := range r.Domains {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	for _, h := range hosts {
		d := r.Domains[h]
		fmt.Fprintf(w, "  %s: %d requests, %d errors, %d throttled, %d ms\n", h, d.Requests, d.Errors, d.Throttled, d.TotalMS)
	}
}

type itemsOptions struct {
	tenantOption
	format, run, contains string
	limit                 int
}

func crawlItems(ctx context.Context, c *Call, svc *crawl.Service, tenant string, o *itemsOptions) error {
	j, err := jobNamed(ctx, c, svc, tenant)
	if err != nil {
		return err
	}
	stdout, cols := c.Stdout, j.Spec.Extract.Order
	var cw *crawl.ItemsCSV
	switch o.format {
	case "csv":
		if cw, err = crawl.NewItemsCSV(stdout, cols); err != nil {
			return err
		}
	case "table":
		fmt.Fprintf(stdout, "%s\n", strings.Join(append([]string{"KEY", "FIRST SEEN"}, cols...), "\t"))
	}
	enc := json.NewEncoder(stdout)
	done, page := 0, 500
	for {
		n := page
		if o.limit > 0 {
			n = min(page, o.limit-done)
		}
		if n <= 0 {
			break
		}
		items, _, err := svc.Store.Items(ctx, tenant, j.ID, crawl.ItemFilter{RunID: o.run, Contains: o.contains, Limit: n, Offset: done})
		if err != nil {
			return err
		}
		for _, it := range items {
			switch o.format {
			case "jsonl":
				_ = enc.Encode(it)
			case "csv":
				if err := cw.Write(it); err != nil {
					return err
				}
			default:
				row := []string{it.Key, it.FirstSeen.UTC().Format("2006-01-02 15:04:05")}
				for _, col := range cols {
					row = append(row, crawl.Cell(it.Data[col]))
				}
				fmt.Fprintln(stdout, strings.Join(row, "\t"))
			}
		}
		done += len(items)
		if len(items) < n {
			break
		}
	}
	if cw != nil {
		return cw.Flush()
	}
	return nil
}

func crawlPause(pause bool) func(ctx context.Context, c *Call, o *tenantOption) error {
	return func(ctx context.Context, c *Call, o *tenantOption) error {
		return withCrawl(ctx, c, o.tenant, func(svc *crawl.Service, tenant string) error {
			j, err := jobNamed(ctx, c, svc, tenant)
			if err != nil {
				return err
			}
			if err := svc.SetPaused(ctx, tenant, actor(), j.ID, pause); err != nil {
				return err
			}
			fmt.Fprintf(c.Stdout, "job %q %s\n", j.Name, map[bool]string{true: "paused", false: "resumed"}[pause])
			return nil
		})
	}
}

type egressOptions struct {
	tenantOption
	allow, ports []string
}

func crawlEgress(ctx context.Context, c *Call, o *egressOptions) error {
	var ports []int
	for _, p := range o.ports {
		n, err := strconv.Atoi(p)
		if err != nil {
			return usagef("--port %q is not a number", p)
		}
		ports = append(ports, n)
	}
	return withCrawl(ctx, c, o.tenant, func(svc *crawl.Service, tenant string) error {
		if err := svc.Store.SetEgress(ctx, tenant, actor(), crawl.EgressPolicy{Allow: o.allow, Ports: ports}); err != nil {
			return err
		}
		fmt.Fprintf(c.Stdout, "egress allowlist of the tenant: allow %v, extra ports of public addresses %v\n", o.allow, ports)
		return nil
	})
}
