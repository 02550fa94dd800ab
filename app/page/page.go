// Package page is the console page's model: what the shared layout
// (views) renders around a module's own content, and what the console's
// frame (auth.Shell) fills in for each request. It is plain data, so a
// package that builds a page's frame need not import the layout, templ or
// the embedded assets.
package page

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
	// SignOutURL is the sign-out action on the right of the top bar.
	SignOutURL string
}
