package crawl_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/board/catalog"
)

// procCPU is a process's user + system CPU time, and its peak resident
// memory (VmHWM), from /proc.
func procCPU(tb testing.TB, pid int) (time.Duration, int64) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(tb, err)
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	cpu := time.Duration(ut+st) * time.Second / 100 // USER_HZ
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(tb, err)
	m := regexp.MustCompile(`VmHWM:\s+(\d+) kB`).FindSubmatch(status)
	require.NotNil(tb, m)
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return cpu, kb * 1024
}

var pagesRe = regexp.MustCompile(`pages (\d+), items (\d+)`)

// benchCrawl crawls the catalogue with one agent process: listing pages
// lead to item pages (follow), so pages go out in parallel under a high
// politeness budget. It reports pages/s, the agent's CPU seconds per 1,000
// pages and its peak memory.
func benchCrawl(b *testing.B, render string, items int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	f := startFleet(b, ctx, 1)
	cat, port := startCatalog(b, catalog.Config{Hosts: []string{"127.0.0.31"}, Items: items, Rate: 1e6, Burst: 1e6})
	_ = cat
	out, code := f.cli("egress", fmt.Sprintf("--allow=127.0.0.0/8:%d", port))
	require.Equal(b, 0, code, out)
	list := "/catalog"
	if render == "browser" {
		list = "/js/catalog"
	}
	f.apply("bench", fmt.Sprintf(`version: 1
name: bench
start: {urls: ["http://127.0.0.31:%d%s?page=1"]}
allowed_domains: [127.0.0.31]
render: %s
follow: {css: li.product a.title}
extract:
  fields:
    url: {css: "link[rel=canonical]", attr: href, required: true}
    title: {css: h1.name, transform: [trim]}
    price: {css: .price, transform: [number]}
pagination: {next: {css: a.next}}
item_key: url
politeness: {concurrency: 16, delay: 0s, jitter: 0, autothrottle: false}
limits: {pages: 100000, concurrency: 16, run_time: 30m}
`, port, list, render))
	pid := f.agents[0]
	cpu0, _ := procCPU(b, pid)
	b.ResetTimer()
	start := time.Now()
	out = f.runJob("bench")
	elapsed := time.Since(start)
	b.StopTimer()
	cpu1, peak := procCPU(b, pid)
	m := pagesRe.FindStringSubmatch(out)
	require.NotNil(b, m, out)
	pages, _ := strconv.Atoi(m[1])
	found, _ := strconv.Atoi(m[2])
	require.Equal(b, items, found, out)
	b.ReportMetric(float64(pages)/elapsed.Seconds(), "pages/s")
	b.ReportMetric((cpu1-cpu0).Seconds()/float64(pages)*1000, "agent-cpu-s/1000pages")
	b.ReportMetric(float64(peak)/(1<<20), "agent-peak-MiB")
	b.ReportMetric(float64(pages), "pages")
}

// BenchmarkCrawlHTTP: 10,000 item pages and 500 listing pages in http mode.
// Run with -benchtime=1x (one crawl per run).
func BenchmarkCrawlHTTP(b *testing.B) {
	for range b.N {
		benchCrawl(b, "http", 10000)
	}
}

// BenchmarkCrawlBrowser: 500 item pages and 25 JavaScript listing pages in
// browser mode.
func BenchmarkCrawlBrowser(b *testing.B) {
	for range b.N {
		benchCrawl(b, "browser", 500)
	}
}

// BenchmarkCrawlThreeAgentsOneHost: three agents crawl one host (2,000 item
// pages and 100 listing pages, politeness 100 requests/s with jitter,
// concurrency 4). The oracle's busiest 10 s window must stay within its
// bound (rate × 10 s × 1.05 + burst): the budget is the host's, shared by
// the fleet, not each agent's. Run with -benchtime=1x.
func BenchmarkCrawlThreeAgentsOneHost(b *testing.B) {
	for range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		f := startFleet(b, ctx, 3)
		cat, port := startCatalog(b, catalog.Config{Hosts: []string{"127.0.0.32"}, Items: 2000, Rate: 1e6, Burst: 1e6})
		out, code := f.cli("egress", fmt.Sprintf("--allow=127.0.0.0/8:%d", port))
		require.Equal(b, 0, code, out)
		f.apply("three", fmt.Sprintf(`version: 1
name: three
start: {urls: ["http://127.0.0.32:%d/catalog?page=1"]}
allowed_domains: [127.0.0.32]
follow: {css: li.product a.title}
extract:
  fields:
    url: {css: "link[rel=canonical]", attr: href, required: true}
    price: {css: .price, transform: [number]}
pagination: {next: {css: a.next}}
item_key: url
politeness: {concurrency: 4, delay: 10ms, jitter: 0.5, autothrottle: false}
limits: {pages: 100000, concurrency: 12, run_time: 20m}
`, port))
		b.ResetTimer()
		start := time.Now()
		out = f.runJob("three")
		elapsed := time.Since(start)
		b.StopTimer()
		m := pagesRe.FindStringSubmatch(out)
		require.NotNil(b, m, out)
		pages, _ := strconv.Atoi(m[1])
		rep := cat.Oracle()
		fig := rep.Hosts["127.0.0.32"]
		bound := catalog.Bound(100, 4)
		require.Zero(b, rep.RobotsViolations)
		require.LessOrEqual(b, fig.MaxRequests10s, bound, "three agents on one host stay within the host's budget")
		var agents int
		require.NoError(b, db.InTenant(ctx, f.d.App, f.tenant, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT count(*) FROM crawl_agent_egress`).Scan(&agents)
		}))
		require.Equal(b, 3, agents, "all three agents were handed pages")
		b.ReportMetric(float64(pages)/elapsed.Seconds(), "pages/s")
		b.ReportMetric(float64(fig.MaxRequests10s), "max-req-10s")
		b.ReportMetric(float64(bound), "bound-10s")
		cancel()
	}
}

// BenchmarkCrawlPolite: the default sandbox catalogue (three hosts, 300
// items and 15 listing pages each: 945 pages) under a politeness of 10
// requests/s per host (delay 100 ms, no jitter, 2 in flight per host, 6 in
// flight for the run). Its politeness bound is 945 ÷ (3 × 10/s) = 31.5 s;
// it reports the wall time and its ratio to the bound, and checks every
// item was found once with no host over its budget. Run with -benchtime=1x.
func BenchmarkCrawlPolite(b *testing.B) {
	for range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		f := startFleet(b, ctx, 1)
		hosts := []string{"127.0.0.41", "127.0.0.42", "127.0.0.43"}
		cat, port := startCatalog(b, catalog.Config{Hosts: hosts, Rate: 1e6, Burst: 1e6})
		out, code := f.cli("egress", fmt.Sprintf("--allow=127.0.0.0/8:%d", port))
		require.Equal(b, 0, code, out)
		f.apply("polite", fmt.Sprintf(`version: 1
name: polite
start:
  templates:
    - url: "http://{host}:%d/catalog?page=1"
      params: {host: [127.0.0.41, 127.0.0.42, 127.0.0.43]}
allowed_domains: [127.0.0.41, 127.0.0.42, 127.0.0.43]
follow: {css: li.product a.title}
extract:
  fields:
    url: {css: "link[rel=canonical]", attr: href, required: true}
    title: {css: h1.name, transform: [trim]}
    price: {css: .price, transform: [number]}
pagination: {next: {css: a.next}}
item_key: url
politeness: {concurrency: 2, delay: 100ms, jitter: 0, autothrottle: false}
limits: {pages: 100000, concurrency: 6, run_time: 10m}
`, port))
		b.ResetTimer()
		start := time.Now()
		out = f.runJob("polite")
		elapsed := time.Since(start)
		b.StopTimer()
		m := pagesRe.FindStringSubmatch(out)
		require.NotNil(b, m, out)
		pages, _ := strconv.Atoi(m[1])
		found, _ := strconv.Atoi(m[2])
		require.Equal(b, 900, found, out)
		rep := cat.Oracle()
		require.Zero(b, rep.RobotsViolations)
		for _, h := range hosts {
			// The budget allows one request per 100 ms: at most 100 in any
			// 10 s window (5 % slack and one more for the window's edges).
			require.LessOrEqual(b, rep.Hosts[h].MaxRequests10s, catalog.Bound(10, 1), h)
		}
		bound := float64(pages) / (3 * 10)
		b.ReportMetric(elapsed.Seconds(), "wall-s")
		b.ReportMetric(elapsed.Seconds()/bound, "x-bound")
		b.ReportMetric(float64(pages), "pages")
		cancel()
	}
}
