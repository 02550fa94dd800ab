package agent

import (
	"context"
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

	"github.com/go-rod/rod/lib/proto"

	"github.com/fleetwright/fleetwright/app/browser"
	"github.com/fleetwright/fleetwright/app/egress"
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
	handlers map[string]func(context.Context, wire.PageTask) wire.PageResult
	names    []string
	rr       int
}

func newCrawlHub() *crawlHub {
	return &crawlHub{handlers: map[string]func(context.Context, wire.PageTask) wire.PageResult{}}
}

func (c *crawlHub) register(name string, fn func(context.Context, wire.PageTask) wire.PageResult) func() {
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
func (c *crawlHub) handle(ctx context.Context, t wire.PageTask) wire.PageResult {
	c.mu.Lock()
	var fn func(context.Context, wire.PageTask) wire.PageResult
	if len(c.names) > 0 {
		c.rr++
		fn = c.handlers[c.names[c.rr%len(c.names)]]
	}
	c.mu.Unlock()
	if fn == nil {
		return wire.PageResult{TaskID: t.TaskID, URL: t.URL, Error: ErrNoCrawler.Error()}
	}
	return fn(ctx, t)
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

// guarded is one egress policy's guard, client and (lazily) browser.
type guarded struct {
	g      *egress.Guard
	client *http.Client
	mu     sync.Mutex
	proxy  *egress.Proxy
	br     *browser.Browser
	slot   bool
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
	if gd.proxy != nil {
		_ = gd.proxy.Close()
		gd.proxy = nil
	}
	if gd.slot {
		<-env.Browsers
		gd.slot = false
	}
}

func (c *crawler) guard(t wire.PageTask) (*guarded, error) {
	key := strings.Join(t.EgressAllow, ",") + "|" + fmt.Sprint(t.EgressPorts)
	c.mu.Lock()
	defer c.mu.Unlock()
	if gd, ok := c.guards[key]; ok {
		return gd, nil
	}
	allow, err := egress.ParseAllow(t.EgressAllow)
	if err != nil {
		return nil, err
	}
	ports := append([]int(nil), egress.DefaultPorts...)
	ports = append(ports, t.EgressPorts...)
	g, err := egress.New(egress.Config{Policy: egress.Policy{Ports: ports, Allow: allow}, Logger: c.env.Log})
	if err != nil {
		return nil, err
	}
	client := g.Client(egress.ClientOptions{Timeout: 2 * time.Minute})
	gd := &guarded{g: g, client: client}
	c.guards[key] = gd
	return gd, nil
}

// do fetches and extracts one page task.
func (c *crawler) do(ctx context.Context, t wire.PageTask) wire.PageResult {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return wire.PageResult{TaskID: t.TaskID, URL: t.URL, Error: "agent: stopping"}
	}
	defer func() { <-c.sem }()
	start := c.env.Clock.Now()
	res := wire.PageResult{TaskID: t.TaskID, URL: t.URL}
	timeout := time.Duration(t.TimeoutMS) * time.Millisecond
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	gd, err := c.guard(t)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	var body []byte
	var ctype string
	if t.Render == "browser" && t.Kind != wire.PageRobots {
		body, err = c.browse(ctx, gd, t, &res)
	} else {
		body, ctype, err = c.fetch(ctx, gd, t, &res)
	}
	res.DurationMS = c.env.Clock.Since(start).Milliseconds()
	if err != nil {
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
	if looksLikeCaptcha(body) {
		res.Captcha = true
		res.Error = "the page asks for a captcha: a person must look (nothing tries to solve it)"
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

var captchaMarks = []string{"g-recaptcha", "h-captcha", "data-captcha", "cf-challenge", `id="captcha"`, `class="captcha"`}

func looksLikeCaptcha(b []byte) bool {
	head := strings.ToLower(string(b[:min(len(b), 64<<10)]))
	for _, m := range captchaMarks {
		if strings.Contains(head, m) {
			return true
		}
	}
	return false
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

// browse loads the page in the worker's Chromium, whose only way out is the
// guard proxy, and returns the rendered DOM.
func (c *crawler) browse(ctx context.Context, gd *guarded, t wire.PageTask, res *wire.PageResult) ([]byte, error) {
	br, err := c.browser(ctx, gd)
	if err != nil {
		return nil, err
	}
	page, err := br.Page(ctx)
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
		}
		return true
	})
	_ = proto.NetworkEnable{}.Call(page)
	go wait()
	if err := page.Navigate(t.URL); err != nil {
		return nil, fmt.Errorf("agent: crawl: navigate: %w", err)
	}
	if err := page.WaitLoad(); err != nil {
		return nil, fmt.Errorf("agent: crawl: load: %w", err)
	}
	html, err := page.HTML()
	if err != nil {
		return nil, fmt.Errorf("agent: crawl: read DOM: %w", err)
	}
	info, err := page.Info()
	if err == nil {
		res.FinalURL = info.URL
	}
	mu.Lock()
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
	return gd.br, nil
}
