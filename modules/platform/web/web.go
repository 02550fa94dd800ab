// Package web is a tenant's platform page (docs/ADAPTERS.md, "Platforms
// per tenant"): the spec's source at each version with the diffs between
// them, an admin's upload of a new version, a check run against one of the
// tenant's accounts with its result beside the spec, the recorded review a
// real target needs before it claims (docs/LAW_REGISTER.md), and which
// account runs which version, with an admin's move of one. Every change is
// audited in the transaction that makes it; the sensitive ones ask first.
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

	"github.com/fleetwright/fleetwright/app/egress"
	"github.com/fleetwright/fleetwright/app/server"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/platform/engine"
	"github.com/fleetwright/fleetwright/modules/platform/registry"
	"github.com/fleetwright/fleetwright/modules/platform/spec"
	"github.com/fleetwright/fleetwright/modules/traits"
	"github.com/fleetwright/fleetwright/views"
)

// Deps are what the page needs.
type Deps struct {
	Registry *registry.Store
	Fleet    *fleet.Store
	Shell    *auth.Shell
	Log      *slog.Logger
}

type web struct{ Deps }

// Path is the platform page of a tenant.
func Path(slug string) string { return "/t/" + slug + "/settings/platform" }

// Mount declares the platform page: fleet.read to look, fleet.steer to run
// a check (it signs in with an account's credentials), settings.manage
// (admin) to upload a version, move an account and record or withdraw a
// review.
func Mount(r chi.Router, d Deps) {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	w := &web{d}
	r.Method(http.MethodGet, "/t/{tenant}/settings/platform", auth.Require(auth.FleetRead, w.page))
	r.Method(http.MethodPost, "/t/{tenant}/settings/platform/check", auth.Require(auth.FleetSteer, w.check))
	r.Method(http.MethodPost, "/t/{tenant}/settings/platform/apply", auth.Require(auth.SettingsManage, w.admin(w.apply)))
	r.Method(http.MethodPost, "/t/{tenant}/settings/platform/account", auth.Require(auth.SettingsManage, w.admin(w.account)))
	r.Method(http.MethodPost, "/t/{tenant}/settings/platform/review", auth.Require(auth.SettingsManage, w.admin(w.review)))
	r.Method(http.MethodPost, "/t/{tenant}/settings/platform/review/withdraw", auth.Require(auth.SettingsManage, w.admin(w.withdraw)))
}

// admin resolves the route's tenant for an installation-wide permission
// (settings.manage), as the guard does for tenant permissions.
func (w *web) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(rw http.ResponseWriter, r *http.Request) {
		t, ok := auth.UserFrom(r.Context()).Tenant(chi.URLParam(r, auth.TenantParam))
		if !ok {
			auth.Forbidden(rw, r)
			return
		}
		h(rw, r.WithContext(auth.WithTenant(r.Context(), t)))
	}
}

func by(r *http.Request) audit.Entry {
	u := auth.UserFrom(r.Context())
	return audit.Entry{ActorID: u.ID, Actor: u.Email, IP: server.ClientIP(r)}
}

func (w *web) fail(rw http.ResponseWriter, r *http.Request, what string, err error) {
	w.Log.Error("platform page: "+what, "err", err)
	auth.ServerError(rw, r)
}

func back(rw http.ResponseWriter, r *http.Request, to, kind, text string) {
	auth.Flash(rw, kind, text)
	http.Redirect(rw, r, to, http.StatusSeeOther)
}

// builtin is the name the page gives the sandbox built into the agent.
const builtin = "sandbox (built in)"

// pageModel is the platform page.
type pageModel struct {
	Slug, Tenant string
	Platforms    []registry.Platform
	// Sel is the platform shown (nil: the built-in sandbox).
	Sel      *registry.Platform
	Versions []registry.Version
	// Shown is the version whose source is shown (for the built-in
	// sandbox, its shipped text).
	Shown            registry.Version
	Diff             []registry.DiffLine
	DiffFrom, DiffTo int
	Accounts         []registry.Account
	Reviews          []registry.ReviewRecord
	CanSteer, Admin  bool
	// Check is the last check's report (nil: none run on this page).
	Check        *engine.CheckReport
	CheckAccount string
	CheckError   string
	// Upload is a refused upload's text and its errors.
	Upload       string
	UploadErrors []spec.FieldError
	ReviewError  string
}

func (m pageModel) base() string { return Path(m.Slug) }

// selURL is the page with a platform (and more) selected.
func (m pageModel) selURL(extra string) string {
	u := m.base()
	if m.Sel != nil {
		u += "?p=" + url.QueryEscape(m.Sel.Name)
		if extra != "" {
			u += "&" + extra
		}
	} else if extra != "" {
		u += "?" + extra
	}
	return u
}

// heldAccounts counts the accounts the review gate holds.
func (m pageModel) heldAccounts() int {
	n := 0
	for _, a := range m.Accounts {
		if a.Held != "" && m.Sel != nil && a.PlatformID == m.Sel.ID {
			n++
		}
	}
	return n
}

// load builds the page for the request's selection (?p=NAME, ?v=N,
// ?diff=N), or the form's on a POST.
func (w *web) load(r *http.Request) (pageModel, error) {
	ctx := r.Context()
	t, _ := auth.TenantFrom(ctx)
	u := auth.UserFrom(ctx)
	m := pageModel{Slug: t.Slug, Tenant: t.Name, CanSteer: u.Has(auth.FleetSteer), Admin: u.Has(auth.SettingsManage)}
	var err error
	if m.Platforms, err = w.Registry.Platforms(ctx, t.ID); err != nil {
		return m, err
	}
	if m.Accounts, err = w.Registry.Accounts(ctx, t.ID); err != nil {
		return m, err
	}
	// No ?p at all: the first platform; ?p= (empty): the built-in sandbox.
	_ = r.ParseForm()
	name, chosen := r.Form.Get("p"), r.Form.Has("p")
	for i := range m.Platforms {
		if m.Platforms[i].Name == name {
			m.Sel = &m.Platforms[i]
		}
	}
	if m.Sel == nil && !chosen && len(m.Platforms) > 0 {
		m.Sel = &m.Platforms[0]
	}
	if m.Sel == nil {
		src := registry.ShippedSpecs()["sandbox.yaml"]
		m.Shown = registry.Version{Name: "sandbox", Source: src, Digest: registry.Digest(src), Shipped: true}
		return m, nil
	}
	if m.Versions, err = w.Registry.Versions(ctx, t.ID, m.Sel.ID); err != nil {
		return m, err
	}
	if m.Reviews, err = w.Registry.Reviews(ctx, t.ID, m.Sel.ID); err != nil {
		return m, err
	}
	want, _ := strconv.Atoi(r.FormValue("v"))
	m.Shown = m.Versions[0]
	for _, v := range m.Versions {
		if v.Version == want {
			m.Shown = v
		}
	}
	if d, _ := strconv.Atoi(r.URL.Query().Get("diff")); d > 0 {
		for i, v := range m.Versions {
			if v.Version == d {
				prev := ""
				if i+1 < len(m.Versions) {
					prev = m.Versions[i+1].Source
				}
				m.Diff, m.DiffFrom, m.DiffTo = registry.Diff(prev, v.Source), d-1, d
			}
		}
	}
	return m, nil
}

func (w *web) render(rw http.ResponseWriter, r *http.Request, status int, m pageModel) {
	views.Render(rw, r, status, Page(w.Shell.Page(rw, r, m.Tenant+" · Platform"), m))
}

func (w *web) page(rw http.ResponseWriter, r *http.Request) {
	m, err := w.load(r)
	if err != nil {
		w.fail(rw, r, "load", err)
		return
	}
	w.render(rw, r, http.StatusOK, m)
}

// ask shows what a sensitive change will do; nothing is changed.
func (w *web) ask(rw http.ResponseWriter, r *http.Request, title string, c views.Confirm) {
	_ = r.ParseForm()
	c.Action, c.Fields = r.URL.Path, r.PostForm
	views.Render(rw, r, http.StatusOK, views.ConfirmPage(w.Shell.Page(rw, r, title), c))
}

// apply stores an uploaded spec as its platform's next version.
func (w *web) apply(rw http.ResponseWriter, r *http.Request) {
	t, _ := auth.TenantFrom(r.Context())
	src := strings.ReplaceAll(r.PostFormValue("source"), "\r\n", "\n")
	sp, perr := spec.Parse("upload", []byte(src))
	if perr != nil {
		m, err := w.load(r)
		if err != nil {
			w.fail(rw, r, "load", err)
			return
		}
		m.Upload, m.UploadErrors = src, fieldErrors(perr)
		w.render(rw, r, http.StatusUnprocessableEntity, m)
		return
	}
	if !views.Confirmed(r) {
		what := []string{"It is stored as the next version of platform " + sp.Name + " for " + t.Name + " (audited), beside every earlier version.",
			"No account moves to it: an admin moves each account on this page (also audited)."}
		if !registry.Shipped(src) {
			what = append(what, "It is not the text of a shipped sandbox: accounts on it claim nothing until an admin records the platform's review.")
		}
		w.ask(rw, r, t.Name+" · Upload a platform spec", views.Confirm{Question: "Store this spec for platform " + sp.Name + "?",
			What: what, Button: "Store the spec", Back: Path(t.Slug)})
		return
	}
	v, changed, err := w.Registry.Apply(r.Context(), t.ID, by(r), "upload", []byte(src))
	var inv registry.Invalid
	if errors.As(err, &inv) {
		m, lerr := w.load(r)
		if lerr != nil {
			w.fail(rw, r, "load", lerr)
			return
		}
		m.Upload, m.UploadErrors = src, []spec.FieldError{{Msg: inv.Error()}}
		w.render(rw, r, http.StatusUnprocessableEntity, m)
		return
	}
	if err != nil {
		w.fail(rw, r, "apply", err)
		return
	}
	to := Path(t.Slug) + "?p=" + url.QueryEscape(v.Name)
	if !changed {
		back(rw, r, to, "ok", "Unchanged: platform "+v.Name+" is already at this text (version "+strconv.Itoa(v.Version)+").")
		return
	}
	back(rw, r, to, "ok", fmt.Sprintf("Stored: platform %s version %d. No account moved.", v.Name, v.Version))
}

func fieldErrors(err error) []spec.FieldError {
	var errs *spec.Errors
	if errors.As(err, &errs) {
		return errs.List
	}
	return []spec.FieldError{{Msg: err.Error()}}
}

// account moves one account to a version, or back to the built-in sandbox.
func (w *web) account(rw http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	t, _ := auth.TenantFrom(ctx)
	a, err := w.Registry.AccountByID(ctx, t.ID, r.PostFormValue("account"))
	if errors.Is(err, registry.ErrNoAccount) {
		auth.NotFound(rw, r)
		return
	}
	if err != nil {
		w.fail(rw, r, "account", err)
		return
	}
	target := r.PostFormValue("target") // "platform-id:version" or "" (built in)
	pid, version := "", 0
	label := builtin
	if target != "" {
		id, vs, _ := strings.Cut(target, ":")
		version, _ = strconv.Atoi(vs)
		p, err := w.Registry.ByID(ctx, t.ID, id)
		if errors.Is(err, registry.ErrNoPlatform) {
			auth.NotFound(rw, r)
			return
		}
		if err != nil {
			w.fail(rw, r, "account", err)
			return
		}
		pid, label = p.ID, fmt.Sprintf("%s version %d", p.Name, version)
	}
	if !views.Confirmed(r) {
		what := []string{"Account " + a.Key + " runs " + label + " from now on (audited); its agents get the new configuration at once.",
			"Its workers restart their platform sessions with the new spec."}
		w.ask(rw, r, t.Name+" · Move an account", views.Confirm{Question: "Move account " + a.Key + " to " + label + "?",
			What: what, Button: "Move " + a.Key, Back: Path(t.Slug)})
		return
	}
	err = w.Registry.SetAccount(ctx, t.ID, by(r), a.ID, pid, version)
	if errors.Is(err, registry.ErrNoVersion) {
		auth.NotFound(rw, r)
		return
	}
	if err != nil {
		w.fail(rw, r, "move account", err)
		return
	}
	a, _ = w.Registry.AccountByID(ctx, t.ID, a.ID)
	kind, msg := "ok", "Recorded: "+a.Key+" runs "+label+"."
	if a.Held != "" {
		kind, msg = "warn", msg+" It claims nothing yet: "+a.Held
	}
	back(rw, r, Path(t.Slug)+"?p="+url.QueryEscape(a.Platform), kind, msg)
}

// review records the review of the selected platform.
func (w *web) review(rw http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	t, _ := auth.TenantFrom(ctx)
	p, err := w.Registry.ByName(ctx, t.ID, r.PostFormValue("p"))
	if errors.Is(err, registry.ErrNoPlatform) {
		auth.NotFound(rw, r)
		return
	}
	if err != nil {
		w.fail(rw, r, "review", err)
		return
	}
	in := registry.ReviewInput{Reference: r.PostFormValue("reference"), Note: r.PostFormValue("note")}
	if len(strings.TrimSpace(in.Reference)) < 3 {
		w.refuseReview(rw, r, "The reference to the written permission or legal advice is required.")
		return
	}
	if !views.Confirmed(r) {
		w.ask(rw, r, t.Name+" · Record a review", views.Confirm{Question: "Record the review of " + p.Name + " for " + t.Name + "?",
			What: []string{"You (" + auth.UserFrom(ctx).Email + ") record now that the law register was reviewed for this target and this client, resting on: " + strings.TrimSpace(in.Reference) + ".",
				"The accounts on " + p.Name + " may claim from their next lease on (audited); withdrawing the review stops them again."},
			Button: "Record the review", Back: Path(t.Slug) + "?p=" + url.QueryEscape(p.Name)})
		return
	}
	_, err = w.Registry.RecordReview(ctx, t.ID, by(r), p.ID, in)
	var inv registry.Invalid
	if errors.As(err, &inv) {
		w.refuseReview(rw, r, inv.Error())
		return
	}
	if err != nil {
		w.fail(rw, r, "review", err)
		return
	}
	back(rw, r, Path(t.Slug)+"?p="+url.QueryEscape(p.Name), "ok", "Recorded: the review of "+p.Name+". Its accounts may claim.")
}

func (w *web) refuseReview(rw http.ResponseWriter, r *http.Request, msg string) {
	m, err := w.load(r)
	if err != nil {
		w.fail(rw, r, "load", err)
		return
	}
	m.ReviewError = msg
	w.render(rw, r, http.StatusUnprocessableEntity, m)
}

// withdraw ends the review in force.
func (w *web) withdraw(rw http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	t, _ := auth.TenantFrom(ctx)
	p, err := w.Registry.ByName(ctx, t.ID, r.PostFormValue("p"))
	if errors.Is(err, registry.ErrNoPlatform) {
		auth.NotFound(rw, r)
		return
	}
	if err != nil {
		w.fail(rw, r, "withdraw", err)
		return
	}
	if !views.Confirmed(r) {
		w.ask(rw, r, t.Name+" · Withdraw a review", views.Confirm{Question: "Withdraw the review of " + p.Name + "?",
			What:   []string{"The accounts on " + p.Name + " claim nothing from their next lease on (audited), until a review is recorded again."},
			Button: "Withdraw the review", Back: Path(t.Slug) + "?p=" + url.QueryEscape(p.Name)})
		return
	}
	err = w.Registry.WithdrawReview(ctx, t.ID, by(r), p.ID)
	if errors.Is(err, registry.ErrNoReview) {
		back(rw, r, Path(t.Slug)+"?p="+url.QueryEscape(p.Name), "warn", p.Name+" has no review in force.")
		return
	}
	if err != nil {
		w.fail(rw, r, "withdraw", err)
		return
	}
	back(rw, r, Path(t.Slug)+"?p="+url.QueryEscape(p.Name), "warn", "Withdrawn: the review of "+p.Name+". Its accounts claim nothing.")
}

// check runs the shown version against one of the tenant's accounts, from
// the panel, dialling the account's board only (the egress guard admits
// nothing else), and shows the report beside the spec. It books only the
// load the form names. Audited (it opens the account's credentials).
func (w *web) check(rw http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	t, _ := auth.TenantFrom(ctx)
	m, err := w.load(r)
	if err != nil {
		w.fail(rw, r, "load", err)
		return
	}
	m.CheckAccount = r.PostFormValue("account")
	report, err := w.runCheck(ctx, t.ID, by(r), m, m.CheckAccount, strings.TrimSpace(r.PostFormValue("book")))
	if errors.Is(err, fleet.ErrNoAccount) {
		m.CheckError = "Choose one of the tenant's accounts: the check signs in with its credentials."
		w.render(rw, r, http.StatusUnprocessableEntity, m)
		return
	}
	if err != nil {
		m.CheckError = err.Error()
		w.render(rw, r, http.StatusUnprocessableEntity, m)
		return
	}
	m.Check = &report
	w.render(rw, r, http.StatusOK, m)
}

func (w *web) runCheck(ctx context.Context, tenant string, who audit.Entry, m pageModel, accountID, book string) (engine.CheckReport, error) {
	target, err := w.Fleet.SignInTarget(ctx, tenant, accountID)
	if err != nil {
		return engine.CheckReport{}, err
	}
	sp, err := spec.Parse("spec", []byte(m.Shown.Source))
	if err != nil {
		return engine.CheckReport{}, fmt.Errorf("the stored spec no longer parses: %v", err)
	}
	ad, err := engine.New(sp, target.BoardURL)
	if err != nil {
		return engine.CheckReport{}, err
	}
	tr, err := traits.For(target.Key, target.Region)
	if err != nil {
		return engine.CheckReport{}, err
	}
	only, err := egress.OnlyTargets(target.Credentials.Origins)
	if err != nil {
		return engine.CheckReport{}, err
	}
	g, err := egress.New(egress.Config{Policy: egress.Policy{Only: only}, Logger: w.Log})
	if err != nil {
		return engine.CheckReport{}, err
	}
	ad.SetDial(g.DialContext)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	report := ad.Check(ctx, engine.CheckOptions{Credentials: target.Credentials,
		Session: platform.SessionOptions{Traits: tr, Timeout: 15 * time.Second, Dial: g.DialContext}, Book: book})
	version := m.Shown.Version
	err = w.Registry.AuditCheck(ctx, tenant, who, m.Shown.PlatformID, map[string]any{"platform": m.Shown.Name, "version": version,
		"account": target.Key, "book": book, "ok": report.OK()})
	if err != nil {
		return engine.CheckReport{}, err
	}
	return report, nil
}
