package wire

import "errors"

// Crawl messages (version 4). The panel runs a crawl: it keeps the frontier,
// holds the per-domain politeness budget (in the cell's Redis; agents never
// reach Redis) and hands one page at a time to a crawler worker of an agent,
// which fetches it through the account's own egress and the SSRF guard,
// extracts, and answers. A page task is the politeness token: an agent
// fetches nothing it was not handed.

// Page task kinds.
const (
	PageListing = "listing" // a start or next page: items, follow links, the next page
	PageItem    = "item"    // a page reached by a follow link: items only
	PageRobots  = "robots"  // robots.txt: the body comes back raw
)

// PagePaused is the error of a page task an agent refused because it is
// paused (its own pause, its tenant's or the fleet's): the page was not
// fetched, and the panel gives it again later or to another agent without
// counting it as a failed attempt.
const PagePaused = "agent: paused: no new page starts while a pause holds this agent"

// CrawlField is one extraction rule (docs/CRAWL.md, extract.fields).
type CrawlField struct {
	Name      string   `json:"name"`
	CSS       string   `json:"css,omitempty"`
	Attr      string   `json:"attr,omitempty"`
	Path      string   `json:"path,omitempty"`
	All       bool     `json:"all,omitempty"`
	Required  bool     `json:"required,omitempty"`
	Transform []string `json:"transform,omitempty"`
}

// CrawlRules say how a page becomes items, links and a next page.
type CrawlRules struct {
	Format string       `json:"format"`
	Items  string       `json:"items,omitempty"`
	Fields []CrawlField `json:"fields"`
	// FollowCSS selects links to item pages (attribute FollowAttr).
	FollowCSS   string `json:"follow_css,omitempty"`
	FollowAttr  string `json:"follow_attr,omitempty"`
	FollowLimit int    `json:"follow_limit,omitempty"`
	// NextCSS selects the next listing page's link (attribute NextAttr).
	NextCSS  string `json:"next_css,omitempty"`
	NextAttr string `json:"next_attr,omitempty"`
	// CursorPath reads the next cursor from JSON, sent as CursorParam.
	CursorPath  string `json:"cursor_path,omitempty"`
	CursorParam string `json:"cursor_param,omitempty"`
}

// PageTask asks a crawler worker to fetch and extract one page.
type PageTask struct {
	TaskID string `json:"task_id"`
	RunID  string `json:"run_id"`
	Kind   string `json:"kind"`
	URL    string `json:"url"`
	// Render is http or browser.
	Render string     `json:"render"`
	Rules  CrawlRules `json:"rules"`
	// AllowedDomains bound the links and redirects followed.
	AllowedDomains []string `json:"allowed_domains"`
	// EgressAllow and EgressPorts are the tenant's egress allowlist
	// (entries with their port, like 127.0.0.0/8:8081: egress.ParseEntries;
	// an agent that reads only CIDR ranges refuses such a task) and the
	// ports beyond 80/443 it admits on public addresses.
	EgressAllow []string `json:"egress_allow,omitempty"`
	EgressPorts []int    `json:"egress_ports,omitempty"`
	MaxBytes    int64    `json:"max_bytes"`
	TimeoutMS   int64    `json:"timeout_ms"`
	// Snapshot asks for a bounded body snapshot (alarm traces), and in
	// browser mode a small screenshot too.
	Snapshot bool `json:"snapshot,omitempty"`
	// Proxy is the upstream proxy of the tenant's pool the fetch must go
	// through (nil: the agent's own egress). An agent never falls back to
	// its own egress when a proxy was named.
	Proxy *CrawlProxy `json:"proxy,omitempty"`
	// Solution answers the captcha the page showed last time: a solver the
	// tenant authorised (docs/CRAWL.md, "Captchas") solved it. The agent
	// submits the captcha's form with it.
	Solution *CaptchaSolution `json:"solution,omitempty"`
}

// CaptchaChallenge describes a captcha a page showed.
type CaptchaChallenge struct {
	// Kind is recaptcha, hcaptcha or unknown.
	Kind    string `json:"kind"`
	SiteKey string `json:"site_key,omitempty"`
	// PageURL is the page that showed it.
	PageURL string `json:"page_url"`
}

// CaptchaSolution is a solver's answer: the token, and the form field
// that carries it (g-recaptcha-response, h-captcha-response, …).
type CaptchaSolution struct {
	Field string `json:"field"`
	Token string `json:"token"`
}

// CrawlProxy is one proxy of a tenant's pool, as a page task names it. Its
// credentials travel sealed to the agent's installation key (like the
// account's, SealedCredentials), never in the clear.
type CrawlProxy struct {
	ID string `json:"id"`
	// URL is scheme://host:port (http, https or socks5), without
	// credentials.
	URL string `json:"url"`
	// Allow are the internal ranges the proxy's own address may be in (the
	// pool's admin-set allow list); public addresses need none.
	Allow []string `json:"allow,omitempty"`
	// Sealed holds Username and Password sealed to the agent's key.
	Sealed *SealedCredentials `json:"sealed,omitempty"`
	// Withheld says why the credentials were not sent (Withheld*).
	Withheld string `json:"withheld,omitempty"`
	// Credentials are filled by the panel and sealed by the gateway just
	// before sending; they never travel.
	Credentials Credentials `json:"-"`
}

// CrawlItem is one extracted item: field name → value (a string, a
// number, or a list of them).
type CrawlItem map[string]any

// PageResult answers a page task.
type PageResult struct {
	TaskID   string `json:"task_id"`
	URL      string `json:"url"`
	FinalURL string `json:"final_url,omitempty"`
	Status   int    `json:"status,omitempty"`
	// RetryAfterMS is the Retry-After the site sent with a 429 or 503.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
	Bytes        int64 `json:"bytes"`
	DurationMS   int64 `json:"duration_ms"`
	// Items, Links (absolute, inside the allowed domains) and Next.
	Items []CrawlItem `json:"items,omitempty"`
	Links []string    `json:"links,omitempty"`
	Next  string      `json:"next,omitempty"`
	// Missing names required fields that matched nothing, once per item
	// dropped for it (selector failures).
	Missing []string `json:"missing,omitempty"`
	// Body is the raw body of a robots task, or a bounded snapshot.
	Body string `json:"body,omitempty"`
	// Headers are the response headers, redacted (a snapshot's).
	Headers map[string]string `json:"headers,omitempty"`
	// Refused is the egress guard's reason when it refused the fetch.
	Refused string `json:"refused,omitempty"`
	// Captcha says the page asked for a person; Challenge describes it.
	Captcha   bool              `json:"captcha,omitempty"`
	Challenge *CaptchaChallenge `json:"challenge,omitempty"`
	// Error is a fetch or extraction failure ("" on success).
	Error string `json:"error,omitempty"`
	// ProxyError is set when the task's proxy itself failed (unreachable,
	// refused by the guard, a refused CONNECT): the proxy is at fault, not
	// the page.
	ProxyError string `json:"proxy_error,omitempty"`
	// Screenshot is a small JPEG of the rendered page (base64), sent with a
	// snapshot in browser mode.
	Screenshot string `json:"screenshot,omitempty"`
}

// MessageType implements Message.
func (PageTask) MessageType() Type { return TypePageTask }

// MessageType implements Message.
func (PageResult) MessageType() Type { return TypePageResult }

func validateCrawl(m Message) error {
	switch x := m.(type) {
	case PageTask:
		if x.TaskID == "" || x.URL == "" || x.Kind == "" {
			return errors.New("page_task needs task_id, kind and url")
		}
	case PageResult:
		if x.TaskID == "" {
			return errors.New("page_result needs task_id")
		}
	}
	return nil
}
