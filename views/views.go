// Package views holds the console's shared layout and components only; each
// module keeps its own pages beside its handlers.
package views

import "strconv"

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
	// Attention is the strip of what needs a person (nil: none shown).
	Attention *Attention
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

// Attention is what needs a person now: the strip at the top of every
// console page and the overview's first row. Its count leads the browser
// tab's title, so a tab left open in the background still says it.
type Attention struct {
	Items []AttentionItem
	// Refresh is the path the strip reloads itself from (htmx); empty: it
	// does not reload.
	Refresh string
	// Failed says some of it could not be read (the rest still shows).
	Failed bool
	// AllClear shows a line saying so when nothing needs a person (the
	// overview); other pages show nothing then.
	AllClear bool
}

// AttentionItem is one line of the strip: what is wrong, in words, and the
// page where it is put right.
type AttentionItem struct {
	// Severity is bad (act now), warn (act soon) or info.
	Severity string
	Text     string
	Href     string
	// Tenant names the tenant when the user reaches several ("" for the
	// installation's own).
	Tenant string
}

// Count is how many lines need a person.
func (a *Attention) Count() int {
	if a == nil {
		return 0
	}
	return len(a.Items)
}

// TabTitle is the browser tab's title: the count of what needs a person
// first, then the page.
func TabTitle(title string, a *Attention) string {
	if n := a.Count(); n > 0 {
		return "(" + strconv.Itoa(n) + ") " + title + " · Fleetwright"
	}
	return title + " · Fleetwright"
}
