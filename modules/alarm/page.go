package alarm

import (
	"errors"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/server"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/views"
)

// Deps are what the alarms page needs.
type Deps struct {
	DB    *pgxpool.Pool
	Shell *auth.Shell
	Log   *slog.Logger
}

// Mount declares the alarms page and the resolve actions: a tenant's
// alarms are resolved by whoever steers its fleet, the system's by an admin;
// both are audited.
func Mount(r chi.Router, d Deps) {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	r.Method(http.MethodGet, "/alarms", auth.Require(auth.Self, d.page))
	r.Method(http.MethodPost, "/t/{tenant}/alarms/{id}/resolve", auth.Require(auth.FleetSteer, d.resolveTenant))
	r.Method(http.MethodPost, "/admin/alarms/{id}/resolve", auth.Require(auth.SettingsManage, d.resolveSystem))
	d.Shell.AddNav(auth.NavItem{Section: "Activity", Label: "Alarms", Href: "/alarms", Perm: auth.Self, Order: 90})
}

// Row is an alarm on the page with its tenant's slug.
type Row struct {
	Open
	Slug, TenantName string
	CanResolve       bool
}

type pageModel struct {
	Rows    []Row
	Tenants []auth.Tenant
	Admin   bool
	Tenant  string // filter: a slug, "system" or ""
	Kind    string // filter: an alarm kind or ""
	All     bool   // resolved ones too
	// Kinds are the kinds among the rows before the kind filter.
	Kinds []string
	Now   time.Time
}

// page lists the alarms of every tenant the user reaches, each read in its
// own scope, and the system's for an admin: no cross-tenant read.
func (d Deps) page(w http.ResponseWriter, r *http.Request) {
	u := auth.UserFrom(r.Context())
	q := r.URL.Query()
	m := pageModel{Tenants: u.Tenants, Admin: u.Role == auth.Admin, Tenant: q.Get("tenant"), Kind: q.Get("kind"), All: q.Get("state") == "all", Now: time.Now()}
	steer := u.Has(auth.FleetSteer)
	add := func(id, slug, name string, can bool) error {
		if m.Tenant != "" && m.Tenant != slug {
			return nil
		}
		list, err := ListTenant(r.Context(), d.DB, id, !m.All, 200)
		if err != nil {
			return err
		}
		for _, a := range list {
			m.Rows = append(m.Rows, Row{Open: a, Slug: slug, TenantName: name, CanResolve: can && a.ResolvedAt == nil})
		}
		return nil
	}
	var err error
	if m.Admin {
		err = add(System, "system", "system", true)
	}
	for _, t := range u.Tenants {
		if err == nil {
			err = add(t.ID, t.Slug, t.Name, steer)
		}
	}
	if err != nil {
		d.Log.Error("alarms page failed", "err", err)
		auth.ServerError(w, r)
		return
	}
	kinds := map[string]bool{}
	kept := m.Rows[:0]
	for _, a := range m.Rows {
		kinds[a.Kind] = true
		if m.Kind == "" || a.Kind == m.Kind {
			kept = append(kept, a)
		}
	}
	m.Rows = kept
	for k := range kinds {
		m.Kinds = append(m.Kinds, k)
	}
	if m.Kind != "" && !kinds[m.Kind] {
		m.Kinds = append(m.Kinds, m.Kind)
	}
	sort.Strings(m.Kinds)
	sort.SliceStable(m.Rows, func(i, j int) bool {
		a, b := m.Rows[i], m.Rows[j]
		if (a.ResolvedAt == nil) != (b.ResolvedAt == nil) {
			return a.ResolvedAt == nil
		}
		if rank(a.Severity) != rank(b.Severity) {
			return rank(a.Severity) < rank(b.Severity)
		}
		return a.RaisedAt.After(b.RaisedAt)
	})
	views.Render(w, r, http.StatusOK, alarmsPage(d.Shell.Page(w, r, "Alarms"), m))
}

func rank(s Severity) int {
	switch s {
	case Critical:
		return 0
	case Warning:
		return 1
	}
	return 2
}

func (d Deps) resolveTenant(w http.ResponseWriter, r *http.Request) {
	t, _ := auth.TenantFrom(r.Context())
	d.resolve(w, r, t.ID, "/alarms?tenant="+t.Slug)
}

func (d Deps) resolveSystem(w http.ResponseWriter, r *http.Request) {
	d.resolve(w, r, System, "/alarms?tenant=system")
}

// resolve closes one alarm by hand, audited in the alarm's tenant's chain.
func (d Deps) resolve(w http.ResponseWriter, r *http.Request, tenant, back string) {
	u := auth.UserFrom(r.Context())
	id, err := strconv.ParseInt(chi.URLParam(r, "id"), 10, 64)
	if err != nil {
		auth.NotFound(w, r)
		return
	}
	var closed bool
	err = db.InTenant(r.Context(), d.DB, tenant, func(tx pgx.Tx) error {
		var kind, key string
		if err := tx.QueryRow(r.Context(), `SELECT kind, key FROM alarms WHERE id = $1 AND tenant_id = app_tenant() AND resolved_at IS NULL`, id).
			Scan(&kind, &key); err != nil {
			return err
		}
		var err error
		if closed, err = resolve(r.Context(), tx, tenant, kind, key, u.Email, time.Time{}); err != nil || !closed {
			return err
		}
		return audit.Append(r.Context(), tx, audit.Entry{ActorID: u.ID, Actor: u.Email, IP: server.ClientIP(r),
			Action: "alarm.resolve", Target: kind + " " + key, Detail: map[string]any{"alarm_id": id}})
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		auth.Flash(w, "warn", "That alarm is resolved already.")
	case err != nil:
		d.Log.Error("resolve alarm failed", "err", err)
		auth.ServerError(w, r)
		return
	default:
		auth.Flash(w, "ok", "Alarm resolved. It opens again if its condition is seen again.")
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}
