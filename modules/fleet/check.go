package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// ErrNoAccount is an account id the tenant does not have.
var ErrNoAccount = errors.New("fleet: no such account in this tenant")

// SignInTarget is what a platform check from the console signs in with:
// the account's board, its traits' inputs and its credentials, bound to
// the board's origin they were sealed for.
type SignInTarget struct {
	Key, Region, BoardURL string
	Credentials           wire.Credentials
}

// SignInTarget opens one account's credentials for the console's platform
// check (modules/platform/web), which signs in to the account's board from
// the panel as the agent would. The caller audits the check; the secrets
// are registered with the logging layer's redaction.
func (s *Store) SignInTarget(ctx context.Context, tenant, accountID string) (SignInTarget, error) {
	var t SignInTarget
	var box []byte
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT account_key, region, board_url, username, secret_box FROM accounts WHERE id::text = $1`, accountID).
			Scan(&t.Key, &t.Region, &t.BoardURL, &t.Credentials.Username, &box)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return t, ErrNoAccount
	}
	if err != nil {
		return t, fmt.Errorf("fleet: sign-in target: %w", err)
	}
	pt, err := s.vault.Open(box, sealContext(accountID, t.BoardURL))
	if err != nil {
		if pt, err = s.vault.Open(box, "account:"+accountID); err != nil {
			return t, fmt.Errorf("fleet: sign-in target: the credentials do not open for %s (they are sealed to another board: enter them again): %w", BoardOrigin(t.BoardURL), err)
		}
	}
	var sec sealedSecrets
	if err := json.Unmarshal(pt, &sec); err != nil {
		return t, fmt.Errorf("fleet: sign-in target: sealed secrets: %w", err)
	}
	logging.RegisterSecret(sec.Password, sec.TOTPSecret)
	t.Credentials.Password, t.Credentials.TOTPSecret = wire.NewSecret(sec.Password), wire.NewSecret(sec.TOTPSecret)
	t.Credentials.Origins = []string{BoardOrigin(t.BoardURL)}
	return t, nil
}
