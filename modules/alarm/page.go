package alarm

import (
	"errors"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/clock"
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
	// Clock is when now is: silences start and end on it (nil: the real
	// clock).
	Clock clock.Clock
}

func (d Deps) now() time.Time {
	if d.Clock == nil {
		return time.Now()
	}
	return d.Clock.Now()
}

// Mount declares the alarms page and a person's actions on an open alarm
// (acknowledge, silence for a while, end the silence, resolve): on a
// tenant's alarms by whoever steers its fleet, on the system's by an admin;
// each is audited.
func Mount(r chi.Router, d Deps) {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	r.Method(http.MethodGet, "/alarms", auth.Require(auth.Self, d.page))
	for _, a := range []string{"resolve", "acknowledge", "silence", "unsilence"} {
		r.Method(http.MethodPost, "/t/{tenant}/alarms/{id}/"+a, auth.Require(auth.FleetSteer, d.tenantAction(a)))
		r.Method(http.MethodPost, "/admin/alarms/{id}/"+a, auth.Require(auth.SettingsManage, d.systemAction(a)))
	}
	d.Shell.AddNav(auth.NavItem{Section: "Activity", Label: "Alarms", Href: "/alarms", Perm: auth.Self, Order: 90})
}

// Row is an alarm on the page with its tenant's slug.
type Row struct {
	Open
	Slug, TenantName string
	// CanAct: the user may acknowledge, silence and resolve it (it is open).
	CanAct bool
}

// States the page filters by: open is every alarm not resolved
// (acknowledged and silenced ones too, each marked).
const (
	StateOpen         = "open"
	StateAcknowledged = "acknowledged"
	StateSilenced     = "silenced"
	StateResolved     = "resolved"
	StateAll          = "all"
)

// inState reports whether a is in the page's state filter at now.
func inState(a Open, state string, now time.Time) bool {
	switch state {
	case StateAcknowledged:
		return a.ResolvedAt == nil && a.AcknowledgedAt != nil
	case StateSilenced:
		return a.Silenced(now)
	case StateResolved:
		return a.ResolvedAt != nil
	case StateAll:
		return true
	}
	return a.ResolvedAt == nil
}

type pageModel struct {
	Rows    []Row
	Tenants []auth.Tenant
	Admin   bool
	Tenant  string // filter: a slug, "system" or ""
	Kind    string // filter: an alarm kind or ""
	State   string // filter: one of the State constants
	// Back is this page with its filters: where an action returns to.
	Back string
	// Kinds are the kinds among the rows before the kind filter.
	Kinds []string
	Now   time.Time
}

// page lists the alarms of every tenant the user reaches, each read in its
// own scope, and the system's for an admin: no cross-tenant read.
func (d Deps) page(w http.ResponseWriter, r *http.Request) {
	u := auth.UserFrom(r.Context())
	q := r.URL.Query()
	m := pageModel{Tenants: u.Tenants, Admin: u.Role == auth.Admin, Tenant: q.Get("tenant"), Kind: q.Get("kind"), State: q.Get("state"), Now: d.now(), Back: r.URL.RequestURI()}
	switch m.State {
	case StateAcknowledged, StateSilenced, StateResolved, StateAll:
	default:
		m.State = StateOpen
	}
	openOnly := m.State != StateResolved && m.State != StateAll
	steer := u.Has(auth.FleetSteer)
	add := func(id, slug, name string, can bool) error {
		if m.Tenant != "" && m.Tenant != slug {
			return nil
		}
		list, err := ListTenant(r.Context(), d.DB, id, openOnly, 200)
		if err != nil {
			return err
		}
		for _, a := range list {
			if inState(a, m.State, m.Now) {
				m.Rows = append(m.Rows, Row{Open: a, Slug: slug, TenantName: name, CanAct: can && a.ResolvedAt == nil})
			}
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

func (d Deps) tenantAction(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t, _ := auth.TenantFrom(r.Context())
		d.act(w, r, action, t.ID, t.Slug)
	}
}

func (d Deps) systemAction(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { d.act(w, r, action, System, "system") }
}

// back is where an action returns to: the page the form was on (its
// filters kept), else the alarms of the tenant.
func back(r *http.Request, slug string) string {
	if b := r.PostFormValue("back"); strings.HasPrefix(b, "/alarms") && !strings.HasPrefix(b, "//") {
		return b
	}
	return "/alarms?tenant=" + slug
}

// act is a person's action on one open alarm, audited in the alarm's
// tenant's chain in the same transaction.
func (d Deps) act(w http.ResponseWriter, r *http.Request, action, tenant, slug string) {
	u := auth.UserFrom(r.Context())
	id, err := strconv.ParseInt(chi.URLParam(r, "id"), 10, 64)
	if err != nil {
		auth.NotFound(w, r)
		return
	}
	now := d.now()
	var silence time.Duration
	if action == "silence" {
		for _, c := range SilenceChoices {
			if r.PostFormValue("for") == c.String() {
				silence = c
			}
		}
		if silence == 0 {
			auth.Flash(w, "bad", "Not silenced: choose how long to silence it for ("+choiceWords()+").")
			http.Redirect(w, r, back(r, slug), http.StatusSeeOther)
			return
		}
	}
	var done string
	err = db.InTenant(r.Context(), d.DB, tenant, func(tx pgx.Tx) error {
		var h Hand
		detail := map[string]any{"alarm_id": id}
		switch action {
		case "resolve":
			if err := tx.QueryRow(r.Context(), `SELECT kind, key FROM alarms WHERE id = $1 AND tenant_id = app_tenant() AND resolved_at IS NULL`, id).
				Scan(&h.Kind, &h.Key); err != nil {
				return err
			}
			closed, err := resolve(r.Context(), tx, tenant, h.Kind, h.Key, u.Email, now)
			if err != nil {
				return err
			}
			if !closed {
				return pgx.ErrNoRows
			}
			done = "Alarm resolved. It opens again if its condition is seen again."
		case "acknowledge":
			if h, err = Acknowledge(r.Context(), tx, id, u.Email, now); err != nil {
				return err
			}
			done = "Alarm acknowledged: the alarms page shows that you are on it."
		case "silence":
			if h, err = Silence(r.Context(), tx, id, silence, u.Email, now); err != nil {
				return err
			}
			detail["for"], detail["until"] = silence.String(), h.Until.UTC().Format(time.RFC3339)
			done = "Alarm silenced until " + stamp(now, h.Until) + ": not counted in the attention strip and not notified again until then."
		case "unsilence":
			if h, err = Unsilence(r.Context(), tx, id, now); err != nil {
				return err
			}
			done = "Silence ended: the alarm counts again."
		}
		return audit.Append(r.Context(), tx, audit.Entry{ActorID: u.ID, Actor: u.Email, IP: server.ClientIP(r),
			Action: "alarm." + action, Target: h.Kind + " " + h.Key, Detail: detail})
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		auth.Flash(w, "warn", "Nothing changed: that alarm is resolved already (or its silence had ended).")
	case err != nil:
		d.Log.Error("alarm action failed", "action", action, "err", err)
		auth.ServerError(w, r)
		return
	default:
		auth.Flash(w, "ok", done)
	}
	http.Redirect(w, r, back(r, slug), http.StatusSeeOther)
}

// choiceWords lists the silence durations in words.
func choiceWords() string {
	var out []string
	for _, c := range SilenceChoices {
		out = append(out, durationWords(c))
	}
	return strings.Join(out, ", ")
}

// durationWords is a silence's length as people say it.
func durationWords(d time.Duration) string {
	switch {
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + " min"
	case d < 24*time.Hour:
		return strconv.Itoa(int(d.Hours())) + " h"
	case d == 24*time.Hour:
		return "1 day"
	}
	return strconv.Itoa(int(d.Hours())/24) + " days"
}
