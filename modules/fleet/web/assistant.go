package web

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/wire"
	"github.com/fleetwright/fleetwright/views"
)

type wireLimitSet = wire.AssistantLimitSet

func (m PageModel) hasAssistants() bool {
	for _, a := range m.Fleet.Agents {
		if a.Assistant != nil && !a.Retired {
			return true
		}
	}
	return false
}

func wallField(seconds int) string {
	if seconds == 0 {
		return ""
	}
	return (time.Duration(seconds) * time.Second).String()
}

// mountAssistant adds the assistant routes: a task started from the
// console (fleet.steer), the tenant's limits (fleet.steer) and the
// installation's (settings.manage, an admin; the route's tenant is only
// where the page returns to).
func mountAssistant(r chi.Router, d Deps) {
	r.Method(http.MethodPost, "/t/{tenant}/fleet/agents/{agent}/assistant-task", auth.Require(auth.FleetSteer, d.ownAgent(d.startAssistantTask)))
	r.Method(http.MethodPost, "/t/{tenant}/fleet/assistant-limits", auth.Require(auth.FleetSteer, d.tenantLimits))
	r.Method(http.MethodGet, "/limits/assistants", auth.Require(auth.Self, d.globalLimitsPage))
	r.Method(http.MethodPost, "/admin/assistant-limits", auth.Require(auth.SettingsManage, d.globalLimits))
}

// globalLimitsPage shows the installation-wide assistant limits to every
// signed-in user (like /limits); admins change them.
func (d Deps) globalLimitsPage(w http.ResponseWriter, r *http.Request) {
	d.renderGlobal(w, r, http.StatusOK, "")
}

func (d Deps) renderGlobal(w http.ResponseWriter, r *http.Request, status int, errText string) {
	g, err := d.Store.GlobalAssistantLimits(r.Context())
	if err != nil {
		d.Log.Error("global assistant limits", "err", err)
		auth.ServerError(w, r)
		return
	}
	views.Render(w, r, status, GlobalLimitsPage(d.Shell.Page(w, r, "Assistant limits"), g, auth.UserFrom(r.Context()).Has(auth.SettingsManage), errText))
}

func (d Deps) startAssistantTask(w http.ResponseWriter, r *http.Request) {
	t, _ := auth.TenantFrom(r.Context())
	var urls []string
	for _, l := range strings.Split(r.PostFormValue("urls"), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			urls = append(urls, l)
		}
	}
	_, err := d.Store.StartAssistantTask(r.Context(), t.ID, chi.URLParam(r, "agent"), fleet.AssistantTaskInput{Goal: r.PostFormValue("goal"), URLs: urls}, actor(r))
	var inv fleet.Invalid
	switch {
	case errors.As(err, &inv):
		d.refused(w, r, viewAssistants, errors.New("The task was not started: "+inv.Error()+"."))
	case errors.Is(err, fleet.ErrNotAssistant):
		d.refused(w, r, viewAssistants, errors.New("The task was not started: that agent is not an enrolled assistant."))
	case err != nil:
		d.Log.Warn("start assistant task", "err", err)
		d.back(w, r, "bad", "The task was not started: "+d.shown(err))
	default:
		d.back(w, r, "ok", "Task sent to the assistant; it appears in its card once the assistant takes it (its person must allow tasks from the panel).")
	}
}

// parseLimitSet reads the limits form; every error names the field. Spend
// per day is not in it: it is the model_spend_day limit (/limits).
func parseLimitSet(r *http.Request) (wire.AssistantLimitSet, error) {
	var s wire.AssistantLimitSet
	if strings.TrimSpace(r.PostFormValue("day_cost_usd")) != "" {
		return s, fleet.ErrSpendElsewhere
	}
	ints := []struct {
		name string
		to   *int
	}{{"task_steps", &s.TaskSteps}, {"task_tokens", &s.TaskTokens}, {"task_tabs", &s.TaskTabs}, {"day_steps", &s.DaySteps}, {"day_tokens", &s.DayTokens}}
	for _, f := range ints {
		v := strings.TrimSpace(r.PostFormValue(f.name))
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(strings.ReplaceAll(v, ",", ""))
		if err != nil {
			return s, fleet.Invalid(fmt.Sprintf("%s: %q is not a whole number", strings.ReplaceAll(f.name, "_", " "), v))
		}
		*f.to = n
	}
	for _, f := range []struct {
		name string
		to   *float64
	}{{"task_cost_usd", &s.TaskCostUSD}} {
		v := strings.TrimPrefix(strings.TrimSpace(r.PostFormValue(f.name)), "$")
		if v == "" {
			continue
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return s, fleet.Invalid(fmt.Sprintf("%s: %q is not an amount in USD", strings.ReplaceAll(f.name, "_", " "), v))
		}
		*f.to = x
	}
	if v := strings.TrimSpace(r.PostFormValue("task_wall")); v != "" {
		dur, err := time.ParseDuration(v)
		if err != nil || dur < 0 || dur%time.Second != 0 {
			return s, fleet.Invalid(fmt.Sprintf("wall time per task: %q is not a duration in whole seconds like 30m or 1h30m", v))
		}
		s.TaskWallSeconds = int(dur / time.Second)
	}
	return s, fleet.CheckLimitSet(s)
}

func (d Deps) tenantLimits(w http.ResponseWriter, r *http.Request) {
	t, _ := auth.TenantFrom(r.Context())
	d.saveLimits(w, r, t.ID, "this tenant's")
}

// globalLimits saves the installation's assistant limits (an admin).
func (d Deps) globalLimits(w http.ResponseWriter, r *http.Request) {
	set, err := parseLimitSet(r)
	if err == nil {
		err = d.Store.SetAssistantLimits(r.Context(), "", set, actor(r))
	}
	var inv fleet.Invalid
	switch {
	case errors.As(err, &inv):
		d.renderGlobal(w, r, http.StatusUnprocessableEntity, "The limits were not saved: "+inv.Error()+".")
		return
	case err != nil:
		d.Log.Warn("assistant limits", "err", err)
		auth.Flash(w, "bad", "The limits were not saved: "+d.shown(err))
	default:
		auth.Flash(w, "ok", "Saved the installation's assistant limits; connected assistants apply them at their next step.")
	}
	http.Redirect(w, r, "/limits/assistants", http.StatusSeeOther)
}

func (d Deps) saveLimits(w http.ResponseWriter, r *http.Request, tenant, whose string) {
	set, err := parseLimitSet(r)
	if err == nil {
		err = d.Store.SetAssistantLimits(r.Context(), tenant, set, actor(r))
	}
	var inv fleet.Invalid
	switch {
	case errors.As(err, &inv):
		d.refused(w, r, viewAssistants, errors.New("The limits were not saved: "+inv.Error()+"."))
	case err != nil:
		d.Log.Warn("assistant limits", "err", err)
		d.back(w, r, "bad", "The limits were not saved: "+d.shown(err))
	default:
		d.back(w, r, "ok", "Saved "+whose+" assistant limits; connected assistants apply them at their next step.")
	}
}
