package retention

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/server"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/schedule"
	"github.com/fleetwright/fleetwright/views"
)

// Deps are what the retention page needs.
type Deps struct {
	DB *pgxpool.Pool
	// Schedules shows the daily prune's last and next run (nil: not shown).
	Schedules *schedule.Scheduler
	Shell     *auth.Shell
	Log       *slog.Logger
	Clock     clock.Clock
}

// Mount declares the retention page (everyone sees the global settings and
// those of the tenants they reach, what the last prune deleted and when the
// next one runs) and the change action (admin; each change audited as
// retention.set). The form posts with htmx and gets its own section back,
// its errors beside the fields; without JavaScript it is a plain post.
func Mount(r chi.Router, d Deps) {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Clock == nil {
		d.Clock = clock.Real{}
	}
	r.Method(http.MethodGet, "/retention", auth.Require(auth.Self, d.page))
	r.Method(http.MethodPost, "/admin/retention", auth.Require(auth.SettingsManage, d.set))
	d.Shell.AddNav(auth.NavItem{Section: "Activity", Label: "Retention", Href: "/retention", Perm: auth.Self, Order: 105})
}

// Row is one kind of data in one scope.
type Row struct {
	Def
	// Own is the scope's own setting for people ("" when none); Input is
	// what the form field holds.
	Own, Input string
	// Applies is what applies to the tenant, and where it is set.
	Applies, From string
	// Error is this field's validation error.
	Error string
}

// Scope is the global settings or one tenant's.
type Scope struct {
	Slug, Name string
	Global     bool
	Rows       []Row
	// Pruned is what the latest prune that deleted anything here deleted
	// (nil: none kept); RunPruned what the last daily run deleted (nil:
	// nothing).
	Pruned, RunPruned *Pruned
	Admin             bool
	// Saved and Error report the last change of this scope's form.
	Saved, Error string
	// LastRun is the daily prune's last finished run.
	LastRun *schedule.RunRecord
}

// OlderPrune says Pruned is not the last daily run's (a CLI prune, or an
// earlier run): shown on its own line.
func (s Scope) OlderPrune() bool {
	return s.Pruned != nil && (s.RunPruned == nil || s.Pruned.Run != s.RunPruned.Run)
}

type pageModel struct {
	Status PruneStatus
	Scopes []Scope
	Now    time.Time
}

func (d Deps) page(w http.ResponseWriter, r *http.Request) {
	m, err := d.model(r, nil)
	if err != nil {
		d.Log.Error("retention page", "err", err)
		auth.ServerError(w, r)
		return
	}
	views.Render(w, r, http.StatusOK, retentionPage(d.Shell.Page(w, r, "Retention"), m))
}

// model reads every scope the user reaches; edited replaces one scope's
// rows with a refused form's (its values and errors).
func (d Deps) model(r *http.Request, edited *Scope) (pageModel, error) {
	ctx := r.Context()
	u := auth.UserFrom(ctx)
	m := pageModel{Now: d.Clock.Now()}
	var err error
	if m.Status, err = Status(ctx, d.Schedules); err != nil {
		return m, err
	}
	g, err := d.scope(r, "global", "Global (every tenant, and the system's own alarms and audit log)", Global)
	if err != nil {
		return m, err
	}
	m.Scopes = append(m.Scopes, g)
	for _, t := range u.Tenants {
		s, err := d.scope(r, t.Slug, t.Name, t.ID)
		if err != nil {
			return m, err
		}
		m.Scopes = append(m.Scopes, s)
	}
	if edited != nil {
		for i := range m.Scopes {
			if m.Scopes[i].Slug == edited.Slug {
				m.Scopes[i].Rows, m.Scopes[i].Error = edited.Rows, edited.Error
			}
		}
	}
	return m, nil
}

// scope reads one scope's settings and its last prune.
func (d Deps) scope(r *http.Request, slug, name, tenant string) (Scope, error) {
	ctx := r.Context()
	s := Scope{Slug: slug, Name: name, Global: tenant == Global, Admin: auth.UserFrom(ctx).Has(auth.SettingsManage)}
	set, err := Load(ctx, d.DB, tenant)
	if err != nil {
		return s, err
	}
	own := set.Tenant
	if s.Global {
		own = set.Global
	}
	for _, def := range Defs {
		row := Row{Def: def}
		if v, ok := own[def.Kind]; ok {
			row.Own = FormatDays(v)
			row.Input = "forever"
			if v > 0 {
				row.Input = strconv.Itoa(v)
			}
		}
		days, from := set.Days(def.Kind)
		if s.Global {
			days, from = def.Default, "default"
			if v, ok := set.Global[def.Kind]; ok {
				days, from = v, "global"
			}
		}
		row.Applies, row.From = FormatDays(days), from
		s.Rows = append(s.Rows, row)
	}
	if s.Pruned, err = LastPruned(ctx, d.DB, tenant); err != nil {
		return s, err
	}
	if st, err := Status(ctx, d.Schedules); err == nil && st.LastRun != nil {
		s.LastRun = st.LastRun
		if s.RunPruned, err = PrunedByRun(ctx, d.DB, tenant, st.LastRun.ID); err != nil {
			return s, err
		}
	}
	return s, nil
}

// set changes a scope's settings from its form: every field is checked
// first, and nothing is stored while one is wrong; then each changed kind is
// stored and audited.
func (d Deps) set(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	u := auth.UserFrom(ctx)
	slug := r.PostFormValue("scope")
	tenant, name := "", ""
	if slug == "global" {
		tenant, name = Global, "Global"
	}
	for _, t := range u.Tenants {
		if t.Slug == slug {
			tenant, name = t.ID, t.Name
		}
	}
	if tenant == "" {
		d.refuse(w, r, &Scope{Slug: slug, Error: "Unknown tenant " + strconv.Quote(slug) + "."})
		return
	}
	cur, err := d.scope(r, slug, name, tenant)
	if err != nil {
		d.Log.Error("retention: read settings", "err", err)
		auth.ServerError(w, r)
		return
	}
	type change struct {
		kind Kind
		days int
		ok   bool
	}
	var changes []change
	bad := 0
	for i, row := range cur.Rows {
		in := strings.TrimSpace(r.PostFormValue(string(row.Kind)))
		cur.Rows[i].Input = in
		days, ok, err := ParseDays(in)
		if err != nil {
			cur.Rows[i].Error = "Write a number of days from 1 to 36500, \"forever\", or leave it empty for the " + fallback(cur.Global) + "."
			bad++
			continue
		}
		newOwn := ""
		if ok {
			newOwn = FormatDays(days)
		}
		if newOwn != row.Own {
			changes = append(changes, change{row.Kind, days, ok})
		}
	}
	if bad > 0 {
		cur.Error = strconv.Itoa(bad) + " value(s) are not valid; nothing was changed."
		if bad == 1 {
			cur.Error = "One value is not valid; nothing was changed."
		}
		d.refuse(w, r, &cur)
		return
	}
	by := audit.Entry{ActorID: u.ID, Actor: u.Email, IP: server.ClientIP(r)}
	for _, c := range changes {
		if err := Set(ctx, d.DB, by, tenant, c.kind, c.days, c.ok); err != nil {
			if errors.Is(err, ErrUnknown) {
				cur.Error = err.Error()
				d.refuse(w, r, &cur)
				return
			}
			d.Log.Error("retention: set", "err", err)
			auth.ServerError(w, r)
			return
		}
	}
	msg := "No change."
	if len(changes) > 0 {
		names := make([]string, len(changes))
		for i, c := range changes {
			names[i] = string(c.kind)
		}
		msg = "Saved: " + strings.Join(names, ", ") + "."
	}
	if isHTMX(r) {
		s, err := d.scope(r, slug, name, tenant)
		if err != nil {
			d.Log.Error("retention: read settings", "err", err)
			auth.ServerError(w, r)
			return
		}
		s.Saved = msg
		views.Render(w, r, http.StatusOK, scopeSection(s))
		return
	}
	auth.Flash(w, "ok", "Retention of "+slug+": "+msg)
	http.Redirect(w, r, "/retention#retention-"+slug, http.StatusSeeOther)
}

// refuse answers a refused form: with htmx its section with the errors
// (200, so htmx swaps it in), otherwise the whole page with 400.
func (d Deps) refuse(w http.ResponseWriter, r *http.Request, s *Scope) {
	if isHTMX(r) && s.Rows != nil {
		views.Render(w, r, http.StatusOK, scopeSection(*s))
		return
	}
	m, err := d.model(r, s)
	if err != nil {
		d.Log.Error("retention page", "err", err)
		auth.ServerError(w, r)
		return
	}
	p := d.Shell.Page(w, r, "Retention")
	if s.Rows == nil {
		p.Flashes = append(p.Flashes, views.Flash{Kind: "bad", Text: s.Error})
	}
	views.Render(w, r, http.StatusBadRequest, retentionPage(p, m))
}

func fallback(global bool) string {
	if global {
		return "built-in default"
	}
	return "global setting"
}

func isHTMX(r *http.Request) bool { return r.Header.Get("HX-Request") == "true" }
