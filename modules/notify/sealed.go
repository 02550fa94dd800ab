package notify

import "github.com/fleetwright/fleetwright/app/vault"

// SealedColumns are the columns of this module holding values sealed with
// the panel's key, for a key rotation (modules/rekey): a webhook channel's
// signing secret, bound to the channel.
func SealedColumns() []vault.Column {
	return []vault.Column{{
		Table: "notify_channels", Column: "secret_box",
		Select:   `SELECT id::text, '', secret_box FROM notify_channels WHERE secret_box IS NOT NULL`,
		Contexts: func(id, _ string) []string { return []string{"notify:" + id} },
		Update:   `UPDATE notify_channels SET secret_box = $3 WHERE id::text = $1 AND secret_box = $2`,
	}}
}
