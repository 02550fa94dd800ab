package crawl

import "github.com/fleetwright/fleetwright/app/vault"

// SealedColumns are the columns of this module holding values sealed with
// the panel's key, for a key rotation (modules/rekey): proxy passwords,
// and captcha solvers' API keys, each bound to its row.
func SealedColumns() []vault.Column {
	return []vault.Column{{
		Table: "crawl_proxies", Column: "secret", Tenant: true,
		Select:   `SELECT id::text, '', secret FROM crawl_proxies WHERE secret IS NOT NULL`,
		Contexts: func(id, _ string) []string { return []string{proxyContext(id)} },
		Update:   `UPDATE crawl_proxies SET secret = $3 WHERE id::text = $1 AND secret = $2`,
	}, {
		Table: "crawl_captcha_auth", Column: "api_key", Tenant: true,
		Select:   `SELECT id::text, '', api_key FROM crawl_captcha_auth WHERE api_key IS NOT NULL`,
		Contexts: func(id, _ string) []string { return []string{captchaContext(id)} },
		Update:   `UPDATE crawl_captcha_auth SET api_key = $3 WHERE id::text = $1 AND api_key = $2`,
	}}
}
