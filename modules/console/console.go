// Package console serves the operators' web console: its landing page is
// the overview, the whole fleet's state in one window, refreshed live.
package console

import (
	"context"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/server"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/schedule"
	"github.com/fleetwright/fleetwright/views"
)

// Deps are what the console needs from the panel; Claims, Fleet and
// Schedules may be nil (their figures are left out).
type Deps struct {
	DB        *pgxpool.Pool
	Health    *server.Health
	Version   string
	Shell     *auth.Shell
	Claims    *claim.Engine
	Fleet     *fleet.Store
	Schedules *schedule.Scheduler
	Clock     clock.Clock
}

type homeModel struct {
	Installation string
	Version      string
	Checks       []checkView
	Overview     Overview
}

type checkView struct {
	Name string
	OK   bool
}

// Mount adds the overview (the landing page) and its live fragments to r.
func Mount(r chi.Router, d Deps) {
	r.Method(http.MethodGet, "/", auth.Require(auth.Self, d.home))
	r.Method(http.MethodGet, "/overview/figures", auth.Require(auth.Self, d.figures))
	r.Method(http.MethodGet, "/t/{tenant}/overview/figures", auth.Require(auth.FleetRead, d.tenantFigures))
	r.Method(http.MethodGet, AttentionPath, auth.Require(auth.Self, d.attentionFragment))
	d.Shell.AddNav(auth.NavItem{Label: "Overview", Href: "/", Perm: auth.Self, Order: 0})
	d.Shell.SetAttention(d.attention)
}

func (d Deps) sources() Sources {
	return Sources{DB: d.DB, Claims: d.Claims, Fleet: d.Fleet, Schedules: d.Schedules, Clock: d.Clock}
}

// overview is the signed-in user's: every tenant they reach, and the
// system's own figures for an admin.
func (d Deps) overview(ctx context.Context, u *auth.User) Overview {
	return Build(ctx, d.sources(), u.Tenants, u.Role == auth.Admin)
}

func (d Deps) home(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	m := homeModel{Version: d.Version}
	if err := d.DB.QueryRow(ctx, "SELECT id::text FROM installation").Scan(&m.Installation); err != nil {
		m.Installation = "unavailable"
	}
	_, results := d.Health.Run(ctx, 2*time.Second)
	for _, c := range results {
		m.Checks = append(m.Checks, checkView{Name: c.Name, OK: c.OK})
	}
	m.Overview = d.overview(ctx, auth.UserFrom(r.Context()))
	views.Render(w, r, http.StatusOK, homePage(d.Shell.Page(w, r, "Overview"), m))
}

func (d Deps) figures(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	views.Render(w, r, http.StatusOK, Figures(d.overview(ctx, auth.UserFrom(r.Context())), "/overview/figures"))
}

// tenantFigures is the live part of a tenant's overview (/t/{tenant}).
func (d Deps) tenantFigures(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	t, _ := auth.TenantFrom(r.Context())
	o := Build(ctx, d.sources(), []auth.Tenant{t}, false)
	o.Single = true
	views.Render(w, r, http.StatusOK, Figures(o, "/t/"+t.Slug+"/overview/figures"))
}
