// Package auth is the console's authorisation kernel that every module uses:
// permissions and the roles that hold them, the signed-in user in the request
// context, Require (the guard every route is declared with), the navigation
// registry and the page frame. It holds no store: modules/account signs users
// in and puts them in the context; this package only decides.
package auth

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"
)

// Role is an operator's role.
type Role string

// The three roles.
const (
	// Admin manages users, tenants, cells and settings, and reaches every tenant.
	Admin Role = "admin"
	// Operator steers the fleet of the tenants they are granted.
	Operator Role = "operator"
	// Viewer reads the tenants they are granted.
	Viewer Role = "viewer"
)

// Roles lists the roles, most powerful first.
var Roles = []Role{Admin, Operator, Viewer}

// Valid reports whether r is a known role.
func (r Role) Valid() bool { return slices.Contains(Roles, r) }

// Perm is what a route requires.
type Perm string

// The permissions. A route declares exactly one with Require.
const (
	// Public: anyone, signed in or not (sign-in page, assets, health).
	Public Perm = "public"
	// MFA: a session past its password whose TOTP step is pending; the MFA
	// pages are the only ones such a session reaches.
	MFA Perm = "mfa"
	// Self: any fully signed-in user acting on their own account.
	Self Perm = "self"
	// AuditRead: the audit log; rows are limited to the user's tenants
	// unless the user is an admin.
	AuditRead Perm = "audit.read"
	// UsersManage: create, disable, reset users and their grants (admin).
	UsersManage Perm = "users.manage"
	// TenantsManage: create and edit tenants (admin).
	TenantsManage Perm = "tenants.manage"
	// CellsManage: cells and the routing of tenants to them (admin).
	CellsManage Perm = "cells.manage"
	// SettingsManage: installation-wide settings, the global pause (admin).
	SettingsManage Perm = "settings.manage"
	// FleetRead: read a tenant's fleet; the route has a {tenant} parameter.
	FleetRead Perm = "fleet.read"
	// FleetSteer: steer a tenant's fleet; the route has a {tenant} parameter.
	FleetSteer Perm = "fleet.steer"
	// FleetSecrets: what could unlock a tenant's platform credentials — a
	// new agent token, accepting a new agent installation (admin; the route
	// has a {tenant} parameter).
	FleetSecrets Perm = "fleet.secrets"
)

// perms says who holds each role-based permission and whether it is scoped
// to the {tenant} of the route.
var perms = map[Perm]struct {
	roles  []Role
	tenant bool
}{
	Self:           {roles: Roles},
	AuditRead:      {roles: Roles},
	UsersManage:    {roles: []Role{Admin}},
	TenantsManage:  {roles: []Role{Admin}},
	CellsManage:    {roles: []Role{Admin}},
	SettingsManage: {roles: []Role{Admin}},
	FleetRead:      {roles: Roles, tenant: true},
	FleetSteer:     {roles: []Role{Admin, Operator}, tenant: true},
	FleetSecrets:   {roles: []Role{Admin}, tenant: true},
}

// Known reports whether p is a declared permission.
func (p Perm) Known() bool {
	_, ok := perms[p]
	return ok || p == Public || p == MFA
}

// TenantScoped reports whether p applies to the {tenant} of the route.
func (p Perm) TenantScoped() bool { return perms[p].tenant }

// TenantParam is the route parameter tenant-scoped routes carry (a slug).
const TenantParam = "tenant"

// Tenant is a tenant a user reaches.
type Tenant struct {
	ID   string
	Slug string
	Name string
}

// User is the signed-in operator of a request.
type User struct {
	ID    string
	Email string
	Role  Role
	// MFAOK is false while the session's TOTP step is pending.
	MFAOK bool
	// SessionID is the session's public id (never its cookie token).
	SessionID string
	// Tenants are the tenants this user reaches: their grants, or every
	// tenant for an admin.
	Tenants []Tenant
}

// Has reports whether u holds p, ignoring tenant scope.
func (u *User) Has(p Perm) bool {
	switch {
	case p == Public:
		return true
	case u == nil:
		return false
	case p == MFA:
		return true
	case !u.MFAOK:
		return false
	}
	return slices.Contains(perms[p].roles, u.Role)
}

// Tenant returns the tenant with the given slug if u reaches it.
func (u *User) Tenant(slug string) (Tenant, bool) {
	if u == nil {
		return Tenant{}, false
	}
	for _, t := range u.Tenants {
		if t.Slug == slug {
			return t, true
		}
	}
	return Tenant{}, false
}

type userKey struct{}
type tenantKey struct{}

// WithUser returns ctx carrying the signed-in user.
func WithUser(ctx context.Context, u *User) context.Context {
	return context.WithValue(ctx, userKey{}, u)
}

// UserFrom returns the request's user, or nil when nobody is signed in.
func UserFrom(ctx context.Context) *User {
	u, _ := ctx.Value(userKey{}).(*User)
	return u
}

// TenantFrom returns the tenant a tenant-scoped route was called for; Require
// has checked that the user reaches it.
func TenantFrom(ctx context.Context) (Tenant, bool) {
	t, ok := ctx.Value(tenantKey{}).(Tenant)
	return t, ok
}

// WithTenant returns ctx carrying t as the route's tenant: for a handler on
// a tenant's route guarded by an installation-wide permission, after it
// checked that the user reaches t.
func WithTenant(ctx context.Context, t Tenant) context.Context {
	return context.WithValue(ctx, tenantKey{}, t)
}

// Guarded is a handler with its declared permission. Every console route is
// one (the route-walk test fails otherwise).
type Guarded struct {
	Perm Perm
	next http.Handler
}

// Require declares the permission of a route's handler and enforces it on
// every request: register routes as r.Method(method, pattern, Require(p, h)).
func Require(p Perm, h http.HandlerFunc) *Guarded {
	if !p.Known() {
		panic("auth: unknown permission " + string(p))
	}
	return &Guarded{Perm: p, next: h}
}

// PermOf returns the permission a router's endpoint was declared with.
func PermOf(h http.Handler) (Perm, bool) {
	g, ok := h.(*Guarded)
	if !ok {
		return "", false
	}
	return g.Perm, true
}

// Paths the guard sends people to.
const (
	SignInPath = "/signin"
	MFAPath    = "/signin/mfa"
)

// ServeHTTP enforces the permission, then serves.
func (g *Guarded) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u := UserFrom(r.Context())
	switch {
	case g.Perm == Public:
	case u == nil:
		refuseAnonymous(w, r)
		return
	case g.Perm == MFA:
	case !u.MFAOK:
		if safeMethod(r) && !isHTMX(r) {
			http.Redirect(w, r, MFAPath, http.StatusSeeOther)
			return
		}
		Forbidden(w, r)
		return
	case !u.Has(g.Perm):
		Forbidden(w, r)
		return
	case g.Perm.TenantScoped():
		t, ok := u.Tenant(chi.URLParam(r, TenantParam))
		if !ok {
			Forbidden(w, r)
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), tenantKey{}, t))
	}
	g.next.ServeHTTP(w, r)
}

func safeMethod(r *http.Request) bool {
	return r.Method == http.MethodGet || r.Method == http.MethodHead
}

func isHTMX(r *http.Request) bool { return r.Header.Get("HX-Request") == "true" }

// refuseAnonymous sends a browser to sign in (and back afterwards); anything
// else gets 401.
func refuseAnonymous(w http.ResponseWriter, r *http.Request) {
	to := SignInPath
	if r.URL.Path != "/" {
		to += "?next=" + url.QueryEscape(r.URL.RequestURI())
	}
	if safeMethod(r) && !isHTMX(r) {
		http.Redirect(w, r, to, http.StatusSeeOther)
		return
	}
	if isHTMX(r) {
		w.Header().Set("HX-Redirect", to)
	}
	ErrorPage(w, r, http.StatusUnauthorized, "Sign-in required", "Your session has ended. Sign in again to continue.")
}

// Forbidden answers 403 with the console's error page.
func Forbidden(w http.ResponseWriter, r *http.Request) {
	ErrorPage(w, r, http.StatusForbidden, "Not allowed", "Your role does not give access to this page or action.")
}

// NotFound answers 404 with the console's error page.
func NotFound(w http.ResponseWriter, r *http.Request) {
	ErrorPage(w, r, http.StatusNotFound, "Not found", "There is no page at this address.")
}

// ServerError answers 500 naming the request id, never the error itself
// (which goes to the log).
func ServerError(w http.ResponseWriter, r *http.Request) {
	ErrorPage(w, r, http.StatusInternalServerError, "Something went wrong",
		"The error was logged. Try again; if it persists, quote request "+requestID(r)+".")
}

// ErrorRenderer writes the body of an error page: the console's layout
// (views.RenderError) in the panel. It is given to Pages, not imported, so
// this kernel does not pull in the layout, templ and the assets for every
// module that checks a permission or appends an audit entry.
type ErrorRenderer func(w http.ResponseWriter, r *http.Request, code int, title, msg string)

type errorRendererKey struct{}

// Pages is the middleware that renders every error page below it with
// render; the panel puts it at the root of its router.
func Pages(render ErrorRenderer) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), errorRendererKey{}, render)))
		})
	}
}

// ErrorPage writes an error page with status code: through the renderer
// Pages set, else a plain page with the same title and message (a module's
// routes mounted alone, as in its tests).
func ErrorPage(w http.ResponseWriter, r *http.Request, code int, title, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	if render, ok := r.Context().Value(errorRendererKey{}).(ErrorRenderer); ok && render != nil {
		render(w, r, code, title, msg)
		return
	}
	_, _ = fmt.Fprintf(w, "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>%d %s</title></head><body><h1>%s</h1><p>%s</p></body></html>\n",
		code, html.EscapeString(title), html.EscapeString(title), html.EscapeString(msg))
}

// SafeNext returns next if it is a path on this site, else "/": a sign-in
// link must never bounce to another site. Browsers are lenient with what
// follows a Location header (they drop tabs and newlines, read a backslash
// as a slash, decode before resolving), so only the plainest form passes: an
// absolute path of printable ASCII, without a backslash, whose second byte
// is not a slash, and that stays so after percent-decoding (repeatedly, for
// double encoding) — no scheme, no host, no user, no control character, no
// space, no dot segment.
func SafeNext(next string) string {
	if !safeNext(next) {
		return "/"
	}
	return next
}

func safeNext(next string) bool {
	if len(next) == 0 || len(next) > 2048 {
		return false
	}
	for i := 0; i < len(next); i++ {
		if c := next[i]; c <= ' ' || c >= 0x7f {
			return false // control characters, whitespace, anything not ASCII
		}
	}
	// The path decides where the browser goes; the query and fragment
	// only travel along (and stay encoded).
	p := next
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	for round := 0; ; round++ {
		if !safePath(p) {
			return false
		}
		d, err := url.PathUnescape(p)
		if err != nil {
			return false
		}
		if d == p {
			break
		}
		if round == 3 {
			return false // still encoded after four rounds: nobody links like that
		}
		p = d
	}
	u, err := url.Parse(next)
	return err == nil && u.Scheme == "" && u.Host == "" && u.User == nil && u.Opaque == "" && strings.HasPrefix(u.Path, "/")
}

// safePath checks one decoding of a path: a single leading slash, then no
// slash, no backslash, no control character or whitespace (nor anything
// outside ASCII), no dot segment.
func safePath(p string) bool {
	if len(p) == 0 || p[0] != '/' || strings.HasPrefix(p, "//") {
		return false
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c >= 0x7f || c == '\\' {
			return false
		}
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." {
			return false
		}
	}
	return true
}
