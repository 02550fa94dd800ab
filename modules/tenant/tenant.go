// Package tenant manages the operators' clients: the tenants page for
// admins and each tenant's overview for those who reach it.
package tenant

import (
	"context"
	"errors"
	"fmt"
	"github.com/fleetwright/fleetwright/app/server"
	"github.com/fleetwright/fleetwright/views"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
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

// Tenant is a tenant as listed.
type Tenant struct {
	ID        string
	Slug      string
	Name      string
	CreatedAt time.Time
	Members   int
}

// FieldErrors are validation messages by form field.
type FieldErrors map[string]string

func (f FieldErrors) Error() string { return fmt.Sprintf("tenant: invalid %v", map[string]string(f)) }

var slugRe = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,62}$`)

// Create stores a new tenant, audited on the system chain and as the first
// entry of the tenant's own chain.
func Create(ctx context.Context, pool *pgxpool.Pool, slug, name string, by audit.Entry) (Tenant, error) {
	t := Tenant{Slug: strings.TrimSpace(slug), Name: strings.TrimSpace(name)}
	fe := FieldErrors{}
	if !slugRe.MatchString(t.Slug) {
		fe["slug"] = "2 to 63 lower-case letters, digits and dashes, starting with a letter or digit"
	}
	if t.Name == "" || len(t.Name) > 200 {
		fe["name"] = "enter a name of up to 200 characters"
	}
	if len(fe) > 0 {
		return t, fe
	}
	err := audit.InSystem(ctx, pool, func(tx pgx.Tx) error {
		// The dispatch mode is the column's default (assign since migration
		// 0140); the entry records which one this tenant started with.
		var mode string
		if err := tx.QueryRow(ctx, `INSERT INTO tenants (slug, name) VALUES ($1, $2) RETURNING id::text, created_at, dispatch_mode`, t.Slug, t.Name).Scan(&t.ID, &t.CreatedAt, &mode); err != nil {
			return err
		}
		by.Action, by.Target, by.Detail = "tenant.created", t.Slug, map[string]any{"tenant_id": t.ID, "name": t.Name, "dispatch_mode": mode}
		return audit.Append(ctx, tx, by)
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		return t, FieldErrors{"slug": "this slug is taken"}
	}
	if err != nil {
		return t, fmt.Errorf("tenant: create: %w", err)
	}
	err = db.InTenant(ctx, pool, t.ID, func(tx pgx.Tx) error { return audit.Append(ctx, tx, by) })
	if err != nil {
		return t, fmt.Errorf("tenant: create: %w", err)
	}
	return t, nil
}

type listModel struct {
	Tenants []Tenant
	Slug    string
	Name    string
	Errors  FieldErrors
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
		m.Tenants, err = pgx.CollectRows(rows, pgx.RowToStructByPos[Tenant])
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
	t, err := Create(r.Context(), d.DB, slug, name, audit.Entry{ActorID: u.ID, Actor: u.Email, IP: server.ClientIP(r)})
	var fe FieldErrors
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
