package web

import (
	"net/http"
	"strconv"

	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/tenant"
	"github.com/fleetwright/fleetwright/views"
)

// ask answers an action that stops work, sent without its confirmation,
// with the page that says what it will do; nothing is changed.
func (w *web) ask(rw http.ResponseWriter, r *http.Request, title string, c views.Confirm) {
	_ = r.ParseForm()
	c.Action, c.Fields = r.URL.Path, r.PostForm
	views.Render(rw, r, http.StatusOK, views.ConfirmPage(w.Shell.Page(rw, r, title), c))
}

func (w *web) askPauseTenant(rw http.ResponseWriter, r *http.Request, t auth.Tenant) {
	w.ask(rw, r, t.Name+" · Pause claims", views.Confirm{
		Question: "Pause the claims of " + t.Name + "?",
		What: []string{
			t.Name + " takes no new load and starts no new booking from now on (the database checks it in the statements that grant and act).",
			"Bookings already sent finish and are reported; its agents are told within seconds; its crawl runs and page tasks hold too.",
			"It stays paused until someone presses Resume on its claim settings.",
		},
		Button: "Pause the claims of " + t.Name, Back: tenantPath(r, "/settings"),
	})
}

func (w *web) askPauseFleet(rw http.ResponseWriter, r *http.Request) {
	n := "every tenant"
	if ts, err := tenant.List(r.Context(), w.Engine.Store().Pool()); err == nil {
		n = "all " + strconv.Itoa(len(ts)) + " tenants"
	}
	w.ask(rw, r, "Pause the whole fleet", views.Confirm{
		Question: "Pause the whole fleet?",
		What: []string{
			"No tenant (" + n + ") takes a new load or starts a new booking from now on, whatever its own switch says.",
			"Bookings already sent finish and are reported; every agent is told within seconds; crawl runs and page tasks hold too.",
			"It stays paused until an admin presses Resume the fleet here (or runs fleetwright admin resume).",
		},
		Button: "Pause the whole fleet", Back: "/admin/settings",
	})
}

func (w *web) askDeleteFilter(rw http.ResponseWriter, r *http.Request, t auth.Tenant, id int64) {
	name := "this filter"
	if fs, err := w.Engine.Store().Filters(r.Context(), t.ID); err == nil {
		for _, f := range fs {
			if f.ID == id {
				name = "the filter “" + f.Name + "”"
			}
		}
	}
	w.ask(rw, r, t.Name+" · Delete a filter", views.Confirm{
		Question: "Delete " + name + " of " + t.Name + "?",
		What: []string{
			"Loads that only this filter wants are no longer claimed, from the next sighting on.",
			"It is gone for good: to claim those loads again, add the filter anew.",
		},
		Button: "Delete " + name, Back: tenantPath(r, "/settings"),
	})
}

// askRoute asks before a tenant moves to another cell; it reports false
// (nothing asked) when there is no move to ask about: an unknown tenant or
// cell (refused next with its reason) or the tenant's own cell.
func (w *web) askRoute(rw http.ResponseWriter, r *http.Request, tenantID, cell string) bool {
	t, err := tenant.ByID(r.Context(), w.Engine.Store().Pool(), tenantID)
	if err != nil || t.Cell == cell || cell == "" {
		return false
	}
	name := t.Name
	w.ask(rw, r, "Move a tenant to another cell", views.Confirm{
		Question: "Move " + name + " to cell " + cell + "?",
		What: []string{
			"Its sightings are queued in cell " + cell + " from now on; jobs already queued in its old cell are dispatched there until they expire.",
			"If cell " + cell + " is failing, " + name + " claims nothing until it recovers.",
		},
		Button: "Move " + name + " to " + cell, Back: "/admin/cells",
	})
	return true
}

func (w *web) askDispatch(rw http.ResponseWriter, r *http.Request, t auth.Tenant, mode string) {
	what := []string{"The change applies to the next job queued; claims in flight finish as they started."}
	switch mode {
	case claim.DispatchAssign:
		what = append([]string{"The panel picks one warm actor for each job (least busy, then lowest round trip) and grants it the job; agents older than protocol 4 get jobs only while no protocol-4 actor is warm."}, what...)
	default:
		what = append([]string{"Every warm actor is offered each job and the first lease request the database grants wins: more requests to the board for each load."}, what...)
	}
	w.ask(rw, r, t.Name+" · Dispatch mode", views.Confirm{
		Question: "Switch " + t.Name + " to " + mode + " mode?", What: what,
		Button: "Switch to " + mode, Back: tenantPath(r, "/settings"),
	})
}
