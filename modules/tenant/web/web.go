// Package web is the tenants' console pages: the tenants page for admins
// (list, create) and each tenant's overview for those who reach it.
package web

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/server"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/tenant"
	"github.com/fleetwright/fleetwright/views"
)

// Deps are what the module needs from the panel.
type Deps struct {
	DB    *pgxpool.Pool
	Shell *auth.Shell
	Log   *slog.Logger
}

// Mount declares the tenant routes.
func Mount(r chi.Router, d Deps) {
	r.Method(http.MethodGet, "/admin/tenants", auth.Require(auth.TenantsManage, d.list))
	r.Method(http.MethodPost, "/admin/tenants", auth.Require(auth.TenantsManage, d.create))
	r.Method(http.MethodGet, "/t/{tenant}", auth.Require(auth.FleetRead, d.overview))
	d.Shell.AddNav(auth.NavItem{Section: "Administration", Label: "Tenants", Href: "/admin/tenants", Perm: auth.TenantsManage, Order: 810})
}

// row is a tenant as the tenants page lists it.
type row struct {
	ID        string
	Slug      string
	Name      string
	CreatedAt time.Time
	Members   int
}

type listModel struct {
	Tenants []row
	Slug    string
	Name    string
	Errors  tenant.FieldErrors
}

func (d Deps) list(w http.ResponseWriter, r *http.Request) {
	d.renderList(w, r, http.StatusOK, listModel{})
}

func (d Deps) renderList(w http.ResponseWriter, r *http.Request, status int, m listModel) {
	u := auth.UserFrom(r.Context())
	by := audit.Entry{ActorID: u.ID, Actor: u.Email, Target: "tenants page", Detail: map[string]any{"reason": "count members of every tenant"}}
	err := audit.AcrossTenants(r.Context(), d.DB, by, func(tx pgx.Tx) error {
		rows, err := tx.Query(r.Context(), `SELECT t.id::text, t.slug, t.name, t.created_at, (SELECT count(*) FROM tenant_members m WHERE m.tenant_id = t.id)
			FROM tenants t ORDER BY t.name`)
		if err != nil {
			return err
		}
		m.Tenants, err = pgx.CollectRows(rows, pgx.RowToStructByPos[row])
		return err
	})
	if err != nil {
		d.Log.Error("tenants page failed", "err", err)
		auth.ServerError(w, r)
		return
	}
	views.Render(w, r, status, listPage(d.Shell.Page(w, r, "Tenants"), m))
}

func (d Deps) create(w http.ResponseWriter, r *http.Request) {
	u := auth.UserFrom(r.Context())
	slug, name := r.PostFormValue("slug"), r.PostFormValue("name")
	t, err := tenant.Create(r.Context(), d.DB, slug, name, audit.Entry{ActorID: u.ID, Actor: u.Email, IP: server.ClientIP(r)})
	var fe tenant.FieldErrors
	if errors.As(err, &fe) {
		d.renderList(w, r, http.StatusUnprocessableEntity, listModel{Slug: slug, Name: name, Errors: fe})
		return
	}
	if err != nil {
		d.Log.Error("create tenant failed", "err", err)
		auth.ServerError(w, r)
		return
	}
	auth.Flash(w, "ok", "Tenant "+t.Name+" was created. Grant operators access on the Users page.")
	http.Redirect(w, r, "/admin/tenants", http.StatusSeeOther)
}

type member struct {
	Email string
	Role  string
	Since time.Time
}

type overviewModel struct {
	Tenant  auth.Tenant
	Members []member
	Recent  []recent
}

type recent struct {
	At     time.Time
	Actor  string
	Action string
	Target string
	// Agent is the acting agent's name when the actor is "agent:<id>/<worker>".
	Agent *string
}

// Who names the actor for people: an agent by its name and worker, not
// its id.
func (e recent) Who() string {
	if e.Agent != nil && strings.HasPrefix(e.Actor, "agent:") {
		if _, worker, ok := strings.Cut(strings.TrimPrefix(e.Actor, "agent:"), "/"); ok && worker != "" {
			return *e.Agent + " / " + worker
		}
		return *e.Agent
	}
	return e.Actor
}

// overview reads only in the tenant's own scope.
func (d Deps) overview(w http.ResponseWriter, r *http.Request) {
	t, _ := auth.TenantFrom(r.Context())
	m := overviewModel{Tenant: t}
	err := db.InTenant(r.Context(), d.DB, t.ID, func(tx pgx.Tx) error {
		rows, err := tx.Query(r.Context(), `SELECT email, role, granted_at FROM tenant_members ORDER BY email`)
		if err != nil {
			return err
		}
		if m.Members, err = pgx.CollectRows(rows, pgx.RowToStructByPos[member]); err != nil {
			return err
		}
		rows, err = tx.Query(r.Context(), `SELECT a.at, a.actor, a.action, a.target, ag.name
			FROM (SELECT * FROM audit_log ORDER BY id DESC LIMIT 15) a
			LEFT JOIN agents ag ON a.actor LIKE 'agent:%' AND ag.id::text = split_part(substr(a.actor, 7), '/', 1)
			ORDER BY a.id DESC`)
		if err != nil {
			return err
		}
		m.Recent, err = pgx.CollectRows(rows, pgx.RowToStructByPos[recent])
		return err
	})
	if err != nil {
		d.Log.Error("tenant overview failed", "err", err)
		auth.ServerError(w, r)
		return
	}
	views.Render(w, r, http.StatusOK, overviewPage(d.Shell.Page(w, r, t.Name), m))
}
