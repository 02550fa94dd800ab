// Package extract turns one fetched page into items, follow links and the
// next page, by a crawl job's rules: CSS selectors on HTML (goquery's
// cascadia), RFC 9535 JSONPath on JSON. It is what a crawler worker runs on
// a page, in either render mode (a browser's rendered DOM is HTML too).
package extract

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/PuerkitoBio/goquery"
	"github.com/theory/jsonpath"

	"github.com/fleetwright/fleetwright/modules/wire"
)

// Result is what a page yields.
type Result struct {
	Items   []wire.CrawlItem
	Links   []string
	Next    string
	Missing []string
}

// Page extracts from body, fetched from pageURL. kind is wire.PageListing
// (items, links and next page) or wire.PageItem (items only). Rules
// without fields extract no item.
func Page(body []byte, pageURL, kind string, r wire.CrawlRules, allowed []string) (Result, error) {
	base, err := url.Parse(pageURL)
	if err != nil {
		return Result{}, fmt.Errorf("extract: page URL: %w", err)
	}
	if r.Format == "json" {
		return pageJSON(body, base, kind, r, allowed)
	}
	return pageHTML(body, base, kind, r, allowed)
}

func pageHTML(body []byte, base *url.URL, kind string, r wire.CrawlRules, allowed []string) (Result, error) {
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(string(body)))
	if err != nil {
		return Result{}, fmt.Errorf("extract: parse HTML: %w", err)
	}
	// A <base href> changes what relative links mean.
	if href, ok := doc.Find("base[href]").First().Attr("href"); ok {
		if b, err := base.Parse(href); err == nil {
			base = b
		}
	}
	var res Result
	roots := doc.Selection
	if r.Items != "" {
		roots = doc.Find(r.Items)
	}
	if len(r.Fields) == 0 {
		// No fields: this page has no extract rules (a listing page of a
		// job that follows links), so it yields no item, not an empty one.
		roots = roots.Slice(0, 0)
	}
	roots.Each(func(_ int, root *goquery.Selection) {
		item := wire.CrawlItem{}
		for _, f := range r.Fields {
			sel := root
			if f.CSS != "" {
				sel = root.Find(f.CSS)
			}
			var vals []any
			sel.EachWithBreak(func(_ int, s *goquery.Selection) bool {
				var raw string
				if f.Attr != "" {
					v, ok := s.Attr(f.Attr)
					if !ok {
						return true
					}
					raw = v
				} else {
					raw = s.Text()
				}
				if v, ok := Transform(raw, f.Transform, base); ok {
					vals = append(vals, v)
				}
				return f.All
			})
			if !add(item, f, vals) && f.Required {
				res.Missing = append(res.Missing, f.Name)
				return
			}
		}
		if missingRequired(item, r.Fields) {
			return
		}
		res.Items = append(res.Items, item)
	})
	if kind != wire.PageListing {
		return res, nil
	}
	if r.FollowCSS != "" {
		attr := or(r.FollowAttr, "href")
		seen := map[string]bool{}
		doc.Find(r.FollowCSS).EachWithBreak(func(_ int, s *goquery.Selection) bool {
			if u, ok := link(s, attr, base, allowed); ok && !seen[u] {
				seen[u] = true
				res.Links = append(res.Links, u)
			}
			return r.FollowLimit == 0 || len(res.Links) < r.FollowLimit
		})
	}
	if r.NextCSS != "" {
		if u, ok := link(doc.Find(r.NextCSS).First(), or(r.NextAttr, "href"), base, allowed); ok {
			res.Next = u
		}
	}
	return res, nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// add stores a field's values; it reports whether anything matched.
func add(item wire.CrawlItem, f wire.CrawlField, vals []any) bool {
	if len(vals) == 0 {
		if f.All {
			item[f.Name] = []any{}
		}
		return false
	}
	if f.All {
		item[f.Name] = vals
	} else {
		item[f.Name] = vals[0]
	}
	return true
}

func missingRequired(item wire.CrawlItem, fields []wire.CrawlField) bool {
	for _, f := range fields {
		if !f.Required {
			continue
		}
		v, ok := item[f.Name]
		if !ok {
			return true
		}
		if l, isList := v.([]any); isList && len(l) == 0 {
			return true
		}
	}
	return false
}

// link resolves an element's link attribute; only http(s) links inside the
// allowed domains count.
func link(s *goquery.Selection, attr string, base *url.URL, allowed []string) (string, bool) {
	if s.Length() == 0 {
		return "", false
	}
	v, ok := s.Attr(attr)
	if !ok || strings.TrimSpace(v) == "" {
		return "", false
	}
	u, err := base.Parse(strings.TrimSpace(v))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return "", false
	}
	u.Fragment = ""
	if !DomainAllowed(allowed, u.Hostname()) {
		return "", false
	}
	return u.String(), true
}

// DomainAllowed reports whether host is one of domains or a subdomain of one.
func DomainAllowed(domains []string, host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, d := range domains {
		if host == d || strings.HasSuffix(host, "."+d) {
			return true
		}
	}
	return false
}

func pageJSON(body []byte, base *url.URL, kind string, r wire.CrawlRules, allowed []string) (Result, error) {
	var doc any
	if err := json.Unmarshal(body, &doc); err != nil {
		return Result{}, fmt.Errorf("extract: parse JSON: %w", err)
	}
	var res Result
	roots := []any{doc}
	if r.Items != "" {
		p, err := jsonpath.Parse(r.Items)
		if err != nil {
			return Result{}, fmt.Errorf("extract: items path: %w", err)
		}
		roots = p.Select(doc)
	}
	if len(r.Fields) == 0 {
		roots = nil // no extract rules for this page (see pageHTML)
	}
	paths := map[string]*jsonpath.Path{}
	for _, f := range r.Fields {
		p, err := jsonpath.Parse(f.Path)
		if err != nil {
			return Result{}, fmt.Errorf("extract: field %s: %w", f.Name, err)
		}
		paths[f.Name] = p
	}
	for _, root := range roots {
		item := wire.CrawlItem{}
		dropped := false
		for _, f := range r.Fields {
			var vals []any
			for _, n := range paths[f.Name].Select(root) {
				if n == nil {
					continue
				}
				raw, isString := n.(string)
				if !isString {
					if len(f.Transform) == 0 {
						vals = append(vals, n)
						if !f.All {
							break
						}
						continue
					}
					raw = fmt.Sprint(n)
				}
				if v, ok := Transform(raw, f.Transform, base); ok {
					vals = append(vals, v)
				}
				if !f.All && len(vals) > 0 {
					break
				}
			}
			if !add(item, f, vals) && f.Required {
				res.Missing = append(res.Missing, f.Name)
				dropped = true
				break
			}
		}
		if !dropped && !missingRequired(item, r.Fields) {
			res.Items = append(res.Items, item)
		}
	}
	if kind == wire.PageListing && r.CursorPath != "" {
		p, err := jsonpath.Parse(r.CursorPath)
		if err != nil {
			return Result{}, fmt.Errorf("extract: cursor path: %w", err)
		}
		if ns := p.Select(doc); len(ns) > 0 && ns[0] != nil {
			if c := strings.TrimSpace(fmt.Sprint(ns[0])); c != "" {
				next := *base
				q := next.Query()
				q.Set(r.CursorParam, c)
				next.RawQuery = q.Encode()
				if DomainAllowed(allowed, next.Hostname()) {
					res.Next = next.String()
				}
			}
		}
	}
	return res, nil
}

var (
	spaceRe  = regexp.MustCompile(`\s+`)
	numberRe = regexp.MustCompile(`-?\d[\d,]*(?:\.\d+)?|-?\.\d+`)
	intRe    = regexp.MustCompile(`-?\d[\d,]*`)
)

// Transform applies a field's transforms in order (docs/CRAWL.md). A
// transform that finds nothing (no number in the text, no regex match)
// drops the value: ok is false.
func Transform(raw string, ts []string, base *url.URL) (any, bool) {
	var v any = raw
	for _, t := range ts {
		s, isString := v.(string)
		if !isString {
			s = fmt.Sprint(v)
		}
		switch {
		case t == "trim":
			v = strings.TrimSpace(s)
		case t == "collapse_space":
			v = strings.TrimSpace(spaceRe.ReplaceAllString(s, " "))
		case t == "lower":
			v = strings.ToLower(s)
		case t == "upper":
			v = strings.ToUpper(s)
		case t == "number":
			m := numberRe.FindString(s)
			f, err := strconv.ParseFloat(strings.ReplaceAll(m, ",", ""), 64)
			if m == "" || err != nil {
				return nil, false
			}
			v = f
		case t == "integer":
			m := intRe.FindString(s)
			n, err := strconv.ParseInt(strings.ReplaceAll(m, ",", ""), 10, 64)
			if m == "" || err != nil {
				return nil, false
			}
			v = n
		case t == "absolute_url":
			u, err := base.Parse(strings.TrimSpace(s))
			if err != nil {
				return nil, false
			}
			v = u.String()
		case strings.HasPrefix(t, "regex:"):
			re, err := regexp.Compile(strings.TrimPrefix(t, "regex:"))
			if err != nil {
				return nil, false
			}
			m := re.FindStringSubmatch(s)
			if m == nil {
				return nil, false
			}
			v = m[len(m)-1]
		}
	}
	return v, true
}
