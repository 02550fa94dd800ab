// Package web is the console's fleet pages: a tenant's agents live, one
// compact row each (what its workers do now, what needs a person first);
// each agent's page (its technical facts, outages, events, and the commands
// an operator sends it: pause, resume, restart a worker, new token,
// retire); and the settings each on a page of its own: accounts and adding
// one, board and client, the assistants' tasks and limits (the
// installation's on /limits/assistants).
package web

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/fleetwright/fleetwright/app/server"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/wire"
	"github.com/fleetwright/fleetwright/views"
)

// Deps are what the fleet pages need.
type Deps struct {
	Store *fleet.Store
	Shell *auth.Shell
	Log   *slog.Logger
}

// Mount adds the fleet pages: reading needs fleet.read on the tenant,
// every change fleet.steer; each change is audited with the command.
func Mount(r chi.Router, d Deps) {
	r.Method(http.MethodGet, "/t/{tenant}/fleet", auth.Require(auth.FleetRead, d.page))
	r.Method(http.MethodGet, "/t/{tenant}/fleet/rows", auth.Require(auth.FleetRead, d.rows))
	r.Method(http.MethodGet, "/t/{tenant}/fleet/agents/{agent}", auth.Require(auth.FleetRead, d.ownAgent(d.agentPage)))
	r.Method(http.MethodGet, "/t/{tenant}/fleet/accounts", auth.Require(auth.FleetRead, d.view(viewAccounts)))
	r.Method(http.MethodGet, "/t/{tenant}/fleet/accounts/platform", auth.Require(auth.FleetSecrets, d.view(viewPlatform)))
	r.Method(http.MethodGet, "/t/{tenant}/fleet/assistants", auth.Require(auth.FleetRead, d.view(viewAssistants)))
	r.Method(http.MethodPost, "/t/{tenant}/fleet/accounts", auth.Require(auth.FleetSteer, d.createAccount))
	// The board decides where the account's credentials are sent: admins
	// only, with a second confirmation (the account's key typed again).
	r.Method(http.MethodPost, "/t/{tenant}/fleet/accounts/platform", auth.Require(auth.FleetSecrets, d.setPlatform))
	for _, a := range []struct {
		path string
		h    http.HandlerFunc
	}{
		{"pause", d.command(fleet.CmdPause)},
		{"resume", d.command(fleet.CmdResume)},
		{"restart-worker", d.command(fleet.CmdRestartWorker)},
		{"retire", d.retire},
	} {
		r.Method(http.MethodPost, "/t/{tenant}/fleet/agents/{agent}/"+a.path, auth.Require(auth.FleetSteer, d.ownAgent(a.h)))
	}
	// A new token can unlock the account's credentials: admins only, with a
	// second confirmation (the agent's name typed again).
	r.Method(http.MethodPost, "/t/{tenant}/fleet/agents/{agent}/rotate-token", auth.Require(auth.FleetSecrets, d.ownAgent(d.rotateToken)))
	mountAssistant(r, d)
}

func actor(r *http.Request) audit.Entry {
	u := auth.UserFrom(r.Context())
	return audit.Entry{ActorID: u.ID, Actor: u.Email, IP: server.ClientIP(r)}
}

func (d Deps) model(r *http.Request) (PageModel, error) {
	t, _ := auth.TenantFrom(r.Context())
	f, err := d.Store.List(r.Context(), t.ID)
	if err != nil {
		return PageModel{}, err
	}
	lim, err := d.Store.AssistantLimits(r.Context(), t.ID)
	if err != nil {
		return PageModel{}, err
	}
	m := PageModel{Slug: t.Slug, Fleet: f, CanSteer: auth.UserFrom(r.Context()).Has(auth.FleetSteer),
		CanSecrets: auth.UserFrom(r.Context()).Has(auth.FleetSecrets), CanSettings: auth.UserFrom(r.Context()).Has(auth.SettingsManage), Now: time.Now()}
	if lim != nil {
		m.Limits = *lim
	}
	return m, nil
}

// The fleet's pages besides the agents: each settings form on its own.
const (
	viewFleet      = ""
	viewAccounts   = "accounts"
	viewPlatform   = "platform"
	viewAssistants = "assistants"
)

// render shows one of the fleet's pages with the model given.
func (d Deps) render(w http.ResponseWriter, r *http.Request, status int, view string, m PageModel) {
	t, _ := auth.TenantFrom(r.Context())
	switch view {
	case viewAccounts:
		views.Render(w, r, status, AccountsPage(d.Shell.Page(w, r, t.Name+" · Accounts"), m))
	case viewPlatform:
		views.Render(w, r, status, PlatformPage(d.Shell.Page(w, r, t.Name+" · Board and client"), m))
	case viewAssistants:
		views.Render(w, r, status, AssistantsPage(d.Shell.Page(w, r, t.Name+" · Assistants"), m))
	default:
		views.Render(w, r, status, Page(d.Shell.Page(w, r, t.Name+" · Fleet"), m))
	}
}

func (d Deps) view(view string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		m, err := d.model(r)
		if err != nil {
			d.Log.Error("fleet page", "view", view, "err", err)
			auth.ServerError(w, r)
			return
		}
		d.render(w, r, http.StatusOK, view, m)
	}
}

func (d Deps) page(w http.ResponseWriter, r *http.Request) { d.view(viewFleet)(w, r) }

// agentPage is one agent: its facts, outages, events and actions.
func (d Deps) agentPage(w http.ResponseWriter, r *http.Request) {
	d.renderAgent(w, r, "", "")
}

func (d Deps) renderAgent(w http.ResponseWriter, r *http.Request, tokenAgent, token string) {
	t, _ := auth.TenantFrom(r.Context())
	m, err := d.model(r)
	if err != nil {
		d.Log.Error("agent page", "err", err)
		auth.ServerError(w, r)
		return
	}
	id := chi.URLParam(r, "agent")
	am := AgentModel{PageModel: m}
	found := false
	for _, a := range m.Fleet.Agents {
		if a.ID == id {
			am.Agent, found = a, true
		}
	}
	if !found {
		auth.NotFound(w, r)
		return
	}
	if am.History, err = d.Store.AgentHistory(r.Context(), t.ID, id); err != nil {
		d.Log.Error("agent page", "err", err)
		auth.ServerError(w, r)
		return
	}
	am.NewToken, am.NewTokenAgent = token, tokenAgent
	views.Render(w, r, http.StatusOK, AgentPage(d.Shell.Page(w, r, t.Name+" · "+am.Agent.Name), am))
}

func (d Deps) rows(w http.ResponseWriter, r *http.Request) {
	m, err := d.model(r)
	if err != nil {
		d.Log.Error("fleet rows", "err", err)
		auth.ServerError(w, r)
		return
	}
	views.Render(w, r, http.StatusOK, Rows(m))
}

// back flashes text and returns to the page the form was on (its "back"
// field: one of the tenant's fleet pages), else the fleet page.
func (d Deps) back(w http.ResponseWriter, r *http.Request, kind, text string) {
	auth.Flash(w, kind, text)
	http.Redirect(w, r, backTo(r), http.StatusSeeOther)
}

func backTo(r *http.Request) string {
	t, _ := auth.TenantFrom(r.Context())
	base := "/t/" + t.Slug + "/fleet"
	if b := r.FormValue("back"); strings.HasPrefix(b, base+"/") && !strings.Contains(b, "//") {
		return b
	}
	return base
}

func (d Deps) command(kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t, _ := auth.TenantFrom(r.Context())
		body := fleet.CommandBody{Worker: r.FormValue("worker"), Reason: "from the console by " + auth.UserFrom(r.Context()).Email}
		if _, err := d.Store.Enqueue(r.Context(), t.ID, chi.URLParam(r, "agent"), kind, body, actor(r)); err != nil {
			d.Log.Warn("fleet command", "kind", kind, "err", err)
			d.back(w, r, "bad", "The command could not be sent: "+d.shown(err))
			return
		}
		d.back(w, r, "ok", "Sent "+strings.ReplaceAll(kind, "_", " ")+"; the agent confirms it within seconds.")
	}
}

func (d Deps) retire(w http.ResponseWriter, r *http.Request) {
	t, _ := auth.TenantFrom(r.Context())
	if !views.Confirmed(r) {
		id := chi.URLParam(r, "agent")
		name, err := d.Store.AgentName(r.Context(), t.ID, id)
		if err != nil {
			d.back(w, r, "bad", "Nothing retired: no such live agent.")
			return
		}
		views.Render(w, r, http.StatusOK, views.ConfirmPage(d.Shell.Page(w, r, t.Name+" · Retire an agent"), views.Confirm{
			Question: "Retire agent " + name + "?",
			What: []string{
				name + " stops for good: its workers end, it wipes its board credentials and browser profiles, and its token answers \"retired\" from now on.",
				"Its account stays; to run it again, add a new agent for it and install that one.",
			},
			Action: r.URL.Path, Button: "Retire " + name, Back: "/t/" + t.Slug + "/fleet/agents/" + id,
		}))
		return
	}
	if err := d.Store.Retire(r.Context(), t.ID, chi.URLParam(r, "agent"), "retired from the console", actor(r)); err != nil {
		d.back(w, r, "bad", "The agent could not be retired: "+d.shown(err))
		return
	}
	d.back(w, r, "ok", "Agent retired: it wipes its credentials and stops; its token now answers \"retired\".")
}

// showToken renders the accounts page with a new agent's token shown
// once; the page is never cached, and the token is in no redirect, log or
// flash cookie. A rotated token is shown on its agent's page
// (renderAgent).
func (d Deps) showToken(w http.ResponseWriter, r *http.Request, agentName, token string) {
	m, err := d.model(r)
	if err != nil {
		auth.ServerError(w, r)
		return
	}
	m.NewToken, m.NewTokenAgent = token, agentName
	d.render(w, r, http.StatusOK, viewAccounts, m)
}

// rotateToken issues a new token (admin, FleetSecrets). The form must repeat
// the agent's name in "confirm"; "new_installation" also forgets the agent's
// pinned installation key, so the next agent to connect with the new token
// receives the credentials — for an agent whose state dir was lost.
func (d Deps) rotateToken(w http.ResponseWriter, r *http.Request) {
	t, _ := auth.TenantFrom(r.Context())
	id := chi.URLParam(r, "agent")
	name, err := d.Store.AgentName(r.Context(), t.ID, id)
	if err != nil {
		d.back(w, r, "bad", "No new token: no such live agent.")
		return
	}
	if r.FormValue("confirm") == "" {
		views.Render(w, r, http.StatusOK, TokenConfirm(d.Shell.Page(w, r, t.Name+" · New token"), t.Slug, id, name))
		return
	}
	if strings.TrimSpace(r.FormValue("confirm")) != name {
		d.back(w, r, "bad", "No new token: the name typed does not match the agent's ("+name+").")
		return
	}
	if r.FormValue("new_installation") == "1" {
		if err := d.Store.AcceptNewInstallation(r.Context(), t.ID, id, actor(r)); err != nil {
			d.back(w, r, "bad", "No new token: "+err.Error())
			return
		}
	}
	token, err := d.Store.RotateToken(r.Context(), t.ID, id, actor(r))
	if err != nil {
		d.back(w, r, "bad", "No new token: "+d.shown(err))
		return
	}
	d.renderAgent(w, r, name, token)
}

// parseWorkers reads one worker kind per line, naming them kind-1, kind-2….
func parseWorkers(s string) ([]wire.WorkerSpec, error) {
	var out []wire.WorkerSpec
	count := map[string]int{}
	for _, line := range strings.Split(s, "\n") {
		kind := strings.TrimSpace(line)
		if kind == "" {
			continue
		}
		switch kind {
		case "watcher", "actor", "http_actor", "assistant":
		default:
			return nil, fleet.FieldError{Field: "workers", Msg: "unknown worker kind " + kind + " (watcher, actor, http_actor, assistant)"}
		}
		count[kind]++
		out = append(out, wire.WorkerSpec{Name: kind + "-" + string(rune('0'+count[kind])), Kind: kind})
	}
	return out, nil
}

// refusedAccount shows the fleet page again with what was typed in "Add an
// account" (never its secrets, which are asked again) and the error next
// to its field (422).
func (d Deps) refusedAccount(w http.ResponseWriter, r *http.Request, in fleet.AccountInput, workers string, err error) {
	m, merr := d.model(r)
	if merr != nil {
		auth.ServerError(w, r)
		return
	}
	m.Account = AccountForm{Key: in.Key, Region: in.Region, BoardURL: in.BoardURL, Client: in.Client, Username: in.Username,
		Workers: workers, Errors: map[string]string{}, Sent: true}
	var fe fleet.FieldError
	switch {
	case errors.As(err, &fe):
		m.Account.Errors[fe.Field] = fe.Msg
	case errors.Is(err, fleet.ErrOtherClient):
		m.Account.Errors["client"] = strings.TrimPrefix(err.Error(), "fleet: ")
	default:
		m.Account.Errors[""] = strings.TrimPrefix(d.shown(err), "fleet: ")
	}
	d.render(w, r, http.StatusUnprocessableEntity, viewAccounts, m)
}

// refused shows the page of the form again with why a change was refused
// (422).
func (d Deps) refused(w http.ResponseWriter, r *http.Request, view string, err error) {
	m, merr := d.model(r)
	if merr != nil {
		auth.ServerError(w, r)
		return
	}
	m.Error = strings.TrimPrefix(err.Error(), "fleet: ")
	d.render(w, r, http.StatusUnprocessableEntity, view, m)
}

// setPlatform changes the board and client of one account, or of every
// account of the tenant at once (account "all"); admin (FleetSecrets). The
// form repeats the account's key (or "every account") in "confirm"; an
// account moving to another board origin needs its credentials entered
// again (username, password, totp_secret).
func (d Deps) setPlatform(w http.ResponseWriter, r *http.Request) {
	t, _ := auth.TenantFrom(r.Context())
	id := r.FormValue("account")
	want := "every account"
	if id == "all" {
		id = ""
	} else if id == "" {
		d.refused(w, r, viewPlatform, errors.New("fleet: choose an account, or every account"))
		return
	} else {
		f, err := d.Store.List(r.Context(), t.ID)
		if err != nil {
			auth.ServerError(w, r)
			return
		}
		want = ""
		for _, a := range f.Accounts {
			if a.ID == id {
				want = a.Key
			}
		}
		if want == "" {
			d.refused(w, r, viewPlatform, errors.New("fleet: no such account"))
			return
		}
	}
	if strings.TrimSpace(r.FormValue("confirm")) != want {
		d.refused(w, r, viewPlatform, fmt.Errorf("fleet: nothing changed: type %q in the confirmation to move its board or client", want))
		return
	}
	var relogin map[string]fleet.Credentials
	if id != "" && r.FormValue("password") != "" {
		relogin = map[string]fleet.Credentials{want: {Username: strings.TrimSpace(r.FormValue("username")), Password: r.FormValue("password"),
			TOTPSecret: strings.TrimSpace(r.FormValue("totp_secret"))}}
	}
	if err := d.Store.SetPlatform(r.Context(), t.ID, id, strings.TrimSpace(r.FormValue("board_url")),
		strings.TrimSpace(r.FormValue("client")), relogin, actor(r)); err != nil {
		d.refused(w, r, viewPlatform, err)
		return
	}
	d.back(w, r, "ok", "Board and client saved.")
}

func (d Deps) createAccount(w http.ResponseWriter, r *http.Request) {
	t, _ := auth.TenantFrom(r.Context())
	workers, err := parseWorkers(r.FormValue("workers"))
	in := fleet.AccountInput{Key: strings.TrimSpace(r.FormValue("key")), Region: strings.TrimSpace(r.FormValue("region")),
		BoardURL: strings.TrimSpace(r.FormValue("board_url")), Client: strings.TrimSpace(r.FormValue("client")),
		Username: strings.TrimSpace(r.FormValue("username")),
		Password: r.FormValue("password"), TOTPSecret: strings.TrimSpace(r.FormValue("totp_secret")), Workers: workers}
	if err == nil {
		err = in.Validate()
	}
	var id string
	if err == nil {
		id, err = d.Store.CreateAccount(r.Context(), t.ID, in, actor(r))
	}
	if err != nil {
		d.refusedAccount(w, r, in, r.FormValue("workers"), err)
		return
	}
	name := "agent-" + in.Key
	_, token, err := d.Store.CreateAgent(r.Context(), t.ID, id, name, actor(r))
	if err != nil {
		d.Log.Error("create agent", "err", err)
		auth.ServerError(w, r)
		return
	}
	d.showToken(w, r, name, token)
}
