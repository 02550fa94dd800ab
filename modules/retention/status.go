package retention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/schedule"
)

// ScheduleName is the system schedule of the daily prune (Spec).
const ScheduleName = "retention"

// PruneStatus is the daily prune's schedule as people see it: its latest
// finished run and its next one.
type PruneStatus struct {
	// Scheduled is false when the panel has no prune schedule (yet).
	Scheduled bool
	Cron      string
	// LastRun is the latest finished run (ok or failed), nil before one.
	LastRun *schedule.RunRecord
	NextRun *time.Time
}

// Status reads the prune schedule (sched nil: not scheduled).
func Status(ctx context.Context, sched *schedule.Scheduler) (PruneStatus, error) {
	var st PruneStatus
	if sched == nil {
		return st, nil
	}
	sc, err := sched.Get(ctx, schedule.System, ScheduleName)
	if err != nil {
		return st, nil // no schedule: the page says so
	}
	st.Scheduled, st.Cron, st.NextRun = sc.Enabled, sc.Cron+" "+sc.TimeZone, sc.NextRunAt
	runs, err := sched.Runs(ctx, schedule.System, sc.ID, 20)
	if err != nil {
		return st, fmt.Errorf("retention: status: %w", err)
	}
	for _, r := range runs {
		if (r.Status == "ok" || r.Status == "failed") && r.FinishedAt != nil {
			r := r
			st.LastRun = &r
			break
		}
	}
	return st, nil
}

// Pruned is one prune's deletions in one tenant, as its retention.prune
// audit entry records them (a prune that deleted nothing there writes none).
type Pruned struct {
	At     time.Time
	Actor  string
	Counts []KindCount
	Total  int64
	// Run is the schedule run that pruned (0: `fleetwright retention run`).
	Run int64
}

// KindCount is the rows of one kind a prune deleted.
type KindCount struct {
	Kind  Kind
	Label string
	N     int64
}

// LastPruned is the tenant's latest retention.prune entry (nil: none kept).
func LastPruned(ctx context.Context, pool *pgxpool.Pool, tenant string) (*Pruned, error) {
	return pruned(ctx, pool, tenant, 0)
}

// PrunedByRun is what the schedule's run deleted in the tenant (nil:
// nothing, or its record was itself pruned with the audit log).
func PrunedByRun(ctx context.Context, pool *pgxpool.Pool, tenant string, run int64) (*Pruned, error) {
	if run <= 0 {
		return nil, nil
	}
	return pruned(ctx, pool, tenant, run)
}

func pruned(ctx context.Context, pool *pgxpool.Pool, tenant string, run int64) (*Pruned, error) {
	var p Pruned
	var detail []byte
	err := db.InTenant(ctx, pool, tenant, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT at, actor, detail FROM audit_log WHERE action = 'retention.prune' AND target = 'tenant data'
			AND ($1::bigint = 0 OR detail->>'schedule_run' = $1::bigint::text) ORDER BY id DESC LIMIT 1`, run).Scan(&p.At, &p.Actor, &detail)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("retention: last prune: %w", err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(detail, &fields); err != nil {
		return nil, fmt.Errorf("retention: last prune: %w", err)
	}
	for k, raw := range fields {
		var n int64
		if err := json.Unmarshal(raw, &n); err != nil {
			continue
		}
		if k == "schedule_run" {
			p.Run = n
			continue
		}
		d, ok := DefOf(Kind(k))
		if !ok {
			continue
		}
		p.Counts = append(p.Counts, KindCount{Kind: Kind(k), Label: d.Label, N: n})
		p.Total += n
	}
	sort.Slice(p.Counts, func(i, j int) bool { return p.Counts[i].Kind < p.Counts[j].Kind })
	return &p, nil
}
