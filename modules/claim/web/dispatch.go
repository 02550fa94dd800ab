package web

import (
	"errors"
	"net/http"
	"slices"

	"github.com/go-chi/chi/v5"

	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/tenant"
	"github.com/fleetwright/fleetwright/views"
)

// dispatchModeForm is an admin's change of the tenant's dispatch mode. The
// permission (settings.manage) is installation-wide, so the route's tenant is
// resolved here, as for the platforms' idempotency setting.
func (w *web) dispatchModeForm(rw http.ResponseWriter, r *http.Request) {
	t, ok := auth.UserFrom(r.Context()).Tenant(chi.URLParam(r, auth.TenantParam))
	if !ok {
		auth.Forbidden(rw, r)
		return
	}
	r = r.WithContext(auth.WithTenant(r.Context(), t))
	mode := r.PostFormValue("mode")
	if cur, err := tenant.ByID(r.Context(), w.Engine.Store().Pool(), t.ID); err == nil && cur.DispatchMode != mode &&
		slices.Contains(claim.DispatchModes, mode) && !views.Confirmed(r) {
		w.askDispatch(rw, r, t, mode)
		return
	}
	err := w.Engine.SetDispatchMode(r.Context(), by(r), t.ID, mode)
	var inv claim.Invalid
	if errors.As(err, &inv) {
		w.refuse(rw, r, "dispatch", inv.Error(), nil)
		return
	}
	if err != nil {
		w.fail(rw, r, "dispatch mode", err)
		return
	}
	back(rw, r, tenantPath(r, "/settings"), "ok", "Recorded: "+t.Name+" dispatches in "+mode+" mode.")
}
