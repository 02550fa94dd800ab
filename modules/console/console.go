// Package console serves the operators' web console.
package console

import (
	"context"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/server"
	"github.com/fleetwright/fleetwright/views"
)

// Deps are what the console needs from the panel.
type Deps struct {
	DB      *pgxpool.Pool
	Health  *server.Health
	Version string
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

// Mount adds the console's routes to r.
func Mount(r chi.Router, d Deps) {
	r.Get("/", d.home)
	r.NotFound(func(w http.ResponseWriter, req *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		_ = views.ErrorPage(http.StatusNotFound, "Not found", "There is no page at this address.").Render(req.Context(), w)
	})
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
	p := views.Page{Title: "Overview", Nav: []views.NavItem{{Label: "Overview", Href: "/", Active: true}}}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = homePage(p, m).Render(ctx, w)
}
