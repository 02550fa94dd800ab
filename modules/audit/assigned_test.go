package audit_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/audit"
)

// Item 14 of issue 12: the application role inserted an entry with a
// back-dated time and transaction id; the sealer, working forward, never
// sealed it, and verify said OK.
func TestBackdatedEntriesAreRefusedAndFoundByVerify(t *testing.T) {
	ctx := context.Background()
	d := testenv.DB(t)
	appendN(t, d, audit.System, 3, "user.created")
	seal(t, d, nil)

	// The application role cannot choose time, transaction id or id.
	for _, q := range []string{
		`INSERT INTO audit_log (actor, action, at) VALUES ('mallory', 'user.created', '2020-01-01')`,
		`INSERT INTO audit_log (actor, action, txid) VALUES ('mallory', 'user.created', '1')`,
		`INSERT INTO audit_log (id, actor, action) OVERRIDING SYSTEM VALUE VALUES (1000000, 'mallory', 'user.created')`,
	} {
		err := audit.InSystem(ctx, d.App, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, q)
			return err
		})
		require.ErrorContains(t, err, "permission denied", q)
	}
	// Whoever inserts, the database stamps the entry: the owner's explicit
	// values are overwritten.
	owner, err := pgx.Connect(ctx, d.OwnerURL)
	require.NoError(t, err)
	defer owner.Close(ctx)
	var at, txid string
	require.NoError(t, pgx.BeginFunc(ctx, owner, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('app.tenant_id', $1, true)", audit.System); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `INSERT INTO audit_log (tenant_id, actor, action, at, txid)
			VALUES ($1, 'owner', 'user.created', '2020-01-01', '1') RETURNING at::text, txid::text`, audit.System).Scan(&at, &txid)
	}))
	require.False(t, strings.HasPrefix(at, "2020"), at)
	require.NotEqual(t, "1", txid)
	seal(t, d, nil)
	path := filepath.Join(t.TempDir(), "anchors.log")
	rep := verify(t, d, path)
	require.True(t, rep.OK(), rep.Problems)

	// A superuser with the triggers off can still slip one in behind the
	// sealer: verify now reports it.
	super, err := pgx.Connect(ctx, d.SuperURL)
	require.NoError(t, err)
	defer super.Close(ctx)
	_, err = super.Exec(ctx, "SET session_replication_role = replica")
	require.NoError(t, err)
	_, err = super.Exec(ctx, `INSERT INTO audit_log (tenant_id, actor, action, at, txid) VALUES ($1, 'mallory', 'user.created', '2020-01-01', '1')`, audit.System)
	require.NoError(t, err)
	require.Empty(t, seal(t, d, nil), "the sealer never picks it up")
	rep = verify(t, d, path)
	require.False(t, rep.OK())
	require.Contains(t, strings.Join(rep.Problems, "\n"), "older than the sealed head but in no chain")
	require.Contains(t, strings.Join(rep.Problems, "\n"), "mallory")
}
