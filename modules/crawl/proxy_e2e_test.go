package crawl_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/board/catalog"
	"github.com/fleetwright/fleetwright/modules/crawl"
	"github.com/fleetwright/fleetwright/modules/crawl/spec"

	"github.com/jackc/pgx/v5"
)

// testProxy is a real HTTP proxy on loopback (CONNECT tunnels and
// absolute-URL forwarding) that demands Basic credentials and records what
// it was asked for. With fail set it is a proxy whose own upstream is down:
// it answers every request 502.
type testProxy struct {
	t          *testing.T
	ln         net.Listener
	srv        *http.Server
	user, pass string
	fail       bool

	mu       sync.Mutex
	hits     int
	connects []string
	auths    []string
}

func startTestProxy(t *testing.T, user, pass string, fail bool) *testProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &testProxy{t: t, ln: ln, user: user, pass: pass, fail: fail}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	t.Cleanup(func() { _ = p.srv.Close() })
	return p
}

func (p *testProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *testProxy) seen() (hits int, connects, auths []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hits, append([]string(nil), p.connects...), append([]string(nil), p.auths...)
}

// loopbackOnly keeps the test's proxy from ever dialling anything but
// loopback, whatever it is asked.
func (p *testProxy) loopbackOnly(hostport string) bool {
	ap, err := netip.ParseAddrPort(hostport)
	if err != nil || !ap.Addr().IsLoopback() {
		p.t.Errorf("the proxy was asked for %q: not a checked loopback address", hostport)
		return false
	}
	return true
}

func (p *testProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.hits++
	p.auths = append(p.auths, r.Header.Get("Proxy-Authorization"))
	p.mu.Unlock()
	if p.fail {
		http.Error(w, "proxy: upstream unreachable", http.StatusBadGateway)
		return
	}
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte(p.user+":"+p.pass))
	if r.Header.Get("Proxy-Authorization") != want {
		w.Header().Set("Proxy-Authenticate", `Basic realm="test"`)
		w.WriteHeader(http.StatusProxyAuthRequired)
		return
	}
	if r.Method == http.MethodConnect {
		p.mu.Lock()
		p.connects = append(p.connects, r.Host)
		p.mu.Unlock()
		if !p.loopbackOnly(r.Host) {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		dst, err := net.Dial("tcp", r.Host)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			dst.Close()
			return
		}
		_, _ = io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n")
		go func() {
			if n := buf.Reader.Buffered(); n > 0 {
				b, _ := buf.Reader.Peek(n)
				_, _ = dst.Write(b)
			}
			_, _ = io.Copy(dst, conn)
			dst.Close()
		}()
		_, _ = io.Copy(conn, dst)
		conn.Close()
		return
	}
	// Forwarding: an absolute http:// URL.
	if !r.URL.IsAbs() || !p.loopbackOnly(r.URL.Host) {
		http.Error(w, "proxy: absolute http:// URLs only", http.StatusBadRequest)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Header.Del("Proxy-Authorization")
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func (f *crawlFleet) proxies(ctx context.Context, pool string) map[string]crawl.Proxy {
	f.t.Helper()
	p, err := crawl.NewStore(f.d.App, spec.Options{}).Pool(ctx, f.tenant, pool)
	require.NoError(f.t, err)
	out := map[string]crawl.Proxy{}
	for _, x := range p.Proxies {
		out[x.URL()] = x
	}
	return out
}

// testProxyPools: a job with a proxy pool crawls through the pool's
// proxies in both render modes; credentials are sealed at rest and travel
// sealed; a proxy's own address goes through the egress guard (refused on
// loopback until the pool's allow list admits it, and the run then fails
// rather than fall back to the accounts' own egress); a failing proxy is
// benched, retried after its cooldown, and shown; the fleet page shows each
// account's egress.
func testProxyPools(t *testing.T, ctx context.Context, f *crawlFleet, _ *catalog.Server, port int) {
	site, sport := startCatalog(t, catalog.Config{Hosts: []string{"127.0.0.26"}, Items: 100, Rate: 100, Burst: 50})
	out, code := f.cli("egress", fmt.Sprintf("--allow=127.0.0.0/8:%d", port), fmt.Sprintf("--allow=127.0.0.0/8:%d", sport))
	require.Equal(t, 0, code, out)
	const secret = "Pr0xy-S3cret-7f2c"
	good := startTestProxy(t, "crawler", secret, false)
	bad := startTestProxy(t, "crawler", secret, true)

	out, code = f.cli("proxy", "pool", "pool1", "--rotation=round_robin", "--bench-after=1", "--remove-after=1", "--cooldown=1s")
	require.Equal(t, 0, code, out)
	out, code = f.cliIn(secret+"\n", "proxy", "add", "pool1", good.URL(), "--username=crawler", "--password-stdin")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "password sealed")
	require.NotContains(t, out, secret)
	out, code = f.cli("proxy", "add", "pool1", "http://crawler:"+secret+"@127.0.0.1:3128")
	require.Equal(t, 1, code, "credentials in a URL are refused")
	require.Contains(t, out, "not in its URL")

	// Sealed at rest: the stored row holds no trace of the password, and
	// neither does the audit log.
	var sealed []byte
	var auditText string
	require.NoError(t, db.InTenant(ctx, f.d.App, f.tenant, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT secret FROM crawl_proxies`).Scan(&sealed); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT string_agg(detail::text, ' ') FROM audit_log WHERE action LIKE 'crawl.proxy%'`).Scan(&auditText)
	}))
	require.NotEmpty(t, sealed)
	require.NotContains(t, string(sealed), secret)
	require.Contains(t, auditText, good.URL())
	require.NotContains(t, auditText, secret)

	job := func(name, render, pool string) string {
		return fmt.Sprintf(`version: 1
name: %s
start: {urls: ["http://127.0.0.26:%d/%scatalog?page=1"]}
allowed_domains: [127.0.0.26]
render: %s
extract:
  items: li.product
  fields:
    url: {css: a.title, attr: href, transform: [absolute_url], required: true}
    price: {css: .price, transform: [number]}
pagination: {next: {css: a.next}}
item_key: url
politeness: {concurrency: 2, delay: 20ms}
proxy_pool: %s
`, name, sport, map[string]string{"http": "", "browser": "js/"}[render], render, pool)
	}
	requests := func() int { return site.Oracle().Hosts["127.0.0.26"].Requests }

	// 1. The proxy sits on loopback and the pool admits no internal range:
	// the guard refuses the proxy's own address, the proxy is removed
	// (remove after one bench), and the run fails; the site never sees a
	// request, so nothing went out the accounts' own way.
	f.apply("via-proxy", job("via-proxy", "http", "pool1"))
	out, code = f.cli("run", "via-proxy", "--wait", "--timeout=2m")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "every proxy of pool \"pool1\" was removed")
	require.Zero(t, requests(), "no fallback to the agents' own egress")
	_, connects, _ := good.seen()
	require.Empty(t, connects, "the refused proxy was never dialled")
	px := f.proxies(ctx, "pool1")[good.URL()]
	require.Equal(t, crawl.ProxyRemoved, px.State)
	require.Contains(t, px.LastError, "the upstream proxy's address")
	require.Contains(t, px.LastError, "loopback")
	require.NotContains(t, px.LastError, secret)
	require.Contains(t, f.openAlarms(ctx)[crawl.AlarmProxyRemoved], "Proxy "+good.URL()+" of pool pool1 removed", "a removed proxy asks for a person")

	// 2. The admin allows loopback for this pool's proxies; a failing proxy
	// joins; the good one is restored.
	out, code = f.cli("proxy", "pool", "pool1", "--rotation=round_robin", "--bench-after=1", "--remove-after=3", "--cooldown=2s", "--allow=127.0.0.0/8")
	require.Equal(t, 0, code, out)
	out, code = f.cliIn(secret+"\n", "proxy", "add", "pool1", bad.URL(), "--username=crawler", "--password-stdin")
	require.Equal(t, 0, code, out)
	out, code = f.cli("proxy", "restore", px.ID)
	require.Equal(t, 0, code, out)
	require.NotContains(t, f.openAlarms(ctx), crawl.AlarmProxyRemoved, "restoring it resolves the alarm")

	out = f.runJob("via-proxy")
	require.Contains(t, out, "succeeded (done)")
	require.Contains(t, out, "items 100")
	seen := urlsOf(f.items("via-proxy"))
	for _, it := range site.Published() {
		require.Equal(t, 1, seen[it.URL], it.URL)
	}
	_, connects, auths := good.seen()
	require.NotEmpty(t, connects)
	for _, c := range connects {
		require.Equal(t, fmt.Sprintf("127.0.0.26:%d", sport), c, "the proxy is asked for the checked address, never a name")
	}
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("crawler:"+secret))
	for _, a := range auths {
		require.Equal(t, want, a, "the agent opened the sealed credentials")
	}
	badHits, _, _ := bad.seen()
	require.Positive(t, badHits, "round robin reached the failing proxy")
	px = f.proxies(ctx, "pool1")[bad.URL()]
	require.Equal(t, crawl.ProxyBenched, px.State, "the failing proxy is benched")
	require.Contains(t, px.LastError, "502")
	require.Equal(t, crawl.ProxyActive, f.proxies(ctx, "pool1")[good.URL()].State)
	out, code = f.cli("proxy", "list")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, bad.URL())
	require.Contains(t, out, "benched until")
	require.NotContains(t, out, secret)

	// 3. After its cooldown the failing proxy is tried again, fails again,
	// and is benched for longer.
	firstBench := *px.BenchedUntil
	// Real time: the bench is kept by the panel process on its own clock
	// (the binary under test, not this process), so the test waits it out.
	time.Sleep(time.Until(firstBench) + 200*time.Millisecond)
	f.runJob("via-proxy")
	again, _, _ := bad.seen()
	require.Greater(t, again, badHits, "retried after its cooldown")
	px = f.proxies(ctx, "pool1")[bad.URL()]
	require.Contains(t, []string{crawl.ProxyBenched, crawl.ProxyRemoved}, px.State)
	require.GreaterOrEqual(t, px.Benches, 2)

	// 4. Browser mode goes through the pool too (Chromium → the agent's
	// guard proxy → the pool's proxy).
	before, _, _ := good.seen()
	f.apply("via-proxy-js", job("via-proxy-js", "browser", "pool1"))
	out = f.runJob("via-proxy-js")
	require.Contains(t, out, "succeeded (done)")
	require.Contains(t, out, "items 100")
	after, connects, _ := good.seen()
	require.Greater(t, after, before, "the browser's pages went through the proxy")
	for _, c := range connects {
		require.Equal(t, fmt.Sprintf("127.0.0.26:%d", sport), c)
	}
	require.Zero(t, site.Oracle().RobotsViolations)

	// The costs reach the panel's metrics: the bytes the pool carried, and
	// the seconds the crawlers' browsers were open for the browser run.
	metric := func(re string) float64 {
		res, err := http.Get(f.metrics)
		require.NoError(t, err)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		m := regexp.MustCompile(re + ` ([0-9.e+-]+)\n`).FindStringSubmatch(string(body))
		if m == nil {
			return 0
		}
		v, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		return v
	}
	proxied := metric(`fleet_proxy_traffic_bytes_total\{pool="pool1",tenant="` + f.tenant + `"\}`)
	require.Greater(t, proxied, float64(1000), "the catalog's pages came through the pool")
	require.Eventually(t, func() bool {
		return metric(`fleet_browser_seconds_total\{kind="crawler",tenant="`+f.tenant+`"\}`) > 0
	}, time.Minute, 200*time.Millisecond, "the crawlers' browser seconds reached the panel")

	// 5. The fleet page shows each account's egress.
	fl, err := f.fleet.List(ctx, f.tenant)
	require.NoError(t, err)
	for _, a := range fl.Agents {
		require.Contains(t, a.Egress, "proxy http://127.0.0.1:", "agent %s", a.Name)
		require.Contains(t, a.Egress, "(pool pool1)", "agent %s", a.Name)
	}
	var rows int
	require.NoError(t, db.InTenant(ctx, f.d.App, f.tenant, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT count(*) FROM crawl_agent_egress`).Scan(&rows)
	}))
	require.Equal(t, len(fl.Agents), rows)
	require.False(t, strings.Contains(fmt.Sprint(fl.Agents), secret))
}
