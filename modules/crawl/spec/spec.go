// Package spec is the crawl job as data: the versioned YAML (or JSON) format
// documented in docs/CRAWL.md, its parser and its validation. Every error
// names the field's path and its line, and all errors are reported at once,
// so an operator fixes a file in one pass.
package spec

import (
	"time"

	"go.yaml.in/yaml/v3"
)

// Version is the schema version this build reads and writes.
const Version = 1

// Render modes.
const (
	RenderHTTP    = "http"
	RenderBrowser = "browser"
)

// Response formats an extraction reads.
const (
	FormatHTML = "html"
	FormatJSON = "json"
)

// Catch-up policies for missed scheduled runs.
const (
	CatchUpSkip = "skip"
	CatchUpOne  = "one"
	CatchUpAll  = "all"
)

// Job is one crawl job. Field names are the file's keys; docs/CRAWL.md is
// the reference. Parse fills defaults, so a parsed Job is complete.
type Job struct {
	Version        int         `yaml:"version" json:"version"`
	Name           string      `yaml:"name" json:"name"`
	Description    string      `yaml:"description,omitempty" json:"description,omitempty"`
	Start          Start       `yaml:"start" json:"start"`
	AllowedDomains Strings     `yaml:"allowed_domains" json:"allowed_domains"`
	Render         string      `yaml:"render,omitempty" json:"render,omitempty"`
	Follow         *Follow     `yaml:"follow,omitempty" json:"follow,omitempty"`
	Extract        Extract     `yaml:"extract" json:"extract"`
	Pagination     *Pagination `yaml:"pagination,omitempty" json:"pagination,omitempty"`
	ItemKey        Strings     `yaml:"item_key" json:"item_key"`
	Schedule       *Schedule   `yaml:"schedule,omitempty" json:"schedule,omitempty"`
	Politeness     Politeness  `yaml:"politeness,omitempty" json:"politeness,omitempty"`
	ProxyPool      string      `yaml:"proxy_pool,omitempty" json:"proxy_pool,omitempty"`
	ExpectedItems  *Range      `yaml:"expected_items,omitempty" json:"expected_items,omitempty"`
	Limits         Limits      `yaml:"limits,omitempty" json:"limits,omitempty"`
	Alarms         Alarms      `yaml:"alarms,omitempty" json:"alarms,omitempty"`
}

// Strings is a list that may be written as one value (`item_key: url`).
type Strings []string

// UnmarshalYAML reads a list or a single value.
func (s *Strings) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*s = Strings{n.Value}
		return nil
	}
	return n.Decode((*[]string)(s))
}

// Start says where a run begins: literal URLs and URL templates expanded
// over their parameters.
type Start struct {
	URLs      []string   `yaml:"urls,omitempty" json:"urls,omitempty"`
	Templates []Template `yaml:"templates,omitempty" json:"templates,omitempty"`
}

// Template is a URL with {name} placeholders and the values each takes.
type Template struct {
	URL    string           `yaml:"url" json:"url"`
	Params map[string]Param `yaml:"params" json:"params"`
}

// Param is a template parameter: a list of values, or an integer range.
type Param struct {
	Values []string `yaml:"values,omitempty" json:"values,omitempty"`
	From   *int     `yaml:"from,omitempty" json:"from,omitempty"`
	To     *int     `yaml:"to,omitempty" json:"to,omitempty"`
	Step   int      `yaml:"step,omitempty" json:"step,omitempty"`
}

// UnmarshalYAML reads a parameter written as a list ([a, b]) or as a range
// ({from: 1, to: 5}).
func (p *Param) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.SequenceNode {
		return n.Decode(&p.Values)
	}
	type plain Param
	return n.Decode((*plain)(p))
}

// Follow selects links on the listing pages (start and pagination pages)
// to the pages items are extracted from.
type Follow struct {
	CSS   string `yaml:"css" json:"css"`
	Attr  string `yaml:"attr,omitempty" json:"attr,omitempty"`
	Limit int    `yaml:"limit,omitempty" json:"limit,omitempty"`
}

// Extract turns a page into items.
type Extract struct {
	// Format of the responses read: html (CSS selectors) or json (JSONPath).
	Format string `yaml:"format,omitempty" json:"format,omitempty"`
	// Items selects each item's root (a CSS selector or a JSONPath); empty
	// means the whole page is one item.
	Items  string           `yaml:"items,omitempty" json:"items,omitempty"`
	Fields map[string]Field `yaml:"fields" json:"fields"`
	// Order is the fields' order in the file (for CSV columns); not a key.
	Order []string `yaml:"-" json:"-"`
}

// Field extracts one value from an item root.
type Field struct {
	// CSS selects the element inside the item root (html); empty means the
	// root itself.
	CSS string `yaml:"css,omitempty" json:"css,omitempty"`
	// Attr reads an attribute instead of the text.
	Attr string `yaml:"attr,omitempty" json:"attr,omitempty"`
	// Path is a JSONPath relative to the item root (json).
	Path string `yaml:"path,omitempty" json:"path,omitempty"`
	// All collects every match as a list instead of the first.
	All bool `yaml:"all,omitempty" json:"all,omitempty"`
	// Required fields that match nothing count as a selector failure.
	Required bool `yaml:"required,omitempty" json:"required,omitempty"`
	// Transform is applied in order: trim, lower, upper, collapse_space,
	// number, integer, absolute_url, regex:<pattern>.
	Transform []string `yaml:"transform,omitempty" json:"transform,omitempty"`
}

// Pagination finds the next listing page: exactly one of Next, Param or
// Cursor.
type Pagination struct {
	Next     *NextLink  `yaml:"next,omitempty" json:"next,omitempty"`
	Param    *PageParam `yaml:"param,omitempty" json:"param,omitempty"`
	Cursor   *Cursor    `yaml:"cursor,omitempty" json:"cursor,omitempty"`
	MaxPages int        `yaml:"max_pages,omitempty" json:"max_pages,omitempty"`
}

// NextLink is a next-page link selector.
type NextLink struct {
	CSS  string `yaml:"css" json:"css"`
	Attr string `yaml:"attr,omitempty" json:"attr,omitempty"`
}

// PageParam counts a query parameter up from From until a page has no
// items (or To).
type PageParam struct {
	Name string `yaml:"name" json:"name"`
	From int    `yaml:"from,omitempty" json:"from,omitempty"`
	To   int    `yaml:"to,omitempty" json:"to,omitempty"`
	Step int    `yaml:"step,omitempty" json:"step,omitempty"`
}

// Cursor reads the next cursor from a JSON response and sends it as a
// query parameter; an empty or missing cursor ends the listing.
type Cursor struct {
	Path  string `yaml:"path" json:"path"`
	Param string `yaml:"param" json:"param"`
}

// Schedule runs the job on a cron expression in a recorded time zone.
type Schedule struct {
	Cron     string `yaml:"cron" json:"cron"`
	Timezone string `yaml:"timezone,omitempty" json:"timezone,omitempty"`
	CatchUp  string `yaml:"catch_up,omitempty" json:"catch_up,omitempty"`
	// CatchUpCap bounds the runs started by catch_up: all.
	CatchUpCap int  `yaml:"catch_up_cap,omitempty" json:"catch_up_cap,omitempty"`
	Paused     bool `yaml:"paused,omitempty" json:"paused,omitempty"`
}

// Politeness overrides the fleet's per-domain defaults. The budget holds
// across every agent crawling the domain.
type Politeness struct {
	// Concurrency is the most requests in flight to one domain.
	Concurrency int `yaml:"concurrency,omitempty" json:"concurrency,omitempty"`
	// Delay is the mean gap between two requests to one domain (its rate
	// is 1/Delay); a robots.txt crawl-delay that is longer wins.
	Delay string `yaml:"delay,omitempty" json:"delay,omitempty"`
	// Jitter spreads each gap uniformly over Delay × (1 ± Jitter).
	Jitter *float64 `yaml:"jitter,omitempty" json:"jitter,omitempty"`
	// Retries is the number of retries of a failed page.
	Retries *int `yaml:"retries,omitempty" json:"retries,omitempty"`
	// BackoffBase and BackoffCap bound the full-jitter exponential backoff.
	BackoffBase string `yaml:"backoff_base,omitempty" json:"backoff_base,omitempty"`
	BackoffCap  string `yaml:"backoff_cap,omitempty" json:"backoff_cap,omitempty"`
	// AutoThrottle slows a domain down when its response times rise.
	AutoThrottle *bool `yaml:"autothrottle,omitempty" json:"autothrottle,omitempty"`

	DelayD       time.Duration `yaml:"-" json:"-"`
	BackoffBaseD time.Duration `yaml:"-" json:"-"`
	BackoffCapD  time.Duration `yaml:"-" json:"-"`
}

// Range is an inclusive count range.
type Range struct {
	Min int `yaml:"min" json:"min"`
	Max int `yaml:"max" json:"max"`
}

// Limits stop a run cleanly, saying which one was reached.
type Limits struct {
	Pages       int    `yaml:"pages,omitempty" json:"pages,omitempty"`
	Bytes       string `yaml:"bytes,omitempty" json:"bytes,omitempty"`
	PageBytes   string `yaml:"page_bytes,omitempty" json:"page_bytes,omitempty"`
	RunTime     string `yaml:"run_time,omitempty" json:"run_time,omitempty"`
	Concurrency int    `yaml:"concurrency,omitempty" json:"concurrency,omitempty"`

	BytesN     int64         `yaml:"-" json:"-"`
	PageBytesN int64         `yaml:"-" json:"-"`
	RunTimeD   time.Duration `yaml:"-" json:"-"`
}

// Alarms tune the job's alarm rules.
type Alarms struct {
	// DropShare raises a sudden-drop alarm when a run's items fall below
	// this share of the trailing median of recent runs.
	DropShare *float64 `yaml:"drop_share,omitempty" json:"drop_share,omitempty"`
	// ErrorRate raises an alarm when failed pages exceed this share.
	ErrorRate *float64 `yaml:"error_rate,omitempty" json:"error_rate,omitempty"`
	// Webhook receives alarms (through the egress guard).
	Webhook string `yaml:"webhook,omitempty" json:"webhook,omitempty"`
}

// Defaults, applied by Parse where a file is silent.
const (
	DefaultConcurrency       = 1
	DefaultDelay             = time.Second
	DefaultJitter            = 0.5
	DefaultRetries           = 3
	DefaultBackoffBase       = time.Second
	DefaultBackoffCap        = time.Minute
	DefaultPages             = 1000
	DefaultBytes       int64 = 100 << 20
	DefaultPageBytes   int64 = 5 << 20
	DefaultRunTime           = 30 * time.Minute
	DefaultRunConc           = 4
	DefaultDropShare         = 0.5
	DefaultErrorRate         = 0.2
	DefaultCatchUpCap        = 10
	DefaultTimezone          = "UTC"
)
