package extract_test

import (
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/board/catalog"
	"github.com/fleetwright/fleetwright/modules/crawl/extract"
	"github.com/fleetwright/fleetwright/modules/wire"
)

func fetch(t *testing.T, u string) []byte {
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return b
}

var listing = wire.CrawlRules{Format: "html", Items: "li.product",
	Fields: []wire.CrawlField{
		{Name: "url", CSS: "a.title", Attr: "href", Required: true, Transform: []string{"absolute_url"}},
		{Name: "title", CSS: "a.title", Transform: []string{"collapse_space"}},
		{Name: "price", CSS: ".price", Required: true, Transform: []string{"number"}},
		{Name: "sku", CSS: ".sku", Transform: []string{"regex:SKU-(\\d+)", "integer"}},
	},
	FollowCSS: "li.product a.title", NextCSS: "a.next"}

func TestCatalogueHTML(t *testing.T) {
	s, err := catalog.Start(catalog.Config{Hosts: []string{"127.0.0.11"}, Items: 45})
	require.NoError(t, err)
	defer s.Close()
	base := s.URLs()[0]
	host := "127.0.0.11"
	res, err := extract.Page(fetch(t, base+"/catalog?page=1"), base+"/catalog?page=1", wire.PageListing, listing, []string{host})
	require.NoError(t, err)
	require.Len(t, res.Items, 20)
	first := s.Published()[0]
	require.Equal(t, first.URL, res.Items[0]["url"])
	require.Equal(t, first.Title, res.Items[0]["title"])
	require.Equal(t, first.Price, res.Items[0]["price"])
	require.Equal(t, int64(first.SKU), res.Items[0]["sku"])
	require.Len(t, res.Links, 20)
	require.Equal(t, base+"/catalog?page=2", res.Next)

	// Links outside the allowed domains are not followed.
	res, err = extract.Page(fetch(t, base+"/catalog?page=1"), base+"/catalog?page=1", wire.PageListing, listing, []string{"other.example"})
	require.NoError(t, err)
	require.Empty(t, res.Links)
	require.Empty(t, res.Next)

	// An item page is one item; kind item yields no links.
	itemRules := wire.CrawlRules{Format: "html", Fields: []wire.CrawlField{
		{Name: "url", CSS: "link[rel=canonical]", Attr: "href"},
		{Name: "title", CSS: "h1.name", Transform: []string{"trim"}},
		{Name: "price", CSS: ".price", Transform: []string{"number"}},
	}, NextCSS: "a.next"}
	res, err = extract.Page(fetch(t, base+"/item/p0003"), base+"/item/p0003", wire.PageItem, itemRules, []string{host})
	require.NoError(t, err)
	require.Equal(t, []wire.CrawlItem{{"url": s.Published()[2].URL, "title": s.Published()[2].Title, "price": s.Published()[2].Price}}, res.Items)

	// After the layout change the same rules find nothing: zero items, and
	// nothing "missing" either, since no item root matched at all.
	require.NoError(t, s.SetLayout(2))
	res, err = extract.Page(fetch(t, base+"/catalog?page=1"), base+"/catalog?page=1", wire.PageListing, listing, []string{host})
	require.NoError(t, err)
	require.Empty(t, res.Items)
	require.Empty(t, res.Next)

	// A required field that stops matching drops the item and is counted.
	broken := listing
	broken.Items = "div.card"
	res, err = extract.Page(fetch(t, base+"/catalog?page=1"), base+"/catalog?page=1", wire.PageListing, broken, []string{host})
	require.NoError(t, err)
	require.Empty(t, res.Items)
	require.Len(t, res.Missing, 20)
}

func TestCatalogueJSON(t *testing.T) {
	s, err := catalog.Start(catalog.Config{Hosts: []string{"127.0.0.12"}, Items: 45})
	require.NoError(t, err)
	defer s.Close()
	rules := wire.CrawlRules{Format: "json", Items: "$.items[*]", Fields: []wire.CrawlField{
		{Name: "url", Path: "$.url", Transform: []string{"absolute_url"}, Required: true},
		{Name: "price", Path: "$.price"},
		{Name: "tags", Path: "$.tags[*]", All: true},
	}, CursorPath: "$.next_cursor", CursorParam: "cursor"}
	u := s.URLs()[0] + "/api/items?limit=20"
	var got []wire.CrawlItem
	for u != "" {
		res, err := extract.Page(fetch(t, u), u, wire.PageListing, rules, []string{"127.0.0.12"})
		require.NoError(t, err)
		got = append(got, res.Items...)
		u = res.Next
	}
	require.Len(t, got, 45)
	pub := s.Published()
	require.Equal(t, pub[44].URL, got[44]["url"])
	require.Equal(t, pub[44].Price, got[44]["price"])
	require.Equal(t, []any{pub[44].Tags[0], pub[44].Tags[1]}, got[44]["tags"])
}

func TestTransforms(t *testing.T) {
	base, _ := url.Parse("https://shop.example/a/b?x=1")
	for _, c := range []struct {
		in   string
		ts   []string
		want any
		ok   bool
	}{
		{"  Hello \n  World ", []string{"collapse_space"}, "Hello World", true},
		{" x ", []string{"trim", "upper"}, "X", true},
		{"$1,234.50 incl. VAT", []string{"number"}, 1234.5, true},
		{"Price: -3", []string{"integer"}, int64(-3), true},
		{"free", []string{"number"}, nil, false},
		{"../c?y=2", []string{"absolute_url"}, "https://shop.example/c?y=2", true},
		{"SKU-0042", []string{"regex:SKU-(\\d+)", "integer"}, int64(42), true},
		{"none", []string{"regex:\\d+"}, nil, false},
	} {
		v, ok := extract.Transform(c.in, c.ts, base)
		require.Equal(t, c.ok, ok, c.in)
		require.Equal(t, c.want, v, c.in)
	}
}

// TestNoFieldsNoItems: rules without fields (a listing page of a job that
// follows links) yield links and the next page, and no item: not one
// empty item for the page's root.
func TestNoFieldsNoItems(t *testing.T) {
	s, err := catalog.Start(catalog.Config{Hosts: []string{"127.0.0.11"}, Items: 45})
	require.NoError(t, err)
	defer s.Close()
	base := s.URLs()[0]
	rules := wire.CrawlRules{Format: "html", FollowCSS: "li.product a.title", NextCSS: "a.next"}
	res, err := extract.Page(fetch(t, base+"/catalog?page=1"), base+"/catalog?page=1", wire.PageListing, rules, []string{"127.0.0.11"})
	require.NoError(t, err)
	require.Empty(t, res.Items)
	require.Empty(t, res.Missing)
	require.Len(t, res.Links, 20)
	require.Equal(t, base+"/catalog?page=2", res.Next)
	res, err = extract.Page([]byte(`{"items": [{"a": 1}]}`), base+"/api", wire.PageListing, wire.CrawlRules{Format: "json"}, nil)
	require.NoError(t, err)
	require.Empty(t, res.Items)
}
