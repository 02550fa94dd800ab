package console

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/claim/latency"
	"github.com/fleetwright/fleetwright/modules/durability"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/retention"
	"github.com/fleetwright/fleetwright/modules/schedule"
	"github.com/fleetwright/fleetwright/modules/tenant"
)

// RateWindow is the window the claims-per-minute figure is taken over.
const RateWindow = 15 * time.Minute

// StageWindow is the window of the stage percentiles and sparklines.
const StageWindow = time.Hour

// AuditVerifySchedule is the system schedule whose last run is the
// overview's "audit clean" figure.
const AuditVerifySchedule = "audit-verify"

// Sources are what the overview reads; nil parts are left out of it.
type Sources struct {
	DB        *pgxpool.Pool
	Claims    *claim.Engine
	Fleet     *fleet.Store
	Schedules *schedule.Scheduler
	Clock     clock.Clock
}

// TenantFigures are one tenant's line of the overview.
type TenantFigures struct {
	Tenant     auth.Tenant
	Paused     bool
	Duplicates int
	Workers    []fleet.KindCount
	Claims     claim.Counts
	Alarms     int
	// Approvals are enrolled assistants' tasks held for an approval.
	Approvals int
	// Errs names figures that could not be read (the rest still show).
	Errs []string
}

// WorkersOnline sums the tenant's workers online and declared.
func (t TenantFigures) WorkersOnline() (online, total int) {
	for _, k := range t.Workers {
		online += k.Online
		total += k.Total
	}
	return online, total
}

// WorkersHung sums the tenant's workers running but hung or crash-looping.
func (t TenantFigures) WorkersHung() int {
	n := 0
	for _, k := range t.Workers {
		n += k.Hung
	}
	return n
}

// Waiting is what waits for a person: claim reviews and assistant approvals.
func (t TenantFigures) Waiting() int { return t.Claims.Reviews + t.Approvals }

// StageFigure is one claim stage over the last hour.
type StageFigure struct {
	Stage, Label string
	N            int
	P50, P99     time.Duration
	// Spark is an inline SVG of the p50 per five minutes.
	Spark string
}

// AuditFigure is the result of the panel's own scheduled verification.
type AuditFigure struct {
	Known   bool
	OK      bool
	At      time.Time
	Detail  string
	NextRun *time.Time
}

// RetentionFigure is the daily prune: its last finished run, what that run
// deleted in the tenants shown (and the system's, for admins), and its next
// run.
type RetentionFigure struct {
	Known   bool
	OK      bool
	At      time.Time
	Deleted int64
	NextRun *time.Time
}

// Overview is the whole window: the user's tenants, or one tenant.
type Overview struct {
	At      time.Time
	Single  bool // one tenant's overview
	Tenants []TenantFigures
	Total   TenantFigures
	Kinds   []fleet.KindCount
	Stages  []StageFigure
	Cells   []CellFigure
	Alarms  []alarm.Count
	// AlarmsOpen sums Alarms: open and not silenced.
	AlarmsOpen int
	// AlarmsSilenced counts the open alarms under a silence, which Alarms
	// leaves out until the silence ends.
	AlarmsSilenced int
	Audit          AuditFigure
	Retention      RetentionFigure
	// System says the user sees system figures (cells, system alarms).
	System bool
	// Hold is why new leases and actions are held — the database cluster
	// cannot promise that a commit is on two nodes — or "" (every user
	// sees it: every tenant's claiming stopped); HeldSince when it began.
	Hold      string
	HeldSince *time.Time
	Errs      []string
}

// CellFigure is a cell and its state.
type CellFigure struct {
	Name    string
	Failing bool
	Since   time.Time
	Error   string
	Tenants int
}

// Build reads the overview of tenants; system adds the system's own
// figures (cells, system alarms), which only admins see. Every tenant is
// read in its own row-level-security scope.
func Build(ctx context.Context, src Sources, tenants []auth.Tenant, system bool) Overview {
	now := time.Now()
	if src.Clock != nil {
		now = src.Clock.Now()
	}
	o := Overview{At: now, System: system}
	if reason, since, err := durability.Hold(ctx, src.DB); err != nil {
		o.Errs = append(o.Errs, "durability hold")
	} else {
		o.Hold, o.HeldSince = reason, since
	}
	var all []claim.Claim
	kinds := map[string]*fleet.KindCount{}
	alarms := map[[2]string]int{}
	// addAlarms counts the alarms that want a person now and returns how
	// many those are; a silenced one is counted apart.
	addAlarms := func(list []alarm.Open) int {
		n := 0
		for _, a := range list {
			if a.Silenced(now) {
				o.AlarmsSilenced++
				continue
			}
			alarms[[2]string{a.Kind, string(a.Severity)}]++
			n++
		}
		return n
	}
	for _, t := range tenants {
		f := TenantFigures{Tenant: t}
		if src.Claims != nil {
			st := src.Claims.Store()
			if ct, err := tenant.ByID(ctx, st.Pool(), t.ID); err == nil {
				f.Paused = ct.Paused
			}
			if n, _, err := st.DuplicateConfirmations(ctx, t.ID); err != nil {
				f.Errs = append(f.Errs, "duplicates")
			} else {
				f.Duplicates = n
			}
			if c, err := st.CountWindow(ctx, t.ID, RateWindow); err != nil {
				f.Errs = append(f.Errs, "claims")
			} else {
				f.Claims = c
			}
			if cs, err := st.Window(ctx, t.ID, StageWindow, 20000); err != nil {
				f.Errs = append(f.Errs, "latency")
			} else {
				all = append(all, cs...)
			}
		}
		if src.Fleet != nil {
			if ws, err := src.Fleet.WorkerCounts(ctx, t.ID); err != nil {
				f.Errs = append(f.Errs, "workers")
			} else {
				f.Workers = ws
				for _, k := range ws {
					if kinds[k.Kind] == nil {
						kinds[k.Kind] = &fleet.KindCount{Kind: k.Kind}
					}
					kinds[k.Kind].Online += k.Online
					kinds[k.Kind].Total += k.Total
					kinds[k.Kind].Hung += k.Hung
				}
			}
		}
		if n, err := pendingApprovals(ctx, src.DB, t.ID); err != nil {
			f.Errs = append(f.Errs, "approvals")
		} else {
			f.Approvals = n
		}
		if list, err := alarm.ListTenant(ctx, src.DB, t.ID, true, 1000); err != nil {
			f.Errs = append(f.Errs, "alarms")
		} else {
			f.Alarms = addAlarms(list)
		}
		o.Total.Duplicates += f.Duplicates
		o.Total.Alarms += f.Alarms
		o.Total.Claims.Window = RateWindow
		o.Total.Claims.Total += f.Claims.Total
		o.Total.Claims.Confirmed += f.Claims.Confirmed
		o.Total.Claims.Taken += f.Claims.Taken
		o.Total.Claims.Unknown += f.Claims.Unknown
		o.Total.Claims.Reviews += f.Claims.Reviews
		o.Total.Approvals += f.Approvals
		for _, e := range f.Errs {
			o.Errs = append(o.Errs, t.Name+": "+e)
		}
		o.Tenants = append(o.Tenants, f)
	}
	for _, k := range kinds {
		o.Kinds = append(o.Kinds, *k)
	}
	sort.Slice(o.Kinds, func(i, j int) bool { return o.Kinds[i].Kind < o.Kinds[j].Kind })
	o.Total.Workers = o.Kinds
	if system {
		if list, err := alarm.ListTenant(ctx, src.DB, alarm.System, true, 1000); err != nil {
			o.Errs = append(o.Errs, "system alarms")
		} else {
			addAlarms(list)
		}
		if src.Claims != nil {
			if cm := src.Claims.Cells(); cm != nil {
				for _, c := range cm.Status() {
					o.Cells = append(o.Cells, CellFigure{Name: c.Name, Failing: c.Failing, Since: c.Since, Error: c.LastError, Tenants: c.Tenants})
				}
			}
		}
	}
	for k, n := range alarms {
		o.Alarms = append(o.Alarms, alarm.Count{Kind: k[0], Severity: alarm.Severity(k[1]), Open: n})
		o.AlarmsOpen += n
	}
	sort.Slice(o.Alarms, func(i, j int) bool { return o.Alarms[i].Kind < o.Alarms[j].Kind })
	o.Stages = stageFigures(all, now)
	o.Audit = auditFigure(ctx, src)
	o.Retention = retentionFigure(ctx, src, tenants, system)
	return o
}

func stageFigures(claims []claim.Claim, now time.Time) []StageFigure {
	g := latency.Summarize("all", claims)
	out := make([]StageFigure, 0, len(g.Stages))
	for _, p := range g.Stages {
		out = append(out, StageFigure{Stage: p.Stage, Label: latency.StageLabel(p.Stage), N: p.N, P50: p.P50, P99: p.P99,
			Spark: sparkline(p.Stage, claims, now)})
	}
	return out
}

// sparkline draws the p50 of a stage per five minutes over the last hour.
func sparkline(stage string, claims []claim.Claim, now time.Time) string {
	const buckets, w, h = 12, 120, 28
	step := StageWindow / buckets
	start := now.Add(-StageWindow)
	ds := make([][]time.Duration, buckets)
	for _, c := range claims {
		d, ok := c.StageDurations()[stage]
		if !ok || c.LeasedAt.Before(start) {
			continue
		}
		i := min(int(c.LeasedAt.Sub(start)/step), buckets-1)
		ds[i] = append(ds[i], d)
	}
	p50 := make([]time.Duration, buckets)
	peak := time.Duration(0)
	for i := range ds {
		sort.Slice(ds[i], func(a, b int) bool { return ds[i][a] < ds[i][b] })
		p50[i] = latency.Quantile(ds[i], .5)
		peak = max(peak, p50[i])
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" class="spark" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="p50 per five minutes">`, w, h, w, h)
	var pts []string
	for i, d := range p50 {
		if len(ds[i]) == 0 {
			continue
		}
		y := float64(h - 2)
		if peak > 0 {
			y = float64(h-2) - float64(h-4)*float64(d)/float64(peak)
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", float64(i)*float64(w-2)/float64(buckets-1)+1, y))
	}
	if len(pts) == 1 {
		pts = append(pts, pts[0])
	}
	if len(pts) > 0 {
		fmt.Fprintf(&sb, `<polyline fill="none" stroke="#1f5fa8" stroke-width="1.5" points="%s"/>`, strings.Join(pts, " "))
	} else {
		fmt.Fprintf(&sb, `<line x1="1" x2="%d" y1="%d" y2="%d" stroke="#dde3ea"/>`, w-1, h-2, h-2)
	}
	sb.WriteString(`</svg>`)
	return sb.String()
}

func auditFigure(ctx context.Context, src Sources) AuditFigure {
	var a AuditFigure
	if src.Schedules == nil {
		return a
	}
	sc, err := src.Schedules.Get(ctx, schedule.System, AuditVerifySchedule)
	if err != nil {
		return a
	}
	a.NextRun = sc.NextRunAt
	runs, err := src.Schedules.Runs(ctx, schedule.System, sc.ID, 20)
	if err != nil {
		return a
	}
	for _, r := range runs {
		if (r.Status == "ok" || r.Status == "failed") && r.FinishedAt != nil {
			a.Known, a.OK, a.At, a.Detail = true, r.Status == "ok", *r.FinishedAt, r.Error
			break
		}
	}
	return a
}

func retentionFigure(ctx context.Context, src Sources, tenants []auth.Tenant, system bool) RetentionFigure {
	var f RetentionFigure
	st, err := retention.Status(ctx, src.Schedules)
	if err != nil {
		return f
	}
	f.NextRun = st.NextRun
	r := st.LastRun
	if r == nil || r.FinishedAt == nil {
		return f
	}
	f.Known, f.OK, f.At = true, r.Status == "ok", *r.FinishedAt
	ids := make([]string, 0, len(tenants)+1)
	for _, t := range tenants {
		ids = append(ids, t.ID)
	}
	if system {
		ids = append(ids, retention.Global)
	}
	for _, id := range ids {
		if p, err := retention.PrunedByRun(ctx, src.DB, id, r.ID); err == nil && p != nil {
			f.Deleted += p.Total
		}
	}
	return f
}

// pendingApprovals counts the tenant's assistant tasks held for approval.
func pendingApprovals(ctx context.Context, pool *pgxpool.Pool, tenantID string) (int, error) {
	var n int
	err := db.TenantRow(ctx, pool, tenantID, `SELECT count(*) FROM agents ag
		CROSS JOIN LATERAL jsonb_array_elements(CASE jsonb_typeof(ag.assistant_report->'tasks') WHEN 'array'
		      THEN ag.assistant_report->'tasks' ELSE '[]'::jsonb END) t
		WHERE ag.retired_at IS NULL AND ag.assistant_report IS NOT NULL AND COALESCE(t->>'pending_approval', '') <> ''`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("console: approvals: %w", err)
	}
	return n, nil
}
