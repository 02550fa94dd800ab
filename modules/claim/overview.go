package claim

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
)

// Counts are a tenant's claims leased within a window, by state (current
// and archived claims alike), for the overview.
type Counts struct {
	Window                            time.Duration
	Total, Confirmed, Taken, Unknown  int
	Acting, Leased, Released, Reviews int
}

// PerMinute is the rate of claims over the window.
func (c Counts) PerMinute() float64 {
	if c.Window <= 0 {
		return 0
	}
	return float64(c.Total) / c.Window.Minutes()
}

// CountWindow counts the tenant's claims leased within window, and its
// pending reviews.
func (s *Store) CountWindow(ctx context.Context, tenant string, window time.Duration) (Counts, error) {
	c := Counts{Window: window}
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT count(*),
				count(*) FILTER (WHERE state = 'CONFIRMED'), count(*) FILTER (WHERE state = 'TAKEN'),
				count(*) FILTER (WHERE state = 'UNKNOWN'), count(*) FILTER (WHERE state = 'ACTING'),
				count(*) FILTER (WHERE state = 'LEASED'), count(*) FILTER (WHERE state = 'RELEASED')
			FROM (SELECT state FROM claims WHERE leased_at >= clock_timestamp() - make_interval(secs => $1)
			      UNION ALL
			      SELECT state FROM claims_archive WHERE leased_at >= clock_timestamp() - make_interval(secs => $1)) c`,
			window.Seconds()).Scan(&c.Total, &c.Confirmed, &c.Taken, &c.Unknown, &c.Acting, &c.Leased, &c.Released)
		if err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT count(*) FROM claim_reviews WHERE state = 'PENDING'`).Scan(&c.Reviews)
	})
	if err != nil {
		return c, fmt.Errorf("claim: counts: %w", err)
	}
	return c, nil
}
