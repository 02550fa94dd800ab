package panel

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/modules/account"
	"github.com/fleetwright/fleetwright/modules/audit"
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
