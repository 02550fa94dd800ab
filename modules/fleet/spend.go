package fleet

import (
	"context"
	"math"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/limit"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// enforceSpend pauses an enrolled assistant whose model spend today (its
// own report) reached the model_spend_day limit that applies to its tenant
// (modules/limit): a pause command with the limit as its reason, audited,
// a limit.reached alarm and a log line. The assistant obeys the panel's
// pauses; a person resumes it (the next UTC day, or after raising the
// limit). An assistant already paused is left alone, so one crossing is
// one pause.
func (g *Gateway) enforceSpend(ctx context.Context, a Agent, r wire.AssistantReport) {
	if r.Paused {
		return
	}
	l, err := limit.Load(ctx, g.store.pool, a.Tenant)
	if err != nil {
		g.log.Warn("fleet: read limits", "agent", a.ID, "err", err)
		return
	}
	e := l.Get(limit.ModelSpendPerDay)
	if !e.Set || int64(math.Round(r.CostTodayUSD*1e6)) < e.Value {
		return
	}
	var paused bool
	if err := db.TenantRow(ctx, g.store.pool, a.Tenant, `SELECT paused FROM agents WHERE id = $1`, a.ID).Scan(&paused); err == nil && paused {
		return
	}
	if _, err := g.store.Enqueue(ctx, a.Tenant, a.ID, CmdPause, CommandBody{Reason: e.Reason()}, audit.Entry{Actor: "system"}); err != nil {
		g.log.Error("fleet: pause an assistant over its spend limit", "agent", a.ID, "err", err)
		return
	}
	var slug string
	_ = g.store.pool.QueryRow(ctx, `SELECT slug FROM tenants WHERE id = $1`, a.Tenant).Scan(&slug)
	limit.Reached(ctx, g.store.pool, g.log, a.Tenant, e, "assistant "+a.Name, "/t/"+slug+"/fleet")
}

// completed counts a finished task of worker under its kind (as the
// agent's latest state report names it).
func (c *conn) completed(worker, outcome string) {
	c.mu.Lock()
	kind := c.kinds[worker]
	c.mu.Unlock()
	if kind == "" {
		kind = "unknown"
	}
	c.g.completions.WithLabelValues(kind, outcome).Inc()
}
