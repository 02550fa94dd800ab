package account

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The one rule for guesses, passwords and TOTP codes alike. Per account:
// AccountFree attempts, then each attempt must wait a delay doubling from
// AccountDelay up to AccountMaxDelay after the previous one, until a
// success resets the count (so an attacker cannot lock a known operator out
// for long, and the right password after the delay works). Per address:
// AddressLimit attempts per AddressWindow. Attempts are counted when they
// are admitted, before they are evaluated, so of many parallel attempts at
// most AccountFree are evaluated; refused ones are not counted (hammering
// during a delay does not lengthen it).
const (
	AccountFree     = 5
	AccountDelay    = time.Second
	AccountMaxDelay = 15 * time.Minute
	AddressLimit    = 20
	AddressWindow   = time.Minute
	// accountForget: an account key quiet this long starts afresh.
	accountForget = 24 * time.Hour
)

// admitAccount records an attempt on an account key and reports whether it
// may be evaluated, or how long it must wait. One statement decides and
// records: the row lock of INSERT … ON CONFLICT DO UPDATE serialises
// concurrent attempts, on one replica or many.
func admitAccount(ctx context.Context, pool *pgxpool.Pool, key string, now time.Time) (time.Duration, error) {
	var n int
	// The attempt's number: 1 again when the key was quiet long enough.
	const num = `(CASE WHEN t.updated_at <= $2 - $6 * interval '1 second' THEN 1 ELSE t.attempts + 1 END)`
	err := pool.QueryRow(ctx, `
		INSERT INTO auth_throttle AS t (key, attempts, window_at, next_at, updated_at) VALUES ($1, 1, $2, $2, $2)
		ON CONFLICT (key) DO UPDATE SET
			attempts = `+num+`,
			next_at = CASE WHEN `+num+` >= $3
				THEN $2 + least($4 * power(2, least(`+num+` - $3, 30)), $5) * interval '1 second'
				ELSE $2 END,
			updated_at = $2
		WHERE t.next_at <= $2
		RETURNING t.attempts`,
		key, now, AccountFree, AccountDelay.Seconds(), AccountMaxDelay.Seconds(), accountForget.Seconds()).Scan(&n)
	if err == nil {
		return 0, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("account: throttle: %w", err)
	}
	return waitUntil(ctx, pool, key, "next_at", 0, now)
}

// admitAddress records an attempt from an address: AddressLimit per
// AddressWindow, in a fixed window, one statement as for accounts.
func admitAddress(ctx context.Context, pool *pgxpool.Pool, key string, now time.Time) (time.Duration, error) {
	var n int
	const expired = `t.window_at <= $2 - $4 * interval '1 second'`
	err := pool.QueryRow(ctx, `
		INSERT INTO auth_throttle AS t (key, attempts, window_at, next_at, updated_at) VALUES ($1, 1, $2, $2, $2)
		ON CONFLICT (key) DO UPDATE SET
			attempts = CASE WHEN `+expired+` THEN 1 ELSE t.attempts + 1 END,
			window_at = CASE WHEN `+expired+` THEN $2 ELSE t.window_at END,
			updated_at = $2
		WHERE `+expired+` OR t.attempts < $3
		RETURNING t.attempts`,
		key, now, AddressLimit, AddressWindow.Seconds()).Scan(&n)
	if err == nil {
		return 0, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("account: throttle: %w", err)
	}
	return waitUntil(ctx, pool, key, "window_at", AddressWindow, now)
}

// waitUntil reads how long a refused key must wait: until col + after. It
// never answers less than a second (Retry-After counts whole seconds, and
// zero would invite an immediate retry).
func waitUntil(ctx context.Context, pool *pgxpool.Pool, key, col string, after time.Duration, now time.Time) (time.Duration, error) {
	var at time.Time
	if err := pool.QueryRow(ctx, `SELECT `+col+` FROM auth_throttle WHERE key = $1`, key).Scan(&at); err != nil {
		return 0, fmt.Errorf("account: throttle: %w", err)
	}
	return max(at.Add(after).Sub(now), time.Second), nil
}

// admit records an attempt from addrKey on acctKey: the address first (so
// an address over its limit does not spend the account's attempts), then
// the account. It returns 0 when the attempt may be evaluated, else the wait.
func admit(ctx context.Context, pool *pgxpool.Pool, now time.Time, acctKey, addrKey string) (time.Duration, error) {
	if wait, err := admitAddress(ctx, pool, addrKey, now); err != nil || wait > 0 {
		return wait, err
	}
	return admitAccount(ctx, pool, acctKey, now)
}

// succeeded resets an account key after a right password or code.
func succeeded(ctx context.Context, pool *pgxpool.Pool, key string) error {
	if _, err := pool.Exec(ctx, `DELETE FROM auth_throttle WHERE key = $1`, key); err != nil {
		return fmt.Errorf("account: throttle: %w", err)
	}
	return nil
}

// Prune deletes throttle rows quiet for a day and sessions ended or
// expired a week ago; the panel runs it periodically.
func Prune(ctx context.Context, pool *pgxpool.Pool, now time.Time) error {
	if _, err := pool.Exec(ctx, `DELETE FROM auth_throttle WHERE updated_at < $1 AND next_at < $1`, now.Add(-accountForget)); err != nil {
		return fmt.Errorf("account: prune: %w", err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM sessions WHERE (ended_at IS NOT NULL AND ended_at < $1) OR expires_at < $1`, now.Add(-7*24*time.Hour)); err != nil {
		return fmt.Errorf("account: prune: %w", err)
	}
	return nil
}
