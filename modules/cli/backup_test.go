package cli_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/migrations"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/backup"
	"github.com/fleetwright/fleetwright/modules/tenant"
)

// startPanelCluster holds dir the way a panel does: its lock and its
// running, migrated embedded cluster.
func startPanelCluster(t *testing.T, dir string) (*embedded.Lock, *embedded.Postgres) {
	t.Helper()
	ctx := context.Background()
	lock, err := embedded.LockDataDir(dir, "fleetwright test panel")
	require.NoError(t, err)
	pg, err := embedded.StartPostgres(ctx, embedded.PostgresConfig{Dir: filepath.Join(dir, "postgres"), NoSync: true})
	if err != nil {
		lock.Release()
		require.NoError(t, err)
	}
	own, err := db.Open(ctx, pg.OwnerURL(), 2)
	require.NoError(t, err)
	err = db.Migrate(ctx, own, migrations.FS, embedded.AppRole, "v-test", slog.New(slog.DiscardHandler))
	own.Close()
	require.NoError(t, err)
	t.Cleanup(func() { pg.Stop(); lock.Release() })
	return lock, pg
}

func tenantSlugs(t *testing.T, url string) []string {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer c.Close(ctx)
	rows, err := c.Query(ctx, `SELECT slug FROM tenants ORDER BY slug`)
	require.NoError(t, err)
	slugs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return slugs
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	out, err := exec.Command("cp", "-a", src, dst).CombinedOutput()
	require.NoError(t, err, string(out))
}

// TestBackupAndRestoreOfTheEmbeddedCluster: a backup of a running panel's
// cluster, with its key and anchors, restores into an empty data directory
// as of the backup (a tenant created after it is absent), marked as restored
// with the fencing tokens moved on; each bad input is refused with what is
// wrong and leaves nothing that looks like a backup or a restore.
func TestBackupAndRestoreOfTheEmbeddedCluster(t *testing.T) {
	ctx := context.Background()
	root := testenv.SharedTempDir(t)
	data := filepath.Join(root, "panel")
	_, pg := startPanelCluster(t, data)
	app, err := db.Open(ctx, pg.AppURL(), 2)
	require.NoError(t, err)
	defer app.Close()
	_, err = tenant.Create(ctx, app, "acme", "Acme", audit.Entry{Actor: "test"})
	require.NoError(t, err)
	key, err := vault.Load("", filepath.Join(data, "secret.key"), true)
	require.NoError(t, err)
	heads, err := audit.Seal(ctx, app)
	require.NoError(t, err)
	require.NoError(t, audit.NewAnchor(audit.AnchorFile(data), slog.New(slog.DiscardHandler)).Write(time.Now(), heads))
	var tokenBefore int64
	require.NoError(t, app.QueryRow(ctx, `SELECT nextval('claim_token')`).Scan(&tokenBefore))

	// Online: the panel's cluster keeps running (its data dir is locked).
	dest := filepath.Join(root, "backups", "b1")
	r := run(t, "", "backup", "--data-dir="+data, "--to="+dest)
	require.Equal(t, 0, r.code, r)
	names, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	require.Contains(t, r.stdout, "of the embedded database (schema "+strings.TrimSuffix(names[len(names)-1], ".sql")+", release v-test)")
	require.Contains(t, r.stdout, "secret key: included")
	require.Contains(t, r.stdout, "anchors: included")
	m, err := backup.Verify(dest)
	require.NoError(t, err)
	require.Equal(t, backup.FormatVersion, m.Format)
	require.Equal(t, "v-test", m.Release)
	require.NotEmpty(t, m.SystemIdentifier)
	require.NotEmpty(t, m.EndLSN)
	require.False(t, m.FinishedAt.Before(m.StartedAt))
	paths := map[string]bool{}
	for _, f := range m.Files {
		paths[f.Path] = true
		require.Len(t, f.SHA256, 64)
	}
	for _, p := range []string{"postgres/data/PG_VERSION", "postgres/credentials.json", "secret.key", "audit/anchors.log"} {
		require.True(t, paths[p], p)
	}
	entries, _ := os.ReadDir(filepath.Dir(dest))
	require.Len(t, entries, 1, "no partial directory is left beside the backup")

	// After the backup: a tenant the restore will not have, sealed and
	// anchored on the old host.
	_, err = tenant.Create(ctx, app, "later", "Later", audit.Entry{Actor: "test"})
	require.NoError(t, err)
	heads, err = audit.Seal(ctx, app)
	require.NoError(t, err)
	require.NotEmpty(t, heads)
	require.NoError(t, audit.NewAnchor(audit.AnchorFile(data), slog.New(slog.DiscardHandler)).Write(time.Now(), heads))

	// A backup into a directory that holds something is refused.
	r = run(t, "", "backup", "--data-dir="+data, "--to="+dest)
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "is not empty")
	require.Contains(t, r.stderr, "choose another --to")
	_, err = backup.Verify(dest)
	require.NoError(t, err, "the backup there is untouched")

	// A full disk stops the backup with a clear error and leaves nothing.
	small := filepath.Join(root, "small")
	require.NoError(t, os.Mkdir(small, 0o755))
	require.NoError(t, syscall.Mount("tmpfs", small, "tmpfs", 0, "size=2m"))
	defer func() { _ = syscall.Unmount(small, 0) }()
	r = run(t, "", "backup", "--data-dir="+data, "--to="+filepath.Join(small, "b"))
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "is full (no space left on device); nothing was kept")
	entries, err = os.ReadDir(small)
	require.NoError(t, err)
	require.Empty(t, entries, "no partial backup on the full disk")

	// A restore into the data directory in use, or one not empty, is refused.
	r = run(t, "", "restore", "--from="+dest, "--data-dir="+data)
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "data directory is in use")
	require.Contains(t, r.stderr, "fleetwright test panel")
	busy := filepath.Join(root, "busy")
	require.NoError(t, os.MkdirAll(filepath.Join(busy, "keep"), 0o755))
	r = run(t, "", "restore", "--from="+dest, "--data-dir="+busy)
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "is not empty (keep)")
	require.DirExists(t, filepath.Join(busy, "keep"))

	// Damaged backups: truncated, altered, unfinished, of a newer release.
	bad := func(name string, spoil func(dir string)) string {
		dir := filepath.Join(root, name)
		copyDir(t, dest, dir)
		spoil(dir)
		return dir
	}
	for _, c := range []struct {
		name, want string
		spoil      func(dir string)
	}{
		{"truncated", "postgres/data/global/pg_control is 0 bytes, the manifest says 8192 (truncated", func(dir string) {
			require.NoError(t, os.Truncate(filepath.Join(dir, "postgres/data/global/pg_control"), 0))
		}},
		{"altered", "secret.key does not match its checksum", func(dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "secret.key"), []byte(strings.Repeat("0", 64)+"\n"), 0o600))
		}},
		{"unfinished", "has no manifest.json (a backup writes it last: this one did not finish", func(dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, "manifest.json")))
		}},
		{"newer", "whose schema holds migration 9999_from_a_newer_release that this binary (release v-test) does not ship; nothing was restored: restore it with release v9.9.9 or newer", func(dir string) {
			var m backup.Manifest
			b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(b, &m))
			m.Release, m.Migrations = "v9.9.9", append(m.Migrations, "9999_from_a_newer_release")
			b, _ = json.Marshal(m)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "manifest.json"), b, 0o600))
		}},
	} {
		target := filepath.Join(root, "into-"+c.name)
		r = run(t, "", "restore", "--from="+bad(c.name, c.spoil), "--data-dir="+target)
		require.Equal(t, 1, r.code, c.name+"\n"+r.String())
		require.Contains(t, r.stderr, c.want, c.name)
		entries, _ := os.ReadDir(target)
		for _, e := range entries {
			require.Equal(t, "fleetwright.lock", e.Name(), "%s: nothing restored", c.name)
		}
	}

	// The restore: as of the backup, marked, tokens moved on.
	into := filepath.Join(root, "restored")
	r = run(t, "", "restore", "--from="+dest, "--data-dir="+into, "--anchors="+filepath.Join(root, "backups", "b1", "secret.key"))
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "is not a later copy of the same anchors file")
	r = run(t, "", "restore", "--from="+dest, "--data-dir="+into, "--anchors="+audit.AnchorFile(data))
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "restored backup "+m.ID)
	_, rpg := startPanelCluster(t, into)
	require.Equal(t, []string{"acme"}, tenantSlugs(t, rpg.SuperURL(embedded.Database)))
	c, err := pgx.Connect(ctx, rpg.OwnerURL())
	require.NoError(t, err)
	defer c.Close(ctx)
	var started time.Time
	var before, from, next int64
	require.NoError(t, c.QueryRow(ctx, `SELECT backup_started_at, tokens_before, tokens_from FROM restores`).Scan(&started, &before, &from))
	require.WithinDuration(t, m.StartedAt, started, time.Millisecond)
	require.GreaterOrEqual(t, before, tokenBefore)
	require.Equal(t, before+backup.TokenGap, from)
	require.NoError(t, c.QueryRow(ctx, `SELECT nextval('claim_token')`).Scan(&next))
	require.Equal(t, from, next)
	gotKey, err := vault.Load("", filepath.Join(into, "secret.key"), false)
	require.NoError(t, err)
	require.Equal(t, key, gotKey)
	want, _ := os.ReadFile(audit.AnchorFile(data))
	got, err := os.ReadFile(audit.AnchorFile(into))
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "the old host's newer anchors")

	// The restored chains go on past the backup with other entries at the
	// lost sequence numbers; audit verify names what the restore lost and
	// finds no tampering.
	rapp, err := db.Open(ctx, rpg.AppURL(), 2)
	require.NoError(t, err)
	defer rapp.Close()
	_, err = tenant.Create(ctx, rapp, "after", "After", audit.Entry{Actor: "test"})
	require.NoError(t, err)
	heads, err = audit.Seal(ctx, rapp)
	require.NoError(t, err)
	require.NoError(t, audit.NewAnchor(audit.AnchorFile(into), slog.New(slog.DiscardHandler)).Write(time.Now(), heads))
	r = run(t, "", "audit", "verify", "--data-dir="+into)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "this database was restored from a backup 1 time(s): entries written after a backup are missing from it")
	require.Contains(t, r.stdout, "RESTORED: chain system: seqs ")
	require.Contains(t, r.stdout, "the anchors prove those entries existed — lost with the restore, not tampered with")
	require.Contains(t, r.stdout, "(made after the backup)", "the later tenant's chain")
	require.NotContains(t, r.stdout, "PROBLEM")
	require.Contains(t, r.stdout, "audit verify: OK")
	// Tampering is still tampering on a restored database.
	sc, err := pgx.Connect(ctx, rpg.SuperURL(embedded.Database))
	require.NoError(t, err)
	defer sc.Close(ctx)
	_, err = sc.Exec(ctx, `ALTER TABLE audit_log DISABLE TRIGGER USER`)
	require.NoError(t, err)
	_, err = sc.Exec(ctx, `UPDATE audit_log SET actor = 'mallory' WHERE id = (SELECT min(id) FROM audit_log)`)
	require.NoError(t, err)
	r = run(t, "", "audit", "verify", "--data-dir="+into)
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stdout, "was altered after it was sealed")
}

// TestBackupAndRestoreOfAnExternalDatabase: pg_dump with a role that
// bypasses row-level security, restored into an empty database; the
// owner's URL (under RLS) and a database that is not empty are refused.
func TestBackupAndRestoreOfAnExternalDatabase(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	_, err := vault.Load("", filepath.Join(b.dataDir, "secret.key"), true)
	require.NoError(t, err)
	dest := filepath.Join(t.TempDir(), "b")

	r := run(t, "", "backup", "--database-url="+b.d.OwnerURL, "--data-dir="+b.dataDir, "--to="+dest)
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "subject to row-level security")
	require.NoDirExists(t, dest)

	r = run(t, "", "backup", "--database-url="+b.d.SuperURL, "--data-dir="+b.dataDir, "--to="+dest)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "of the external database")
	require.Contains(t, r.stdout, "anchors: none")

	full := testenv.DB(t)
	r = run(t, "", "restore", "--from="+dest, "--database-url="+full.SuperURL, "--data-dir="+t.TempDir())
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "is not empty")

	empty := testenv.EmptyDB(t)
	into := t.TempDir()
	r = run(t, "", "restore", "--from="+dest, "--database-url="+empty.SuperURL, "--data-dir="+into)
	require.Equal(t, 0, r.code, r)
	require.Equal(t, []string{"acme"}, tenantSlugs(t, empty.SuperURL))
	var n int
	require.NoError(t, empty.Owner.QueryRow(ctx, `SELECT count(*) FROM restores`).Scan(&n))
	require.Equal(t, 1, n)
	require.FileExists(t, filepath.Join(into, "secret.key"))
	require.NoFileExists(t, vault.NextFile(filepath.Join(into, "secret.key")))

	// Taken while a key rotation runs, a backup carries both keys (values
	// already re-sealed open only with the next one), and the restore puts
	// both back.
	next, err := vault.WriteNext(filepath.Join(b.dataDir, "secret.key"))
	require.NoError(t, err)
	during := filepath.Join(t.TempDir(), "b")
	r = run(t, "", "backup", "--database-url="+b.d.SuperURL, "--data-dir="+b.dataDir, "--to="+during)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "a key rotation was under way")
	empty2 := testenv.EmptyDB(t)
	into2 := t.TempDir()
	r = run(t, "", "restore", "--from="+during, "--database-url="+empty2.SuperURL, "--data-dir="+into2)
	require.Equal(t, 0, r.code, r)
	_, gotNext, err := vault.ReadRing(filepath.Join(into2, "secret.key"))
	require.NoError(t, err)
	require.Equal(t, next, gotNext)
}
