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
