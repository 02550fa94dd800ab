package crawl

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/limit"
)

// browserSlots prefixes the budget key of a tenant's browser page loads in
// flight (no host name contains "@").
const browserSlots = "browsers@"

// pagesEvery is how often a run with a pages-per-day limit writes its pages
// so far and reads the tenant's other runs' pages.
const pagesEvery = 5 * time.Second

// Limits reads the tenant's and the global limits (modules/limit).
func (s *Store) Limits(ctx context.Context, tenant string) (limit.Limits, error) {
	l, err := limit.Load(ctx, s.pool, tenant)
	if err != nil {
		return l, fmt.Errorf("crawl: %w", err)
	}
	return l, nil
}

// PagesToday is the pages of the tenant's runs started on the UTC day of
// now, other than runID, as far as they have written them.
func (s *Store) PagesToday(ctx context.Context, tenant, runID string, now time.Time) (int, error) {
	day := now.UTC().Truncate(24 * time.Hour)
	var n int
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT COALESCE(sum(pages), 0)::int FROM crawl_runs
			WHERE started_at >= $1 AND started_at < $2 AND id <> $3`, day, day.Add(24*time.Hour), runID).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("crawl: pages today: %w", err)
	}
	return n, nil
}

// Progress writes a running run's pages so far.
func (s *Store) Progress(ctx context.Context, tenant, runID string, pages int) error {
	return db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE crawl_runs SET pages = $2 WHERE id = $1 AND state = 'running'`, runID, pages)
		return err
	})
}

// limits sets the run's effective limits.
func (x *execution) limits(ctx context.Context) error {
	l, err := x.r.Store.Limits(ctx, x.tenant)
	if err != nil {
		return err
	}
	j := x.spec
	// The job's own run time, rounded up to whole seconds to compare; a
	// tie keeps the job's (exact) value.
	x.runTime = l.Apply(limit.RunTime, int64((j.Limits.RunTimeD+time.Second-1)/time.Second))
	// A job's own 0 retries is a value (none), not "no limit".
	x.retries = l.Get(limit.Retries)
	if own := int64(*j.Politeness.Retries); !x.retries.Set || own <= x.retries.Value {
		x.retries = limit.Effective{Name: limit.Retries, Value: own, From: "task", Set: true}
	}
	x.pagesDay = l.Get(limit.CrawlPagesPerDay)
	x.browsers = l.Get(limit.BrowserConcurrency)
	return nil
}

// pagesToday is the tenant's pages today with this run's, refreshed (and
// this run's written) every pagesEvery.
func (x *execution) pagesToday(ctx context.Context, now time.Time) int {
	if x.pagesRead.IsZero() || now.Sub(x.pagesRead) >= pagesEvery {
		if err := x.r.Store.Progress(ctx, x.tenant, x.run.ID, x.run.Pages); err != nil && ctx.Err() == nil {
			x.r.Log.Warn("crawl: write run progress", "err", err)
		}
		if n, err := x.r.Store.PagesToday(ctx, x.tenant, x.run.ID, x.start); err == nil {
			x.pagesBefore, x.pagesRead = n, now
		} else if ctx.Err() == nil {
			x.r.Log.Warn("crawl: read pages today", "err", err)
		}
	}
	return x.pagesBefore + x.run.Pages
}

// limitOutcome reports a limit that stopped the run (log, alarm, metric),
// or, for a run that succeeded, resolves the tenant's limit alarms of the
// kinds a crawl run is held to: it ran within them.
func (x *execution) limitOutcome(ctx context.Context, log *slog.Logger) {
	link := "/t/" + x.tenantSlug(ctx) + "/crawl/jobs/" + x.job.Name
	if x.hit != nil {
		limit.Reached(ctx, x.r.Store.pool, log, x.tenant, *x.hit, "crawl run of "+x.job.Name, link)
		return
	}
	if x.run.State != "succeeded" {
		return
	}
	for _, n := range []limit.Name{limit.RunTime, limit.Retries, limit.CrawlPagesPerDay, limit.BrowserConcurrency} {
		if err := limit.Clear(ctx, x.r.Store.pool, x.tenant, n); err != nil {
			log.Warn("crawl: clear limit alarm", "err", err)
		}
	}
}

func (x *execution) tenantSlug(ctx context.Context) string {
	var slug string
	_ = x.r.Store.pool.QueryRow(ctx, `SELECT slug FROM tenants WHERE id = $1`, x.tenant).Scan(&slug)
	return slug
}
