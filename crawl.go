package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/crawl"
	"github.com/fleetwright/fleetwright/modules/crawl/spec"
	"github.com/fleetwright/fleetwright/modules/schedule"
	"github.com/fleetwright/fleetwright/modules/tenant"
)

var crawlSubs = []string{"validate", "apply", "run", "list", "runs", "items", "pause", "resume", "egress", "proxy", "captcha"}

const crawlUsage = `Usage: fleetwright crawl SUBCOMMAND [flags]

  validate FILE…            check job files against the schema (docs/CRAWL.md); every error names its field path and line; exit 1 on any
  apply FILE… --tenant T    store each file as its job's next version (unchanged text changes nothing); keeps the job's schedule in step
  run NAME --tenant T       queue a run now (a running panel with crawler agents executes it); --wait follows it to its end
  list --tenant T           the tenant's jobs, their versions and last runs
  runs NAME --tenant T      a job's runs with their figures
  items NAME --tenant T     a job's items: --format table|jsonl|csv, --run ID, --contains TEXT, --limit N
  pause NAME / resume NAME  pause or resume a job and its schedule
  egress --tenant T --allow CIDR… --port N…   set the tenant's egress allowlist (admin; audited; docs/EGRESS.md)
  proxy pool NAME --tenant T [--rotation sticky|round_robin|on_failure] [--bench-after N] [--remove-after N] [--cooldown D] [--allow CIDR…]
                            create a proxy pool or change its rules; --allow sets the internal ranges its proxies may sit in (admin; audited; none clears)
  proxy add POOL URL --tenant T [--username U] [--password-stdin]
                            add a proxy (http://, https:// or socks5://host:port); its password is read from stdin, sealed at rest, never shown again
  proxy list --tenant T     the pools, their proxies and each proxy's health
  proxy remove ID / proxy restore ID   delete a proxy, or put a benched or removed one back into rotation
  captcha show --tenant T   the captcha solver authorisation in force, if any
  captcha authorise --tenant T --solver NAME --endpoint URL --reference TEXT [--api-key-stdin]
                            record who authorised a solver, when, and the reference to the written permission (admin; audited);
                            refused for a solver this binary does not have (none ships)
  captcha revoke --tenant T end the authorisation in force (audited)

The database flags are the admin commands' (--data-dir, --database-url, --database-app-url).
`

// runCrawl is `fleetwright crawl SUBCOMMAND`.
func runCrawl(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, crawlUsage)
		return 0
	}
	sub := args[0]
	known := false
	for _, s := range crawlSubs {
		known = known || s == sub
	}
	if !known {
		fmt.Fprintf(stderr, "fleetwright: unknown command \"crawl %s\"; crawl takes: %s (see fleetwright crawl --help)\n", sub, strings.Join(crawlSubs, ", "))
		return 2
	}
	if sub == "validate" {
		return crawlValidate(args[1:], stdout, stderr)
	}
	var o adminOptions
	var c crawlOptions
	s := adminFlags(&o, "crawl "+sub)
	s.String(&o.tenant, "tenant", "FLEET_ADMIN_TENANT", "", "the tenant (slug)")
	s.Bool(&c.wait, "wait", "", false, "run: wait for the run to end and print its figures (exit 1 unless it succeeded)")
	s.Duration(&c.timeout, "timeout", "", time.Hour, "run --wait: give up waiting after this long")
	s.Enum(&c.format, "format", "", "table", []string{"table", "jsonl", "csv"}, "items: output format")
	s.String(&c.run, "run", "", "", "items: only the items this run saw")
	s.String(&c.contains, "contains", "", "", "items: only items whose data contains this text")
	s.Int(&c.limit, "limit", "", 0, "items: at most this many (0: all); runs: default 20")
	s.List(&c.allow, "allow", "", "egress: an allowed CIDR range or address (repeatable)")
	s.List(&c.ports, "port", "", "egress: an allowed extra port (repeatable)")
	s.String(&c.rotation, "rotation", "", "", "proxy pool: sticky (default), round_robin or on_failure")
	s.Int(&c.benchAfter, "bench-after", "", 0, "proxy pool: failures in a row that bench a proxy (default 3)")
	s.Int(&c.removeAfter, "remove-after", "", 0, "proxy pool: benches in a row that remove a proxy (default 5)")
	s.Duration(&c.cooldown, "cooldown", "", 0, "proxy pool: a bench's first cooldown, doubled for each bench in a row (default 30s)")
	s.String(&c.username, "username", "", "", "proxy add: the proxy's username")
	s.String(&c.solver, "solver", "", "", "captcha authorise: the solver adapter's name")
	s.String(&c.endpoint, "endpoint", "", "", "captcha authorise: the solver's endpoint URL")
	s.String(&c.reference, "reference", "", "", "captcha authorise: the reference to the written permission (contract, ticket, document)")
	s.Bool(&c.apiKeyStdin, "api-key-stdin", "", false, "captcha authorise: read the solver's API key from the first line of standard input")
	s.Bool(&c.passwordStdin, "password-stdin", "", false, "proxy add: read the proxy's password from the first line of standard input")
	s.String(&c.secretKeyFile, "secret-key-file", "FLEET_SECRET_KEY_FILE", "", "proxy add: the panel's secret key file that seals credentials (default DATA_DIR/secret.key; FLEET_SECRET_KEY wins)")
	var pos []string
	rest := args[1:]
	for {
		r, err := s.Parse(rest, os.Getenv)
		if errors.Is(err, config.ErrHelp) {
			fmt.Fprint(stdout, crawlUsage+"\nFlags:\n")
			s.PrintDefaults(stdout)
			return 0
		}
		if err != nil {
			fmt.Fprintf(stderr, "fleetwright crawl %s: %v (see fleetwright crawl --help)\n", sub, err)
			return 2
		}
		if len(r) == 0 {
			break
		}
		pos, rest = append(pos, r[0]), r[1:]
	}
	need := map[string]int{"apply": -1, "run": 1, "runs": 1, "items": 1, "pause": 1, "resume": 1, "list": 0, "egress": 0, "proxy": -2, "captcha": 1}[sub]
	switch {
	case o.tenant == "":
		fmt.Fprintf(stderr, "fleetwright crawl %s: --tenant is required\n", sub)
		return 2
	case need == -1 && len(pos) == 0:
		fmt.Fprintf(stderr, "fleetwright crawl %s: give one or more job files\n", sub)
		return 2
	case need == -2:
		if msg := proxyUsage(pos); msg != "" {
			fmt.Fprintf(stderr, "fleetwright crawl proxy: %s (see fleetwright crawl --help)\n", msg)
			return 2
		}
		if len(pos) > 0 && pos[0] == "add" {
			key, err := vault.Load(os.Getenv("FLEET_SECRET_KEY"), secretKeyFile(o, c), false)
			if err == nil {
				c.vault, err = vault.New(key)
			}
			if err != nil && c.passwordStdin {
				fmt.Fprintf(stderr, "fleetwright crawl proxy add: %v: the panel's secret key seals the password at rest; run this where the panel's --data-dir or FLEET_SECRET_KEY is\n", err)
				return 1
			}
		}
	case need >= 0 && len(pos) != need:
		fmt.Fprintf(stderr, "fleetwright crawl %s: takes %d argument(s) (the job's name), got %d\n", sub, need, len(pos))
		return 2
	}
	log := logging.New(stderr, logging.Options{Format: o.logFormat, Level: level(o.logLevel)})
	ctx, stop := signalContext()
	defer stop()
	code := 0
	err := withAppDB(ctx, o, log, func(pool *pgxpool.Pool) error {
		t, err := tenant.BySlug(ctx, pool, o.tenant)
		if err != nil {
			return err
		}
		rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
		if err != nil {
			return fmt.Errorf("crawl: river: %w", err)
		}
		sch := schedule.New(pool, schedule.Config{Log: log})
		svc := crawl.NewService(pool, rc, sch)
		if err := svc.RegisterSchedule(); err != nil {
			return err
		}
		code, err = crawlCommand(ctx, svc, t.ID, sub, pos, c, stdout, stderr)
		return err
	})
	if err != nil {
		var errs *spec.Errors
		if errors.As(err, &errs) {
			for _, fe := range errs.List {
				fmt.Fprintf(stderr, "  %s %s\n", errs.File, fe.String())
			}
			return 1
		}
		fmt.Fprintf(stderr, "fleetwright crawl %s: %s\n", sub, logging.Scrub(err.Error()))
		return 1
	}
	return code
}

type crawlOptions struct {
	rotation                string
	benchAfter, removeAfter int
	cooldown                time.Duration
	username, secretKeyFile string
	passwordStdin           bool
	vault                   *vault.Vault
	solver, endpoint        string
	reference               string
	apiKeyStdin             bool
	wait                    bool
	timeout                 time.Duration
	format                  string
	run, contains           string
	limit                   int
	allow, ports            []string
}

func crawlCommand(ctx context.Context, svc *crawl.Service, tenant, sub string, pos []string, c crawlOptions, stdout, stderr io.Writer) (int, error) {
	by := cliActor()
	job := func() (crawl.Job, error) {
		j, err := svc.Store.JobByName(ctx, tenant, pos[0])
		if errors.Is(err, crawl.ErrNoJob) {
			return j, fmt.Errorf("no job named %q in this tenant (crawl list shows them)", pos[0])
		}
		return j, err
	}
	switch sub {
	case "apply":
		for _, f := range pos {
			src, err := os.ReadFile(f)
			if err != nil {
				return 1, err
			}
			j, changed, err := svc.Apply(ctx, tenant, by, f, src)
			if err != nil {
				return 1, err
			}
			if changed {
				fmt.Fprintf(stdout, "%s: job %q is now at version %d\n", f, j.Name, j.Version)
			} else {
				fmt.Fprintf(stdout, "%s: job %q unchanged (version %d)\n", f, j.Name, j.Version)
			}
		}
	case "run":
		j, err := job()
		if err != nil {
			return 1, err
		}
		id, err := svc.QueueRun(ctx, tenant, j.ID, "cli", by)
		if err != nil {
			return 1, err
		}
		fmt.Fprintf(stdout, "run %s of job %q (version %d) queued\n", id, j.Name, j.Version)
		if !c.wait {
			return 0, nil
		}
		deadline := time.Now().Add(c.timeout)
		for {
			r, err := svc.Store.Run(ctx, tenant, id)
			if err != nil {
				return 1, err
			}
			if r.State != "queued" && r.State != "running" {
				printRun(stdout, r)
				if r.State != "succeeded" {
					return 1, nil
				}
				return 0, nil
			}
			if time.Now().After(deadline) {
				return 1, fmt.Errorf("run %s still %s after %s", id, r.State, c.timeout)
			}
			select {
			case <-ctx.Done():
				return 1, ctx.Err()
			case <-time.After(500 * time.Millisecond):
			}
		}
	case "list":
		jobs, err := svc.Store.Jobs(ctx, tenant)
		if err != nil {
			return 1, err
		}
		fmt.Fprintf(stdout, "%-24s %-7s %-7s %-8s %-22s %s\n", "JOB", "VERSION", "RENDER", "PAUSED", "LAST RUN", "ITEMS")
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
			fmt.Fprintf(stdout, "%-24s %-7d %-7s %-8t %-22s %s\n", j.Name, j.Version, render, j.Paused, last, items)
		}
	case "runs":
		j, err := job()
		if err != nil {
			return 1, err
		}
		runs, err := svc.Store.Runs(ctx, tenant, j.ID, max(c.limit, 20))
		if err != nil {
			return 1, err
		}
		for _, r := range runs {
			printRun(stdout, r)
		}
	case "items":
		j, err := job()
		if err != nil {
			return 1, err
		}
		return exportItems(ctx, svc, tenant, j, c, stdout)
	case "pause", "resume":
		j, err := job()
		if err != nil {
			return 1, err
		}
		if err := svc.SetPaused(ctx, tenant, by, j.ID, sub == "pause"); err != nil {
			return 1, err
		}
		fmt.Fprintf(stdout, "job %q %sd\n", j.Name, sub)
	case "proxy":
		return crawlProxy(ctx, svc, tenant, pos, c, stdout)
	case "captcha":
		return crawlCaptcha(ctx, svc, tenant, pos[0], c, stdout)
	case "egress":
		var ports []int
		for _, p := range c.ports {
			n, err := strconv.Atoi(p)
			if err != nil {
				return 2, fmt.Errorf("--port %q is not a number", p)
			}
			ports = append(ports, n)
		}
		if err := svc.Store.SetEgress(ctx, tenant, by, crawl.EgressPolicy{Allow: c.allow, Ports: ports}); err != nil {
			return 1, err
		}
		fmt.Fprintf(stdout, "egress allowlist of the tenant: allow %v, extra ports %v\n", c.allow, ports)
	}
	return 0, nil
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

func exportItems(ctx context.Context, svc *crawl.Service, tenant string, j crawl.Job, c crawlOptions, stdout io.Writer) (int, error) {
	cols := j.Spec.Extract.Order
	var cw *csv.Writer
	switch c.format {
	case "csv":
		cw = csv.NewWriter(stdout)
		_ = cw.Write(append([]string{"key", "first_seen", "last_seen", "changed_at"}, cols...))
	case "table":
		fmt.Fprintf(stdout, "%s\n", strings.Join(append([]string{"KEY", "FIRST SEEN"}, cols...), "\t"))
	}
	enc := json.NewEncoder(stdout)
	done, page := 0, 500
	for {
		n := page
		if c.limit > 0 {
			n = min(page, c.limit-done)
		}
		if n <= 0 {
			break
		}
		items, _, err := svc.Store.Items(ctx, tenant, j.ID, crawl.ItemFilter{RunID: c.run, Contains: c.contains, Limit: n, Offset: done})
		if err != nil {
			return 1, err
		}
		for _, it := range items {
			switch c.format {
			case "jsonl":
				_ = enc.Encode(it)
			case "csv":
				row := []string{it.Key, it.FirstSeen.UTC().Format(time.RFC3339), it.LastSeen.UTC().Format(time.RFC3339), it.ChangedAt.UTC().Format(time.RFC3339)}
				for _, col := range cols {
					row = append(row, cell(it.Data[col]))
				}
				_ = cw.Write(row)
			default:
				row := []string{it.Key, it.FirstSeen.UTC().Format("2006-01-02 15:04:05")}
				for _, col := range cols {
					row = append(row, cell(it.Data[col]))
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
		cw.Flush()
	}
	return 0, nil
}

// cell renders an item value for CSV and tables.
func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}

func crawlValidate(files []string, stdout, stderr io.Writer) int {
	if len(files) == 0 {
		fmt.Fprintln(stderr, "fleetwright crawl validate: give one or more job files (see docs/CRAWL.md)")
		return 2
	}
	code := 0
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintf(stderr, "fleetwright crawl validate: %v\n", err)
			code = 1
			continue
		}
		j, err := spec.Parse(f, src, spec.Options{CheckCron: func(expr, tz string) error {
			_, err := schedule.ParseCron(expr, tz)
			return err
		}})
		var errs *spec.Errors
		if errors.As(err, &errs) {
			fmt.Fprintf(stderr, "%s: %d error(s)\n", f, len(errs.List))
			for _, fe := range errs.List {
				fmt.Fprintf(stderr, "  %s %s\n", f, fe.String())
			}
			code = 1
			continue
		}
		fmt.Fprintf(stdout, "%s: ok: job %q, render %s, %d start URL(s), %d field(s), item key %v\n",
			f, j.Name, j.Render, len(j.StartURLs()), len(j.Extract.Fields), []string(j.ItemKey))
	}
	return code
}

func secretKeyFile(o adminOptions, c crawlOptions) string {
	if c.secretKeyFile != "" {
		return c.secretKeyFile
	}
	return filepath.Join(o.dataDir, "secret.key")
}

// proxyUsage checks the positional arguments of crawl proxy.
func proxyUsage(pos []string) string {
	if len(pos) == 0 {
		return "give one of: pool NAME, add POOL URL, list, remove ID, restore ID"
	}
	want := map[string]int{"pool": 2, "add": 3, "list": 1, "remove": 2, "restore": 2}
	n, ok := want[pos[0]]
	switch {
	case !ok:
		return fmt.Sprintf("unknown action %q; give one of: pool, add, list, remove, restore", pos[0])
	case len(pos) != n:
		return fmt.Sprintf("%s takes %d argument(s), got %d", pos[0], n-1, len(pos)-1)
	}
	return ""
}

// crawlProxy is `crawl proxy …`: pools, proxies and their health.
func crawlProxy(ctx context.Context, svc *crawl.Service, tenant string, pos []string, c crawlOptions, stdout io.Writer) (int, error) {
	by := cliActor()
	st := svc.Store
	switch pos[0] {
	case "pool":
		p, err := st.SetPool(ctx, tenant, by, crawl.PoolInput{Name: pos[1], Rotation: c.rotation, BenchAfter: c.benchAfter,
			RemoveAfter: c.removeAfter, Cooldown: c.cooldown})
		if err != nil {
			return 1, err
		}
		if len(c.allow) > 0 {
			allow := c.allow
			if len(allow) == 1 && allow[0] == "none" {
				allow = nil
			}
			if err := st.SetPoolAllow(ctx, tenant, by, p.Name, allow); err != nil {
				return 1, err
			}
			p.Allow = allow
		}
		fmt.Fprintf(stdout, "pool %q: rotation %s, bench after %d failures for %s (doubling), removed after %d benches, internal ranges allowed %v\n",
			p.Name, p.Rotation, p.BenchAfter, p.Cooldown, p.RemoveAfter, p.Allow)
	case "add":
		password := ""
		if c.passwordStdin {
			line, err := bufio.NewReader(os.Stdin).ReadString('\n')
			if err != nil && line == "" {
				return 1, fmt.Errorf("read the password from stdin: %w", err)
			}
			password = strings.TrimRight(line, "\r\n")
			logging.RegisterSecret(password)
		}
		st.SetVault(c.vault)
		p, err := st.AddProxy(ctx, tenant, by, pos[1], crawl.ProxyInput{URL: pos[2], Username: c.username, Password: password})
		if err != nil {
			return 1, err
		}
		fmt.Fprintf(stdout, "proxy %s added to pool %q as %s (password %s)\n", p.URL(), pos[1], p.ID,
			map[bool]string{true: "sealed", false: "none"}[p.HasPassword])
	case "list":
		pools, err := st.Pools(ctx, tenant)
		if err != nil {
			return 1, err
		}
		for _, p := range pools {
			fmt.Fprintf(stdout, "pool %s  rotation %s  bench after %d for %s  remove after %d  allow %v\n",
				p.Name, p.Rotation, p.BenchAfter, p.Cooldown, p.RemoveAfter, p.Allow)
			for _, x := range p.Proxies {
				fmt.Fprintf(stdout, "  %s  %-36s %-8s score %.2f  failures %d  benches %d", x.ID, x.URL(), x.State, x.Score, x.Failures, x.Benches)
				if x.BenchedUntil != nil {
					fmt.Fprintf(stdout, "  benched until %s", x.BenchedUntil.UTC().Format(time.RFC3339))
				}
				if x.LastError != "" {
					fmt.Fprintf(stdout, "  last error: %s", x.LastError)
				}
				fmt.Fprintln(stdout)
			}
		}
	case "remove":
		if err := st.RemoveProxy(ctx, tenant, by, pos[1]); err != nil {
			return 1, err
		}
		fmt.Fprintf(stdout, "proxy %s removed\n", pos[1])
	case "restore":
		if err := st.RestoreProxy(ctx, tenant, by, pos[1]); err != nil {
			return 1, err
		}
		fmt.Fprintf(stdout, "proxy %s restored: active, health reset\n", pos[1])
	}
	return 0, nil
}

// crawlCaptcha is `crawl captcha show|authorise|revoke`.
func crawlCaptcha(ctx context.Context, svc *crawl.Service, tenant, action string, c crawlOptions, stdout io.Writer) (int, error) {
	st := svc.Store
	switch action {
	case "show":
		a, err := st.CaptchaAuthorisation(ctx, tenant)
		if errors.Is(err, crawl.ErrCaptchaNotAuthorised) {
			fmt.Fprintln(stdout, "no captcha solver is authorised for this tenant: a captcha stops the page and a person must look")
			return 0, nil
		}
		if err != nil {
			return 1, err
		}
		fmt.Fprintf(stdout, "solver %s at %s, authorised by %s at %s, written permission: %s\n", a.Solver, a.Endpoint, a.AuthorisedBy,
			a.AuthorisedAt.UTC().Format(time.RFC3339), a.Reference)
	case "authorise":
		key := ""
		if c.apiKeyStdin {
			line, err := bufio.NewReader(os.Stdin).ReadString('\n')
			if err != nil && line == "" {
				return 1, fmt.Errorf("read the API key from stdin: %w", err)
			}
			key = strings.TrimRight(line, "\r\n")
			logging.RegisterSecret(key)
		}
		a, err := st.AuthoriseCaptcha(ctx, tenant, cliActor(), crawl.CaptchaAuthInput{Solver: c.solver, Endpoint: c.endpoint,
			Reference: c.reference, APIKey: key}, crawl.SolverNames(crawl.BuiltinSolvers))
		if err != nil {
			return 1, err
		}
		fmt.Fprintf(stdout, "solver %s authorised (%s), written permission: %s\n", a.Solver, a.ID, a.Reference)
	case "revoke":
		if err := st.RevokeCaptcha(ctx, tenant, cliActor()); err != nil {
			return 1, err
		}
		fmt.Fprintln(stdout, "captcha solver authorisation revoked")
	default:
		return 2, fmt.Errorf("captcha takes show, authorise or revoke, not %q", action)
	}
	return 0, nil
}
