package retention_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/factory"
	"github.com/fleetwright/fleetwright/modules/retention"
)

// TestClientAddressRetentionKeepsTheChainVerifiable: the client-address
// setting deletes clear addresses past it (the chained entries keep their
// keyed hashes); a month's key is deleted only once the longest address
// retention of any tenant has passed — a tenant keeping addresses forever
// keeps every key —, the prune reports both, and `audit verify` passes
// before and after, across a checkpoint.
func TestClientAddressRetentionKeepsTheChainVerifiable(t *testing.T) {
	d := testenv.DB(t)
	ctx := context.Background()
	v := testenv.Vault(t)
	start := time.Now().UTC()
	fake := clock.NewFake(start)
	keys := audit.NewAddressKeys(d.App, v, fake)
	ctx = audit.WithAddressKeys(ctx, keys)
	var acme, beta string
	acme = factory.Tenant(t, d, "acme", "Acme")
	beta = factory.Tenant(t, d, "beta", "Beta")
	ops := audit.Entry{Actor: "ops@example.com"}
	require.NoError(t, retention.Set(ctx, d.App, ops, acme, retention.ClientAddresses, 30, true))
	require.NoError(t, retention.Set(ctx, d.App, ops, retention.Global, retention.ClientAddresses, 20, true))
	require.NoError(t, retention.Set(ctx, d.App, ops, beta, retention.ClientAddresses, 0, true)) // forever

	super, err := pgx.Connect(ctx, d.SuperURL)
	require.NoError(t, err)
	defer super.Close(ctx)
	count := func(sql string, args ...any) int {
		t.Helper()
		var n int
		require.NoError(t, super.QueryRow(ctx, sql, args...).Scan(&n), sql)
		return n
	}
	appendFrom := func(tenant, action, ip string) int64 {
		t.Helper()
		var id int64
		require.NoError(t, db.InTenant(ctx, d.App, tenant, func(tx pgx.Tx) error {
			if err := audit.Append(ctx, tx, audit.Entry{Actor: "op@example.com", Action: action, IP: ip}); err != nil {
				return err
			}
			return tx.QueryRow(ctx, `SELECT max(id) FROM audit_log`).Scan(&id)
		}))
		return id
	}
	path := filepath.Join(t.TempDir(), "anchors.log")
	anchor := audit.NewAnchor(path, testenv.Logger(t))
	seal := func() {
		t.Helper()
		heads, err := audit.Seal(ctx, d.App)
		require.NoError(t, err)
		require.NoError(t, anchor.Write(time.Now(), heads))
	}
	verifyOK := func() audit.Report {
		t.Helper()
		seal()
		rep, err := audit.Verify(ctx, d.App, path)
		require.NoError(t, err)
		require.True(t, rep.OK(), rep.Problems)
		return rep
	}

	month0 := audit.MonthOf(start)
	appendFrom(acme, "claim.pause", "203.0.113.7")
	appendFrom(acme, "claim.resume", "203.0.113.8")
	appendFrom(audit.System, "signin.succeeded", "203.0.113.7")
	seal()
	// Whole entries before the cut are dropped behind a checkpoint, their
	// clear addresses with them.
	cut := time.Now()
	// The next entry is stamped by the database's clock: wait until that
	// clock has passed the cut.
	require.Eventually(t, func() bool {
		var after bool
		return super.QueryRow(ctx, `SELECT clock_timestamp() > $1`, cut).Scan(&after) == nil && after
	}, 5*time.Second, time.Millisecond, "the database clock passed the cut")
	e3 := appendFrom(acme, "claim.pause", "203.0.113.7")
	var mac3 string
	require.NoError(t, super.QueryRow(ctx, `SELECT ip_mac FROM audit_log WHERE id = $1`, e3).Scan(&mac3))
	pr, err := audit.DropBefore(ctx, d.App, anchor, acme, cut)
	require.NoError(t, err)
	require.Positive(t, pr.Checkpoint.Seq)
	require.Equal(t, 1, count(`SELECT count(*) FROM audit_addresses WHERE tenant_id = $1`, acme), "only the kept entry's")
	verifyOK()

	// 100 days on (the entries' own times are the database's, now): acme's
	// and the system's clear addresses are past 30 and 20 days; beta keeps
	// addresses forever, so every key stays.
	fake.Advance(100 * 24 * time.Hour)
	e4 := appendFrom(acme, "claim.resume", "203.0.113.7")
	var mac4 string
	require.NoError(t, super.QueryRow(ctx, `SELECT ip_mac FROM audit_log WHERE id = $1`, e4).Scan(&mac4))
	require.NotEqual(t, strings.SplitN(mac3, ":", 2)[1], strings.SplitN(mac4, ":", 2)[1], "the same address months apart")
	betaEntry := appendFrom(beta, "claim.pause", "198.51.100.5")
	p := &retention.Pruner{DB: d.App, Anchor: anchor, Clock: fake, Log: testenv.Logger(t), Keys: keys}
	rep, err := p.Run(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, rep.Tenants[acme][retention.ClientAddresses])
	require.EqualValues(t, 1, rep.Tenants[retention.Global][retention.ClientAddresses])
	require.Zero(t, rep.Tenants[beta][retention.ClientAddresses])
	require.Empty(t, rep.AddressKeys, "beta keeps addresses forever")
	require.Zero(t, count(`SELECT count(*) FROM audit_addresses WHERE tenant_id IN ($1, $2)`, acme, audit.System))
	require.Equal(t, 1, count(`SELECT count(*) FROM audit_addresses WHERE entry_id = $1`, betaEntry))
	require.Equal(t, 1, count(`SELECT count(*) FROM audit_address_keys WHERE month = $1`, month0))
	// The chained rows keep their hashes; nothing in them changed.
	require.Equal(t, 1, count(`SELECT count(*) FROM audit_log WHERE id = $1 AND ip_mac = $2`, e3, mac3))
	verifyOK()

	// Beta down to 10 days: the longest is acme's 30, so month 0's key,
	// older than that, goes (and with it any way to link its hashes);
	// this month's and next month's stay.
	require.NoError(t, retention.Set(ctx, d.App, ops, beta, retention.ClientAddresses, 10, true))
	rep, err = p.Run(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{month0}, rep.AddressKeys)
	require.EqualValues(t, 1, rep.Tenants[beta][retention.ClientAddresses])
	require.Zero(t, count(`SELECT count(*) FROM audit_addresses`))
	require.Zero(t, count(`SELECT count(*) FROM audit_address_keys WHERE month = $1`, month0))
	require.Equal(t, 1, count(`SELECT count(*) FROM audit_address_keys WHERE month = $1`, audit.MonthOf(fake.Now())))
	next := fake.Now().AddDate(0, 0, 32-fake.Now().Day())
	require.Equal(t, 1, count(`SELECT count(*) FROM audit_address_keys WHERE month = $1`, audit.MonthOf(next)), "next month's key made ahead")
	require.Equal(t, 1, count(`SELECT count(*) FROM audit_log WHERE tenant_id = $1 AND action = 'retention.prune' AND target = 'address keys'
		AND detail->'address_keys' ? $2`, audit.System, month0), "the key deletion is audited")
	require.Equal(t, 1, count(`SELECT count(*) FROM audit_log WHERE id = $1 AND ip_mac = $2`, e3, mac3))
	vr := verifyOK()
	require.Equal(t, 1, vr.Checkpoints)

	// A third run finds nothing more.
	rep, err = p.Run(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Total())
	require.Empty(t, rep.AddressKeys)
}
