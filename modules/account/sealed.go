package account

import "github.com/fleetwright/fleetwright/app/vault"

// SealedColumns are the columns of this module holding values sealed with
// the panel's key, for a key rotation (modules/rekey): operators' TOTP seeds
// and the seeds offered during enrolment, as text.
func SealedColumns() []vault.Column {
	return []vault.Column{{
		Table: "users", Column: "totp_secret", TextPrefix: sealedPrefix,
		Select:   `SELECT id::text, '', totp_secret FROM users WHERE totp_secret LIKE 'sealed:%'`,
		Contexts: func(id, _ string) []string { return []string{totpContext(id)} },
		Update:   `UPDATE users SET totp_secret = $3 WHERE id::text = $1 AND totp_secret = $2`,
	}, {
		Table: "sessions", Column: "enrol_secret", TextPrefix: sealedPrefix,
		Select:   `SELECT id::text, '', enrol_secret FROM sessions WHERE enrol_secret LIKE 'sealed:%'`,
		Contexts: func(id, _ string) []string { return []string{enrolContext(id)} },
		Update:   `UPDATE sessions SET enrol_secret = $3 WHERE id::text = $1 AND enrol_secret = $2`,
	}}
}
