package gateway

import "github.com/fleetwright/fleetwright/app/vault"

// SealedColumns are the columns of this package holding values sealed with
// the panel's key, for a key rotation (modules/rekey): the proxy
// credentials of a fetch relayed to an agent on another replica, bound to
// the relay's row.
func SealedColumns() []vault.Column {
	return []vault.Column{{
		Table: "crawl_relay", Column: "creds", Tenant: true,
		Select:   `SELECT id::text, '', creds FROM crawl_relay WHERE creds IS NOT NULL`,
		Contexts: func(id, _ string) []string { return []string{relayContext(id)} },
		Update:   `UPDATE crawl_relay SET creds = $3 WHERE id::text = $1 AND creds = $2`,
	}}
}

func relayContext(id string) string { return "crawl_relay:" + id }
