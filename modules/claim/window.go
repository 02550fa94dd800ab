package claim

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
)

// Window reads the tenant's claims leased within the window (current and
// archived), at most limit, oldest first.
func (s *Store) Window(ctx context.Context, tenant string, window time.Duration, limit int) ([]Claim, error) {
	var out []Claim
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT * FROM (
			SELECT `+claimCols+` FROM claims WHERE leased_at >= clock_timestamp() - make_interval(secs => $1)
			UNION ALL
			SELECT `+claimCols+` FROM claims_archive WHERE leased_at >= clock_timestamp() - make_interval(secs => $1)
			) c ORDER BY leased_at DESC LIMIT $2`, window.Seconds(), limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, scanClaim)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim: latency window: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LeasedAt.Before(out[j].LeasedAt) })
	return out, nil
}
