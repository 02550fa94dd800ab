package schedule

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/views"
)

// Deps are what the schedules page needs.
type Deps struct {
	Scheduler *Scheduler
	DB        *pgxpool.Pool
	Shell     *auth.Shell
	Log       *slog.Logger
}

// Mount declares the schedules page: every schedule the user reaches with
// its next five run times and its last runs; a new schedule is created
// disabled, so its next runs are seen before it is enabled; every change
// is audited in the schedule's tenant's chain.
func Mount(r chi.Router, d Deps) {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	r.Method(http.MethodGet, "/schedules", auth.Require(auth.Self, d.page))
	r.Method(http.MethodGet, "/schedules/preview", auth.Require(auth.Self, d.preview))
	r.Method(http.MethodPost, "/t/{tenant}/schedules", auth.Require(auth.FleetSteer, d.create))
	r.Method(http.MethodPost, "/t/{tenant}/schedules/{name}/{action}", auth.Require(auth.FleetSteer, d.tenantAction))
	r.Method(http.MethodPost, "/admin/schedules/{name}/{action}", auth.Require(auth.SettingsManage, d.systemAction))
	d.Shell.AddNav(auth.NavItem{Section: "Activity", Label: "Schedules", Href: "/schedules", Perm: auth.Self, Order: 95})
}

// Row is a schedule on the page.
type Row struct {
	Schedule
	Slug, TenantName string
	Next             []time.Time
	Runs             []RunRecord
	CanChange        bool
}

type pageModel struct {
	Rows    []Row
	Tenants []auth.Tenant
	Kinds   []string
	Error   string
	Form    Spec
	FormFor string
	Now     time.Time
}

func (d Deps) load(r *http.Request, m *pageModel) error {
	u := auth.UserFrom(r.Context())
	m.Tenants, m.Kinds, m.Now = u.Tenants, d.Scheduler.Kinds(), d.Scheduler.cfg.Clock.Now()
	if m.FormFor == "" {
		m.FormFor = r.URL.Query().Get("tenant")
	}
	if _, ok := u.Tenant(m.FormFor); !ok && len(u.Tenants) > 0 {
		m.FormFor = u.Tenants[0].Slug
	}
	add := func(id, slug, name string, can bool) error {
		list, err := d.Scheduler.List(r.Context(), id)
		if err != nil {
			return err
		}
		for _, sc := range list {
			row := Row{Schedule: sc, Slug: slug, TenantName: name, CanChange: can}
			row.Next, _ = NextRuns(sc.Cron, sc.TimeZone, m.Now, 5)
			if row.Runs, err = d.Scheduler.Runs(r.Context(), id, sc.ID, 5); err != nil {
				return err
			}
			m.Rows = append(m.Rows, row)
		}
		return nil
	}
	if u.Role == auth.Admin {
		if err := add(System, "system", "system", true); err != nil {
			return err
		}
	}
	for _, t := range u.Tenants {
		if err := add(t.ID, t.Slug, t.Name, u.Has(auth.FleetSteer)); err != nil {
			return err
		}
	}
	return nil
}

func (d Deps) render(w http.ResponseWriter, r *http.Request, status int, m pageModel) {
	if err := d.load(r, &m); err != nil {
		d.Log.Error("schedules page", "err", err)
		auth.ServerError(w, r)
		return
	}
	views.Render(w, r, status, schedulesPage(d.Shell.Page(w, r, "Schedules"), m))
}

func (d Deps) page(w http.ResponseWriter, r *http.Request) {
	d.render(w, r, http.StatusOK, pageModel{})
}

// preview answers the next five run times of a cron expression in a zone,
// as the form is filled in (htmx).
func (d Deps) preview(w http.ResponseWriter, r *http.Request) {
	next, err := NextRuns(r.URL.Query().Get("cron"), r.URL.Query().Get("time_zone"), d.Scheduler.cfg.Clock.Now(), 5)
	views.Render(w, r, http.StatusOK, nextRuns(next, err))
}

func (d Deps) audit(r *http.Request, tenant, action, target string, detail map[string]any) error {
	u := auth.UserFrom(r.Context())
	return db.InTenant(r.Context(), d.DB, tenant, func(tx pgx.Tx) error {
		return audit.Append(r.Context(), tx, audit.Entry{ActorID: u.ID, Actor: u.Email, IP: r.RemoteAddr, Action: action, Target: target, Detail: detail})
	})
}

func (d Deps) create(w http.ResponseWriter, r *http.Request) {
	t, _ := auth.TenantFrom(r.Context())
	capN, _ := strconv.Atoi(r.PostFormValue("cap"))
	sp := Spec{Name: strings.TrimSpace(r.PostFormValue("name")), Kind: r.PostFormValue("kind"), Cron: strings.TrimSpace(r.PostFormValue("cron")),
		TimeZone: strings.TrimSpace(r.PostFormValue("time_zone")), CatchUp: Policy(r.PostFormValue("catch_up")), Cap: capN}
	if a := strings.TrimSpace(r.PostFormValue("args")); a != "" {
		sp.Args = []byte(a)
	}
	sc, err := d.Scheduler.Create(r.Context(), t.ID, auth.UserFrom(r.Context()).Email, sp)
	if err != nil {
		d.render(w, r, http.StatusUnprocessableEntity, pageModel{Error: err.Error(), Form: sp, FormFor: t.Slug})
		return
	}
	if err := d.audit(r, t.ID, "schedule.create", sc.Name, map[string]any{"kind": sc.Kind, "cron": sc.Cron, "time_zone": sc.TimeZone,
		"catch_up": string(sc.CatchUp), "cap": sc.Cap}); err != nil {
		d.Log.Error("audit schedule create", "err", err)
	}
	auth.Flash(w, "ok", "Schedule "+sc.Name+" created, disabled: check its next runs below, then enable it.")
	http.Redirect(w, r, "/schedules", http.StatusSeeOther)
}

func (d Deps) tenantAction(w http.ResponseWriter, r *http.Request) {
	t, _ := auth.TenantFrom(r.Context())
	d.action(w, r, t.ID)
}

func (d Deps) systemAction(w http.ResponseWriter, r *http.Request) { d.action(w, r, System) }

func (d Deps) action(w http.ResponseWriter, r *http.Request, tenant string) {
	name, action := chi.URLParam(r, "name"), chi.URLParam(r, "action")
	by := auth.UserFrom(r.Context()).Email
	var err error
	switch action {
	case "enable", "disable":
		err = d.Scheduler.SetEnabled(r.Context(), tenant, name, action == "enable", by)
	case "delete":
		err = d.Scheduler.Delete(r.Context(), tenant, name)
	default:
		auth.NotFound(w, r)
		return
	}
	if err != nil {
		auth.Flash(w, "bad", err.Error())
	} else {
		if aerr := d.audit(r, tenant, "schedule."+action, name, nil); aerr != nil {
			d.Log.Error("audit schedule change", "err", aerr)
		}
		auth.Flash(w, "ok", fmt.Sprintf("Schedule %s: %sd.", name, action))
	}
	http.Redirect(w, r, "/schedules", http.StatusSeeOther)
}
