package limit

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/server"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/views"
)

// Deps are what the limits page needs.
type Deps struct {
	DB    *pgxpool.Pool
	Shell *auth.Shell
	Log   *slog.Logger
	// Notify is told of each change (the fleet's enrolled assistants);
	// nil: the work learns a limit when it next reads it.
	Notify Notifier
}

// Mount declares the limits page (everyone sees the limits of the tenants
// they reach and the global ones) and the change action (admin; audited).
func Mount(r chi.Router, d Deps) {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	r.Method(http.MethodGet, "/limits", auth.Require(auth.Self, d.page))
	r.Method(http.MethodPost, "/admin/limits", auth.Require(auth.SettingsManage, d.set))
	d.Shell.AddNav(auth.NavItem{Section: "Activity", Label: "Limits", Href: "/limits", Perm: auth.Self, Order: 95})
}

// Row is one limit of one scope on the page.
type Row struct {
	Def
	// Value is the scope's own value ("" when none).
	Value string
	// Effective is what applies to the tenant ("no limit" when none), and
	// where it comes from.
	Effective, From string
}

// Scope is the global limits or one tenant's.
type Scope struct {
	Slug, Name string // "global" for the global limits
	Rows       []Row
}

type pageModel struct {
	Scopes []Scope
	Admin  bool
	Error  string
}

func (d Deps) page(w http.ResponseWriter, r *http.Request) {
	d.render(w, r, http.StatusOK, "")
}

func (d Deps) render(w http.ResponseWriter, r *http.Request, status int, msg string) {
	u := auth.UserFrom(r.Context())
	m := pageModel{Admin: u.Has(auth.SettingsManage), Error: msg}
	g, err := Load(r.Context(), d.DB, Global)
	if err == nil {
		m.Scopes = append(m.Scopes, scope("global", "Global (every tenant)", Limits{Tenant: g.Global}, true))
		for _, t := range u.Tenants {
			var l Limits
			if l, err = Load(r.Context(), d.DB, t.ID); err != nil {
				break
			}
			m.Scopes = append(m.Scopes, scope(t.Slug, t.Name, l, false))
		}
	}
	if err != nil {
		d.Log.Error("limits page", "err", err)
		auth.ServerError(w, r)
		return
	}
	views.Render(w, r, status, limitsPage(d.Shell.Page(w, r, "Limits"), m))
}

func scope(slug, name string, l Limits, global bool) Scope {
	s := Scope{Slug: slug, Name: name}
	for _, def := range Defs {
		row := Row{Def: def}
		if v, ok := l.Tenant[def.Name]; ok {
			row.Value = def.Format(v)
		}
		if !global {
			e := l.Get(def.Name)
			row.Effective, row.From = "no limit", ""
			if e.Set {
				row.Effective, row.From = def.Format(e.Value), e.From
			}
		}
		s.Rows = append(s.Rows, row)
	}
	return s
}

// set changes one limit of one scope: an empty value removes it.
func (d Deps) set(w http.ResponseWriter, r *http.Request) {
	u := auth.UserFrom(r.Context())
	slug, name := r.PostFormValue("scope"), Name(r.PostFormValue("name"))
	tenant := ""
	if slug == "global" {
		tenant = Global
	}
	for _, t := range u.Tenants {
		if t.Slug == slug {
			tenant = t.ID
		}
	}
	def, known := DefOf(name)
	if tenant == "" || !known {
		d.render(w, r, http.StatusBadRequest, "Unknown tenant or limit.")
		return
	}
	v, ok, err := def.Parse(r.PostFormValue("value"))
	if err != nil {
		d.render(w, r, http.StatusUnprocessableEntity, def.Label+": "+strings.TrimPrefix(err.Error(), string(name)+": "))
		return
	}
	by := audit.Entry{ActorID: u.ID, Actor: u.Email, IP: server.ClientIP(r)}
	var tell []Notifier
	if d.Notify != nil {
		tell = append(tell, d.Notify)
	}
	if err := Set(r.Context(), d.DB, by, tenant, name, v, ok, tell...); err != nil {
		if errors.Is(err, ErrUnknown) {
			d.render(w, r, http.StatusBadRequest, err.Error())
			return
		}
		if errors.Is(err, ErrNotTold) {
			d.Log.Error("set limit: not every tenant was told", "err", err)
			auth.Flash(w, "bad", def.Label+" of "+slug+" is saved, but not every connected assistant could be told now: each learns it when it next connects.")
			http.Redirect(w, r, "/limits#"+slug, http.StatusSeeOther)
			return
		}
		d.Log.Error("set limit", "err", err)
		auth.ServerError(w, r)
		return
	}
	if ok {
		auth.Flash(w, "ok", def.Label+" of "+slug+" set to "+def.Format(v)+".")
	} else {
		auth.Flash(w, "ok", def.Label+" of "+slug+" removed.")
	}
	http.Redirect(w, r, "/limits#"+slug, http.StatusSeeOther)
}
