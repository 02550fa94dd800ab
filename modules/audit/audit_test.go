package audit_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/factory"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func appendN(t *testing.T, d *testenv.Database, tenant string, n int, action string) {
	ctx := context.Background()
	for i := range n {
		require.NoError(t, db.InTenant(ctx, d.App, tenant, func(tx pgx.Tx) error {
			return audit.Append(ctx, tx, audit.Entry{Actor: "tester", Action: action, Target: "t", Detail: map[string]any{"i": i}})
		}))
	}
}

func TestAppendNeedsATenantScopeAndTheLogIsAppendOnly(t *testing.T) {
	ctx := context.Background()
	d := testenv.DB(t)
	err := pgx.BeginFunc(ctx, d.App, func(tx pgx.Tx) error {
		return audit.Append(ctx, tx, audit.Entry{Actor: "x", Action: "thing.done"})
	})
	require.ErrorContains(t, err, "needs a tenant-scoped transaction")

	appendN(t, d, audit.System, 1, "thing.done")
	for _, q := range []string{"UPDATE audit_log SET actor = 'mallory'", "DELETE FROM audit_log", "TRUNCATE audit_log"} {
		_, err := d.App.Exec(ctx, q)
		require.Error(t, err, q)
		// Not even a superuser, who bypasses privileges and row-level
		// security, may change it while the trigger stands.
		c, err := pgx.Connect(ctx, d.SuperURL)
		require.NoError(t, err)
		_, err = c.Exec(ctx, q)
		c.Close(ctx)
		require.ErrorContains(t, err, "append-only", q)
	}
	var n int
	require.NoError(t, audit.InSystem(ctx, d.App, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT count(*) FROM audit_log").Scan(&n)
	}))
	require.Equal(t, 1, n)
}

func TestCrossTenantReadsNeedAnAuditedAdmin(t *testing.T) {
	ctx := context.Background()
	d := testenv.DB(t)
	a, b := factory.Tenant(t, d, "aaa", "aaa"), factory.Tenant(t, d, "bbb", "bbb")
	appendN(t, d, a, 2, "a.did")
	appendN(t, d, b, 3, "b.did")
	count := func(tx pgx.Tx) int {
		var n int
		require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM audit_log WHERE tenant_id <> $1", audit.System).Scan(&n))
		return n
	}
	// No tenant set: nothing.
	require.NoError(t, pgx.BeginFunc(ctx, d.App, func(tx pgx.Tx) error { require.Zero(t, count(tx)); return nil }))
	// Tenant A set: A's only.
	require.NoError(t, db.InTenant(ctx, d.App, a, func(tx pgx.Tx) error { require.Equal(t, 2, count(tx)); return nil }))

	var admin, viewer string
	require.NoError(t, d.Owner.QueryRow(ctx, `INSERT INTO users (email, role, password_hash) VALUES ('a@x.io', 'admin', 'x') RETURNING id::text`).Scan(&admin))
	require.NoError(t, d.Owner.QueryRow(ctx, `INSERT INTO users (email, role, password_hash) VALUES ('v@x.io', 'viewer', 'x') RETURNING id::text`).Scan(&viewer))
	err := audit.AcrossTenants(ctx, d.App, audit.Entry{ActorID: viewer, Actor: "v@x.io"}, func(tx pgx.Tx) error { return nil })
	require.ErrorContains(t, err, "needs an active admin")
	// Writing the marker by hand is impossible for the app role.
	_, err = d.App.Exec(ctx, "INSERT INTO audit_cross_tenant (txid) VALUES (pg_current_xact_id())")
	require.Error(t, err)

	require.NoError(t, audit.AcrossTenants(ctx, d.App, audit.Entry{ActorID: admin, Actor: "a@x.io", Detail: map[string]any{"reason": "test"}},
		func(tx pgx.Tx) error { require.Equal(t, 5, count(tx)); return nil }))
	// The opening lasts one transaction and is itself on record.
	require.NoError(t, audit.InSystem(ctx, d.App, func(tx pgx.Tx) error {
		require.Zero(t, count(tx))
		var n int
		require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM audit_log WHERE action = 'admin.cross_tenant'").Scan(&n))
		require.Equal(t, 1, n)
		return nil
	}))
}

func seal(t *testing.T, d *testenv.Database, anchor *audit.Anchor) []audit.Head {
	heads, err := audit.Seal(context.Background(), d.App)
	require.NoError(t, err)
	if anchor != nil {
		require.NoError(t, anchor.Write(time.Now(), heads))
	}
	return heads
}

func verify(t *testing.T, d *testenv.Database, path string) audit.Report {
	rep, err := audit.Verify(context.Background(), d.App, path)
	require.NoError(t, err)
	return rep
}

func TestSealingChainsPerTenantInTransactionOrder(t *testing.T) {
	ctx := context.Background()
	d := testenv.DB(t)
	a := factory.Tenant(t, d, "aaa", "aaa")
	appendN(t, d, audit.System, 2, "sys.did")
	// An entry whose transaction is still open is not sealed yet, even if
	// later entries are: it gets its place once it commits.
	tx, err := d.App.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT set_config('app.tenant_id', $1, true)", a)
	require.NoError(t, err)
	require.NoError(t, audit.Append(ctx, tx, audit.Entry{Actor: "slow", Action: "a.slow"}))
	appendN(t, d, a, 2, "a.fast")
	heads := seal(t, d, nil)
	require.Len(t, heads, 1, "only the system chain moved: tenant A's oldest transaction is open")
	require.NoError(t, tx.Commit(ctx))
	heads = seal(t, d, nil)
	require.Len(t, heads, 1)
	require.Equal(t, a, heads[0].Chain)
	require.EqualValues(t, 3, heads[0].Seq, "the slow entry and both fast ones")
	require.Empty(t, seal(t, d, nil), "nothing new")
	rep := verify(t, d, filepath.Join(t.TempDir(), "none"))
	require.True(t, rep.OK(), rep.Problems)
	require.Equal(t, 5, rep.Entries)
	require.Zero(t, rep.Unsealed)
}

// TestVerifyFindsTamperingBehindTheAppsBack plays a superuser who disables
// the append-only triggers and edits the log directly.
func TestVerifyFindsTamperingBehindTheAppsBack(t *testing.T) {
	ctx := context.Background()
	d := testenv.DB(t)
	a := factory.Tenant(t, d, "aaa", "aaa")
	anchorPath := filepath.Join(t.TempDir(), "audit", "anchors.log")
	anchor := audit.NewAnchor(anchorPath, testenv.Logger(t))
	appendN(t, d, audit.System, 6, "user.created")
	appendN(t, d, a, 2, "claim.leased")
	seal(t, d, anchor)
	appendN(t, d, a, 2, "claim.leased")
	seal(t, d, anchor)
	require.True(t, verify(t, d, anchorPath).OK())

	super, err := pgx.Connect(ctx, d.SuperURL)
	require.NoError(t, err)
	defer super.Close(ctx)
	tamper := func(sql string, args ...any) {
		t.Helper()
		_, err := super.Exec(ctx, "SET session_replication_role = replica") // triggers off
		require.NoError(t, err)
		_, err = super.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	ids := func(tenant string) []int64 {
		rows, err := super.Query(ctx, "SELECT id FROM audit_log WHERE tenant_id = $1 ORDER BY id", tenant)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		return out
	}
	sys, ten := ids(audit.System), ids(a)

	// 1. An altered entry.
	tamper("UPDATE audit_log SET actor = 'someone-else' WHERE id = $1", sys[2])
	rep := verify(t, d, anchorPath)
	require.False(t, rep.OK())
	require.Contains(t, strings.Join(rep.Problems, "\n"), "was altered")

	// 2. A deleted entry in the middle, with its seal and the seals after it
	// renumbered and recomputed by a careful attacker: only the anchor knows.
	tamper("UPDATE audit_log SET actor = 'tester' WHERE id = $1", sys[2])
	require.True(t, verify(t, d, anchorPath).OK(), "restored")
	tamper("DELETE FROM audit_log WHERE id = $1", ten[1])
	rep = verify(t, d, anchorPath)
	require.Contains(t, strings.Join(rep.Problems, "\n"), "was deleted")
	tamper("DELETE FROM audit_seals WHERE chain = $1 AND seq >= 2", a)
	rep = verify(t, d, anchorPath)
	require.Contains(t, strings.Join(rep.Problems, "\n"), "deleted at the tail", "chain now shorter than its anchor")
	// Reseal the remaining entries as the attacker would.
	tamper("UPDATE audit_chains SET horizon = '0' WHERE chain = $1", a)
	tamper("DELETE FROM audit_seals WHERE chain = $1", a)
	seal(t, d, nil)
	rep = verify(t, d, anchorPath)
	require.Contains(t, strings.Join(rep.Problems, "\n"), "differs from its anchor")

	// 3. A deleted tail entry and its seal, on the system chain.
	d2 := testenv.DB(t)
	path2 := filepath.Join(t.TempDir(), "anchors.log")
	appendN(t, d2, audit.System, 3, "user.created")
	seal(t, d2, audit.NewAnchor(path2, testenv.Logger(t)))
	super2, err := pgx.Connect(ctx, d2.SuperURL)
	require.NoError(t, err)
	defer super2.Close(ctx)
	_, err = super2.Exec(ctx, "SET session_replication_role = replica")
	require.NoError(t, err)
	_, err = super2.Exec(ctx, "DELETE FROM audit_log WHERE id = (SELECT max(id) FROM audit_log)")
	require.NoError(t, err)
	_, err = super2.Exec(ctx, "DELETE FROM audit_seals WHERE seq = 3")
	require.NoError(t, err)
	rep = verify(t, d2, path2)
	require.False(t, rep.OK())
	require.Contains(t, strings.Join(rep.Problems, "\n"), "ends at seq 2 but seq 3 was anchored")
}
