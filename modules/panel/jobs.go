package panel

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/modules/account"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/console"
	"github.com/fleetwright/fleetwright/modules/schedule"
)

// sealAuditArgs is the periodic job that seals new audit entries into their
// chains and anchors the heads that moved. It runs on the leader only.
type sealAuditArgs struct{}

// Kind implements river.JobArgs.
func (sealAuditArgs) Kind() string { return "audit.seal" }

type sealAuditWorker struct {
	river.WorkerDefaults[sealAuditArgs]
	db     *pgxpool.Pool
	anchor *audit.Anchor
	clock  clock.Clock
}

// Work seals, then anchors; a failed anchor is retried with the next run's
// heads, which cover everything before them.
func (w *sealAuditWorker) Work(ctx context.Context, _ *river.Job[sealAuditArgs]) error {
	heads, err := audit.Seal(ctx, w.db)
	if aerr := w.anchor.Write(w.clock.Now(), heads); aerr != nil {
		return fmt.Errorf("panel: %w", aerr)
	}
	if err != nil {
		return fmt.Errorf("panel: %w", err)
	}
	return nil
}

// pruneAuthArgs is the periodic job that forgets old failures and sessions.
type pruneAuthArgs struct{}

// Kind implements river.JobArgs.
func (pruneAuthArgs) Kind() string { return "account.prune" }

type pruneAuthWorker struct {
	river.WorkerDefaults[pruneAuthArgs]
	db    *pgxpool.Pool
	clock clock.Clock
}

// Work deletes what no longer counts.
func (w *pruneAuthWorker) Work(ctx context.Context, _ *river.Job[pruneAuthArgs]) error {
	return account.Prune(ctx, w.db, w.clock.Now())
}

// auditVerifyKind is the panel's own scheduled verification of the audit
// log: its last result is the overview's "audit clean" figure, and a
// failure raises the critical audit.verify_failed alarm.
func auditVerifyKind(pool *pgxpool.Pool, anchorPath string) schedule.Kind {
	return schedule.Kind{Name: "audit.verify", Lease: 5 * time.Minute, Timeout: 30 * time.Minute,
		Handle: func(ctx context.Context, _ schedule.Run) error {
			rep, err := audit.Verify(ctx, pool, anchorPath)
			if err != nil {
				return fmt.Errorf("panel: audit verify: %w", err)
			}
			if !rep.OK() {
				detail := strings.Join(rep.Problems[:min(len(rep.Problems), 20)], "\n")
				if _, aerr := alarm.Raise(ctx, pool, alarm.Alarm{Kind: "audit.verify_failed", Key: "audit", Severity: alarm.Critical,
					Summary: fmt.Sprintf("audit verification found %d problems: the audit log was tampered with", len(rep.Problems)),
					Detail:  detail, Link: "/audit"}); aerr != nil {
					return aerr
				}
				return fmt.Errorf("%d problems: %s", len(rep.Problems), detail)
			}
			_, err = alarm.Resolve(ctx, pool, alarm.System, "audit.verify_failed", "audit", "audit.verify")
			return err
		}}
}

// auditVerifySpec is the system schedule that runs it.
func auditVerifySpec(cron string) schedule.Spec {
	return schedule.Spec{Name: console.AuditVerifySchedule, Kind: "audit.verify", Cron: cron, TimeZone: "UTC",
		CatchUp: schedule.One, Enabled: true}
}
