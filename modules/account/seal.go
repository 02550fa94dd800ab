package account

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/app/vault"
)

// sealedPrefix marks a TOTP seed sealed with the panel's key; a value
// without it is a clear seed from before sealing (SealStoredSeeds seals it).
const sealedPrefix = "sealed:v1:"

// The vault contexts bind a sealed seed to its row: copied onto another
// user or session, it does not open.
func totpContext(userID string) string     { return "account.totp:" + userID }
func enrolContext(sessionID string) string { return "account.enrol:" + sessionID }

func sealSeed(v *vault.Vault, seed, ctx string) string {
	return sealedPrefix + base64.RawStdEncoding.EncodeToString(v.Seal([]byte(seed), ctx))
}

func openSeed(v *vault.Vault, stored, ctx string) (string, error) {
	if stored == "" {
		return "", nil
	}
	rest, ok := strings.CutPrefix(stored, sealedPrefix)
	if !ok {
		return stored, nil // clear, from before sealing: sealed at the next start
	}
	b, err := base64.RawStdEncoding.DecodeString(rest)
	if err != nil {
		return "", fmt.Errorf("account: TOTP seed: %w", err)
	}
	pt, err := v.Open(b, ctx)
	if err != nil {
		return "", fmt.Errorf("account: TOTP seed of %s: %w (is this the panel's secret key?)", ctx, err)
	}
	logging.RegisterSecret(string(pt))
	return string(pt), nil
}

// SealStoredSeeds seals every operator TOTP seed still stored in clear (from
// before seeds were sealed) and drops enrolment copies of ended sessions.
// The panel runs it at start, once it holds the key; it returns how many
// seeds it sealed.
func SealStoredSeeds(ctx context.Context, pool *pgxpool.Pool, v *vault.Vault) (int, error) {
	n := 0
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id::text, totp_secret FROM users WHERE totp_secret IS NOT NULL AND totp_secret NOT LIKE 'sealed:%' FOR UPDATE`)
		if err != nil {
			return err
		}
		clear, err := pgx.CollectRows(rows, scanSeedRow)
		if err != nil {
			return err
		}
		for _, r := range clear {
			if _, err := tx.Exec(ctx, `UPDATE users SET totp_secret = $2 WHERE id::text = $1`, r.id, sealSeed(v, r.seed, totpContext(r.id))); err != nil {
				return err
			}
			n++
		}
		if _, err := tx.Exec(ctx, `UPDATE sessions SET enrol_secret = NULL WHERE enrol_secret IS NOT NULL AND (ended_at IS NOT NULL OR mfa_ok)`); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT id::text, enrol_secret FROM sessions WHERE enrol_secret IS NOT NULL AND enrol_secret NOT LIKE 'sealed:%' FOR UPDATE`)
		if err != nil {
			return err
		}
		pending, err := pgx.CollectRows(rows, scanSeedRow)
		if err != nil {
			return err
		}
		for _, r := range pending {
			if _, err := tx.Exec(ctx, `UPDATE sessions SET enrol_secret = $2 WHERE id::text = $1`, r.id, sealSeed(v, r.seed, enrolContext(r.id))); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("account: seal TOTP seeds: %w", err)
	}
	return n, nil
}

type seedRow struct{ id, seed string }

func scanSeedRow(r pgx.CollectableRow) (seedRow, error) {
	var x seedRow
	err := r.Scan(&x.id, &x.seed)
	return x, err
}
