package auth

import (
	"encoding/base64"
	"net/http"
	"sort"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5/middleware"

	"github.com/fleetwright/fleetwright/app/page"
)

// NavItem is a sidebar link a module adds, shown to users who hold Perm.
type NavItem struct {
	Section string
	Label   string
	Href    string
	Perm    Perm
	// Order sorts the sidebar (lower first); sections follow their first item.
	Order int
}

// Shell is the console's frame shared by every module: its navigation and
// the Page builder. The panel creates one and hands it to each module.
type Shell struct {
	mu        sync.RWMutex
	nav       []NavItem
	attention AttentionFunc
}

// AttentionFunc reads what needs the signed-in user now, for the strip at
// the top of every page (see SetAttention).
type AttentionFunc func(r *http.Request, u *User) *page.Attention

// SetAttention installs the reader of the attention strip; the console
// module installs it. Without one, pages show no strip.
func (s *Shell) SetAttention(f AttentionFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attention = f
}

// NewShell returns an empty shell.
func NewShell() *Shell { return &Shell{} }

// AddNav adds sidebar links.
func (s *Shell) AddNav(items ...NavItem) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nav = append(s.nav, items...)
	sort.SliceStable(s.nav, func(i, j int) bool { return s.nav[i].Order < s.nav[j].Order })
}

// Page returns the layout's model for the request: the sidebar filtered by
// the user's permissions with the current page marked, the user, and any
// flash message (which is consumed).
func (s *Shell) Page(w http.ResponseWriter, r *http.Request, title string) page.Page {
	u := UserFrom(r.Context())
	p := page.Page{Title: title, Flashes: TakeFlashes(w, r)}
	if u != nil {
		p.User, p.Role, p.SignOutURL = u.Email, string(u.Role), "/signout"
	}
	s.mu.RLock()
	attention := s.attention
	s.mu.RUnlock()
	if u != nil && u.MFAOK && attention != nil {
		p.Attention = attention(r, u)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	best := ""
	for _, n := range s.nav {
		if u.Has(n.Perm) && pathUnder(r.URL.Path, n.Href) && len(n.Href) > len(best) {
			best = n.Href
		}
	}
	section := ""
	for _, n := range s.nav {
		if !u.Has(n.Perm) || n.Perm.TenantScoped() {
			continue
		}
		item := page.NavItem{Label: n.Label, Href: n.Href, Active: n.Href == best}
		if n.Section != section {
			item.Section, section = n.Section, n.Section
		}
		p.Nav = append(p.Nav, item)
	}
	if u != nil && u.MFAOK && len(u.Tenants) > 0 && u.Has(FleetRead) {
		for i, t := range u.Tenants {
			item := page.NavItem{Label: t.Name, Href: "/t/" + t.Slug, Active: pathUnder(r.URL.Path, "/t/"+t.Slug)}
			if i == 0 {
				item.Section = "Tenants"
			}
			p.Nav = append(p.Nav, item)
		}
	}
	return p
}

func pathUnder(path, href string) bool {
	if href == "/" {
		return path == "/"
	}
	return path == href || strings.HasPrefix(path, href+"/")
}

// flashCookie carries one message across a redirect. It holds no secret.
const flashCookie = "fleet_flash"

// Flash sets a message for the next page the browser loads.
func Flash(w http.ResponseWriter, kind, text string) {
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: base64.RawURLEncoding.EncodeToString([]byte(kind + "\x00" + text)),
		Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode, MaxAge: 60})
}

// TakeFlashes returns the pending flash message, if any, and clears it.
func TakeFlashes(w http.ResponseWriter, r *http.Request) []page.Flash {
	c, err := r.Cookie(flashCookie)
	if err != nil {
		return nil
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	b, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil {
		return nil
	}
	kind, text, ok := strings.Cut(string(b), "\x00")
	if !ok || len(text) > 500 {
		return nil
	}
	switch kind {
	case "ok", "warn", "bad", "info":
	default:
		return nil
	}
	return []page.Flash{{Kind: kind, Text: text}}
}

func requestID(r *http.Request) string {
	if id := middleware.GetReqID(r.Context()); id != "" {
		return id
	}
	return "unknown"
}
