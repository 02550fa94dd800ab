package agent

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/proto"

	"github.com/fleetwright/fleetwright/app/browser"
	"github.com/fleetwright/fleetwright/app/egress"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/modules/agent/supervisor"
	"github.com/fleetwright/fleetwright/modules/crawl/extract"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// KindCrawler is the crawler worker: it fetches the pages the panel hands
// it (page tasks) through the account's own egress and the SSRF guard, in
// plain HTTP or in Chromium, and extracts items (docs/CRAWL.md).
const KindCrawler = "crawler"

// Crawler settings.
const (
	SettingCrawlConcurrency = "concurrency" // pages fetched at once by this worker, default 8
)

// Limits of what a page result carries back.
const (
	maxRobotsBytes   = 256 << 10
	maxSnapshotBytes = 8 << 10
	maxItemsPerPage  = 500
)

// crawlHub routes page tasks to the agent's crawler workers.
type crawlHub struct {
	mu       sync.Mutex
	handlers map[string]crawlFunc
	names    []string
	rr       int
}

// crawlFunc handles one page task; open opens credentials sealed to this
// agent's installation key (a proxy's).
type crawlFunc func(ctx context.Context, t wire.PageTask, open opener) wire.PageResult

type opener func(*wire.SealedCredentials) (wire.Credentials, error)

func newCrawlHub() *crawlHub {
	return &crawlHub{handlers: map[string]crawlFunc{}}
}

func (c *crawlHub) register(name string, fn crawlFunc) func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.handlers[name] = fn
	c.names = append(c.names, name)
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.handlers, name)
		c.names = slices.DeleteFunc(c.names, func(n string) bool { return n == name })
	}
}

// handle gives the task to a crawler worker (round robin), or answers that
// none runs here.
func (c *crawlHub) handle(ctx context.Context, t wire.PageTask, open opener) wire.PageResult {
	c.mu.Lock()
	var fn crawlFunc
	if len(c.names) > 0 {
		c.rr++
		fn = c.handlers[c.names[c.rr%len(c.names)]]
	}
	c.mu.Unlock()
	if fn == nil {
		return wire.PageResult{TaskID: t.TaskID, URL: t.URL, Error: ErrNoCrawler.Error()}
	}
	return fn(ctx, t, open)
}

// ErrNoCrawler is the answer of an agent without a running crawler worker.
var ErrNoCrawler = errors.New("agent: no crawler worker runs on this agent")

type crawler struct {
	env  WorkerEnv
	sem  chan struct{}
	ua   string
	lang string

	mu     sync.Mutex
	guards map[string]*guarded
}

// guarded is one egress policy's guard (through one upstream proxy, or
// none), its client and (lazily) its browser and guard proxy. A proxied
// guard has no browser of its own: its pages open in a browser context of
// the direct guard's Chromium whose proxy is this guard's proxy.
type guarded struct {
	g      *egress.Guard
	client *http.Client
	mu     sync.Mutex
	proxy  *egress.Proxy
	br     *browser.Browser
	slot   bool
	timed  func() // stops counting the browser's open seconds
}

func runCrawler(ctx context.Context, h *supervisor.Handle, env WorkerEnv) error {
	t, err := env.traits()
	if err != nil {
		return err
	}
	c := &crawler{env: env, sem: make(chan struct{}, settingInt(env.Spec, SettingCrawlConcurrency, 8)),
		ua: t.UserAgent, lang: t.Language.AcceptLanguage, guards: map[string]*guarded{}}
	defer c.close()
	unregister := env.Crawl.register(env.Spec.Name, c.do)
	defer unregister()
	env.Log.Info("agent: crawler ready", "concurrency", cap(c.sem))
	<-ctx.Done()
	return nil
}

func (c *crawler) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, gd := range c.guards {
		gd.closeBrowser(c.env)
		gd.client.CloseIdleConnections()
	}
}

func (gd *guarded) closeBrowser(env WorkerEnv) {
	gd.mu.Lock()
	defer gd.mu.Unlock()
	if gd.br != nil {
		_ = gd.br.Close()
		gd.br = nil
	}
	if gd.timed != nil {
		gd.timed()
		gd.timed = nil
	}
	if gd.proxy != nil {
		_ = gd.proxy.Close()
		gd.proxy = nil
	}
	if gd.slot {
		<-env.Browsers
		gd.slot = false
	}
}

// guard returns the guard of the task's egress policy, through upstream
// when one is given (a pool's proxy with its opened credentials).
func (c *crawler) guard(t wire.PageTask, upstream *url.URL, upAllow []string) (*guarded, error) {
	key := strings.Join(t.EgressAllow, ",") + "|" + fmt.Sprint(t.EgressPorts)
	if upstream != nil {
		// The key holds a digest of the credentials, so a rotated
		// password gets a new guard (and no secret sits in a map key).
		sum := sha256.Sum256([]byte(upstream.String() + "|" + strings.Join(upAllow, ",")))
		key += "|" + hex.EncodeToString(sum[:])
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if gd, ok := c.guards[key]; ok {
		return gd, nil
	}
	allow, err := egress.ParseEntries(t.EgressAllow)
	if err != nil {
		return nil, err
	}
	ports := append([]int(nil), egress.DefaultPorts...)
	ports = append(ports, t.EgressPorts...)
	cfg := egress.Config{Policy: egress.Policy{Ports: ports, Entries: allow}, Logger: c.env.Log}
	if upstream != nil {
		// The proxy came from the tenant's pool, which is data: its own
		// address is checked too, internal ranges only through the pool's
		// allow list.
		ua, err := egress.ParseAllow(upAllow)
		if err != nil {
			return nil, fmt.Errorf("agent: crawl: the proxy pool's allow list: %w", err)
		}
		cfg.Upstream, cfg.UpstreamPolicy = upstream, &egress.Policy{Allow: ua}
	}
	g, err := egress.New(cfg)
	if err != nil {
		return nil, err
	}
	client := g.Client(egress.ClientOptions{Timeout: 2 * time.Minute})
	gd := &guarded{g: g, client: client}
	c.guards[key] = gd
	return gd, nil
}

// upstream is the task's proxy with its credentials opened, or nil.
func upstreamOf(t wire.PageTask, open opener) (*url.URL, error) {
	p := t.Proxy
	if p == nil {
		return nil, nil
	}
	if p.Withheld != "" {
		advice := withheldAdvice[p.Withheld]
		if advice == "" {
			advice = "see the panel's log"
		}
		return nil, fmt.Errorf("agent: crawl: the panel withheld the proxy's credentials (%s): %s", p.Withheld, advice)
	}
	u, err := url.Parse(p.URL)
	if err != nil || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("agent: crawl: the page task's proxy URL %q is not scheme://host:port", p.URL)
	}
	if p.Sealed != nil {
		if open == nil {
			return nil, errors.New("agent: crawl: sealed proxy credentials but no installation key to open them")
		}
		creds, err := open(p.Sealed)
		if err != nil {
			return nil, fmt.Errorf("agent: crawl: proxy credentials: %w", err)
		}
		pw := creds.Password.Reveal()
		if pw != "" {
			logging.RegisterSecret(pw)
			u.User = url.UserPassword(creds.Username, pw)
		} else {
			u.User = url.User(creds.Username)
		}
	}
	return u, nil
}

// do fetches and extracts one page task.
func (c *crawler) do(ctx context.Context, t wire.PageTask, open opener) wire.PageResult {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return wire.PageResult{TaskID: t.TaskID, URL: t.URL, Error: "agent: stopping"}
	}
	defer func() { <-c.sem }()
	start := c.env.Clock.Now()
	res := wire.PageResult{TaskID: t.TaskID, URL: t.URL}
	if c.env.Paused != nil && c.env.Paused() {
		// Checked after the wait for a slot, at the last moment before the
		// fetch: a pause holds every page not yet started; pages already
		// under way finish.
		res.Error = wire.PagePaused
		return res
	}
	timeout := time.Duration(t.TimeoutMS) * time.Millisecond
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	up, err := upstreamOf(t, open)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	gd, err := c.guard(t, up, proxyAllow(t))
	if err != nil {
		res.Error = err.Error()
		return res
	}
	var body []byte
	var ctype string
	if t.Render == "browser" && t.Kind != wire.PageRobots {
		var base *guarded
		if base, err = c.guard(t, nil, nil); err == nil {
			body, err = c.browse(ctx, base, gd, t, &res)
		}
	} else {
		body, ctype, err = c.fetch(ctx, gd, t, &res)
	}
	res.DurationMS = c.env.Clock.Since(start).Milliseconds()
	if err != nil {
		if ue, ok := egress.AsUpstreamError(err); ok && t.Proxy != nil {
			res.ProxyError = ue.Error()
		}
		if res.ProxyError != "" {
			res.Error = res.ProxyError
			return res
		}
		if r, ok := egress.AsRefusal(err); ok {
			res.Refused = r.Reason
		}
		res.Error = err.Error()
		return res
	}
	if t.Snapshot && t.Kind != wire.PageRobots {
		res.Body = snapshot(body)
	}
	if t.Kind == wire.PageRobots {
		res.Body = string(body)
		return res
	}
	if res.Status < 200 || res.Status > 299 {
		res.Error = fmt.Sprintf("status %d", res.Status)
		return res
	}
	if looksLikeCaptcha(body) && t.Solution != nil && t.Render != "browser" {
		// An authorised solver answered: send the captcha's form with it.
		if body, ctype, err = c.submitCaptcha(ctx, gd, t, body, &res); err != nil {
			res.Error = err.Error()
			return res
		}
		if res.Status < 200 || res.Status > 299 {
			res.Error = fmt.Sprintf("status %d after the captcha's form", res.Status)
			return res
		}
	}
	if looksLikeCaptcha(body) {
		res.Captcha = true
		if t.Solution == nil {
			res.Challenge = challengeOf(body, firstNonEmpty(res.FinalURL, t.URL))
		}
		res.Error = "the page asks for a captcha: a person must look"
		return res
	}
	final := res.FinalURL
	if final == "" {
		final = t.URL
	}
	rules := t.Rules
	if rules.Format == "" {
		rules.Format = "html"
		if strings.Contains(ctype, "json") {
			rules.Format = "json"
		}
	}
	ex, err := extract.Page(body, final, t.Kind, rules, t.AllowedDomains)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	if len(ex.Items) > maxItemsPerPage {
		ex.Items = ex.Items[:maxItemsPerPage]
		res.Error = fmt.Sprintf("more than %d items on one page; the rest were dropped", maxItemsPerPage)
	}
	res.Items, res.Links, res.Next, res.Missing = ex.Items, ex.Links, ex.Next, ex.Missing
	return res
}

func snapshot(b []byte) string {
	if len(b) > maxSnapshotBytes {
		b = b[:maxSnapshotBytes]
	}
	return strings.ToValidUTF8(string(b), "")
}

// redactedHeaders copies response headers without secrets.
func redactedHeaders(h http.Header) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		switch strings.ToLower(k) {
		case "set-cookie", "cookie", "authorization", "proxy-authorization", "www-authenticate":
			out[k] = "[redacted]"
		default:
			out[k] = strings.Join(v, ", ")
		}
	}
	return out
}

// retryAfter reads a Retry-After header: seconds or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

func (c *crawler) fetch(ctx context.Context, gd *guarded, t wire.PageTask, res *wire.PageResult) ([]byte, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
	if err != nil {
		return nil, "", fmt.Errorf("agent: crawl: %w", err)
	}
	req.Header.Set("User-Agent", c.ua)
	req.Header.Set("Accept-Language", c.lang)
	if t.Kind == wire.PageRobots {
		req.Header.Set("Accept", "text/plain")
	} else {
		req.Header.Set("Accept", "text/html,application/json;q=0.9,*/*;q=0.8")
	}
	resp, err := gd.client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	res.Status = resp.StatusCode
	res.FinalURL = resp.Request.URL.String()
	if u, err := url.Parse(res.FinalURL); err == nil && !extract.DomainAllowed(t.AllowedDomains, u.Hostname()) {
		return nil, "", fmt.Errorf("agent: crawl: redirected outside the allowed domains to %s", u.Hostname())
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		res.RetryAfterMS = retryAfter(resp.Header.Get("Retry-After"), c.env.Clock.Now()).Milliseconds()
	}
	if t.Snapshot {
		res.Headers = redactedHeaders(resp.Header)
	}
	limit := t.MaxBytes
	if t.Kind == wire.PageRobots {
		limit = maxRobotsBytes
	}
	if limit <= 0 {
		limit = 5 << 20
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	res.Bytes = int64(len(body))
	if err != nil {
		return nil, "", fmt.Errorf("agent: crawl: read body: %w", err)
	}
	if int64(len(body)) > limit {
		if t.Kind == wire.PageRobots {
			body = body[:limit]
		} else {
			return nil, "", fmt.Errorf("agent: crawl: the page is larger than %d bytes (limits.page_bytes)", limit)
		}
	}
	return body, resp.Header.Get("Content-Type"), nil
}

func proxyAllow(t wire.PageTask) []string {
	if t.Proxy == nil {
		return nil
	}
	return t.Proxy.Allow
}

// browse loads the page in the worker's Chromium, whose only way out is the
// guard proxy, and returns the rendered DOM. base owns the Chromium (its
// launch proxy is base's guard proxy); a page through a pool's proxy opens
// in a browser context whose only proxy is gd's guard proxy, which chains
// to the upstream.
func (c *crawler) browse(ctx context.Context, base, gd *guarded, t wire.PageTask, res *wire.PageResult) ([]byte, error) {
	br, err := c.browser(ctx, base)
	if err != nil {
		return nil, err
	}
	var page *rod.Page
	if gd == base {
		page, err = br.Page(ctx)
	} else {
		var gp *egress.Proxy
		if gp, err = gd.guardProxy(); err != nil {
			return nil, err
		}
		var dispose func()
		page, dispose, err = br.PageVia(ctx, gp.URL())
		if err == nil {
			defer dispose()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("agent: crawl: %w", err)
	}
	defer page.Close()
	page = page.Context(ctx)
	var mu sync.Mutex
	status, retry := 0, ""
	var headers map[string]string
	wait := page.EachEvent(func(e *proto.NetworkResponseReceived) bool {
		if e.Type != proto.NetworkResourceTypeDocument {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		status = e.Response.Status
		if v, ok := e.Response.Headers["Retry-After"]; ok {
			retry = v.String()
		}
		if e.Response.Headers != nil {
			h := http.Header{}
			for k, v := range e.Response.Headers {
				h.Set(k, v.String())
			}
			headers = redactedHeaders(h)
			if ref := h.Get(egress.RefusedHeader); ref != "" {
				res.Refused = ref
			}
			if uf := h.Get(egress.UpstreamFailedHeader); uf != "" && t.Proxy != nil {
				res.ProxyError = uf
			}
		}
		return true
	})
	_ = proto.NetworkEnable{}.Call(page)
	go wait()
	if err := page.Navigate(t.URL); err != nil {
		if t.Proxy != nil && (strings.Contains(err.Error(), "ERR_TUNNEL_CONNECTION_FAILED") || strings.Contains(err.Error(), "ERR_PROXY_CONNECTION_FAILED")) {
			res.ProxyError = "agent: crawl: the proxy " + t.Proxy.URL + " failed: " + err.Error()
		}
		return nil, fmt.Errorf("agent: crawl: navigate: %w", err)
	}
	if err := page.WaitLoad(); err != nil {
		return nil, fmt.Errorf("agent: crawl: load: %w", err)
	}
	html, err := page.HTML()
	if err != nil {
		return nil, fmt.Errorf("agent: crawl: read DOM: %w", err)
	}
	if t.Solution != nil && looksLikeCaptcha([]byte(html)) {
		// An authorised solver answered: the captcha's form goes with it.
		wait := page.WaitNavigation(proto.PageLifecycleEventNameLoad)
		if err := submitCaptchaInPage(page, t.Solution); err != nil {
			return nil, err
		}
		wait()
		if html, err = page.HTML(); err != nil {
			return nil, fmt.Errorf("agent: crawl: read DOM: %w", err)
		}
	}
	if t.Snapshot {
		res.Screenshot = screenshot(page)
	}
	info, err := page.Info()
	if err == nil {
		res.FinalURL = info.URL
	}
	mu.Lock()
	if res.ProxyError != "" {
		mu.Unlock()
		return nil, errors.New(res.ProxyError)
	}
	res.Status, res.Headers = status, headers
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		res.RetryAfterMS = retryAfter(retry, c.env.Clock.Now()).Milliseconds()
	}
	mu.Unlock()
	if res.Refused != "" {
		return nil, fmt.Errorf("egress: refused %s: %s", t.URL, res.Refused)
	}
	if !t.Snapshot {
		res.Headers = nil
	}
	res.Bytes = int64(len(html))
	if t.MaxBytes > 0 && res.Bytes > t.MaxBytes {
		return nil, fmt.Errorf("agent: crawl: the page is larger than %d bytes (limits.page_bytes)", t.MaxBytes)
	}
	return []byte(html), nil
}

func (c *crawler) browser(ctx context.Context, gd *guarded) (*browser.Browser, error) {
	gd.mu.Lock()
	defer gd.mu.Unlock()
	if gd.br != nil {
		return gd.br, nil
	}
	opts, err := BrowserOptions(c.env)
	if err != nil {
		return nil, err
	}
	if !gd.slot {
		select {
		case c.env.Browsers <- struct{}{}:
			gd.slot = true
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if gd.proxy == nil {
		if gd.proxy, err = gd.g.ListenProxy("127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("agent: crawl: %w", err)
		}
	}
	opts.ExtraFlags = append(opts.ExtraFlags, gd.proxy.ChromiumFlags()...)
	if gd.br, err = browser.Launch(ctx, opts); err != nil {
		return nil, fmt.Errorf("agent: crawl: %w", err)
	}
	gd.timed = c.env.BrowserTime.opened(c.env.Spec.Kind)
	return gd.br, nil
}

// guardProxy starts (once) the guard's local proxy for browser contexts.
func (gd *guarded) guardProxy() (*egress.Proxy, error) {
	gd.mu.Lock()
	defer gd.mu.Unlock()
	if gd.proxy != nil {
		return gd.proxy, nil
	}
	p, err := gd.g.ListenProxy("127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("agent: crawl: %w", err)
	}
	gd.proxy = p
	return p, nil
}

// maxScreenshotB64 bounds a trace screenshot: a page result travels in one
// protocol message (wire.MaxMessageBytes) next to the items and an 8 KiB
// body snapshot.
const maxScreenshotB64 = 24 << 10

// screenshot is a small JPEG of the page's viewport for an alarm trace
// (base64), scaled down and recompressed until it fits; "" when it cannot
// be taken or does not fit.
func screenshot(page *rod.Page) string {
	m, err := proto.PageGetLayoutMetrics{}.Call(page)
	if err != nil || m.CSSLayoutViewport == nil {
		return ""
	}
	w, h := float64(m.CSSLayoutViewport.ClientWidth), float64(m.CSSLayoutViewport.ClientHeight)
	for _, try := range []struct {
		scale float64
		q     int
	}{{0.5, 60}, {0.4, 45}, {0.3, 35}, {0.2, 30}} {
		q := try.q
		b, err := page.Screenshot(false, &proto.PageCaptureScreenshot{Format: proto.PageCaptureScreenshotFormatJpeg, Quality: &q,
			Clip: &proto.PageViewport{X: 0, Y: 0, Width: w, Height: h, Scale: try.scale}})
		if err != nil {
			return ""
		}
		if s := base64.StdEncoding.EncodeToString(b); len(s) <= maxScreenshotB64 {
			return s
		}
	}
	return ""
}
