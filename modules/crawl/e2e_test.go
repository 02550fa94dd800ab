package crawl_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/board/catalog"
	"github.com/fleetwright/fleetwright/modules/crawl"
	"github.com/fleetwright/fleetwright/modules/crawl/spec"
	"github.com/fleetwright/fleetwright/modules/factory"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/limit"
	"github.com/fleetwright/fleetwright/modules/wire"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fleet is a panel binary and crawler agents of tenant "acme".
type crawlFleet struct {
	t       testing.TB
	agents  []int // the agent processes' pids
	bin     string
	d       *testenv.Database
	tenant  string
	dir     string
	base    string // the panel's URL
	metrics string // the panel's metrics URL
	key     string // the panel's vault key (hex)
	fleet   *fleet.Store
}

func startFleet(t testing.TB, ctx context.Context, agents int) *crawlFleet {
	d := testenv.DB(t)
	key := make([]byte, vault.KeySize)
	for i := range key {
		key[i] = byte(5*i + 3)
	}
	v, err := vault.New(key)
	require.NoError(t, err)
	f := &crawlFleet{t: t, bin: testenv.Binary(t), d: d, key: hex.EncodeToString(key)}
	f.tenant = factory.Tenant(t, d, "acme", "Acme")
	st := fleet.NewStore(d.App, v)
	f.fleet = st
	ops := audit.Entry{Actor: "e2e"}
	tokens := map[string]string{}
	for i := range agents {
		user := fmt.Sprintf("crawler-%d", i+1)
		id, err := st.CreateAccount(ctx, f.tenant, fleet.AccountInput{Key: user, BoardURL: "http://127.0.0.1:9", Client: "acme", Username: user,
			Password: "unused-" + user, TOTPSecret: "JBSWY3DPEHPK3PXP", Workers: []wire.WorkerSpec{{Name: "crawler-1", Kind: "crawler"}}}, ops)
		require.NoError(t, err)
		agentID, tok, err := st.CreateAgent(ctx, f.tenant, id, "agent-"+user, ops)
		require.NoError(t, err)
		tokens[agentID] = tok
	}
	f.dir, err = os.MkdirTemp(testenv.Dir(t), "crawl-e2e-")
	require.NoError(t, err)
	panel := testenv.Start(t, f.bin, []string{"--role=panel", "--listen=127.0.0.1:0", "--data-dir=" + f.dir},
		"FLEET_DATABASE_URL="+d.OwnerURL, "FLEET_DATABASE_APP_URL="+d.AppURL, "FLEET_REDIS_URL="+testenv.RedisURL(t),
		"FLEET_SECRET_KEY="+hex.EncodeToString(key))
	base := panel.WaitFor(`panel ready" console=(http://127\.0\.0\.1:\d+)/`, time.Minute)
	f.base = base
	f.metrics = panel.MetricsURL(time.Minute)
	for agentID, tok := range tokens {
		state := filepath.Join(f.dir, "agent-"+agentID)
		require.NoError(t, os.MkdirAll(state, 0o700))
		tf := filepath.Join(state, "token")
		require.NoError(t, os.WriteFile(tf, []byte(tok), 0o600))
		p := testenv.Start(t, f.bin, []string{"--role=agent", "--panel=" + base, "--token-file=" + tf, "--state-dir=" + state})
		f.agents = append(f.agents, p.Cmd.Process.Pid)
	}
	require.Eventually(t, func() bool {
		fl, err := st.List(ctx, f.tenant)
		if err != nil {
			return false
		}
		running := 0
		for _, a := range fl.Agents {
			for _, w := range a.State.Workers {
				if w.State == wire.WorkerRunning {
					running++
				}
			}
		}
		return running == agents
	}, time.Minute, 200*time.Millisecond, "every crawler running")
	return f
}

// cli runs `fleetwright crawl …` against the test database.
func (f *crawlFleet) cli(args ...string) (string, int) {
	f.t.Helper()
	return f.cliIn("", args...)
}

// cliIn is cli with stdin.
func (f *crawlFleet) cliIn(stdin string, args ...string) (string, int) {
	f.t.Helper()
	cmd := exec.Command(f.bin, append(append([]string{"crawl"}, args...), "--tenant=acme")...)
	cmd.Env = append(os.Environ(), "FLEET_DATABASE_URL="+f.d.OwnerURL, "FLEET_DATABASE_APP_URL="+f.d.AppURL, "FLEET_DATA_DIR="+f.dir,
		"FLEET_SECRET_KEY="+f.key)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(f.t, err, string(out))
	}
	return string(out), code
}

func (f *crawlFleet) apply(name, yaml string) {
	f.t.Helper()
	p := filepath.Join(f.dir, name+".yaml")
	require.NoError(f.t, os.WriteFile(p, []byte(yaml), 0o600))
	out, code := f.cli("apply", p)
	require.Equal(f.t, 0, code, out)
}

// runJob runs a job to its end through the CLI and returns the output.
func (f *crawlFleet) runJob(name string) string {
	f.t.Helper()
	out, code := f.cli("run", name, "--wait", "--timeout=3m")
	require.Equal(f.t, 0, code, out)
	return out
}

func (f *crawlFleet) items(name string) []map[string]any {
	f.t.Helper()
	out, code := f.cli("items", name, "--format=jsonl")
	require.Equal(f.t, 0, code, out)
	var items []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var it struct {
			Data map[string]any `json:"data"`
		}
		require.NoError(f.t, json.Unmarshal(sc.Bytes(), &it), sc.Text())
		items = append(items, it.Data)
	}
	return items
}

func freePort(t testing.TB, hosts []string) int {
	for range 20 {
		ln, err := net.Listen("tcp", hosts[0]+":0")
		require.NoError(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		ok := true
		for _, h := range hosts[1:] {
			l, err := net.Listen("tcp", fmt.Sprintf("%s:%d", h, port))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatal("no port free on every host")
	return 0
}

func startCatalog(t testing.TB, cfg catalog.Config) (*catalog.Server, int) {
	cfg.Port = freePort(t, cfg.Hosts)
	s, err := catalog.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s, cfg.Port
}

// openAlarms maps the tenant's open alarm kinds to their summaries.
func (f *crawlFleet) openAlarms(ctx context.Context) map[string]string {
	f.t.Helper()
	open, err := alarm.ListTenant(ctx, f.d.App, f.tenant, true, 50)
	require.NoError(f.t, err)
	out := map[string]string{}
	for _, a := range open {
		out[a.Kind] = a.Summary
	}
	return out
}

func urlsOf(items []map[string]any) map[string]int {
	out := map[string]int{}
	for _, it := range items {
		out[fmt.Sprint(it["url"])]++
	}
	return out
}

// TestCrawlCatalogue is the crawler end to end: the panel binary, two
// agent processes with a crawler worker each, and the sandbox catalogue on
// loopback hosts; jobs applied and run through the CLI. Every item is
// found once, the oracle sees no robots.txt violation, no request inside a
// Retry-After window and no 10 s window over the politeness bound, in both
// render modes; a layout change yields a run with zero items.
func TestCrawlCatalogue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	f := startFleet(t, ctx, 2)
	hosts := []string{"127.0.0.21", "127.0.0.22", "127.0.0.23"}
	cat, port := startCatalog(t, catalog.Config{Hosts: hosts, Items: 400, Rate: 100, Burst: 50, CrawlDelay: 0.02})
	out, code := f.cli("egress", fmt.Sprintf("--allow=127.0.0.0/8:%d", port))
	require.Equal(t, 0, code, out)

	t.Run("http", func(t *testing.T) {
		f.apply("cat-http", fmt.Sprintf(`version: 1
name: cat-http
start:
  templates:
    - url: "http://{host}:%d/catalog?page=1"
      params: {host: [127.0.0.21, 127.0.0.22, 127.0.0.23]}
allowed_domains: [127.0.0.21, 127.0.0.22, 127.0.0.23]
extract:
  items: li.product
  fields:
    url: {css: a.title, attr: href, transform: [absolute_url], required: true}
    title: {css: a.title, transform: [collapse_space]}
    price: {css: .price, transform: [number], required: true}
pagination:
  next: {css: a.next}
item_key: [url]
politeness: {concurrency: 2, delay: 50ms, jitter: 0.5}
limits: {concurrency: 6}
`, port))
		out := f.runJob("cat-http")
		require.Contains(t, out, "succeeded (done)")
		require.Contains(t, out, "items 1200 (new 1200, changed 0)")
		items := f.items("cat-http")
		require.Len(t, items, 1200)
		seen := urlsOf(items)
		for _, it := range cat.Published() {
			require.Equal(t, 1, seen[it.URL], "item %s found once", it.URL)
		}
		rep := cat.Oracle()
		require.Zero(t, rep.RobotsViolations, "robots violations: %v", rep.RobotsViolationList)
		require.Zero(t, rep.RetryAfterViolations)
		for h, fig := range rep.Hosts {
			require.LessOrEqual(t, fig.MaxRequests10s, catalog.Bound(20, 2), "host %s", h)
			require.Equal(t, 21, fig.Requests, "host %s: robots.txt and 20 listing pages; the last page's /private archive link is skipped", h)
		}

		// A second run finds the same items: nothing new, nothing changed.
		out = f.runJob("cat-http")
		require.Contains(t, out, "items 1200 (new 0, changed 0)")
		require.Empty(t, f.openAlarms(ctx), "healthy runs raise nothing")

		// The catalogue shrinks to a quarter: a sudden drop below half the
		// trailing median.
		cat.SetItems(100)
		out = f.runJob("cat-http")
		require.Contains(t, out, "items 300 (new 0, changed 0)")
		require.Contains(t, f.openAlarms(ctx), crawl.AlarmSuddenDrop)
		cat.SetItems(400)
		f.runJob("cat-http")
		require.NotContains(t, f.openAlarms(ctx), crawl.AlarmSuddenDrop, "resolved by a healthy run")
	})

	t.Run("proxy", func(t *testing.T) { testProxyPools(t, ctx, f, cat, port) })

	t.Run("retry-after", func(t *testing.T) {
		slow, sport := startCatalog(t, catalog.Config{Hosts: []string{"127.0.0.24"}, Items: 120, Rate: 4, Burst: 2, RetryAfter: time.Second})
		out, code := f.cli("egress", fmt.Sprintf("--allow=127.0.0.0/8:%d", port), fmt.Sprintf("--allow=127.0.0.0/8:%d", sport))
		require.Equal(t, 0, code, out)
		f.apply("cat-slow", fmt.Sprintf(`version: 1
name: cat-slow
start: {urls: ["http://127.0.0.24:%d/api/items?limit=20"]}
allowed_domains: [127.0.0.24]
extract:
  format: json
  items: $.items[*]
  fields:
    url: {path: $.url, transform: [absolute_url]}
    price: {path: $.price}
pagination: {cursor: {path: $.next_cursor, param: cursor}}
item_key: url
politeness: {concurrency: 1, delay: 20ms, retries: 10, backoff_base: 100ms, backoff_cap: 2s}
`, sport))
		out = f.runJob("cat-slow")
		require.Contains(t, out, "succeeded (done)")
		require.Contains(t, out, "items 120")
		rep := slow.Oracle()
		require.Positive(t, rep.Throttled, "the site answered 429 at least once")
		require.Zero(t, rep.RetryAfterViolations, "no request inside a Retry-After window")
		require.Len(t, urlsOf(f.items("cat-slow")), 120)
	})

	t.Run("browser", func(t *testing.T) {
		js, jport := startCatalog(t, catalog.Config{Hosts: []string{"127.0.0.25"}, Items: 60})
		out, code := f.cli("egress", fmt.Sprintf("--allow=127.0.0.0/8:%d", port), fmt.Sprintf("--allow=127.0.0.0/8:%d", jport))
		require.Equal(t, 0, code, out)
		job := fmt.Sprintf(`version: 1
name: cat-js
start: {urls: ["http://127.0.0.25:%d/js/catalog?page=1"]}
allowed_domains: [127.0.0.25]
render: %%s
extract:
  items: li.product
  fields:
    url: {css: a.title, attr: href, transform: [absolute_url], required: true}
    price: {css: .price, transform: [number]}
pagination: {next: {css: a.next}}
item_key: url
politeness: {delay: 20ms}
`, jport)
		// Plain HTTP sees no products on the JavaScript variant …
		f.apply("cat-js", fmt.Sprintf(job, "http"))
		out = f.runJob("cat-js")
		require.Contains(t, out, "items 0")
		// … a browser sees them all.
		f.apply("cat-js", fmt.Sprintf(job, "browser"))
		out = f.runJob("cat-js")
		require.Contains(t, out, "succeeded (done)")
		require.Contains(t, out, "items 60")
		seen := urlsOf(f.items("cat-js"))
		for _, it := range js.Published() {
			require.Equal(t, 1, seen[it.URL], it.URL)
		}
		rep := js.Oracle()
		require.Zero(t, rep.RobotsViolations, "robots violations: %v", rep.RobotsViolationList)

		// The layout switch: the same job "succeeds" with zero items.
		require.NoError(t, js.SetLayout(2))
		out = f.runJob("cat-js")
		require.Contains(t, out, "items 0 (new 0, changed 0)")
		open := f.openAlarms(ctx)
		require.Contains(t, open, crawl.AlarmZeroResults)
		require.Contains(t, open[crawl.AlarmZeroResults], "Zero-result anomaly in crawl cat-js — selector may have changed · Trace saved")
		traces, err := crawl.NewStore(f.d.App, spec.Options{}).Traces(ctx, f.tenant, "", 5)
		require.NoError(t, err)
		require.NotEmpty(t, traces)
		tr := traces[0]
		require.Equal(t, crawl.AlarmZeroResults, tr.Rule)
		require.Equal(t, float64(200), tr.Trace["status"])
		require.Contains(t, tr.Trace["url"], "/js/catalog?page=1")
		require.Contains(t, tr.Trace["body"], `class="card"`, "the snapshot shows the new layout")
		require.LessOrEqual(t, len(tr.Trace["body"].(string)), 8<<10)
		// Browser mode: the trace carries a screenshot of the rendered page.
		shot, _ := tr.Trace["screenshot_jpeg_base64"].(string)
		jpeg, err := base64.StdEncoding.DecodeString(shot)
		require.NoError(t, err)
		require.Greater(t, len(jpeg), 500, "a screenshot, not an empty image")
		require.Equal(t, []byte{0xff, 0xd8}, jpeg[:2], "a JPEG")
	})

	// Limits (modules/limit), set through the CLI: the lowest of the job's,
	// the tenant's and the global one stops a run with its reason, an
	// alarm and nothing fetched past it.
	t.Run("limits", func(t *testing.T) {
		limitCLI := func(args ...string) string {
			t.Helper()
			cmd := exec.Command(f.bin, append([]string{"limit"}, args...)...)
			cmd.Env = append(os.Environ(), "FLEET_DATABASE_URL="+f.d.OwnerURL, "FLEET_DATABASE_APP_URL="+f.d.AppURL, "FLEET_DATA_DIR="+f.dir)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, string(out))
			return string(out)
		}
		run := func(name string) string {
			t.Helper()
			out, _ := f.cli("run", name, "--wait", "--timeout=3m")
			return out
		}
		// A superuser reads across row-level security.
		super, err := pgx.Connect(ctx, f.d.SuperURL)
		require.NoError(t, err)
		defer super.Close(ctx)
		day := time.Now().UTC().Truncate(24 * time.Hour)
		var today int
		require.NoError(t, super.QueryRow(ctx, `SELECT COALESCE(sum(pages), 0)::int FROM crawl_runs WHERE tenant_id = $1 AND started_at >= $2`,
			f.tenant, day).Scan(&today))
		f.apply("cat-limit", fmt.Sprintf(`version: 1
name: cat-limit
start: {urls: ["http://127.0.0.21:%d/catalog?page=1"]}
allowed_domains: [127.0.0.21]
extract:
  items: li.product
  fields:
    url: {css: a.title, attr: href, transform: [absolute_url], required: true}
pagination:
  next: {css: a.next}
item_key: [url]
politeness: {concurrency: 1, delay: 20ms}
limits: {concurrency: 3}
`, port))

		// The tenant's pages per day: five pages left today.
		out := limitCLI("set", "crawl_pages_day", strconv.Itoa(today+5), "--tenant=acme")
		require.Contains(t, out, fmt.Sprintf("tenant acme: crawl_pages_day set to %d", today+5))
		require.Regexp(t, fmt.Sprintf(`crawl_pages_day\s+%d\s+none\s+%d \(tenant\)`, today+5, today+5), out)
		// limitAlarm is the summary of the tenant's open limit.reached
		// alarm of one limit ("" when none is open).
		limitAlarm := func(name limit.Name) string {
			open, err := alarm.ListTenant(ctx, f.d.App, f.tenant, true, 50)
			require.NoError(t, err)
			for _, a := range open {
				if a.Kind == limit.AlarmKind && a.Key == string(name) {
					return a.Summary
				}
			}
			return ""
		}
		out = run("cat-limit")
		require.Contains(t, out, fmt.Sprintf("stopped (limit: crawl_pages_day %d (tenant limit)) pages 5,", today+5))
		require.Contains(t, limitAlarm(limit.CrawlPagesPerDay), "crawl run of cat-limit stopped: limit: crawl_pages_day")

		// A lower global limit applies to the tenant: nothing left today.
		out = limitCLI("set", "crawl_pages_day", strconv.Itoa(today+2))
		require.Contains(t, out, fmt.Sprintf("global: crawl_pages_day set to %d", today+2))
		out = limitCLI("show", "--tenant=acme")
		require.Regexp(t, fmt.Sprintf(`crawl_pages_day\s+%d\s+%d\s+%d \(global\)`, today+5, today+2, today+2), out)
		out = run("cat-limit")
		require.Contains(t, out, fmt.Sprintf("stopped (limit: crawl_pages_day %d (global limit)) pages 0,", today+2))
		limitCLI("set", "crawl_pages_day", "none")
		limitCLI("set", "crawl_pages_day", "none", "--tenant=acme")

		// Run time per task: twenty pages 300 ms apart take longer than a
		// second.
		f.apply("cat-limit-slow", fmt.Sprintf(`version: 1
name: cat-limit-slow
start: {urls: ["http://127.0.0.22:%d/catalog?page=1"]}
allowed_domains: [127.0.0.22]
extract:
  items: li.product
  fields:
    url: {css: a.title, attr: href, transform: [absolute_url], required: true}
pagination:
  next: {css: a.next}
item_key: [url]
politeness: {concurrency: 1, delay: 300ms, jitter: 0}
`, port))
		limitCLI("set", "run_time", "1s", "--tenant=acme")
		out = run("cat-limit-slow")
		require.Contains(t, out, "stopped (limit: run_time 1s (tenant limit))")
		limitCLI("set", "run_time", "none", "--tenant=acme")

		// No browser page load at all: a browser-mode run cannot start;
		// one at a time, it runs.
		limitCLI("set", "browser_concurrency", "0", "--tenant=acme")
		out = run("cat-js")
		require.Contains(t, out, "stopped (limit: browser_concurrency 0 (tenant limit)) pages 0,")
		require.Contains(t, limitAlarm(limit.BrowserConcurrency), "crawl run of cat-js stopped: limit: browser_concurrency 0 (tenant limit)")
		limitCLI("set", "browser_concurrency", "1", "--tenant=acme")
		out = run("cat-js")
		require.Contains(t, out, "succeeded (done)")
		for _, n := range []limit.Name{limit.CrawlPagesPerDay, limit.RunTime, limit.BrowserConcurrency} {
			require.Empty(t, limitAlarm(n), "a run that ends within its limits resolves the %s alarm", n)
		}

		// Completions per worker kind reach the metrics.
		res, err := http.Get(f.metrics)
		require.NoError(t, err)
		metrics, _ := io.ReadAll(res.Body)
		res.Body.Close()
		require.Regexp(t, `fleet_worker_completions_total\{kind="crawler",outcome="ok"\} [1-9]`, string(metrics))

		// Every change is in the audit log: the tenant's in its chain, the
		// global ones in the system chain.
		var tenantSets, globalSets int
		require.NoError(t, super.QueryRow(ctx, `SELECT count(*) FILTER (WHERE tenant_id = $1), count(*) FILTER (WHERE tenant_id = $2)
			FROM audit_log WHERE action = 'limit.set'`, f.tenant, audit.System).Scan(&tenantSets, &globalSets))
		require.Equal(t, 6, tenantSets)
		require.Equal(t, 2, globalSets)
	})
}
