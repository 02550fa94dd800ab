package gateway

import (
	"context"
	"fmt"
	"strings"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// limitStopped reports whether an assistant's task ended at a limit (the
// assistant's stop reasons start so: "limit reached: spend today …").
func limitStopped(t wire.AssistantTask) bool {
	return t.Status == "stopped" && strings.HasPrefix(t.StopReason, "limit reached")
}

// assistantAlarms raises an alarm for each task of the report that a limit
// stopped, once per task and connection (a raise of an open alarm only
// refreshes it), and resolves the alarm of a task that no longer is (the
// person resumed it). A task first seen on this connection and not stopped
// has its alarm looked up once: it may have resumed while disconnected.
func (c *conn) assistantAlarms(ctx context.Context, rep wire.AssistantReport) {
	c.mu.Lock()
	if c.limitAlarms == nil {
		c.limitAlarms = map[int64]bool{}
	}
	var raise []wire.AssistantTask
	var resolve, lookup []int64
	for _, t := range rep.Tasks {
		alarmed, known := c.limitAlarms[t.ID]
		switch stopped := limitStopped(t); {
		case stopped && !alarmed:
			raise = append(raise, t)
		case !stopped && alarmed:
			resolve = append(resolve, t.ID)
		case !stopped && !known:
			lookup = append(lookup, t.ID)
		}
	}
	c.mu.Unlock()
	if len(raise) == 0 && len(resolve) == 0 && len(lookup) == 0 {
		return
	}
	a := c.agent
	pool := c.g.store.Pool()
	key := func(id int64) string { return fmt.Sprintf("%s/%d", a.ID, id) }
	mark := func(id int64, alarmed bool) {
		c.mu.Lock()
		c.limitAlarms[id] = alarmed
		c.mu.Unlock()
	}
	warn := func(what string, id int64, err error) {
		if ctx.Err() == nil {
			c.g.log.Warn(what, "agent", a.ID, "task", id, "err", err)
		}
	}
	for _, id := range lookup {
		open, err := alarm.IsOpen(ctx, pool, a.Tenant, fleet.AlarmAssistantLimit, key(id))
		if err != nil {
			warn("look up assistant limit alarm", id, err)
			continue
		}
		if !open {
			mark(id, false)
			continue
		}
		resolve = append(resolve, id)
	}
	if len(raise) > 0 {
		var slug string
		_ = db.TenantRow(ctx, pool, a.Tenant, `SELECT slug FROM tenants WHERE id = $1`, a.Tenant).Scan(&slug)
		for _, t := range raise {
			_, err := alarm.Raise(ctx, pool, alarm.Alarm{Kind: fleet.AlarmAssistantLimit, Key: key(t.ID), Tenant: a.Tenant,
				Severity: alarm.Warning, Summary: fmt.Sprintf("assistant %s: task %d stopped: %s", a.Name, t.ID, t.StopReason),
				Detail: fmt.Sprintf("task %q: %d steps, %d tokens, $%.4f; its person may resume it on their machine", t.Goal, t.Steps, t.Tokens, t.CostUSD),
				Link:   "/t/" + slug + "/fleet"})
			if err != nil {
				warn("raise assistant limit alarm", t.ID, err)
				continue
			}
			mark(t.ID, true)
		}
	}
	for _, id := range resolve {
		if _, err := alarm.Resolve(ctx, pool, a.Tenant, fleet.AlarmAssistantLimit, key(id), "assistant "+a.Name); err != nil {
			warn("resolve assistant limit alarm", id, err)
			continue
		}
		mark(id, false)
	}
}
