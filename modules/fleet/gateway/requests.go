package gateway

import (
	"context"
	"strconv"

	"github.com/fleetwright/fleetwright/modules/limit"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// requestLimitEvent turns an agent's request budget events into the
// tenant's limit.reached alarm (one per agent, keyed by it) and resolves it
// when the agent resumes.
func (c *conn) requestLimitEvent(ctx context.Context, e wire.Event) {
	g, a := c.g, c.agent
	key := string(limit.AccountRequestsPerHour) + ":" + a.ID
	switch e.Kind {
	case wire.EventRequestLimitReached:
		v, _ := strconv.ParseInt(e.Fields["value"], 10, 64)
		from := e.Fields["from"]
		if from == "" {
			from = "tenant"
		}
		eff := limit.Effective{Name: limit.AccountRequestsPerHour, Value: v, From: from, Set: true}
		var slug string
		_ = g.store.Pool().QueryRow(ctx, `SELECT slug FROM tenants WHERE id = $1`, a.Tenant).Scan(&slug)
		what := "account of agent " + a.Name
		if at := e.Fields["frees_at"]; at != "" {
			what += " (until " + at + ")"
		}
		limit.ReachedKey(ctx, g.store.Pool(), g.log, a.Tenant, eff, key, what, "/t/"+slug+"/fleet")
	case wire.EventRequestLimitResumed:
		if err := limit.ClearKey(ctx, g.store.Pool(), a.Tenant, key); err != nil {
			g.log.Warn("fleet: resolve a request limit alarm", "agent", a.ID, "err", err)
		}
		g.log.Info("agent resumed under its request limit", "agent", a.ID, "tenant", a.Tenant)
	}
}
