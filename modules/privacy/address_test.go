package privacy_test

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/account"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/privacy"
	"github.com/fleetwright/fleetwright/modules/tenant"
)

// TestExportAndEraseClientAddresses: a person's export holds the clear
// client addresses of the audit entries they made (and no one else's), a
// tenant's export its chain's; erasing the person deletes theirs, erasing
// the tenant deletes the tenant's, each audited; the chained entries keep
// their keyed hashes and the log verifies.
func TestExportAndEraseClientAddresses(t *testing.T) {
	d := testenv.DB(t)
	ctx := context.Background()
	v := testenv.Vault(t)
	ctx = audit.WithAddressKeys(ctx, audit.NewAddressKeys(d.App, v, nil))
	ops := audit.Entry{Actor: "ops@example.com"}
	acme, err := tenant.Create(ctx, d.App, "acme", "Acme", ops)
	require.NoError(t, err)
	u, err := account.CreateUser(ctx, d.App, account.NewUser{Email: "dana@example.com", Role: auth.Operator, Password: "correct horse battery"}, ops)
	require.NoError(t, err)
	const danas, others = "203.0.113.9", "198.51.100.7"
	add := func(chain, actorID, ip string) {
		require.NoError(t, db.InTenant(ctx, d.App, chain, func(tx pgx.Tx) error {
			return audit.Append(ctx, tx, audit.Entry{ActorID: actorID, Actor: "someone", Action: "claim.pause", IP: ip})
		}))
	}
	add(acme.ID, u.ID, danas)
	add(audit.System, u.ID, danas)
	add(acme.ID, "", others)

	var buf bytes.Buffer
	_, err = privacy.ExportUser(ctx, d.Owner, ops, "dana@example.com", &buf)
	require.NoError(t, err)
	var got []string
	for _, l := range lines(t, buf.Bytes()) {
		if l.Table == "audit_addresses" {
			got = append(got, l.Row["ip"].(string))
		}
	}
	require.Equal(t, []string{danas, danas}, got, "the person's two, in either chain, and no one else's")

	buf.Reset()
	_, err = privacy.ExportTenant(ctx, d.App, ops, acme.ID, &buf)
	require.NoError(t, err)
	got = nil
	for _, l := range lines(t, buf.Bytes()) {
		if l.Table == "audit_addresses" {
			got = append(got, l.Row["ip"].(string))
		}
	}
	require.ElementsMatch(t, []string{danas, others}, got)

	super, err := pgx.Connect(ctx, d.SuperURL)
	require.NoError(t, err)
	defer super.Close(ctx)
	count := func(sql string, args ...any) int {
		t.Helper()
		var n int
		require.NoError(t, super.QueryRow(ctx, sql, args...).Scan(&n), sql)
		return n
	}
	require.NoError(t, privacy.EraseUser(ctx, d.Owner, ops, "dana@example.com"))
	require.Zero(t, count(`SELECT count(*) FROM audit_addresses WHERE ip = $1`, danas))
	require.Equal(t, 1, count(`SELECT count(*) FROM audit_addresses WHERE ip = $1`, others))
	require.Equal(t, 2, count(`SELECT count(*) FROM audit_log WHERE actor_id = $1 AND ip_mac <> ''`, u.ID), "the entries keep their keyed hashes")
	require.Equal(t, 1, count(`SELECT count(*) FROM audit_log WHERE action = 'user.erase' AND (detail->>'client_addresses')::int = 2`))

	counts, err := privacy.EraseTenant(ctx, d.Owner, ops, acme.ID)
	require.NoError(t, err)
	require.Equal(t, 1, counts["audit_addresses"])
	require.Zero(t, count(`SELECT count(*) FROM audit_addresses WHERE tenant_id = $1`, acme.ID))
	require.Equal(t, 1, count(`SELECT count(*) FROM audit_log WHERE tenant_id = $1 AND action = 'tenant.erase'`, audit.System))

	heads, err := audit.Seal(ctx, d.App)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "anchors.log")
	require.NoError(t, audit.NewAnchor(path, testenv.Logger(t)).Write(time.Now(), heads))
	rep, err := audit.Verify(ctx, d.App, path)
	require.NoError(t, err)
	require.True(t, rep.OK(), rep.Problems)
}
