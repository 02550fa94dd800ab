// Package web is the claim engine's console: each tenant's claims (with
// their conflicts and safety counts), latency (percentiles, histograms, CSV)
// and claim settings (pause, limits, filters, reviews, platforms, dispatch
// mode), the cells and the routing of tenants to them, and the global pause.
package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/server"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/cell"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/claim/latency"
	"github.com/fleetwright/fleetwright/modules/tenant"
	"github.com/fleetwright/fleetwright/views"
)

// Deps are what the claim pages need from the panel.
type Deps struct {
	Engine *claim.Engine
	Shell  *auth.Shell
	Log    *slog.Logger
}

type web struct {
	Deps
}

// Mount declares the claim engine's console pages: each tenant's claims,
// latency and claim settings (fleet.read to look, fleet.steer to change),
// the cells and tenant routing (cells.manage) and the global pause
// (settings.manage). Every change is audited in the transaction that makes
// it.
func Mount(r chi.Router, d Deps) {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	w := &web{d}
	get := func(pattern string, p auth.Perm, h http.HandlerFunc) {
		r.Method(http.MethodGet, pattern, auth.Require(p, h))
	}
	post := func(pattern string, p auth.Perm, h http.HandlerFunc) {
		r.Method(http.MethodPost, pattern, auth.Require(p, h))
	}
	get("/t/{tenant}/claims", auth.FleetRead, w.claimsPage)
	get("/t/{tenant}/claims/rows", auth.FleetRead, w.claimsRows)
	get("/t/{tenant}/claims/load", auth.FleetRead, w.storyPage)
	get("/t/{tenant}/claims/latency", auth.FleetRead, w.latencyPage)
	get("/t/{tenant}/claims/latency.csv", auth.FleetRead, w.latencyCSV)
	get("/t/{tenant}/claims/settings", auth.FleetRead, w.settingsPage)
	post("/t/{tenant}/claims/pause", auth.FleetSteer, w.pauseTenant)
	post("/t/{tenant}/claims/limits", auth.FleetSteer, w.limits)
	post("/t/{tenant}/claims/filters", auth.FleetSteer, w.putFilter)
	post("/t/{tenant}/claims/filters/delete", auth.FleetSteer, w.deleteFilter)
	post("/t/{tenant}/claims/reviews", auth.FleetSteer, w.decide)
	post("/t/{tenant}/claims/platforms", auth.SettingsManage, w.platformKeys)
	post("/t/{tenant}/claims/durability", auth.SettingsManage, w.singleNode)
	post("/t/{tenant}/claims/dispatch", auth.SettingsManage, w.dispatchModeForm)

	get("/admin/cells", auth.CellsManage, w.cellsPage)
	post("/admin/cells", auth.CellsManage, w.putCell)
	post("/admin/cells/delete", auth.CellsManage, w.deleteCell)
	post("/admin/cells/route", auth.CellsManage, w.routeTenant)
	get("/admin/settings", auth.SettingsManage, w.adminSettings)
	post("/admin/settings/pause", auth.SettingsManage, w.pauseFleet)

	d.Shell.AddNav(
		auth.NavItem{Section: "Administration", Label: "Cells", Href: "/admin/cells", Perm: auth.CellsManage, Order: 820},
		auth.NavItem{Section: "Administration", Label: "Settings", Href: "/admin/settings", Perm: auth.SettingsManage, Order: 830},
	)
}

// by names the signed-in operator for the audit log.
func by(r *http.Request) audit.Entry {
	u := auth.UserFrom(r.Context())
	return audit.Entry{ActorID: u.ID, Actor: u.Email, IP: server.ClientIP(r)}
}

func (w *web) fail(rw http.ResponseWriter, r *http.Request, what string, err error) {
	w.Log.Error("claim page: "+what, "err", err)
	auth.ServerError(rw, r)
}

// back redirects after a change, with a flash message.
func back(rw http.ResponseWriter, r *http.Request, to, kind, text string) {
	auth.Flash(rw, kind, text)
	http.Redirect(rw, r, to, http.StatusSeeOther)
}

func tenantPath(r *http.Request, rest string) string {
	t, _ := auth.TenantFrom(r.Context())
	return "/t/" + t.Slug + "/claims" + rest
}

// parseWindow reads a window such as 10m or 2h (at most a week).
func parseWindow(s string, def time.Duration) time.Duration {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil || d <= 0 || d > 7*24*time.Hour {
		return def
	}
	return d
}

// tabs are the tenant's pages, shared with the overview and the fleet page.
type tab struct{ Label, Href string }

func tenantTabs(slug string) []tab {
	return []tab{{"Overview", "/t/" + slug}, {"Fleet", "/t/" + slug + "/fleet"}, {"Claims", "/t/" + slug + "/claims"},
		{"Latency", "/t/" + slug + "/claims/latency"}, {"Claim settings", "/t/" + slug + "/claims/settings"}}
}

// pageSize is how many claims a page of the claims page shows.
const pageSize = 50

// timeInput is the form's layout of a time (an <input type="datetime-local">,
// read as UTC).
const timeInput = "2006-01-02T15:04"

type claimsModel struct {
	Slug   string
	Tenant tenant.Tenant
	State  string
	Worker string
	Window string
	// From and To are the time range as typed (UTC); FilterError says what
	// was wrong with them.
	From, To    string
	FilterError string
	Claims      []claim.Claim
	Total       int
	ByState     map[claim.State]int
	Page, Pages int
	Names       names
	Dups        int
	Safety      claim.SafetyCounts
	Conflicts   []claim.Conflict
	// Query is the filter without the page (for the page links and the
	// live refresh).
	Query       string
	FleetPaused bool
	States      []claim.State
	Wins        winModel
	// Live: the table refreshes itself (the first page of a range that
	// ends now).
	Live bool
}

func (w *web) loadClaims(r *http.Request) (claimsModel, error) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	at, _ := auth.TenantFrom(ctx)
	q := r.URL.Query()
	win := parseWindow(q.Get("window"), time.Hour)
	m := claimsModel{Slug: at.Slug, State: q.Get("state"), Worker: strings.TrimSpace(q.Get("worker")), Window: shortDur(win), States: claim.Stored,
		From: strings.TrimSpace(q.Get("from")), To: strings.TrimSpace(q.Get("to"))}
	if m.State != "" && !claim.State(m.State).Stored() {
		m.State = ""
	}
	cq := claim.ClaimQuery{State: claim.State(m.State), Worker: m.Worker, Window: win, Limit: pageSize}
	var bad []string
	if m.From != "" {
		t, err := time.Parse(timeInput, m.From)
		if err != nil {
			bad = append(bad, fmt.Sprintf("From %q is not a time like 2026-12-01T14:00 (UTC)", m.From))
		}
		cq.From = t
	}
	if m.To != "" {
		t, err := time.Parse(timeInput, m.To)
		if err != nil {
			bad = append(bad, fmt.Sprintf("To %q is not a time like 2026-12-01T15:00 (UTC)", m.To))
		}
		cq.To = t
	}
	if !cq.From.IsZero() && !cq.To.IsZero() && !cq.To.After(cq.From) {
		bad = append(bad, "To must be after From")
		cq.To = time.Time{}
	}
	m.FilterError = strings.Join(bad, "; ")
	m.Page, _ = strconv.Atoi(q.Get("page"))
	m.Page = max(m.Page, 1)
	cq.Offset = (m.Page - 1) * pageSize
	m.Query = url.Values{"state": {m.State}, "worker": {m.Worker}, "window": {m.Window}, "from": {m.From}, "to": {m.To}}.Encode()
	m.Live = m.Page == 1 && cq.To.IsZero()
	var err error
	if m.Tenant, err = tenant.ByID(ctx, w.Engine.Store().Pool(), at.ID); err != nil {
		return m, err
	}
	page, err := w.Engine.Store().Claims(ctx, at.ID, cq)
	if err != nil {
		return m, err
	}
	m.Claims, m.Total, m.ByState = page.Claims, page.Total, page.ByState
	m.Pages = max(1, (m.Total+pageSize-1)/pageSize)
	byID, err := w.Engine.Store().AgentNames(ctx, at.ID)
	if err != nil {
		return m, err
	}
	m.Names = newNames(byID)
	if m.Wins, err = w.wins(ctx, at.ID); err != nil {
		return m, err
	}
	if m.Dups, _, err = w.Engine.Store().DuplicateConfirmations(ctx, at.ID); err != nil {
		return m, err
	}
	if m.Safety, err = w.Engine.Store().Safety(ctx, at.ID); err != nil {
		return m, err
	}
	if m.Conflicts, err = w.Engine.Store().Conflicts(ctx, at.ID, 20); err != nil {
		return m, err
	}
	m.FleetPaused, err = w.Engine.Store().FleetPaused(ctx)
	return m, err
}

// pageURL is the claims page at page n with the same filter.
func (m claimsModel) pageURL(n int) string {
	return fmt.Sprintf("/t/%s/claims?%s&page=%d", m.Slug, m.Query, n)
}

// winModel is the tenant's win rate over the last day, per hour.
type winModel struct {
	Hours             []claim.HourWins
	Contested, Booked int
}

// winWindow is how far back the win rate looks.
const winWindow = 24 * time.Hour

func (w *web) wins(ctx context.Context, tenant string) (winModel, error) {
	hs, err := w.Engine.Store().WinRate(ctx, tenant, winWindow)
	m := winModel{Hours: hs}
	for _, h := range hs {
		m.Contested += h.Contested
		m.Booked += h.Booked
	}
	return m, err
}

// rate is booked ÷ contested in words ("62 %"), or "—" with nothing
// contested.
func rate(booked, contested int) string {
	if contested == 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f %%", 100*float64(booked)/float64(contested))
}

func (w *web) claimsPage(rw http.ResponseWriter, r *http.Request) {
	m, err := w.loadClaims(r)
	if err != nil {
		w.fail(rw, r, "claims", err)
		return
	}
	views.Render(rw, r, http.StatusOK, claimsPage(w.Shell.Page(rw, r, m.Tenant.Name+" · Claims"), m))
}

func (w *web) claimsRows(rw http.ResponseWriter, r *http.Request) {
	m, err := w.loadClaims(r)
	if err != nil {
		w.fail(rw, r, "claim rows", err)
		return
	}
	views.Render(rw, r, http.StatusOK, claimsRows(m))
}

type latencyModel struct {
	Slug   string
	Name   string
	Window string
	By     string
	Groups []latency.Group
	Hists  []string
	Series string
	// NarrowSeries is Series drawn for a phone.
	NarrowSeries string
	N            int
	Query        string
	Wins         winModel
}

func (w *web) latencyData(r *http.Request) (latencyModel, []claim.Claim, error) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	at, _ := auth.TenantFrom(ctx)
	q := r.URL.Query()
	win := parseWindow(q.Get("window"), time.Hour)
	m := latencyModel{Slug: at.Slug, Name: at.Name, Window: shortDur(win), By: q.Get("by")}
	if m.By != "cell" && m.By != "worker" {
		m.By = ""
	}
	m.Query = fmt.Sprintf("window=%s&by=%s", m.Window, m.By)
	claims, err := w.Engine.Store().Window(ctx, at.ID, win, 50000)
	return m, claims, err
}

func (w *web) latencyPage(rw http.ResponseWriter, r *http.Request) {
	m, claims, err := w.latencyData(r)
	if err != nil {
		w.fail(rw, r, "latency", err)
		return
	}
	m.N = len(claims)
	if m.By == "worker" {
		// Per worker means per agent and worker: two agents may each run
		// an "actor-1".
		at, _ := auth.TenantFrom(r.Context())
		byID, err := w.Engine.Store().AgentNames(r.Context(), at.ID)
		if err != nil {
			w.fail(rw, r, "agent names", err)
			return
		}
		n := newNames(byID)
		for i := range claims {
			claims[i].Holder.Worker = n.of(claims[i].Holder)
		}
	}
	m.Groups = latency.GroupBy(claims, m.By)
	for _, s := range claim.Stages {
		m.Hists = append(m.Hists, latency.HistogramSVG(s, claims))
	}
	m.Series = latency.SeriesSVG(claim.StageDetectAction, claims)
	m.NarrowSeries = latency.NarrowSeriesSVG(claim.StageDetectAction, claims)
	at, _ := auth.TenantFrom(r.Context())
	if m.Wins, err = w.wins(r.Context(), at.ID); err != nil {
		w.fail(rw, r, "win rate", err)
		return
	}
	views.Render(rw, r, http.StatusOK, latencyPage(w.Shell.Page(rw, r, m.Name+" · Latency"), m))
}

func (w *web) latencyCSV(rw http.ResponseWriter, r *http.Request) {
	m, claims, err := w.latencyData(r)
	if err != nil {
		w.fail(rw, r, "latency csv", err)
		return
	}
	rw.Header().Set("Content-Type", "text/csv; charset=utf-8")
	rw.Header().Set("Cache-Control", "no-store")
	rw.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="latency-%s-%s.csv"`, m.Slug, m.Window))
	if err := latency.WriteCSV(rw, claims); err != nil {
		w.Log.Warn("latency csv cut short", "err", err)
	}
}

// filterInput is a filter form as typed, so a refused form keeps it.
type filterInput struct {
	ID                                            string
	Name                                          string
	Enabled                                       bool
	Origins, Destinations, Equipment              string
	MinRatePerMile, MaxWeight, MinMiles, MaxMiles string
}

func inputOf(f claim.Filter) filterInput {
	in := filterInput{Name: f.Name, Enabled: f.Enabled, Origins: strings.Join(f.Origins, "; "),
		Destinations: strings.Join(f.Destinations, "; "), Equipment: strings.Join(f.Equipment, "; "),
		MaxWeight: intOr(f.MaxWeightLbs), MinMiles: intOr(f.MinMiles), MaxMiles: intOr(f.MaxMiles)}
	if f.ID != 0 {
		in.ID = strconv.FormatInt(f.ID, 10)
	}
	if f.MinRatePerMileCents != 0 {
		v := int64(f.MinRatePerMileCents)
		in.MinRatePerMile = money(&v)
	}
	return in
}

func (in filterInput) key() string {
	if in.ID == "" {
		return "new"
	}
	return in.ID
}

type settingsModel struct {
	Slug        string
	Tenant      tenant.Tenant
	FleetPaused bool
	// Pause is the tenant's switch in words.
	Pause    claim.PauseState
	Filters  []filterInput
	Reviews  []claim.Review
	Audit    []claim.AuditRecord
	Grace    time.Duration
	CanSteer bool
	// Errors by form ("limits", "filter-new", "filter-<id>").
	Errors     map[string]string
	CapInput   string
	RevInput   string
	LimitsSent bool
	// Platforms and whether each honours idempotency keys; CanAdmin may
	// change that (settings.manage).
	Platforms []claim.PlatformSetting
	CanAdmin  bool
	// Durability is the tenant's single-node setting and the hold.
	Durability claim.Durability
	// OldAgents: connected agents before protocol v4 (assign mode cannot
	// grant them a job).
	OldAgents int
}

func (w *web) loadSettings(r *http.Request) (settingsModel, error) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	at, _ := auth.TenantFrom(ctx)
	m := settingsModel{Slug: at.Slug, Grace: w.Engine.Config().Grace, CanSteer: auth.UserFrom(ctx).Has(auth.FleetSteer), Errors: map[string]string{}}
	var err error
	if m.Tenant, err = tenant.ByID(ctx, w.Engine.Store().Pool(), at.ID); err != nil {
		return m, err
	}
	m.CapInput, m.RevInput = intOr(m.Tenant.DailyBookingCap), money(m.Tenant.ReviewAboveCents)
	if m.Pause, err = w.Engine.Store().PauseOf(ctx, at.ID); err != nil {
		return m, err
	}
	if m.FleetPaused, err = w.Engine.Store().FleetPaused(ctx); err != nil {
		return m, err
	}
	fs, err := w.Engine.Store().Filters(ctx, at.ID)
	if err != nil {
		return m, err
	}
	for _, f := range fs {
		m.Filters = append(m.Filters, inputOf(f))
	}
	m.Filters = append(m.Filters, filterInput{Enabled: true})
	if m.Reviews, err = w.Engine.Store().Reviews(ctx, at.ID, 50); err != nil {
		return m, err
	}
	if m.Platforms, err = w.Engine.Store().PlatformSettings(ctx, at.ID); err != nil {
		return m, err
	}
	m.CanAdmin = auth.UserFrom(ctx).Has(auth.SettingsManage)
	if m.Durability, err = w.Engine.Store().Durability(ctx, at.ID); err != nil {
		return m, err
	}
	if m.OldAgents, err = w.Engine.Store().OldProtocolAgents(ctx, at.ID); err != nil {
		return m, err
	}
	m.Audit, err = w.Engine.Store().SettingsLog(ctx, at.ID, 20)
	return m, err
}

// heldSince is " since <time>" for a hold, or "".
func heldSince(m settingsModel) string {
	if m.Durability.HeldSince == nil {
		return ""
	}
	return " since " + fmtTime(m.Durability.HeldSince)
}

func (w *web) settingsPage(rw http.ResponseWriter, r *http.Request) {
	m, err := w.loadSettings(r)
	if err != nil {
		w.fail(rw, r, "claim settings", err)
		return
	}
	views.Render(rw, r, http.StatusOK, settingsPage(w.Shell.Page(rw, r, m.Tenant.Name+" · Claim settings"), m))
}

// refuse shows the settings page again with 422, the message next to the
// form that was refused and what was typed in it.
func (w *web) refuse(rw http.ResponseWriter, r *http.Request, form string, msg string, edit func(*settingsModel)) {
	m, err := w.loadSettings(r)
	if err != nil {
		w.fail(rw, r, "claim settings", err)
		return
	}
	m.Errors[form] = msg
	if edit != nil {
		edit(&m)
	}
	views.Render(rw, r, http.StatusUnprocessableEntity, settingsPage(w.Shell.Page(rw, r, m.Tenant.Name+" · Claim settings"), m))
}

func (w *web) pauseTenant(rw http.ResponseWriter, r *http.Request) {
	t, _ := auth.TenantFrom(r.Context())
	paused := r.PostFormValue("paused") == "true"
	if paused && !views.Confirmed(r) {
		w.askPauseTenant(rw, r, t)
		return
	}
	if err := w.Engine.Store().SetPaused(r.Context(), by(r), t.ID, paused); err != nil {
		w.fail(rw, r, "tenant pause", err)
		return
	}
	if paused {
		back(rw, r, tenantPath(r, "/settings"), "warn", "Claims of "+t.Name+" are paused: no new lease and no new action; actions in flight finish. Its agents were told.")
		return
	}
	back(rw, r, tenantPath(r, "/settings"), "ok", "Claims of "+t.Name+" resumed.")
}

func optInt(s string) (*int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		return nil, claim.Invalid(fmt.Sprintf("%q is not a whole number ≥ 0", s))
	}
	return &v, nil
}

// dollars parses "3000" or "3000.50" into cents.
func dollars(s string) (*int64, error) {
	s = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s), "$"))
	if s == "" {
		return nil, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > 1e12 {
		return nil, claim.Invalid(fmt.Sprintf("%q is not an amount in dollars", s))
	}
	c := int64(f*100 + 0.5)
	return &c, nil
}

func (w *web) limits(rw http.ResponseWriter, r *http.Request) {
	t, _ := auth.TenantFrom(r.Context())
	capIn, revIn := r.PostFormValue("daily_booking_cap"), r.PostFormValue("review_above_usd")
	keep := func(m *settingsModel) { m.CapInput, m.RevInput = capIn, revIn }
	dailyCap, err := optInt(capIn)
	if err != nil {
		w.refuse(rw, r, "limits", "Daily booking cap: "+err.Error(), keep)
		return
	}
	review, err := dollars(revIn)
	if err != nil {
		w.refuse(rw, r, "limits", "Review threshold: "+err.Error(), keep)
		return
	}
	err = w.Engine.Store().SetLimits(r.Context(), by(r), t.ID, claim.Limits{DailyBookingCap: dailyCap, ReviewAboveCents: review})
	var inv claim.Invalid
	if errors.As(err, &inv) {
		w.refuse(rw, r, "limits", inv.Error(), keep)
		return
	}
	if err != nil {
		w.fail(rw, r, "limits", err)
		return
	}
	back(rw, r, tenantPath(r, "/settings"), "ok", "Limits saved.")
}

func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == '\n' || r == '|' })
}

func formFilter(r *http.Request) (filterInput, claim.Filter, error) {
	in := filterInput{ID: strings.TrimSpace(r.PostFormValue("id")), Name: r.PostFormValue("name"), Enabled: r.PostFormValue("enabled") != "",
		Origins: r.PostFormValue("origins"), Destinations: r.PostFormValue("destinations"), Equipment: r.PostFormValue("equipment"),
		MinRatePerMile: r.PostFormValue("min_rate_per_mile_usd"), MaxWeight: r.PostFormValue("max_weight_lbs"),
		MinMiles: r.PostFormValue("min_miles"), MaxMiles: r.PostFormValue("max_miles")}
	f := claim.Filter{Name: in.Name, Enabled: in.Enabled, Origins: splitList(in.Origins), Destinations: splitList(in.Destinations),
		Equipment: splitList(in.Equipment)}
	var err error
	if in.ID != "" {
		if f.ID, err = strconv.ParseInt(in.ID, 10, 64); err != nil || f.ID <= 0 {
			return in, f, claim.Invalid("there is no such filter")
		}
	}
	rpm, err := dollars(in.MinRatePerMile)
	if err != nil {
		return in, f, claim.Invalid("Min $/mile: " + err.Error())
	}
	if rpm != nil {
		if *rpm > 1<<31-1 {
			return in, f, claim.Invalid("Min $/mile is too large")
		}
		f.MinRatePerMileCents = int(*rpm)
	}
	for _, p := range []struct {
		label string
		in    string
		out   **int
	}{{"Max lbs", in.MaxWeight, &f.MaxWeightLbs}, {"Min miles", in.MinMiles, &f.MinMiles}, {"Max miles", in.MaxMiles, &f.MaxMiles}} {
		if *p.out, err = optInt(p.in); err != nil {
			return in, f, claim.Invalid(p.label + ": " + err.Error())
		}
	}
	return in, f, nil
}

func (w *web) putFilter(rw http.ResponseWriter, r *http.Request) {
	t, _ := auth.TenantFrom(r.Context())
	in, f, err := formFilter(r)
	if err == nil {
		_, err = w.Engine.PutFilter(r.Context(), by(r), t.ID, f)
	}
	var inv claim.Invalid
	if errors.As(err, &inv) {
		w.refuse(rw, r, "filter-"+in.key(), inv.Error(), func(m *settingsModel) {
			for i := range m.Filters {
				if m.Filters[i].ID == in.ID {
					m.Filters[i] = in
				}
			}
		})
		return
	}
	if err != nil {
		w.fail(rw, r, "put filter", err)
		return
	}
	back(rw, r, tenantPath(r, "/settings"), "ok", "Filter "+strings.TrimSpace(f.Name)+" saved; it applies within seconds on every replica.")
}

func (w *web) deleteFilter(rw http.ResponseWriter, r *http.Request) {
	t, _ := auth.TenantFrom(r.Context())
	id, err := strconv.ParseInt(r.PostFormValue("id"), 10, 64)
	if err != nil {
		err = claim.Invalid("there is no such filter")
	} else if !views.Confirmed(r) {
		w.askDeleteFilter(rw, r, t, id)
		return
	} else {
		err = w.Engine.DeleteFilter(r.Context(), by(r), t.ID, id)
	}
	var inv claim.Invalid
	if errors.As(err, &inv) {
		back(rw, r, tenantPath(r, "/settings"), "bad", "Nothing deleted: "+inv.Error()+".")
		return
	}
	if err != nil {
		w.fail(rw, r, "delete filter", err)
		return
	}
	back(rw, r, tenantPath(r, "/settings"), "ok", "Filter deleted.")
}

func (w *web) decide(rw http.ResponseWriter, r *http.Request) {
	t, _ := auth.TenantFrom(r.Context())
	decision, key := r.PostFormValue("decision"), r.PostFormValue("key")
	if decision != "approve" && decision != "reject" {
		back(rw, r, tenantPath(r, "/settings"), "bad", "Choose approve or reject.")
		return
	}
	err := w.Engine.Decide(r.Context(), by(r), t.ID, key, decision == "approve")
	var inv claim.Invalid
	if errors.As(err, &inv) {
		back(rw, r, tenantPath(r, "/settings"), "bad", "Nothing decided: "+inv.Error()+".")
		return
	}
	if errors.Is(err, claim.ErrNotOffered) {
		w.Log.Warn("approved job not offered again", "tenant", t.Slug, "key", key, "err", err)
		back(rw, r, tenantPath(r, "/settings"), "warn", "Approved "+key+", but it could not be offered again now (its cell is not claiming).")
		return
	}
	if err != nil {
		w.fail(rw, r, "review decision", err)
		return
	}
	if decision == "approve" {
		back(rw, r, tenantPath(r, "/settings"), "ok", "Approved "+key+": it is offered to the actors again.")
		return
	}
	back(rw, r, tenantPath(r, "/settings"), "ok", "Rejected "+key+": it will not be leased.")
}

// acrossTenants reads every tenant's claim switches on the audited
// cross-tenant path (an admin.cross_tenant entry on the system chain).
func (w *web) acrossTenants(r *http.Request, why string) ([]tenant.Tenant, error) {
	e := by(r)
	e.Target, e.Detail = r.URL.Path, map[string]any{"reason": why}
	var out []tenant.Tenant
	err := audit.AcrossTenants(r.Context(), w.Engine.Store().Pool(), e, func(tx pgx.Tx) error {
		var err error
		out, err = tenant.List(r.Context(), tx)
		return err
	})
	return out, err
}

type cellRow struct {
	cell.Def
	Status  *cell.Status
	Tenants []string
}

type cellsModel struct {
	Cells   []cellRow
	Tenants []tenant.Tenant
	Errors  map[string]string
	Name    string
	Watched bool
}

func (w *web) loadCells(r *http.Request) (cellsModel, error) {
	m := cellsModel{Errors: map[string]string{}}
	defs, err := cell.ListCells(r.Context(), w.Engine.Store().Pool())
	if err != nil {
		return m, err
	}
	if m.Tenants, err = w.acrossTenants(r, "show the routing of every tenant to its cell"); err != nil {
		return m, err
	}
	status := map[string]cell.Status{}
	if cm := w.Engine.Cells(); cm != nil {
		m.Watched = true
		for _, s := range cm.Status() {
			status[s.Name] = s
		}
	}
	for _, d := range defs {
		row := cellRow{Def: d}
		row.RedisURL = cell.RedactURL(d.RedisURL)
		if s, ok := status[d.Name]; ok {
			row.Status = &s
		}
		for _, t := range m.Tenants {
			if t.Cell == d.Name {
				row.Tenants = append(row.Tenants, t.Slug)
			}
		}
		m.Cells = append(m.Cells, row)
	}
	return m, nil
}

func (w *web) cellsPage(rw http.ResponseWriter, r *http.Request) {
	m, err := w.loadCells(r)
	if err != nil {
		w.fail(rw, r, "cells", err)
		return
	}
	views.Render(rw, r, http.StatusOK, cellsPage(w.Shell.Page(rw, r, "Cells"), m))
}

func (w *web) cellRefused(rw http.ResponseWriter, r *http.Request, form, msg, name string) {
	m, err := w.loadCells(r)
	if err != nil {
		w.fail(rw, r, "cells", err)
		return
	}
	m.Errors[form], m.Name = msg, name
	views.Render(rw, r, http.StatusUnprocessableEntity, cellsPage(w.Shell.Page(rw, r, "Cells"), m))
}

func (w *web) putCell(rw http.ResponseWriter, r *http.Request) {
	// The Redis URL may carry a password: it is never echoed back.
	d := cell.Def{Name: strings.TrimSpace(r.PostFormValue("name")), RedisURL: strings.TrimSpace(r.PostFormValue("redis_url"))}
	err := w.Engine.PutCell(r.Context(), by(r), d)
	var inv claim.Invalid
	if errors.As(err, &inv) {
		w.cellRefused(rw, r, "put", strings.TrimPrefix(inv.Error(), "cell: "), d.Name)
		return
	}
	if err != nil {
		w.fail(rw, r, "put cell", err)
		return
	}
	back(rw, r, "/admin/cells", "ok", "Cell "+d.Name+" saved; every replica applies it within seconds.")
}

func (w *web) deleteCell(rw http.ResponseWriter, r *http.Request) {
	name := strings.TrimSpace(r.PostFormValue("name"))
	err := w.Engine.DeleteCell(r.Context(), by(r), name)
	var inv claim.Invalid
	if errors.As(err, &inv) {
		back(rw, r, "/admin/cells", "bad", "Nothing deleted: "+inv.Error()+".")
		return
	}
	if err != nil {
		w.fail(rw, r, "delete cell", err)
		return
	}
	back(rw, r, "/admin/cells", "ok", "Cell "+name+" deleted.")
}

func (w *web) routeTenant(rw http.ResponseWriter, r *http.Request) {
	tenant, name := r.PostFormValue("tenant"), r.PostFormValue("cell")
	if !views.Confirmed(r) && w.askRoute(rw, r, tenant, name) {
		return
	}
	err := w.Engine.RouteTenant(r.Context(), by(r), tenant, name)
	var inv claim.Invalid
	if errors.As(err, &inv) {
		back(rw, r, "/admin/cells", "bad", "Nothing moved: "+inv.Error()+".")
		return
	}
	if err != nil {
		w.fail(rw, r, "route tenant", err)
		return
	}
	back(rw, r, "/admin/cells", "ok", "Tenant moved to "+name+": its sightings go to that cell from now on.")
}

type adminModel struct {
	FleetPaused bool
	FleetPause  claim.PauseState
	Tenants     []tenant.Tenant
	Grace       time.Duration
	Config      claim.Config
	Audit       []claim.AuditRecord
}

func (w *web) adminSettings(rw http.ResponseWriter, r *http.Request) {
	m := adminModel{Config: w.Engine.Config(), Grace: w.Engine.Config().Grace}
	var err error
	if m.FleetPause, err = w.Engine.Store().PauseOf(r.Context(), ""); err == nil {
		m.FleetPaused = m.FleetPause.Paused
		if m.Tenants, err = w.acrossTenants(r, "show every tenant's pause switch, cap and review threshold"); err == nil {
			m.Audit, err = w.Engine.Store().SettingsLog(r.Context(), audit.System, 20)
		}
	}
	if err != nil {
		w.fail(rw, r, "settings", err)
		return
	}
	views.Render(rw, r, http.StatusOK, adminPage(w.Shell.Page(rw, r, "Settings"), m))
}

func (w *web) pauseFleet(rw http.ResponseWriter, r *http.Request) {
	paused := r.PostFormValue("paused") == "true"
	if paused && !views.Confirmed(r) {
		w.askPauseFleet(rw, r)
		return
	}
	if err := w.Engine.Store().SetPaused(r.Context(), by(r), "", paused); err != nil {
		w.fail(rw, r, "fleet pause", err)
		return
	}
	if paused {
		back(rw, r, "/admin/settings", "warn", "The whole fleet is paused: no new lease and no new action; actions in flight finish. Every agent was told.")
		return
	}
	back(rw, r, "/admin/settings", "ok", "The fleet resumed claiming.")
}

func shortDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// fmtDur is a duration with its unit, spaced as a person reads it: "850 µs",
// "6.6 ms", "193 ms", "18.6 s", "15 min".
func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "—"
	case d < time.Millisecond:
		return fmt.Sprintf("%d µs", d.Microseconds())
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < time.Minute:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", d.Seconds()), ".0") + " s"
	}
	return views.Duration(d)
}

// windowWords is a window typed as "1h" or "90m" said as "1 h", "1 h 30 min".
func windowWords(s string) string {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return s
	}
	return views.Duration(d)
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format("15:04:05.000")
}

func actOK(c claim.Claim) string {
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
