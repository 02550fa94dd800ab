package engine

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/template"
	"text/template/parse"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/andybalholm/cascadia"
	"github.com/tidwall/gjson"
	"golang.org/x/net/html"

	"github.com/fleetwright/fleetwright/modules/platform/spec"
)

// data is what a template sees.
type data map[string]any

// tpl is one compiled template, or the literal text of one without
// actions (most are: a path, a header name), which costs nothing to run.
type tpl struct {
	t   *template.Template
	lit string
}

func newTpl(name, text string) (*tpl, error) {
	t, err := spec.Template(name, text)
	if err != nil {
		return nil, err
	}
	for _, n := range t.Tree.Root.Nodes {
		if n.Type() != parse.NodeText {
			return &tpl{t: t}, nil
		}
	}
	return &tpl{lit: text}, nil
}

func render(t *tpl, d data) (string, error) {
	if t == nil {
		return "", nil
	}
	if t.t == nil {
		return t.lit, nil
	}
	var b strings.Builder
	if err := t.t.Execute(&b, d); err != nil {
		// The error names the template and the variable, never a value.
		return "", fmt.Errorf("template %s: %w", t.t.Name(), err)
	}
	return b.String(), nil
}

// tmpl compiles an optional template (nil when text is empty).
func tmpl(name, text string) (*tpl, error) {
	if text == "" {
		return nil, nil
	}
	return newTpl(name, text)
}

type kv struct {
	k string
	v *tpl
}

func kvs(name string, m map[string]string) ([]kv, error) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]kv, 0, len(m))
	for _, k := range keys {
		t, err := newTpl(name+"."+k, m[k])
		if err != nil {
			return nil, err
		}
		out = append(out, kv{k, t})
	}
	return out, nil
}

// request is a compiled spec.Request.
type request struct {
	name     string
	method   string
	url      *tpl
	query    []kv
	headers  []kv
	form     []kv
	json     *tpl
	body     *tpl
	ctype    string
	htmlForm bool
	fixed    string // the resolved URL when it has no variables (fix)
}

func compileRequest(name string, r spec.Request) (*request, error) {
	c := &request{name: name, method: r.Method, ctype: r.ContentType}
	var err error
	if c.url, err = newTpl(name+".url", r.URL); err != nil {
		return nil, err
	}
	if c.query, err = kvs(name+".query", r.Query); err != nil {
		return nil, err
	}
	if c.headers, err = kvs(name+".headers", r.Headers); err != nil {
		return nil, err
	}
	if c.form, err = kvs(name+".form", r.Form); err != nil {
		return nil, err
	}
	if c.json, err = tmpl(name+".json", r.JSON); err != nil {
		return nil, err
	}
	if c.body, err = tmpl(name+".body", r.Body); err != nil {
		return nil, err
	}
	c.htmlForm = len(r.Form) > 0
	if c.json != nil {
		c.ctype = "application/json"
	}
	if c.htmlForm {
		c.ctype = "application/x-www-form-urlencoded"
	}
	return c, nil
}

// fix resolves a URL without variables once: a booking then costs no URL
// parsing of ours. An origin outside allowed leaves it to be refused when
// the request is built.
func (r *request) fix(base *url.URL, allowed func(*url.URL) error) {
	if r.url.t != nil || len(r.query) > 0 {
		return
	}
	u, err := url.Parse(r.url.lit)
	if err != nil {
		return
	}
	u = base.ResolveReference(u)
	if allowed(u) == nil {
		r.fixed = u.String()
	}
}

// target renders the request's URL against base.
func (r *request) target(base *url.URL, d data) (*url.URL, error) {
	raw, err := render(r.url, d)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: the URL does not parse", r.name)
	}
	u = base.ResolveReference(u)
	if len(r.query) > 0 {
		q := u.Query()
		for _, p := range r.query {
			v, err := render(p.v, d)
			if err != nil {
				return nil, err
			}
			q.Set(p.k, v)
		}
		u.RawQuery = q.Encode()
	}
	return u, nil
}

// payload renders the request's body.
func (r *request) payload(d data) ([]byte, error) {
	switch {
	case r.htmlForm:
		f := url.Values{}
		for _, p := range r.form {
			v, err := render(p.v, d)
			if err != nil {
				return nil, err
			}
			f.Set(p.k, v)
		}
		return []byte(f.Encode()), nil
	case r.json != nil:
		s, err := render(r.json, d)
		return []byte(s), err
	case r.body != nil:
		s, err := render(r.body, d)
		return []byte(s), err
	}
	return nil, nil
}

// answer is one response as the rules read it.
type answer struct {
	status  int
	url     *url.URL
	header  http.Header
	cookies func(name string) string
	body    []byte

	docOnce sync.Once
	doc     *goquery.Document
}

func (a *answer) html() *goquery.Document {
	a.docOnce.Do(func() {
		d, err := goquery.NewDocumentFromReader(bytes.NewReader(a.body))
		if err != nil {
			// The HTML parser reads anything; an error is a reader's.
			d = goquery.NewDocumentFromNode(&html.Node{Type: html.DocumentNode})
		}
		a.doc = d
	})
	return a.doc
}

func selText(s *goquery.Selection, attr string) (string, bool) {
	if s.Length() == 0 {
		return "", false
	}
	if attr != "" {
		return s.Attr(attr)
	}
	return strings.TrimSpace(s.Text()), true
}

// match is a compiled spec.Match.
type match struct {
	equals   *tpl
	contains *tpl
	re       *regexp.Regexp
	exists   *bool
}

func compileMatch(name string, m spec.Match) (match, error) {
	var c match
	var err error
	if m.Equals != nil {
		// An empty equals compares with the empty string.
		if c.equals, err = newTpl(name+".equals", *m.Equals); err != nil {
			return c, err
		}
	}
	if c.contains, err = tmpl(name+".contains", m.Contains); err != nil {
		return c, err
	}
	if m.Matches != "" {
		if c.re, err = regexp.Compile(m.Matches); err != nil {
			return c, fmt.Errorf("%s.matches: %w", name, err)
		}
	}
	c.exists = m.Exists
	return c, nil
}

func (m match) test(v string, present bool, d data) bool {
	switch {
	case m.exists != nil:
		return present == *m.exists
	case !present:
		return false
	case m.equals != nil:
		want, err := render(m.equals, d)
		return err == nil && v == want
	case m.contains != nil:
		want, err := render(m.contains, d)
		return err == nil && strings.Contains(v, want)
	case m.re != nil:
		return m.re.MatchString(v)
	}
	return present
}

// cond is a compiled spec.Cond: every test it has must hold.
type cond struct {
	status  []int
	urlPath string
	header  string
	headerM *match
	json    string
	jsonM   *match
	html    cascadia.Selector
	attr    string
	htmlM   *match
	bodyM   *match
}

func compileCond(name string, c *spec.Cond) (*cond, error) {
	if c == nil {
		return nil, nil
	}
	out := &cond{status: c.Status, urlPath: c.URLPath}
	if c.Header != nil {
		m, err := compileMatch(name+".header", c.Header.Match)
		if err != nil {
			return nil, err
		}
		out.header, out.headerM = c.Header.Name, &m
	}
	if c.JSON != nil {
		m, err := compileMatch(name+".json", c.JSON.Match)
		if err != nil {
			return nil, err
		}
		out.json, out.jsonM = c.JSON.Path, &m
	}
	if c.HTML != nil {
		m, err := compileMatch(name+".html", c.HTML.Match)
		if err != nil {
			return nil, err
		}
		sel, err := cascadia.Compile(c.HTML.Selector)
		if err != nil {
			return nil, fmt.Errorf("%s.html.selector: %w", name, err)
		}
		out.html, out.attr, out.htmlM = sel, c.HTML.Attr, &m
	}
	if c.Body != nil {
		m, err := compileMatch(name+".body", *c.Body)
		if err != nil {
			return nil, err
		}
		out.bodyM = &m
	}
	return out, nil
}

func (c *cond) holds(a *answer, d data) bool {
	if c == nil {
		return false
	}
	if len(c.status) > 0 && !slices.Contains(c.status, a.status) {
		return false
	}
	if c.urlPath != "" && (a.url == nil || a.url.Path != c.urlPath) {
		return false
	}
	if c.headerM != nil {
		vs, ok := a.header[http.CanonicalHeaderKey(c.header)]
		v := ""
		if ok && len(vs) > 0 {
			v = vs[0]
		}
		if !c.headerM.test(v, ok, d) {
			return false
		}
	}
	if c.jsonM != nil {
		r := gjson.GetBytes(a.body, c.json)
		if !c.jsonM.test(r.String(), r.Exists(), d) {
			return false
		}
	}
	if c.htmlM != nil {
		v, ok := selText(a.html().FindMatcher(c.html).First(), c.attr)
		if !c.htmlM.test(v, ok, d) {
			return false
		}
	}
	if c.bodyM != nil && !c.bodyM.test(string(a.body), true, d) {
		return false
	}
	return true
}

func compileConds(name string, cs []spec.Cond) ([]*cond, error) {
	out := make([]*cond, 0, len(cs))
	for i := range cs {
		c, err := compileCond(fmt.Sprintf("%s[%d]", name, i), &cs[i])
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// extractor is a compiled spec.Extractor.
type extractor struct {
	name string
	desc string // where, for errors ("json csrf_token")
	src  spec.Extractor
	sel  cascadia.Selector
	re   *regexp.Regexp
}

func compileExtractor(name string, e spec.Extractor) (extractor, error) {
	x := extractor{name: name, src: e}
	var err error
	switch {
	case e.JSON != "":
		x.desc = "json " + e.JSON
	case e.HTML != "":
		x.desc = "html " + e.HTML
		if x.sel, err = cascadia.Compile(e.HTML); err != nil {
			return x, fmt.Errorf("extract %s: %w", name, err)
		}
	case e.Header != "":
		x.desc = "header " + e.Header
	case e.Cookie != "":
		x.desc = "cookie " + e.Cookie
	}
	if e.Regexp != "" {
		if x.re, err = regexp.Compile(e.Regexp); err != nil {
			return x, fmt.Errorf("extract %s: %w", name, err)
		}
		if x.desc == "" {
			x.desc = "regexp"
		} else {
			x.desc += " and its regexp"
		}
	}
	return x, nil
}

func compileExtracts(m map[string]spec.Extractor) ([]extractor, error) {
	out := make([]extractor, 0, len(m))
	for name, e := range m {
		x, err := compileExtractor(name, e)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	slices.SortFunc(out, func(a, b extractor) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

func (x extractor) value(a *answer) string {
	v, sourced := "", true
	switch {
	case x.src.JSON != "":
		v = gjson.GetBytes(a.body, x.src.JSON).String()
	case x.sel != nil:
		v, _ = selText(a.html().FindMatcher(x.sel).First(), x.src.Attr)
	case x.src.Header != "":
		v = a.header.Get(x.src.Header)
	case x.src.Cookie != "":
		if a.cookies != nil {
			v = a.cookies(x.src.Cookie)
		}
	default:
		sourced = false
	}
	if x.re == nil {
		return v
	}
	var m []string
	if sourced {
		m = x.re.FindStringSubmatch(v)
	} else {
		m = x.re.FindStringSubmatch(string(a.body))
	}
	switch {
	case m == nil:
		return ""
	case len(m) > 1:
		return m[1]
	}
	return m[0]
}

// extract reads every value into vars; a required one that came back
// empty is named (never its value: it may be a token).
func extract(xs []extractor, a *answer, vars map[string]string) error {
	for _, x := range xs {
		v := x.value(a)
		if v == "" && !x.src.Optional {
			return fmt.Errorf("value %s (%s) came back empty: the answer's shape changed", x.name, x.desc)
		}
		vars[x.name] = v
	}
	return nil
}

// field is a compiled spec.Field.
type field struct {
	name string
	f    spec.Field
	loc  *time.Location
}

func compileField(name string, f *spec.Field) (*field, error) {
	if f == nil {
		return nil, nil
	}
	c := &field{name: name, f: *f}
	if f.Zone != "" {
		loc, err := time.LoadLocation(f.Zone)
		if err != nil {
			return nil, fmt.Errorf("%s.zone: %w", name, err)
		}
		c.loc = loc
	}
	return c, nil
}

func (f *field) where() string {
	if f.f.Path != "" {
		return f.f.Path
	}
	return strings.Join(f.f.Paths, ", ")
}

// errField names a field whose value came back empty or unreadable.
type errField struct {
	field, path, what string
}

func (e *errField) Error() string {
	return fmt.Sprintf("field %s (path %s) %s: the answer's shape changed", e.field, e.path, e.what)
}

func (f *field) missing(what string) error { return &errField{f.name, f.where(), what} }

// text reads a text value ("" and no error when absent and not required).
func (f *field) text(item gjson.Result) (string, error) {
	if f == nil {
		return "", nil
	}
	var v string
	if len(f.f.Paths) > 0 {
		parts := make([]string, 0, len(f.f.Paths))
		for _, p := range f.f.Paths {
			if s := strings.TrimSpace(item.Get(p).String()); s != "" {
				parts = append(parts, s)
			}
		}
		v = strings.Join(parts, f.f.Join)
	} else {
		v = item.Get(f.f.Path).String()
	}
	if v == "" && f.f.Required {
		return "", f.missing("came back empty")
	}
	return v, nil
}

func (f *field) number(item gjson.Result) (float64, bool, error) {
	if f == nil {
		return 0, false, nil
	}
	r := item.Get(f.f.Path)
	if !r.Exists() || r.Type == gjson.Null || (r.Type == gjson.String && r.Str == "") {
		if f.f.Required {
			return 0, false, f.missing("came back empty")
		}
		return 0, false, nil
	}
	switch r.Type {
	case gjson.Number:
		return r.Num, true, nil
	case gjson.String:
		n, err := strconv.ParseFloat(strings.TrimSpace(r.Str), 64)
		if err == nil {
			return n, true, nil
		}
	}
	return 0, false, f.missing("is not a number")
}

func (f *field) time(item gjson.Result) (time.Time, error) {
	if f == nil {
		return time.Time{}, nil
	}
	r := item.Get(f.f.Path)
	if !r.Exists() || r.Type == gjson.Null || (r.Type == gjson.String && r.Str == "") {
		if f.f.Required {
			return time.Time{}, f.missing("came back empty")
		}
		return time.Time{}, nil
	}
	switch f.f.Time {
	case spec.TimeEpochS, spec.TimeEpochMS:
		n, ok, err := f.number(item)
		if err != nil || !ok {
			return time.Time{}, f.missing("is not an epoch time")
		}
		if f.f.Time == spec.TimeEpochS {
			sec, frac := math.Modf(n)
			return time.Unix(int64(sec), int64(frac*1e9)).UTC(), nil
		}
		return time.UnixMilli(int64(n)).UTC(), nil
	case spec.TimeLayout:
		loc := f.loc
		if f.f.ZonePath != "" {
			z := item.Get(f.f.ZonePath).String()
			l, err := zone(z)
			if err != nil {
				return time.Time{}, &errField{f.name, f.f.ZonePath, fmt.Sprintf("names no time zone (%q)", z)}
			}
			loc = l
		}
		v := r.String()
		if f.f.ZoneInValue {
			rest, z, ok := cutLast(v, " ")
			l, err := zone(z)
			if !ok || err != nil {
				return time.Time{}, f.missing(fmt.Sprintf("ends with no time zone name (%q)", z))
			}
			v, loc = rest, l
		}
		if loc == nil {
			loc = time.UTC
		}
		t, err := time.ParseInLocation(f.f.Layout, v, loc)
		if err != nil {
			return time.Time{}, f.missing("does not read as " + f.f.Layout)
		}
		return t, nil
	}
	t, err := time.Parse(time.RFC3339Nano, r.String())
	if err != nil {
		return time.Time{}, f.missing("is not an RFC 3339 time")
	}
	return t, nil
}

// cutLast cuts s around the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return strings.TrimSpace(s[:i]), strings.TrimSpace(s[i+len(sep):]), true
	}
	return s, "", false
}

var zones sync.Map // name → *time.Location

func zone(name string) (*time.Location, error) {
	if name == "" {
		return nil, fmt.Errorf("no zone")
	}
	if l, ok := zones.Load(name); ok {
		return l.(*time.Location), nil
	}
	l, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	zones.Store(name, l)
	return l, nil
}

// Unit conversions to the claim engine's units (pounds, miles, cents).
const (
	lbPerKg = 2.20462262185
	miPerKm = 0.621371192237
)

func weightLbs(v float64, unit string) int {
	switch unit {
	case "kg":
		v *= lbPerKg
	case "t":
		v *= 1000 * lbPerKg
	}
	return int(math.Round(v))
}

func distanceMiles(v float64, unit string) float64 {
	if unit == "km" {
		return v * miPerKm
	}
	return v
}

func rateCents(v float64, unit string, miles float64) int64 {
	switch unit {
	case "usd":
		v *= 100
	case "usd_per_mile":
		v *= 100 * miles
	case "cents_per_mile":
		v *= miles
	case "usd_per_km":
		v *= 100 * miles / miPerKm
	case "cents_per_km":
		v *= miles / miPerKm
	}
	return int64(math.Round(v))
}
