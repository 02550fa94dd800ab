package web

import (
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/claim"
)

// platformKeys is an admin's change of a platform's idempotency setting.
// The permission (settings.manage) is installation-wide, so the route's
// tenant is resolved here, as the guard does for tenant permissions.
func (w *web) platformKeys(rw http.ResponseWriter, r *http.Request) {
	t, ok := auth.UserFrom(r.Context()).Tenant(chi.URLParam(r, auth.TenantParam))
	if !ok {
		auth.Forbidden(rw, r)
		return
	}
	r = r.WithContext(auth.WithTenant(r.Context(), t))
	name, val := r.PostFormValue("platform"), r.PostFormValue("honours")
	if val != "true" && val != "false" {
		w.refuse(rw, r, "platforms", "choose whether the platform honours idempotency keys (true or false)", nil)
		return
	}
	err := w.Engine.SetHonoursIdempotency(r.Context(), by(r), t.ID, name, val == "true")
	var inv claim.Invalid
	if errors.As(err, &inv) {
		w.refuse(rw, r, "platforms", inv.Error(), nil)
		return
	}
	if err != nil {
		w.fail(rw, r, "platform setting", err)
		return
	}
	state := "does not honour"
	if val == "true" {
		state = "honours"
	}
	back(rw, r, tenantPath(r, "/settings"), "ok", "Recorded: "+name+" "+state+" idempotency keys for "+t.Name+".")
}
