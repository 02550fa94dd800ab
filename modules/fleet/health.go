package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// KindCount is how many workers of one kind a tenant runs: Total declared
// on the accounts of its live (not retired) agents, Online reported running
// by agents connected now and not hung or crash-looping (Hung: running but
// with such an open alarm; they do not count as online).
type KindCount struct {
	Kind                string
	Online, Total, Hung int
}

// WorkerCounts returns the tenant's workers by kind, for the overview.
func (s *Store) WorkerCounts(ctx context.Context, tenant string) ([]KindCount, error) {
	by := map[string]*KindCount{}
	get := func(kind string) *KindCount {
		if by[kind] == nil {
			by[kind] = &KindCount{Kind: kind}
		}
		return by[kind]
	}
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		unwell := map[string]bool{} // "<agent id>/<worker>"
		hr, err := tx.Query(ctx, `SELECT key FROM alarms WHERE tenant_id = app_tenant() AND resolved_at IS NULL
			AND kind IN ('worker.hung', 'worker.crash_loop')`)
		if err != nil {
			return err
		}
		keys, err := pgx.CollectRows(hr, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, k := range keys {
			unwell[k] = true
		}
		rows, err := tx.Query(ctx, `
			SELECT ag.id::text, ag.connected AND EXISTS (SELECT 1 FROM panel_replicas r WHERE r.id = ag.replica_id
			                                AND r.last_seen > now() - make_interval(secs => $1)),
			       ag.state, ac.workers
			FROM agents ag JOIN accounts ac ON ac.id = ag.account_id
			WHERE ag.retired_at IS NULL`, LiveWindow.Seconds())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var online bool
			var st, ws []byte
			if err := rows.Scan(&id, &online, &st, &ws); err != nil {
				return err
			}
			var specs []wire.WorkerSpec
			_ = json.Unmarshal(ws, &specs)
			for _, w := range specs {
				get(w.Kind).Total++
			}
			if !online || st == nil {
				continue
			}
			var state wire.State
			_ = json.Unmarshal(st, &state)
			for _, w := range state.Workers {
				switch {
				case w.State != wire.WorkerRunning:
				case unwell[id+"/"+w.Name]:
					get(w.Kind).Hung++
				default:
					get(w.Kind).Online++
				}
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("fleet: worker counts: %w", err)
	}
	out := make([]KindCount, 0, len(by))
	for _, k := range by {
		out = append(out, *k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out, nil
}

// Health labels the fleet page shows beside a worker, by alarm kind.
var healthLabels = map[string]string{"worker.hung": "hung", "worker.crash_loop": "crash loop"}

// markHealth copies the open health alarms of the tenant onto its agents:
// worker alarms are keyed "<agent id>/<worker>", agent ones "<agent id>".
func markHealth(ctx context.Context, tx pgx.Tx, byID map[string]*AgentView) error {
	rows, err := tx.Query(ctx, `SELECT kind, key, summary FROM alarms
		WHERE resolved_at IS NULL AND kind IN ('worker.hung', 'worker.crash_loop', 'agent.crash_loop')`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var kind, key, summary string
		if err := rows.Scan(&kind, &key, &summary); err != nil {
			return err
		}
		agent, worker, _ := strings.Cut(key, "/")
		a := byID[agent]
		if a == nil {
			continue
		}
		if kind == "agent.crash_loop" {
			a.CrashLoop = true
			continue
		}
		if a.Health == nil {
			a.Health, a.HealthDetail = map[string]string{}, map[string]string{}
		}
		// A crash loop outranks a hang.
		if a.Health[worker] == "" || kind == "worker.crash_loop" {
			a.Health[worker], a.HealthDetail[worker] = healthLabels[kind], summary
		}
	}
	return rows.Err()
}
