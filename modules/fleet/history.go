package fleet

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
)

// Outage is one stretch an agent was not heard from past its allowance:
// the health sweep's agent.offline alarm, from when it was raised (Since
// is the agent's last word before it) to when it resolved (nil: still
// offline).
type Outage struct {
	Since, Raised time.Time
	Ended         *time.Time
}

// History is an agent's detail page beyond its row: its recent events and
// its outages.
type History struct {
	Events  []EventView
	Outages []Outage
}

// historyEvents and historyOutages bound the detail page.
const (
	historyEvents  = 50
	historyOutages = 30
)

// AgentHistory returns the agent's last events, newest first, and its last
// outages (agent.offline alarms, key = the agent's id), newest first.
func (s *Store) AgentHistory(ctx context.Context, tenant, agentID string) (History, error) {
	var h History
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT at, level, kind, worker, message FROM agent_events
			WHERE agent_id = $1 ORDER BY id DESC LIMIT $2`, agentID, historyEvents)
		if err != nil {
			return err
		}
		h.Events, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (EventView, error) {
			var e EventView
			return e, r.Scan(&e.At, &e.Level, &e.Kind, &e.Worker, &e.Message)
		})
		if err != nil {
			return err
		}
		// The alarm's raised_at is when the sweep saw the silence; the
		// agent's own last word is in the outage's opening event.
		rows, err = tx.Query(ctx, `SELECT a.raised_at, a.resolved_at, COALESCE((SELECT (e.fields->>'since')::timestamptz FROM agent_events e
				WHERE e.agent_id = $1::uuid AND e.kind = 'agent.offline' AND e.at BETWEEN a.raised_at - interval '5 minutes' AND a.raised_at + interval '5 minutes'
				ORDER BY e.id DESC LIMIT 1), a.raised_at)
			FROM alarms a WHERE a.tenant_id = app_tenant() AND a.kind = 'agent.offline' AND a.key = $1::text
			ORDER BY a.raised_at DESC LIMIT $2`, agentID, historyOutages)
		if err != nil {
			return err
		}
		h.Outages, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Outage, error) {
			var o Outage
			return o, r.Scan(&o.Raised, &o.Ended, &o.Since)
		})
		return err
	})
	if err != nil {
		return History{}, fmt.Errorf("fleet: agent history: %w", err)
	}
	return h, nil
}

// Down is how long the outages kept the agent offline within the window
// that ends at now (an open outage runs to now).
func (h History) Down(now time.Time, window time.Duration) time.Duration {
	from := now.Add(-window)
	var d time.Duration
	for _, o := range h.Outages {
		start, end := o.Since, now
		if o.Ended != nil {
			end = *o.Ended
		}
		if start.Before(from) {
			start = from
		}
		if end.After(now) {
			end = now
		}
		if end.After(start) {
			d += end.Sub(start)
		}
	}
	return d
}
