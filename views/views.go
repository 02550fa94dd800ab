// Package views holds the console's shared layout and components only; each
// module keeps its own pages beside its handlers.
package views

import (
	"strconv"

	"github.com/fleetwright/fleetwright/app/page"
)

// NavItem is one link in the console's sidebar (app/page).
type NavItem = page.NavItem

// Flash is a one-time message shown at the top of a page (app/page).
type Flash = page.Flash

// Page is what the layout needs besides the page's own content (app/page).
type Page = page.Page

// Tab is one of the tabs above a page's content.
type Tab struct {
	Label  string
	Href   string
	Active bool
}

// TenantTabs are the pages of one tenant (overview, fleet, claims, latency,
// claim settings) with the one at active marked; every tenant page shows
// them, so a tenant's pages are reached from each other rather than from
// the sidebar.
func TenantTabs(slug, active string) []Tab {
	base := "/t/" + slug
	tabs := []Tab{{Label: "Overview", Href: base}, {Label: "Fleet", Href: base + "/fleet"}, {Label: "Claims", Href: base + "/claims"},
		{Label: "Latency", Href: base + "/claims/latency"}, {Label: "Claim settings", Href: base + "/claims/settings"}, {Label: "Crawl", Href: base + "/crawl"},
		{Label: "Platform", Href: base + "/settings/platform"}}
	for i := range tabs {
		tabs[i].Active = tabs[i].Href == active
	}
	return tabs
}

// Attention is what needs a person now (app/page).
type Attention = page.Attention

// AttentionItem is one line of the attention strip (app/page).
type AttentionItem = page.AttentionItem

// TabTitle is the browser tab's title: the count of what needs a person
// first, then the page.
func TabTitle(title string, a *Attention) string {
	if n := a.Count(); n > 0 {
		return "(" + strconv.Itoa(n) + ") " + title + " · Fleetwright"
	}
	return title + " · Fleetwright"
}
