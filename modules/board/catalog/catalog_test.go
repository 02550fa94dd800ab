package catalog_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/modules/board/catalog"
)

func get(t *testing.T, u string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func start(t *testing.T, cfg catalog.Config) *catalog.Server {
	t.Helper()
	if cfg.Hosts == nil {
		cfg.Hosts = []string{"127.0.0.11", "127.0.0.12"}
	}
	s, err := catalog.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func TestPagesAndLayoutSwitch(t *testing.T) {
	s := start(t, catalog.Config{Items: 45, PerPage: 20, CrawlDelay: 1.5})
	base := s.URLs()[0]
	require.Equal(t, catalog.PortOf(base), catalog.PortOf(s.URLs()[1]), "port 0 picks one port for every host")
	require.NotZero(t, catalog.PortOf(base))
	code, _, body := get(t, base+"/robots.txt")
	require.Equal(t, 200, code)
	require.Contains(t, body, "Disallow: /private/")
	require.Contains(t, body, "Crawl-delay: 1.5")

	_, _, body = get(t, base+"/catalog?page=1")
	require.Equal(t, 20, strings.Count(body, `<li class="product">`))
	require.Contains(t, body, `<a class="next" href="/catalog?page=2">`)
	_, _, body = get(t, base+"/catalog?page=3")
	require.Equal(t, 5, strings.Count(body, `<li class="product">`))
	require.Contains(t, body, `href="/private/archive?page=1"`, "the last page's next link leads into disallowed space")
	code, _, _ = get(t, base+"/catalog?page=4")
	require.Equal(t, 404, code)

	_, _, body = get(t, base+"/item/p0007")
	require.Contains(t, body, `<link rel="canonical" href="`+base+`/item/p0007">`)
	require.Contains(t, body, `<h1 class="name">`)

	var api struct {
		Items []catalog.Item `json:"items"`
		Next  string         `json:"next_cursor"`
	}
	var seen []string
	for cur := ""; ; {
		_, _, body = get(t, base+"/api/items?limit=20&cursor="+url.QueryEscape(cur))
		require.NoError(t, json.Unmarshal([]byte(body), &api))
		for _, it := range api.Items {
			seen = append(seen, it.ID)
		}
		if api.Next == "" {
			break
		}
		cur = api.Next
	}
	require.Len(t, seen, 45)

	_, _, body = get(t, base+"/js/catalog?page=1")
	require.NotContains(t, body, `<li class="product">`, "the JavaScript variant has no product markup")

	require.NoError(t, s.SetLayout(2))
	_, _, body = get(t, base+"/catalog?page=1")
	require.NotContains(t, body, `class="product"`)
	require.Equal(t, 20, strings.Count(body, `<div class="card">`))
	require.Equal(t, 2, s.Oracle().Layout)
	require.Len(t, s.Published(), 90)
	require.Error(t, s.SetLayout(3))
}

// TestOracle: rate limit per client and host with Retry-After, requests
// inside that window, robots violations and the 10 s window maximum, on a
// fake clock.
func TestOracle(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := start(t, catalog.Config{Items: 10, Rate: 2, Burst: 3, RetryAfter: 5 * time.Second, Clock: clk})
	a, b := s.URLs()[0], s.URLs()[1]
	for range 3 {
		code, _, _ := get(t, a+"/catalog")
		require.Equal(t, 200, code)
	}
	code, h, _ := get(t, a+"/catalog")
	require.Equal(t, http.StatusTooManyRequests, code)
	require.Equal(t, "5", h.Get("Retry-After"))
	// The other host has its own bucket.
	code, _, _ = get(t, b+"/catalog")
	require.Equal(t, 200, code)
	clk.Advance(2 * time.Second)
	code, h, _ = get(t, a+"/catalog")
	require.Equal(t, http.StatusTooManyRequests, code, "still inside the Retry-After window")
	require.Equal(t, "3", h.Get("Retry-After"))
	clk.Advance(3 * time.Second)
	code, _, _ = get(t, a+"/catalog")
	require.Equal(t, 200, code)
	get(t, a+"/private/archive?page=1")
	clk.Advance(20 * time.Second)
	get(t, a+"/")

	r := s.Oracle()
	require.Equal(t, 1, r.RetryAfterViolations)
	require.Equal(t, 1, r.Throttled)
	require.Equal(t, 1, r.RobotsViolations)
	require.Equal(t, 8, r.Hosts["127.0.0.11"].Requests)
	require.Equal(t, 7, r.Hosts["127.0.0.11"].MaxRequests10s, "all but the last request fall in [0 s, 10 s)")
	require.Equal(t, 1, r.Hosts["127.0.0.12"].Requests)
	require.Equal(t, 9, r.Clients["127.0.0.1"].Requests)
	require.Equal(t, 20, r.ItemsPublished)
	require.Equal(t, 23, catalog.Bound(2, 2))

	// The oracle over HTTP, and the control endpoint.
	_, _, body := get(t, b+"/_catalog/oracle")
	require.Contains(t, body, `"robots_violations":1`)
	resp, err := http.PostForm(b+"/_catalog/control", url.Values{"layout": {"2"}, "items": {"3"}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, 6, s.Oracle().ItemsPublished)
}

func TestControlNeedsToken(t *testing.T) {
	s := start(t, catalog.Config{Hosts: []string{"127.0.0.11"}, AdminToken: "0123456789abcdef"})
	resp, err := http.PostForm(s.URLs()[0]+"/_catalog/control", url.Values{"layout": {"2"}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	req, _ := http.NewRequest("POST", s.URLs()[0]+"/_catalog/control?layout=2", nil)
	req.Header.Set("Authorization", "Bearer 0123456789abcdef")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, 2, s.Oracle().Layout)
	_, err = catalog.Start(catalog.Config{Hosts: []string{"10.0.0.1"}})
	require.ErrorContains(t, err, "loopback addresses only")
}
