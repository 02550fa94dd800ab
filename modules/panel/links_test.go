package panel_test

import (
	"context"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
)

// TestEveryLinkOfEveryPageLands signs an admin in to a console with a
// tenant, an agent, a confirmed claim and an open alarm, and walks every
// same-origin link of every page it reaches (GET only, breadth first): each
// answers without a server error or a 404, and each link with a fragment
// (#section) lands on a page that has an element with that id. A page
// added with a link to an anchor that was renamed, or to a route that does
// not exist, fails here.
func TestEveryLinkOfEveryPageLands(t *testing.T) {
	c := paneltest.New(t)
	ctx := context.Background()
	acme := c.Tenant(t, "acme")
	const pw = "correct horse battery"
	c.User(t, "admin@fleet.test", auth.Admin, pw)
	agentID := c.Agent(t, acme)
	claimedBy(t, c, acme, agentID, "LD-LINKS-1", "http_actor-1")
	_, err := alarm.Raise(ctx, c.DB.App, alarm.Alarm{Kind: "worker.hung", Key: agentID + "/watcher-1",
		Tenant: acme.ID, Severity: alarm.Warning, Summary: "watcher-1 reads nothing"})
	require.NoError(t, err)

	cl := paneltest.Browserless()
	c.Enrolled(t, cl, "admin@fleet.test", pw)

	base, err := url.Parse(c.Server.URL)
	require.NoError(t, err)
	type page struct {
		ids   map[string]bool
		links []string // absolute, as written (with their fragments)
	}
	pages := map[string]*page{} // path?query → what it holds
	from := map[string]string{} // page → the first page that linked it
	queue := []string{"/"}
	from["/"] = "(start)"
	// Links that change something or end the session even on GET are not
	// followed; downloads are fetched but not parsed.
	skip := func(p string) bool {
		return p == "/signout" || strings.HasPrefix(p, "/static/") || strings.HasPrefix(p, "/signin")
	}
	for len(queue) > 0 && len(pages) < 400 {
		u := queue[0]
		queue = queue[1:]
		if _, done := pages[u]; done {
			continue
		}
		res, body := paneltest.Do(t, cl, "GET", c.Server.URL+u, nil)
		// A redirect is an answer (a form's own page, a tenant's default);
		// its target is walked like a link.
		if loc := res.Header.Get("Location"); res.StatusCode/100 == 3 && loc != "" {
			pages[u] = &page{ids: map[string]bool{}}
			if next, ok := local(base, u, loc); ok && !skip(next.Path) {
				key := next.Path + query(next)
				if _, seen := from[key]; !seen {
					from[key] = u
					queue = append(queue, key)
				}
			}
			continue
		}
		require.Less(t, res.StatusCode, 500, "GET %s (linked from %s): %d", u, from[u], res.StatusCode)
		require.NotEqual(t, http.StatusNotFound, res.StatusCode, "GET %s (linked from %s) is a broken link", u, from[u])
		p := &page{ids: map[string]bool{}}
		pages[u] = p
		if !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
			continue
		}
		doc, err := goquery.NewDocumentFromReader(strings.NewReader(body))
		require.NoError(t, err, u)
		doc.Find("[id]").Each(func(_ int, s *goquery.Selection) { p.ids[s.AttrOr("id", "")] = true })
		doc.Find("a[name]").Each(func(_ int, s *goquery.Selection) { p.ids[s.AttrOr("name", "")] = true })
		doc.Find("a[href]").Each(func(_ int, s *goquery.Selection) {
			href := s.AttrOr("href", "")
			next, ok := local(base, u, href)
			if !ok || skip(next.Path) {
				return
			}
			p.links = append(p.links, next.String())
			key := next.Path + query(next)
			if _, seen := from[key]; !seen {
				from[key] = u
				queue = append(queue, key)
			}
		})
	}
	require.Greater(t, len(pages), 20, "the walk reached too few pages to mean anything")

	var broken []string
	checked := 0
	for src, p := range pages {
		for _, l := range p.links {
			lu, _ := url.Parse(l)
			if lu.Fragment == "" {
				continue
			}
			target, ok := pages[lu.Path+query(lu)]
			if !ok {
				continue // beyond the walk's bound
			}
			checked++
			if !target.ids[lu.Fragment] {
				broken = append(broken, src+" → "+lu.Path+query(lu)+"#"+lu.Fragment)
			}
		}
	}
	sort.Strings(broken)
	require.Positive(t, checked, "no link with a fragment was checked: the overview's links to claim sections should be")
	require.Empty(t, broken, "links to anchors that do not exist on their page")
}

// local resolves href against the page at p; ok is false for links that
// leave the console (another origin, mailto:, javascript:).
func local(base *url.URL, p, href string) (*url.URL, bool) {
	if href == "" || strings.HasPrefix(href, "javascript:") || strings.HasPrefix(href, "mailto:") {
		return nil, false
	}
	cur, err := base.Parse(p)
	if err != nil {
		return nil, false
	}
	u, err := cur.Parse(href)
	if err != nil || u.Host != base.Host {
		return nil, false
	}
	return u, true
}

func query(u *url.URL) string {
	if u.RawQuery == "" {
		return ""
	}
	return "?" + u.RawQuery
}
