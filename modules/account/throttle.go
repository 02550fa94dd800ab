package account

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Throttle counts failed attempts in Postgres, so every panel replica sees
// the same counts: a key is refused once it has Limit failures within Window.
type Throttle struct {
	Limit  int
	Window time.Duration
}

// The limits: per account (password and MFA steps), and per address, which
// is looser because offices share an address.
var (
	accountThrottle = Throttle{Limit: 5, Window: 15 * time.Minute}
	addressThrottle = Throttle{Limit: 30, Window: 15 * time.Minute}
)

// retryAfter returns how long key must wait, or 0 when it may try.
func (t Throttle) retryAfter(ctx context.Context, pool *pgxpool.Pool, key string, now time.Time) (time.Duration, error) {
	var n int
	var oldest *time.Time
	err := pool.QueryRow(ctx, `SELECT count(*), min(at) FROM (SELECT at FROM auth_failures WHERE key = $1 AND at > $2 ORDER BY at DESC LIMIT $3) f`,
		key, now.Add(-t.Window), t.Limit).Scan(&n, &oldest)
	if err != nil {
		return 0, fmt.Errorf("account: throttle: %w", err)
	}
	if n < t.Limit || oldest == nil {
		return 0, nil
	}
	return oldest.Add(t.Window).Sub(now), nil
}

func recordFailure(ctx context.Context, pool *pgxpool.Pool, now time.Time, keys ...string) error {
	for _, k := range keys {
		if _, err := pool.Exec(ctx, `INSERT INTO auth_failures (key, at) VALUES ($1, $2)`, k, now); err != nil {
			return fmt.Errorf("account: throttle: %w", err)
		}
	}
	return nil
}

func clearFailures(ctx context.Context, pool *pgxpool.Pool, key string) error {
	_, err := pool.Exec(ctx, `DELETE FROM auth_failures WHERE key = $1`, key)
	if err != nil {
		return fmt.Errorf("account: throttle: %w", err)
	}
	return nil
}

// Prune deletes failures and ended sessions older than a day; the panel
// runs it periodically.
func Prune(ctx context.Context, pool *pgxpool.Pool, now time.Time) error {
	if _, err := pool.Exec(ctx, `DELETE FROM auth_failures WHERE at < $1`, now.Add(-24*time.Hour)); err != nil {
		return fmt.Errorf("account: prune: %w", err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM sessions WHERE (ended_at IS NOT NULL AND ended_at < $1) OR expires_at < $1`, now.Add(-7*24*time.Hour)); err != nil {
		return fmt.Errorf("account: prune: %w", err)
	}
	return nil
}
