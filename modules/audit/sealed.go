package audit

import "github.com/fleetwright/fleetwright/app/vault"

// SealedColumns are the columns of this module holding values sealed with
// the panel's key, for a key rotation (modules/rekey): the monthly keys of
// client addresses, bound to their month. The application role may not
// change them; the rotation runs as the owner.
func SealedColumns() []vault.Column {
	return []vault.Column{{
		Table: "audit_address_keys", Column: "sealed",
		Select:   `SELECT month, '', sealed FROM audit_address_keys`,
		Contexts: func(month, _ string) []string { return []string{keyContext(month)} },
		Update:   `UPDATE audit_address_keys SET sealed = $3 WHERE month = $1 AND sealed = $2`,
	}}
}
