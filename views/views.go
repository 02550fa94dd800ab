// Package views holds the console's shared layout and components only; each
// module keeps its own pages beside its handlers.
package views

// NavItem is one link in the console's sidebar.
type NavItem struct {
	Section string // heading shown above the first item of a section
	Label   string
	Href    string
	Active  bool
}

// Flash is a one-time message shown at the top of a page.
type Flash struct {
	Kind string // ok, warn, bad, info
	Text string
}

// Page is what the layout needs besides the page's own content.
type Page struct {
	Title string
	Nav   []NavItem
	// User is the signed-in operator's display name; empty on public pages.
	User    string
	Role    string
	Flashes []Flash
	// Actions is rendered on the right of the top bar (e.g. sign out).
	SignOutURL string
}

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
		{Label: "Latency", Href: base + "/claims/latency"}, {Label: "Claim settings", Href: base + "/claims/settings"}, {Label: "Crawl", Href: base + "/crawl"}}
	for i := range tabs {
		tabs[i].Active = tabs[i].Href == active
	}
	return tabs
}
