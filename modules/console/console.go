// Package console serves the operators' web console.
package console

import (
	"context"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/server"
	"github.com/fleetwright/fleetwright/modules/auth"
)

// Deps are what the console needs from the panel.
type Deps struct {
	DB      *pgxpool.Pool
	Health  *server.Health
	Version string
	Shell   *auth.Shell
}

type homeModel struct {
	Installation string
	Version      string
	Checks       []checkView
}

type checkView struct {
	Name string
	OK   bool
}

// Mount adds the console's landing page to r.
func Mount(r chi.Router, d Deps) {
	r.Method(http.MethodGet, "/", auth.Require(auth.Self, d.home))
	d.Shell.AddNav(auth.NavItem{Label: "Overview", Href: "/", Perm: auth.Self, Order: 0})
}

func (d Deps) home(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	m := homeModel{Version: d.Version}
	if err := d.DB.QueryRow(ctx, "SELECT id::text FROM installation").Scan(&m.Installation); err != nil {
		m.Installation = "unavailable"
	}
	_, results := d.Health.Run(ctx, 2*time.Second)
	for _, c := range results {
		m.Checks = append(m.Checks, checkView{Name: c.Name, OK: c.OK})
	}
	p := d.Shell.Page(w, r, "Overview")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_ = homePage(p, m).Render(ctx, w)
}
