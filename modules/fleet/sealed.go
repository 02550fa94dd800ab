package fleet

import "github.com/fleetwright/fleetwright/app/vault"

// SealedColumns are the columns of this module holding values sealed with
// the panel's key, for a key rotation (modules/rekey): a platform account's
// password and TOTP seed, bound to the account and its board's origin
// (older rows to the account alone).
func SealedColumns() []vault.Column {
	return []vault.Column{{
		Table: "accounts", Column: "secret_box", Tenant: true,
		Select:   `SELECT id::text, board_url, secret_box FROM accounts`,
		Contexts: func(id, board string) []string { return []string{sealContext(id, board), "account:" + id} },
		Update:   `UPDATE accounts SET secret_box = $3 WHERE id::text = $1 AND secret_box = $2`,
	}}
}
