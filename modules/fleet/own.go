package fleet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/auth"
)

// ErrNotTenantAgent is returned for an agent id that is not one of the tenant's
// agents: unknown, malformed, or another tenant's.
var ErrNotTenantAgent = errors.New("fleet: no such agent in this tenant")

var uuidRe = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// AgentInTenant reports whether agentID is one of tenant's agents (retired
// ones included). The check is explicit, in the tenant's scope: the
// commands table's foreign key would accept another tenant's agent id.
func (s *Store) AgentInTenant(ctx context.Context, tenant, agentID string) (bool, error) {
	if !uuidRe.MatchString(agentID) {
		return false, nil
	}
	var ok bool
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM agents WHERE id = $1 AND tenant_id = $2)`, agentID, tenant).Scan(&ok)
	})
	if err != nil {
		return false, fmt.Errorf("fleet: agent lookup: %w", err)
	}
	return ok, nil
}

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
