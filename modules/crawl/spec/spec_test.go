package spec_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/crawl/spec"
)

func TestExamplesAreValid(t *testing.T) {
	files, err := filepath.Glob("../../../examples/crawl/*.yaml")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 4)
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		j, err := spec.Parse(filepath.Base(f), src, spec.Options{})
		require.NoError(t, err, f)
		require.NotEmpty(t, j.StartURLs(), f)
		require.NotEmpty(t, j.Extract.Order, f)
	}
}

func TestDefaultsAndExpansion(t *testing.T) {
	j, err := spec.Parse("t.yaml", []byte(`
version: 1
name: shop
start:
  urls: [https://shop.example/a]
  templates:
    - url: "https://{sub}.shop.example/list/{cat}?p={page}"
      params:
        sub: [www, m]
        cat: [books, "music & film"]
        page: {from: 1, to: 5, step: 2}
allowed_domains: [shop.example]
extract:
  items: .item
  fields:
    url: {css: a, attr: href}
    name: {css: h2}
item_key: url
`), spec.Options{})
	require.NoError(t, err)
	require.Equal(t, spec.RenderHTTP, j.Render)
	require.Equal(t, spec.FormatHTML, j.Extract.Format)
	require.Equal(t, []string{"url", "name"}, j.Extract.Order)
	require.Equal(t, spec.Strings{"url"}, j.ItemKey)
	require.Equal(t, spec.DefaultDelay, j.Politeness.DelayD)
	require.Equal(t, 1, j.Politeness.Concurrency)
	require.Equal(t, spec.DefaultPages, j.Limits.Pages)
	require.Equal(t, spec.DefaultBytes, j.Limits.BytesN)
	urls := j.StartURLs()
	require.Len(t, urls, 1+2*2*3)
	require.Contains(t, urls, "https://m.shop.example/list/music+%26+film?p=5")
	require.True(t, j.DomainAllowed("m.shop.example"))
	require.False(t, j.DomainAllowed("evilshop.example"))
}

// TestErrorsNameFieldAndLine: every error in one pass, each with its
// field path and line.
func TestErrorsNameFieldAndLine(t *testing.T) {
	src := `version: 1
name: Bad Name
start:
  urls:
    - https://shop.example/a
    - ftp://shop.example/b
    - https://other.example/c
allowed_domains: [shop.example]
render: chrome
extract:
  items: "div[["
  fields:
    price:
      css: .price
      transform: [trim, shout]
    title:
      path: $.title
pagination:
  next: {css: a.next}
  param: {name: page}
item_key: [sku]
schedule:
  cron: "* * *"
  timezone: Mars/Olympus
  catch_up: sometimes
politeness:
  concurrency: 0
  delay: soon
  jitter: 2
expected_items: {min: 10, max: 5}
limits:
  bytes: 5 parsecs
alarms:
  drop_share: 1.5
`
	_, err := spec.Parse("bad.yaml", []byte(src), spec.Options{})
	require.Error(t, err)
	var errs *spec.Errors
	require.ErrorAs(t, err, &errs)
	got := map[string]int{}
	for _, e := range errs.List {
		got[e.Path] = e.Line
	}
	want := map[string]int{
		"name":                              2,
		"start.urls[1]":                     6,
		"start.urls[2]":                     7,
		"render":                            9,
		"extract.items":                     11,
		"extract.fields.price.transform[1]": 15,
		"extract.fields.title.path":         17,
		"pagination":                        18,
		"item_key[0]":                       21,
		"schedule.cron":                     23,
		"schedule.timezone":                 24,
		"schedule.catch_up":                 25,
		"politeness.delay":                  28,
		"politeness.jitter":                 29,
		"expected_items.max":                30,
		"limits.bytes":                      32,
		"alarms.drop_share":                 34,
	}
	for p, line := range want {
		require.Contains(t, got, p, "no error for %s in:\n%v", p, err)
		require.Equal(t, line, got[p], "line of %s", p)
	}
	msg := err.Error()
	require.Contains(t, msg, "bad.yaml line 15: extract.fields.price.transform[1]: unknown transform \"shout\"")
	require.Contains(t, msg, "bad.yaml line 7: start.urls[2]: host \"other.example\" is not in allowed_domains")
}

func TestTypeAndUnknownFieldErrors(t *testing.T) {
	src := `version: 1
name: shop
start:
  urls: [https://shop.example/]
allowed_domains: [shop.example]
extract:
  fields:
    url: {css: a, atr: href}
limits:
  pages: many
colour: blue
item_key: [url]
`
	_, err := spec.Parse("t.yaml", []byte(src), spec.Options{})
	var errs *spec.Errors
	require.ErrorAs(t, err, &errs)
	require.Len(t, errs.List, 3, err.Error())
	require.Equal(t, "extract.fields.url.atr", errs.List[0].Path)
	require.Equal(t, 8, errs.List[0].Line)
	require.Contains(t, errs.List[0].Msg, `unknown field "atr"`)
	require.Equal(t, "limits.pages", errs.List[1].Path)
	require.Equal(t, 10, errs.List[1].Line)
	require.Equal(t, "colour", errs.List[2].Path)
	require.Equal(t, 11, errs.List[2].Line)
}

func TestSyntaxAndEmpty(t *testing.T) {
	_, err := spec.Parse("t.yaml", []byte("version: 1\nname: [unclosed\n"), spec.Options{})
	require.ErrorContains(t, err, "not valid YAML or JSON")
	_, err = spec.Parse("t.yaml", nil, spec.Options{})
	require.ErrorContains(t, err, "the file is empty")
	_, err = spec.Parse("t.yaml", []byte("- a\n- b\n"), spec.Options{})
	require.ErrorContains(t, err, "a crawl job is a mapping")
	_, err = spec.Parse("t.yaml", []byte("version: 2\n"), spec.Options{})
	require.ErrorContains(t, err, "version 2 is not known")
}

func TestJSONInput(t *testing.T) {
	src := `{
  "version": 1,
  "name": "api",
  "start": {"urls": ["http://api.example/items"]},
  "allowed_domains": ["api.example"],
  "extract": {"format": "json", "items": "$.items[*]", "fields": {"id": {"path": "$.id"}}},
  "pagination": {"cursor": {"path": "$.next", "param": "after"}},
  "item_key": ["id"],
  "limits": {"pages": -1}
}`
	_, err := spec.Parse("job.json", []byte(src), spec.Options{})
	var errs *spec.Errors
	require.ErrorAs(t, err, &errs)
	require.Len(t, errs.List, 1)
	require.Equal(t, "limits.pages", errs.List[0].Path)
	require.Equal(t, 9, errs.List[0].Line)
	j, err := spec.Parse("job.json", []byte(strings.Replace(src, `"pages": -1`, `"pages": 5`, 1)), spec.Options{})
	require.NoError(t, err)
	require.Equal(t, "after", j.Pagination.Cursor.Param)
}

func TestSizes(t *testing.T) {
	for in, want := range map[string]int64{"1024": 1024, "5MB": 5 << 20, "512 KiB": 512 << 10, "1GB": 1 << 30, "7b": 7} {
		n, err := spec.ParseSize(in)
		require.NoError(t, err, in)
		require.Equal(t, want, n, in)
	}
	_, err := spec.ParseSize("5 parsecs")
	require.Error(t, err)
}
