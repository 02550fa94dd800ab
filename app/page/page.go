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
	// Attention is the strip of what needs a person (nil: none shown).
	Attention *Attention
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
