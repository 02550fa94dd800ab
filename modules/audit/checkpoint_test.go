package audit_test

import (
	"context"
	"os"
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

func dbNow(t *testing.T, d *testenv.Database) time.Time {
	var now time.Time
	require.NoError(t, d.Owner.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now))
	return now
}

// entries counts a chain's entries as a superuser sees them (across
// row-level security).
func entries(t *testing.T, d *testenv.Database, chain string) int {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, d.SuperURL)
	require.NoError(t, err)
	defer c.Close(ctx)
	var n int
	require.NoError(t, c.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE tenant_id = $1`, chain).Scan(&n))
	return n
}

// TestDropBeforeCheckpointStillVerifies: retention drops a chain's old
// entries only behind an anchored checkpoint, verification passes across
// it, the chain goes on sealing from it (also when every seal was dropped),
// and what is not sealed yet is never dropped.
func TestDropBeforeCheckpointStillVerifies(t *testing.T) {
	ctx := context.Background()
	d := testenv.DB(t)
	a := factory.Tenant(t, d, "aaa", "aaa")
	path := filepath.Join(t.TempDir(), "audit", "anchors.log")
	anchor := audit.NewAnchor(path, testenv.Logger(t))
	appendN(t, d, a, 5, "old.thing")
	appendN(t, d, audit.System, 2, "sys.thing")
	seal(t, d, anchor)
	cut := dbNow(t, d)
	appendN(t, d, a, 3, "new.thing")
	seal(t, d, anchor)

	p, err := audit.DropBefore(ctx, d.App, anchor, a, cut)
	require.NoError(t, err)
	require.EqualValues(t, 5, p.Checkpoint.Seq)
	require.EqualValues(t, 5, p.Entries)
	require.Equal(t, 3, entries(t, d, a))
	rep := verify(t, d, path)
	require.True(t, rep.OK(), rep.Problems)
	require.Equal(t, 1, rep.Checkpoints)
	require.Equal(t, 5, rep.Entries, "3 of the tenant's and 2 of the system's")

	// Nothing older: no new checkpoint.
	p, err = audit.DropBefore(ctx, d.App, anchor, a, cut)
	require.NoError(t, err)
	require.Zero(t, p.Checkpoint.Seq)

	// Drop everything sealed; an entry not sealed yet stays (its
	// transaction is still open while the sealer runs).
	tx, err := d.App.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT set_config('app.tenant_id', $1, true)", a)
	require.NoError(t, err)
	require.NoError(t, audit.Append(ctx, tx, audit.Entry{Actor: "slow", Action: "open.thing"}))
	p, err = audit.DropBefore(ctx, d.App, anchor, a, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 8, p.Checkpoint.Seq)
	require.EqualValues(t, 3, p.Entries)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, 1, entries(t, d, a), "the unsealed entry was kept")
	// The chain goes on from the checkpoint: seq 9, not 1.
	heads := seal(t, d, anchor)
	require.Len(t, heads, 1)
	require.EqualValues(t, 9, heads[0].Seq)
	rep = verify(t, d, path)
	require.True(t, rep.OK(), rep.Problems)

	cps, err := audit.Checkpoints(ctx, d.App, a)
	require.NoError(t, err)
	require.Len(t, cps, 2)
	require.EqualValues(t, 8, cps[1].Seq)
}

// TestCheckpointsCannotBeForged: the application role cannot write a
// checkpoint that is not its seal, cannot prune without one or another
// chain, cannot delete a checkpoint; a checkpoint whose anchor write failed
// drops nothing and is reported; a chain altered before the checkpoint
// point is not checkpointed.
func TestCheckpointsCannotBeForged(t *testing.T) {
	ctx := context.Background()
	d := testenv.DB(t)
	a, b := factory.Tenant(t, d, "aaa", "aaa"), factory.Tenant(t, d, "bbb", "bbb")
	path := filepath.Join(t.TempDir(), "audit", "anchors.log")
	anchor := audit.NewAnchor(path, testenv.Logger(t))
	appendN(t, d, a, 4, "a.thing")
	appendN(t, d, b, 2, "b.thing")
	seal(t, d, nil) // sealed, its head not anchored yet

	inA := func(sql string, args ...any) error {
		return db.InTenant(ctx, d.App, a, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, sql, args...)
			return err
		})
	}
	require.ErrorContains(t, inA(`INSERT INTO audit_checkpoints (chain, seq, hash, covers_until) VALUES ($1, 4, '\x00', now())`, a), "does not match its seal")
	require.ErrorContains(t, inA(`SELECT audit_prune($1, 4)`, a), "no checkpoint at seq 4")
	require.ErrorContains(t, inA(`SELECT audit_prune($1, 2)`, b), "only in its own transaction")
	require.ErrorContains(t, inA(`DELETE FROM audit_log`), "permission denied")
	require.Equal(t, 4, entries(t, d, a))

	// The anchor cannot be written (its directory is a file): the
	// checkpoint is kept, nothing is dropped, and verify says so.
	bad := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(bad, nil, 0o600))
	_, err := audit.DropBefore(ctx, d.App, audit.NewAnchor(filepath.Join(bad, "anchors.log"), testenv.Logger(t)), a, time.Now().Add(time.Hour))
	require.ErrorContains(t, err, "checkpoint at seq 4 not anchored, nothing dropped")
	require.Equal(t, 4, entries(t, d, a))
	rep := verify(t, d, path)
	require.Contains(t, strings.Join(rep.Problems, "\n"), "checkpoint at seq 4 is not anchored")
	require.ErrorContains(t, inA(`DELETE FROM audit_checkpoints`), "permission denied")

	// An entry altered behind the app's back: no checkpoint over it.
	appendN(t, d, a, 2, "a.more")
	seal(t, d, anchor)
	super, err := pgx.Connect(ctx, d.SuperURL)
	require.NoError(t, err)
	defer super.Close(ctx)
	_, err = super.Exec(ctx, "SET session_replication_role = replica")
	require.NoError(t, err)
	_, err = super.Exec(ctx, "UPDATE audit_log SET actor = 'mallory' WHERE id = (SELECT max(id) FROM audit_log WHERE tenant_id = $1)", a)
	require.NoError(t, err)
	_, err = audit.DropBefore(ctx, d.App, anchor, a, time.Now().Add(time.Hour))
	require.ErrorIs(t, err, audit.ErrChainBroken)
	require.Equal(t, 6, entries(t, d, a), "nothing dropped")
}
