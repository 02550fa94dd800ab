package web

import (
	"context"
	"errors"
	"net"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fleetwright/fleetwright/modules/auth"
)

// ownAgent answers 404 unless the route's {agent} is one of the route's
// tenant's agents, before any handler acts on it.
func (d Deps) ownAgent(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t, _ := auth.TenantFrom(r.Context())
		ok, err := d.Store.AgentInTenant(r.Context(), t.ID, chi.URLParam(r, "agent"))
		if err != nil {
			d.Log.Error("fleet: agent lookup", "err", err)
			auth.ServerError(w, r)
			return
		}
		if !ok {
			auth.NotFound(w, r)
			return
		}
		h(w, r)
	}
}

// shown is what an operator is told about a failed change: the store's own
// messages (bad input, a retired agent), never a database or network error,
// which goes to the log instead.
func (d Deps) shown(err error) string {
	var pg *pgconn.PgError
	var op *net.OpError
	var cerr *pgconn.ConnectError
	if errors.As(err, &pg) || errors.As(err, &op) || errors.As(err, &cerr) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, pgx.ErrNoRows) {
		d.Log.Error("fleet: change failed", "err", err)
		return "an internal error occurred (it was logged)"
	}
	return err.Error()
}
