package web

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/fleetwright/fleetwright/modules/auth"
)

// singleNode is an admin's change of whether the tenant accepts single-node
// durability (settings.manage, installation-wide: the route's tenant is
// resolved here, as for the platforms' setting).
func (w *web) singleNode(rw http.ResponseWriter, r *http.Request) {
	t, ok := auth.UserFrom(r.Context()).Tenant(chi.URLParam(r, auth.TenantParam))
	if !ok {
		auth.Forbidden(rw, r)
		return
	}
	r = r.WithContext(auth.WithTenant(r.Context(), t))
	val := r.PostFormValue("single_node_ok")
	if val != "true" && val != "false" {
		w.refuse(rw, r, "durability", "choose whether the tenant accepts single-node durability (true or false)", nil)
		return
	}
	if err := w.Engine.Store().SetSingleNodeOK(r.Context(), by(r), t.ID, val == "true"); err != nil {
		w.fail(rw, r, "durability setting", err)
		return
	}
	msg := "Recorded: " + t.Name + " claims only what is on two nodes (claims stop while the cluster has no synchronous standby)."
	if val == "true" {
		msg = "Recorded: " + t.Name + " accepts single-node durability: its claims go on while the cluster has no synchronous standby, and a lost primary then loses them."
	}
	back(rw, r, tenantPath(r, "/settings"), "ok", msg)
}
