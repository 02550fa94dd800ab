package spec

import (
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/andybalholm/cascadia"
	"github.com/theory/jsonpath"
)

type validator struct {
	loc  *locator
	opts Options
	errs []FieldError
}

func (v *validator) add(path, format string, args ...any) {
	at := v.loc.find(path)
	v.errs = append(v.errs, FieldError{Path: path, Line: at.line, Column: at.col, Msg: fmt.Sprintf(format, args...)})
}

// NameRE is the form of a job's or a proxy pool's name.
var NameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

var (
	nameRe        = NameRE
	placeholderRe = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_]*)\}`)
	domainRe      = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
)

// Transforms are the light transforms a field may apply.
var Transforms = []string{"trim", "lower", "upper", "collapse_space", "number", "integer", "absolute_url", "regex:<pattern>"}

// maxStartURLs bounds a template's expansion.
const maxStartURLs = 100000

func (v *validator) job(j *Job) {
	switch {
	case j.Version == 0:
		v.add("version", "missing; write `version: %d` as the first line", Version)
	case j.Version != Version:
		v.add("version", "version %d is not known; this build reads version %d", j.Version, Version)
	}
	if j.Name == "" {
		v.add("name", "missing; a job needs a name (lower case letters, digits, '.', '_', '-')")
	} else if !nameRe.MatchString(j.Name) {
		v.add("name", "%q: use 1–63 lower case letters, digits, '.', '_' or '-', starting with a letter or digit", j.Name)
	}
	if len(j.AllowedDomains) == 0 {
		v.add("allowed_domains", "missing; list the domains this job may fetch from (each admits its subdomains)")
	}
	for i, d := range j.AllowedDomains {
		if _, err := netip.ParseAddr(d); err != nil && !domainRe.MatchString(d) {
			v.add(fmt.Sprintf("allowed_domains[%d]", i), "%q is not a lower-case host name or IP address", d)
		}
	}
	v.start(j)
	if j.Render == "" {
		j.Render = RenderHTTP
	}
	if j.Render != RenderHTTP && j.Render != RenderBrowser {
		v.add("render", "%q: use http or browser", j.Render)
	}
	v.extract(j)
	if f := j.Follow; f != nil {
		if f.Attr == "" {
			f.Attr = "href"
		}
		v.css("follow.css", f.CSS, true)
		if j.Extract.Format == FormatJSON {
			v.add("follow", "follow reads links with CSS selectors; a json extract has none (use pagination.cursor)")
		}
		if f.Limit < 0 {
			v.add("follow.limit", "must be 0 (no limit) or more")
		}
	}
	v.pagination(j)
	if len(j.ItemKey) == 0 {
		v.add("item_key", "missing; name the field (or fields) that identify an item, e.g. `item_key: [url]`")
	}
	for i, k := range j.ItemKey {
		if _, ok := j.Extract.Fields[k]; !ok {
			v.add(fmt.Sprintf("item_key[%d]", i), "%q is not one of extract.fields (%s)", k, strings.Join(j.Extract.Order, ", "))
		}
	}
	v.schedule(j)
	v.politeness(j)
	if j.ProxyPool != "" && !nameRe.MatchString(j.ProxyPool) {
		v.add("proxy_pool", "%q is not a pool name (lower case letters, digits, '.', '_', '-')", j.ProxyPool)
	}
	if r := j.ExpectedItems; r != nil {
		if r.Min < 0 {
			v.add("expected_items.min", "must be 0 or more")
		}
		if r.Max < r.Min {
			v.add("expected_items.max", "%d is below min %d", r.Max, r.Min)
		}
	}
	v.limits(j)
	v.alarms(j)
}

func (v *validator) start(j *Job) {
	if len(j.Start.URLs) == 0 && len(j.Start.Templates) == 0 {
		v.add("start", "missing; give start.urls or start.templates")
	}
	for i, u := range j.Start.URLs {
		v.url(fmt.Sprintf("start.urls[%d]", i), u, j.AllowedDomains)
	}
	for i, t := range j.Start.Templates {
		p := fmt.Sprintf("start.templates[%d]", i)
		if t.URL == "" {
			v.add(p+".url", "missing")
			continue
		}
		used := map[string]bool{}
		for _, m := range placeholderRe.FindAllStringSubmatch(t.URL, -1) {
			used[m[1]] = true
			if _, ok := t.Params[m[1]]; !ok {
				v.add(p+".url", "placeholder {%s} has no entry in params", m[1])
			}
		}
		n := 1
		for name, prm := range t.Params {
			pp := p + ".params." + name
			if !used[name] {
				v.add(pp, "parameter %q is not used in the URL (write {%s} in it)", name, name)
			}
			count := len(prm.Values)
			switch {
			case len(prm.Values) > 0 && (prm.From != nil || prm.To != nil):
				v.add(pp, "give either a list of values or from/to, not both")
			case len(prm.Values) == 0 && (prm.From == nil || prm.To == nil):
				v.add(pp, "give a list of values, or from and to")
			case prm.From != nil:
				if prm.Step == 0 {
					prm.Step = 1
					t.Params[name] = prm
				}
				if prm.Step < 0 {
					v.add(pp+".step", "must be positive")
				} else if *prm.To < *prm.From {
					v.add(pp+".to", "%d is below from %d", *prm.To, *prm.From)
				} else {
					count = (*prm.To-*prm.From)/prm.Step + 1
				}
			}
			n *= max(count, 1)
		}
		if n > maxStartURLs {
			v.add(p+".params", "expands to %d URLs; at most %d", n, maxStartURLs)
		} else if len(v.errs) == 0 {
			for _, u := range ExpandTemplate(t) {
				v.url(p+".url", u, j.AllowedDomains)
				break
			}
		}
	}
}

// ExpandTemplate lists a template's URLs, parameters in name order, values
// query-escaped.
func ExpandTemplate(t Template) []string {
	names := make([]string, 0, len(t.Params))
	for n := range t.Params {
		names = append(names, n)
	}
	slices.Sort(names)
	out := []string{t.URL}
	for _, n := range names {
		p := t.Params[n]
		vals := p.Values
		if len(vals) == 0 && p.From != nil && p.To != nil {
			step := max(p.Step, 1)
			for i := *p.From; i <= *p.To; i += step {
				vals = append(vals, strconv.Itoa(i))
			}
		}
		var next []string
		for _, u := range out {
			for _, val := range vals {
				next = append(next, strings.ReplaceAll(u, "{"+n+"}", url.QueryEscape(val)))
			}
		}
		out = next
	}
	return out
}

// StartURLs lists every start URL of a job.
func (j *Job) StartURLs() []string {
	out := append([]string(nil), j.Start.URLs...)
	for _, t := range j.Start.Templates {
		out = append(out, ExpandTemplate(t)...)
	}
	return out
}

// DomainAllowed reports whether host is one of the allowed domains or a
// subdomain of one.
func (j *Job) DomainAllowed(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, d := range j.AllowedDomains {
		if host == d || strings.HasSuffix(host, "."+d) {
			return true
		}
	}
	return false
}

func (v *validator) url(path, raw string, domains []string) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		v.add(path, "%q is not an absolute URL", raw)
		return
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		v.add(path, "%q: only http and https URLs are crawled", raw)
		return
	}
	if u.User != nil {
		v.add(path, "credentials in a URL are not allowed (use the proxy pool or account settings)")
	}
	if len(domains) > 0 && !(&Job{AllowedDomains: domains}).DomainAllowed(u.Hostname()) {
		v.add(path, "host %q is not in allowed_domains (%s)", u.Hostname(), strings.Join(domains, ", "))
	}
}

func (v *validator) css(path, sel string, required bool) {
	if sel == "" {
		if required {
			v.add(path, "missing; give a CSS selector")
		}
		return
	}
	if _, err := cascadia.ParseGroup(sel); err != nil {
		v.add(path, "%q is not a valid CSS selector: %v", sel, err)
	}
}

func (v *validator) jsonPath(path, p string, required bool) {
	if p == "" {
		if required {
			v.add(path, "missing; give a JSONPath (RFC 9535), e.g. $.items[*]")
		}
		return
	}
	if _, err := jsonpath.Parse(p); err != nil {
		v.add(path, "%q is not a valid JSONPath (RFC 9535): %v", p, err)
	}
}

func (v *validator) extract(j *Job) {
	e := &j.Extract
	if e.Format == "" {
		e.Format = FormatHTML
	}
	switch e.Format {
	case FormatHTML:
		v.css("extract.items", e.Items, false)
	case FormatJSON:
		v.jsonPath("extract.items", e.Items, false)
		if j.Render == RenderBrowser {
			v.add("extract.format", "a browser renders HTML; use format html, or render http for a JSON API")
		}
	default:
		v.add("extract.format", "%q: use html or json", e.Format)
	}
	if len(e.Fields) == 0 {
		v.add("extract.fields", "missing; name at least one field to extract")
	}
	for _, name := range e.Order {
		f := e.Fields[name]
		p := "extract.fields." + name
		if !nameRe.MatchString(name) {
			v.add(p, "field name %q: use lower case letters, digits, '.', '_' or '-'", name)
		}
		switch e.Format {
		case FormatHTML:
			if f.Path != "" {
				v.add(p+".path", "path is for json extracts; use css (and attr) in an html extract")
			}
			v.css(p+".css", f.CSS, false)
		case FormatJSON:
			if f.CSS != "" || f.Attr != "" {
				v.add(p+".css", "css and attr are for html extracts; use path in a json extract")
			}
			v.jsonPath(p+".path", f.Path, true)
		}
		for i, t := range f.Transform {
			tp := fmt.Sprintf("%s.transform[%d]", p, i)
			if pat, ok := strings.CutPrefix(t, "regex:"); ok {
				re, err := regexp.Compile(pat)
				if err != nil {
					v.add(tp, "regex %q does not compile: %v", pat, err)
				} else if re.NumSubexp() > 1 {
					v.add(tp, "regex %q: at most one capture group (its match is the value)", pat)
				}
				continue
			}
			if !slices.Contains(Transforms, t) {
				v.add(tp, "unknown transform %q; known: %s", t, strings.Join(Transforms, ", "))
			}
		}
	}
}

func (v *validator) pagination(j *Job) {
	pg := j.Pagination
	if pg == nil {
		return
	}
	n := 0
	if pg.Next != nil {
		n++
		if pg.Next.Attr == "" {
			pg.Next.Attr = "href"
		}
		v.css("pagination.next.css", pg.Next.CSS, true)
		if j.Extract.Format == FormatJSON {
			v.add("pagination.next", "a next-link selector reads HTML; a json extract uses pagination.cursor or pagination.param")
		}
	}
	if pg.Param != nil {
		n++
		if pg.Param.Name == "" {
			v.add("pagination.param.name", "missing; the query parameter that holds the page number")
		}
		if pg.Param.Step == 0 {
			pg.Param.Step = 1
		}
		if pg.Param.From == 0 {
			pg.Param.From = 1
		}
		if pg.Param.To != 0 && pg.Param.To < pg.Param.From {
			v.add("pagination.param.to", "%d is below from %d", pg.Param.To, pg.Param.From)
		}
		if pg.Param.Step < 0 {
			v.add("pagination.param.step", "must be positive")
		}
	}
	if pg.Cursor != nil {
		n++
		v.jsonPath("pagination.cursor.path", pg.Cursor.Path, true)
		if pg.Cursor.Param == "" {
			v.add("pagination.cursor.param", "missing; the query parameter the cursor is sent in")
		}
		if j.Extract.Format != FormatJSON {
			v.add("pagination.cursor", "a cursor is read from JSON; use extract.format json")
		}
	}
	if n != 1 {
		v.add("pagination", "give exactly one of next, param or cursor (found %d)", n)
	}
	if pg.MaxPages < 0 {
		v.add("pagination.max_pages", "must be 0 (the job's page limit) or more")
	}
}

func (v *validator) schedule(j *Job) {
	s := j.Schedule
	if s == nil {
		return
	}
	if s.Timezone == "" {
		s.Timezone = DefaultTimezone
	}
	if _, err := time.LoadLocation(s.Timezone); err != nil {
		v.add("schedule.timezone", "%q is not an IANA time zone (like Europe/Berlin or UTC)", s.Timezone)
	}
	if s.Cron == "" {
		v.add("schedule.cron", "missing; a cron expression with five fields (minute hour day month weekday)")
	} else if v.opts.CheckCron != nil {
		if err := v.opts.CheckCron(s.Cron, s.Timezone); err != nil {
			v.add("schedule.cron", "%q: %v", s.Cron, err)
		}
	} else if len(strings.Fields(s.Cron)) != 5 {
		v.add("schedule.cron", "%q: a cron expression has five fields (minute hour day month weekday)", s.Cron)
	}
	if s.CatchUp == "" {
		s.CatchUp = CatchUpOne
	}
	if !slices.Contains([]string{CatchUpSkip, CatchUpOne, CatchUpAll}, s.CatchUp) {
		v.add("schedule.catch_up", "%q: use skip, one or all", s.CatchUp)
	}
	if s.CatchUpCap == 0 {
		s.CatchUpCap = DefaultCatchUpCap
	}
	if s.CatchUpCap < 0 {
		v.add("schedule.catch_up_cap", "must be positive")
	}
}

func (v *validator) duration(path, s string, def, lo, hi time.Duration) time.Duration {
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		v.add(path, "%q is not a duration (like 500ms, 2s, 1m)", s)
		return def
	}
	if d < lo || d > hi {
		v.add(path, "%s is outside %s–%s", d, lo, hi)
	}
	return d
}

func (v *validator) politeness(j *Job) {
	p := &j.Politeness
	if p.Concurrency == 0 {
		p.Concurrency = DefaultConcurrency
	}
	if p.Concurrency < 1 || p.Concurrency > 64 {
		v.add("politeness.concurrency", "%d: use 1 to 64 requests in flight per domain", p.Concurrency)
	}
	p.DelayD = v.duration("politeness.delay", p.Delay, DefaultDelay, 0, time.Hour)
	if p.Jitter == nil {
		x := DefaultJitter
		p.Jitter = &x
	}
	if *p.Jitter < 0 || *p.Jitter > 1 {
		v.add("politeness.jitter", "%g: use a share from 0 to 1", *p.Jitter)
	}
	if p.Retries == nil {
		x := DefaultRetries
		p.Retries = &x
	}
	if *p.Retries < 0 || *p.Retries > 10 {
		v.add("politeness.retries", "%d: use 0 to 10", *p.Retries)
	}
	p.BackoffBaseD = v.duration("politeness.backoff_base", p.BackoffBase, DefaultBackoffBase, time.Millisecond, time.Hour)
	p.BackoffCapD = v.duration("politeness.backoff_cap", p.BackoffCap, DefaultBackoffCap, time.Millisecond, 24*time.Hour)
	if p.BackoffCapD < p.BackoffBaseD {
		v.add("politeness.backoff_cap", "%s is below backoff_base %s", p.BackoffCapD, p.BackoffBaseD)
	}
	if p.AutoThrottle == nil {
		t := true
		p.AutoThrottle = &t
	}
}

// ParseSize reads a byte size: 1024, 512KB, 5MB, 1GiB (KB = KiB = 1024).
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	num := strings.TrimRight(s, "KMGTiBkmgtib ")
	unit := strings.ToUpper(strings.TrimSpace(s[len(num):]))
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size (like 500KB, 5MB, 1GB)", s)
	}
	mult := map[string]int64{"": 1, "B": 1, "KB": 1 << 10, "KIB": 1 << 10, "K": 1 << 10, "MB": 1 << 20, "MIB": 1 << 20, "M": 1 << 20, "GB": 1 << 30, "GIB": 1 << 30, "G": 1 << 30}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("%q: unknown unit %q (use B, KB, MB or GB)", s, unit)
	}
	return n * mult, nil
}

func (v *validator) size(path, s string, def int64) int64 {
	if s == "" {
		return def
	}
	n, err := ParseSize(s)
	if err != nil {
		v.add(path, "%v", err)
		return def
	}
	if n <= 0 {
		v.add(path, "must be more than 0")
	}
	return n
}

func (v *validator) limits(j *Job) {
	l := &j.Limits
	if l.Pages == 0 {
		l.Pages = DefaultPages
	}
	if l.Pages < 0 {
		v.add("limits.pages", "must be positive")
	}
	if l.Concurrency == 0 {
		l.Concurrency = DefaultRunConc
	}
	if l.Concurrency < 1 || l.Concurrency > 256 {
		v.add("limits.concurrency", "%d: use 1 to 256 pages in flight per run", l.Concurrency)
	}
	l.BytesN = v.size("limits.bytes", l.Bytes, DefaultBytes)
	l.PageBytesN = v.size("limits.page_bytes", l.PageBytes, DefaultPageBytes)
	l.RunTimeD = v.duration("limits.run_time", l.RunTime, DefaultRunTime, time.Second, 24*time.Hour)
}

func (v *validator) alarms(j *Job) {
	a := &j.Alarms
	if a.DropShare == nil {
		x := DefaultDropShare
		a.DropShare = &x
	}
	if *a.DropShare <= 0 || *a.DropShare >= 1 {
		v.add("alarms.drop_share", "%g: use a share between 0 and 1 (0.5 = alarm below half the trailing median)", *a.DropShare)
	}
	if a.ErrorRate == nil {
		x := DefaultErrorRate
		a.ErrorRate = &x
	}
	if *a.ErrorRate <= 0 || *a.ErrorRate > 1 {
		v.add("alarms.error_rate", "%g: use a share above 0 and at most 1", *a.ErrorRate)
	}
	if a.Webhook != "" {
		u, err := url.Parse(a.Webhook)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.add("alarms.webhook", "%q is not an http(s) URL", a.Webhook)
		}
	}
}
