package claim

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/fleetwright/fleetwright/modules/cell"
	"github.com/fleetwright/fleetwright/views"
)

// WebDeps are what the claim pages need from the panel. Until the console's
// auth lands, Actor names the operator for the audit log, and Guard (when
// set) wraps every route with the console's authentication and RBAC.
type WebDeps struct {
	Engine *Engine
	// Actor returns the signed-in operator's name for the audit log.
	Actor func(r *http.Request) string
	// Guard wraps the routes (auth, RBAC, CSRF); nil mounts them bare.
	Guard func(http.Handler) http.Handler
	// Nav is the console's sidebar; the pages mark their own entry active.
	Nav []views.NavItem
}

type web struct {
	WebDeps
}

// Mount adds the claim engine's console pages under /claims.
func Mount(r chi.Router, d WebDeps) {
	if d.Actor == nil {
		d.Actor = func(*http.Request) string { return "console" }
	}
	w := &web{d}
	r.Route("/claims", func(r chi.Router) {
		if d.Guard != nil {
			r.Use(d.Guard)
		}
		r.Get("/", w.claimsPage)
		r.Get("/rows", w.claimsRows)
		r.Get("/latency", w.latencyPage)
		r.Get("/latency.csv", w.latencyCSV)
		r.Get("/settings", w.settingsPage)
		r.Post("/pause", w.pause)
		r.Post("/limits", w.limits)
		r.Post("/filters", w.putFilter)
		r.Post("/filters/delete", w.deleteFilter)
		r.Post("/reviews", w.decide)
		r.Post("/cells", w.putCell)
		r.Post("/cells/delete", w.deleteCell)
		r.Post("/cells/route", w.routeTenant)
	})
}

func (w *web) page(title, href string) views.Page {
	p := views.Page{Title: title}
	for _, n := range w.Nav {
		n.Active = n.Href == href
		p.Nav = append(p.Nav, n)
	}
	if len(p.Nav) == 0 {
		p.Nav = []views.NavItem{{Label: "Overview", Href: "/"}, {Section: "Claims", Label: "Claims", Href: "/claims/", Active: href == "/claims/"},
			{Label: "Latency", Href: "/claims/latency", Active: href == "/claims/latency"},
			{Label: "Claim settings", Href: "/claims/settings", Active: href == "/claims/settings"}}
	}
	return p
}

// tenantOf picks the tenant from ?tenant= (an id or slug), or the first.
func (w *web) tenantOf(ctx context.Context, r *http.Request) (Tenant, []Tenant, error) {
	all, err := w.Engine.store.Tenants(ctx)
	if err != nil || len(all) == 0 {
		return Tenant{}, all, err
	}
	want := r.FormValue("tenant")
	for _, t := range all {
		if t.ID == want || t.Slug == want {
			return t, all, nil
		}
	}
	return all[0], all, nil
}

func parseWindow(s string, def time.Duration) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > 7*24*time.Hour {
		return def
	}
	return d
}

type claimsModel struct {
	Tenant   Tenant
	Tenants  []Tenant
	State    string
	Worker   string
	Window   string
	Claims   []Claim
	Dups     int
	Query    string
	Err      string
	Paused   bool
	States   []State
	Reviewed int
}

func (w *web) loadClaims(r *http.Request) claimsModel {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	m := claimsModel{State: r.FormValue("state"), Worker: r.FormValue("worker"), Window: r.FormValue("window"), States: Stored}
	if m.Window == "" {
		m.Window = "10m"
	}
	t, all, err := w.tenantOf(ctx, r)
	m.Tenant, m.Tenants = t, all
	if err != nil {
		m.Err = err.Error()
		return m
	}
	m.Query = fmt.Sprintf("tenant=%s&state=%s&worker=%s&window=%s", t.ID, m.State, m.Worker, m.Window)
	if t.ID == "" {
		return m
	}
	if m.Claims, err = w.Engine.store.Recent(ctx, t.ID, parseWindow(m.Window, 10*time.Minute), State(m.State), m.Worker, 500); err != nil {
		m.Err = err.Error()
	}
	m.Dups, _, _ = w.Engine.store.DuplicateConfirmations(ctx, t.ID)
	m.Paused, _ = w.Engine.store.FleetPaused(ctx)
	return m
}

func (w *web) claimsPage(rw http.ResponseWriter, r *http.Request) {
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = claimsPage(w.page("Claims", "/claims/"), w.loadClaims(r)).Render(r.Context(), rw)
}

func (w *web) claimsRows(rw http.ResponseWriter, r *http.Request) {
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = claimsRows(w.loadClaims(r)).Render(r.Context(), rw)
}

type latencyModel struct {
	Tenant  Tenant
	Tenants []Tenant
	Window  string
	By      string
	Groups  []Group
	Hists   []string
	Series  string
	N       int
	Err     string
	Query   string
}

func (w *web) latencyData(r *http.Request) (latencyModel, []Claim) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	m := latencyModel{Window: r.FormValue("window"), By: r.FormValue("by")}
	if m.Window == "" {
		m.Window = "1h"
	}
	t, all, err := w.tenantOf(ctx, r)
	m.Tenant, m.Tenants = t, all
	if err != nil || t.ID == "" {
		if err != nil {
			m.Err = err.Error()
		}
		return m, nil
	}
	m.Query = fmt.Sprintf("tenant=%s&window=%s&by=%s", t.ID, m.Window, m.By)
	claims, err := w.Engine.store.Window(ctx, t.ID, parseWindow(m.Window, time.Hour), 50000)
	if err != nil {
		m.Err = err.Error()
		return m, nil
	}
	return m, claims
}

func (w *web) latencyPage(rw http.ResponseWriter, r *http.Request) {
	m, claims := w.latencyData(r)
	m.N = len(claims)
	m.Groups = GroupBy(claims, m.By)
	for _, s := range Stages {
		m.Hists = append(m.Hists, HistogramSVG(s, claims))
	}
	m.Series = SeriesSVG(StageDetectAction, claims)
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = latencyPage(w.page("Latency", "/claims/latency"), m).Render(r.Context(), rw)
}

func (w *web) latencyCSV(rw http.ResponseWriter, r *http.Request) {
	m, claims := w.latencyData(r)
	if m.Err != "" {
		http.Error(rw, m.Err, http.StatusInternalServerError)
		return
	}
	rw.Header().Set("Content-Type", "text/csv; charset=utf-8")
	rw.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="latency-%s-%s.csv"`, m.Tenant.Slug, m.Window))
	_ = WriteCSV(rw, claims)
}

type settingsModel struct {
	Tenant      Tenant
	Tenants     []Tenant
	FleetPaused bool
	Filters     []Filter
	Reviews     []Review
	Cells       []cell.Status
	Defs        []cell.Def
	Audit       []AuditRecord
	Grace       time.Duration
	Flash       string
	Err         string
}

func (w *web) settingsPage(rw http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	m := settingsModel{Flash: r.FormValue("ok"), Err: r.FormValue("err"), Grace: w.Engine.cfg.Grace}
	t, all, err := w.tenantOf(ctx, r)
	m.Tenant, m.Tenants = t, all
	if err == nil {
		m.FleetPaused, err = w.Engine.store.FleetPaused(ctx)
	}
	if err == nil && t.ID != "" {
		m.Filters, err = w.Engine.store.Filters(ctx, t.ID)
		if err == nil {
			m.Reviews, err = w.Engine.store.Reviews(ctx, t.ID, 50)
		}
		if err == nil {
			m.Audit, err = w.Engine.store.AuditLog(ctx, t.ID, "", 30)
		}
	}
	if err == nil {
		m.Defs, err = cell.ListCells(ctx, w.Engine.store.pool)
	}
	if cm := w.Engine.Cells(); cm != nil {
		m.Cells = cm.Status()
	}
	if err != nil {
		m.Err = err.Error()
	}
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = settingsPage(w.page("Claim settings", "/claims/settings"), m).Render(r.Context(), rw)
}

// done redirects back to the settings page with a message; bad input gets a
// clear message and changes nothing.
func (w *web) done(rw http.ResponseWriter, r *http.Request, err error, ok string) {
	q := "tenant=" + r.FormValue("tenant")
	if err != nil {
		q += "&err=" + urlEscape(err.Error())
	} else {
		q += "&ok=" + urlEscape(ok)
	}
	http.Redirect(rw, r, "/claims/settings?"+q, http.StatusSeeOther)
}

func urlEscape(s string) string {
	r := strings.NewReplacer("%", "%25", "&", "%26", "#", "%23", "+", "%2B", " ", "+", "?", "%3F", "=", "%3D")
	return r.Replace(s)
}

func (w *web) pause(rw http.ResponseWriter, r *http.Request) {
	paused := r.FormValue("paused") == "true"
	scope := r.FormValue("scope") // "fleet" or "tenant"
	tenant := ""
	if scope == "tenant" {
		tenant = r.FormValue("tenant")
		if tenant == "" {
			w.done(rw, r, errors.New("choose a tenant to pause"), "")
			return
		}
	}
	err := w.Engine.store.SetPaused(r.Context(), w.Engine.cfg.Auditor, w.Actor(r), tenant, paused)
	w.done(rw, r, err, map[bool]string{true: "Paused", false: "Resumed"}[paused])
}

func optInt(s string) (*int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		return nil, fmt.Errorf("%q is not a whole number ≥ 0", s)
	}
	return &v, nil
}

// dollars parses "3000" or "3000.50" into cents.
func dollars(s string) (*int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 {
		return nil, fmt.Errorf("%q is not an amount in dollars", s)
	}
	c := int64(f*100 + 0.5)
	return &c, nil
}

func (w *web) limits(rw http.ResponseWriter, r *http.Request) {
	cap, err := optInt(r.FormValue("daily_booking_cap"))
	var review *int64
	if err == nil {
		review, err = dollars(r.FormValue("review_above_usd"))
	}
	if err == nil {
		err = w.Engine.store.SetLimits(r.Context(), w.Engine.cfg.Auditor, w.Actor(r), r.FormValue("tenant"),
			Limits{DailyBookingCap: cap, ReviewAboveCents: review})
	}
	w.done(rw, r, err, "Limits saved")
}

func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == '\n' || r == '|' })
}

func (w *web) putFilter(rw http.ResponseWriter, r *http.Request) {
	f := Filter{Name: r.FormValue("name"), Enabled: r.FormValue("enabled") != "",
		Origins: splitList(r.FormValue("origins")), Destinations: splitList(r.FormValue("destinations")),
		Equipment: splitList(r.FormValue("equipment"))}
	var err error
	if id := r.FormValue("id"); id != "" {
		f.ID, err = strconv.ParseInt(id, 10, 64)
	}
	var rpm *int64
	if err == nil {
		rpm, err = dollars(r.FormValue("min_rate_per_mile_usd"))
	}
	if err == nil && rpm != nil {
		f.MinRatePerMileCents = int(*rpm)
	}
	if err == nil {
		f.MaxWeightLbs, err = optInt(r.FormValue("max_weight_lbs"))
	}
	if err == nil {
		f.MinMiles, err = optInt(r.FormValue("min_miles"))
	}
	if err == nil {
		f.MaxMiles, err = optInt(r.FormValue("max_miles"))
	}
	if err == nil {
		_, err = w.Engine.PutFilter(r.Context(), w.Actor(r), r.FormValue("tenant"), f)
	}
	w.done(rw, r, err, "Filter saved")
}

func (w *web) deleteFilter(rw http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.FormValue("id"), 10, 64)
	if err == nil {
		err = w.Engine.DeleteFilter(r.Context(), w.Actor(r), r.FormValue("tenant"), id)
	}
	w.done(rw, r, err, "Filter deleted")
}

func (w *web) decide(rw http.ResponseWriter, r *http.Request) {
	approve := r.FormValue("decision") == "approve"
	err := w.Engine.Decide(r.Context(), w.Actor(r), r.FormValue("tenant"), r.FormValue("key"), approve)
	w.done(rw, r, err, map[bool]string{true: "Approved: offered again", false: "Rejected"}[approve])
}

// cellChange audits a cell edit and applies it on this replica at once.
func (w *web) cellChange(r *http.Request, action, subject string, detail any, change func(context.Context) error) error {
	ctx := r.Context()
	if err := change(ctx); err != nil {
		return err
	}
	if err := auditFleet(ctx, w.Engine, w.Actor(r), action, subject, detail); err != nil {
		return err
	}
	if cm := w.Engine.Cells(); cm != nil {
		return cm.Reload(ctx)
	}
	return nil
}

func (w *web) putCell(rw http.ResponseWriter, r *http.Request) {
	d := cell.Def{Name: strings.TrimSpace(r.FormValue("name")), RedisURL: strings.TrimSpace(r.FormValue("redis_url"))}
	err := w.cellChange(r, "cell.put", d.Name, map[string]string{"redis_url": cell.RedactURL(d.RedisURL)},
		func(ctx context.Context) error { return cell.PutCell(ctx, w.Engine.store.pool, d) })
	w.done(rw, r, err, "Cell saved")
}

func (w *web) deleteCell(rw http.ResponseWriter, r *http.Request) {
	name := r.FormValue("name")
	err := w.cellChange(r, "cell.delete", name, nil,
		func(ctx context.Context) error { return cell.DeleteCell(ctx, w.Engine.store.pool, name) })
	w.done(rw, r, err, "Cell deleted")
}

func (w *web) routeTenant(rw http.ResponseWriter, r *http.Request) {
	tenant, name := r.FormValue("tenant"), r.FormValue("cell")
	err := w.cellChange(r, "cell.route", tenant, map[string]string{"cell": name},
		func(ctx context.Context) error { return cell.RouteTenant(ctx, w.Engine.store.pool, tenant, name) })
	w.done(rw, r, err, "Tenant moved to "+name)
}

func fmtDur(d time.Duration) string {
	if d == 0 {
		return "—"
	}
	return d.Round(100 * time.Microsecond).String()
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format("15:04:05.000")
}

func actOK(c Claim) string {
	if c.ActSentAt == nil || c.ConfirmedAt == nil {
		return "—"
	}
	return fmtDur(c.ConfirmedAt.Sub(*c.ActSentAt))
}

func money(c *int64) string {
	if c == nil {
		return ""
	}
	return fmt.Sprintf("%d.%02d", *c/100, *c%100)
}

func intOr(p *int) string {
	if p == nil {
		return ""
	}
	return strconv.Itoa(*p)
}
