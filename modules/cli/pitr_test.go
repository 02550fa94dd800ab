package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/backup"
	"github.com/fleetwright/fleetwright/modules/tenant"
)

// archived switches the cluster to a new WAL segment and waits until the
// archiver has archived the one it closed.
func archived(t *testing.T, c *pgx.Conn, archive string) string {
	t.Helper()
	ctx := context.Background()
	var seg string
	require.NoError(t, c.QueryRow(ctx, `SELECT pg_walfile_name(pg_switch_wal())`).Scan(&seg))
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(archive, seg))
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "segment %s archived", seg)
	return seg
}

func segments(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		if len(e.Name()) == 24 {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

// TestPointInTimeRecovery: a panel's cluster archiving its WAL
// (SetWALArchive, what --wal-archive does) is backed up, then written
// before and after a moment T; restore --wal-archive --until T holds what
// was committed before T and nothing after, marks the restore as recovered
// to T (the in-doubt window starts there) and settles the River job the
// database had running. Refused with what is wrong and nothing left: an
// --until before the backup ended, in the future, past the archive's end,
// without --wal-archive, an archive with a gap, an archive of another
// cluster. The archive never overwrites a segment with other bytes.
func TestPointInTimeRecovery(t *testing.T) {
	ctx := context.Background()
	root := testenv.SharedTempDir(t)
	data := filepath.Join(root, "panel")
	archive := filepath.Join(root, "wal")
	_, err := embedded.SetWALArchive(filepath.Join(data, "postgres"), embedded.WALArchive{Dir: archive, Timeout: time.Hour})
	require.NoError(t, err)
	_, pg := startPanelCluster(t, data)
	require.Equal(t, archive, pg.WALArchive().Dir)
	app, err := db.Open(ctx, pg.AppURL(), 2)
	require.NoError(t, err)
	defer app.Close()
	sc, err := pgx.Connect(ctx, pg.SuperURL(embedded.Database))
	require.NoError(t, err)
	defer sc.Close(ctx)
	_, err = vault.Load("", filepath.Join(data, "secret.key"), true)
	require.NoError(t, err)
	_, err = tenant.Create(ctx, app, "acme", "Acme", audit.Entry{Actor: "test"})
	require.NoError(t, err)
	// A job a worker was running when the history was lost.
	var jobID int64
	require.NoError(t, sc.QueryRow(ctx, `INSERT INTO river_job (kind, args, state, attempt, max_attempts, attempted_at, queue, priority)
		VALUES ('test.running', '{}', 'running', 1, 25, now(), 'default', 1) RETURNING id`).Scan(&jobID))

	dest := filepath.Join(root, "backups", "b1")
	r := run(t, "", "backup", "--data-dir="+data, "--to="+dest)
	require.Equal(t, 0, r.code, r)
	m, err := backup.Verify(dest)
	require.NoError(t, err)

	_, err = tenant.Create(ctx, app, "before", "Before T", audit.Entry{Actor: "test"})
	require.NoError(t, err)
	var until time.Time
	require.NoError(t, sc.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&until))
	require.Eventually(t, func() bool { // the next commit is strictly after T
		var now time.Time
		return sc.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now) == nil && now.After(until)
	}, time.Second, time.Millisecond)
	_, err = tenant.Create(ctx, app, "after", "After T", audit.Entry{Actor: "test"})
	require.NoError(t, err)
	archived(t, sc, archive)

	// A segment already archived with other bytes is never overwritten:
	// archiving it fails (and is retried) until it is moved away.
	// Something to archive (a switch of an empty segment does nothing); at
	// a segment's very start pg_walfile_name names the one before.
	_, err = sc.Exec(ctx, `SELECT txid_current()`)
	require.NoError(t, err)
	var next string
	require.NoError(t, sc.QueryRow(ctx, `SELECT pg_walfile_name(pg_current_wal_insert_lsn())`).Scan(&next))
	junk := []byte(strings.Repeat("not this segment ", 64))
	require.NoError(t, os.WriteFile(filepath.Join(archive, next), junk, 0o644))
	var failedBefore int64
	require.NoError(t, sc.QueryRow(ctx, `SELECT failed_count FROM pg_stat_archiver`).Scan(&failedBefore))
	_, err = sc.Exec(ctx, `SELECT pg_switch_wal()`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var failed int64
		var last *string
		err := sc.QueryRow(ctx, `SELECT failed_count, last_failed_wal FROM pg_stat_archiver`).Scan(&failed, &last)
		return err == nil && failed > failedBefore && last != nil && *last == next
	}, 30*time.Second, 50*time.Millisecond)
	got, err := os.ReadFile(filepath.Join(archive, next))
	require.NoError(t, err)
	require.Equal(t, junk, got, "the archived file is untouched")
	require.NoError(t, os.Remove(filepath.Join(archive, next)))
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(archive, next))
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "archived once the other file is gone")

	// A moment after every archived commit (the next switch is an hour
	// away): the archive cannot reach it.
	var beyond time.Time
	require.NoError(t, sc.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&beyond))
	nothingIn := func(t *testing.T, dir string) {
		t.Helper()
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			require.Equal(t, "fleetwright.lock", e.Name(), "nothing restored into %s", dir)
		}
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"until before the backup", []string{"--wal-archive=" + archive, "--until=" + m.FinishedAt.Add(-time.Second).Format(time.RFC3339Nano)},
			"is before backup " + m.ID + " finished"},
		{"until in the future", []string{"--wal-archive=" + archive, "--until=" + time.Now().Add(time.Hour).Format(time.RFC3339)},
			"is in the future"},
		{"until without an archive", []string{"--until=" + until.Format(time.RFC3339Nano)}, "--until needs --wal-archive"},
		{"until not a time", []string{"--wal-archive=" + archive, "--until=yesterday"}, `--until "yesterday" is not an RFC 3339 time`},
		{"until past the archive", []string{"--wal-archive=" + archive, "--until=" + beyond.Format(time.RFC3339Nano)},
			"the WAL archive ends before --until"},
	} {
		into := filepath.Join(root, "into-"+strings.ReplaceAll(c.name, " ", "-"))
		r := run(t, "", append([]string{"restore", "--from=" + dest, "--data-dir=" + into}, c.args...)...)
		require.NotEqual(t, 0, r.code, c.name+"\n"+r.String())
		require.Contains(t, r.stderr, c.want, c.name)
		nothingIn(t, into)
	}

	// An archive with a gap, and one of another cluster.
	segs := segments(t, archive)
	require.GreaterOrEqual(t, len(segs), 3, "the backup's, the one before T's and after, the junk's")
	gappy := filepath.Join(root, "wal-gap")
	copyDir(t, archive, gappy)
	require.NoError(t, os.Remove(filepath.Join(gappy, segs[len(segs)-2])))
	into := filepath.Join(root, "into-gap")
	r = run(t, "", "restore", "--from="+dest, "--data-dir="+into, "--wal-archive="+gappy, "--until="+until.Format(time.RFC3339Nano))
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "the WAL archive has a gap: "+segs[len(segs)-2]+" to "+segs[len(segs)-2]+" are missing")
	nothingIn(t, into)
	other := filepath.Join(root, "wal-other")
	copyDir(t, archive, other)
	first := filepath.Join(other, segs[len(segs)-1])
	b, err := os.ReadFile(first)
	require.NoError(t, err)
	b[24] ^= 0xff // the page header's system identifier
	require.NoError(t, os.WriteFile(first, b, 0o644))
	r = run(t, "", "restore", "--from="+dest, "--data-dir="+into, "--wal-archive="+other)
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "is of another cluster")
	nothingIn(t, into)

	// The recovery to T.
	into = filepath.Join(root, "restored")
	r = run(t, "", "restore", "--from="+dest, "--data-dir="+into, "--wal-archive="+archive, "--until="+until.Format(time.RFC3339Nano))
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "recovered to "+until.UTC().Format(time.RFC3339Nano))
	require.Contains(t, r.stdout, "1 background job(s) the database still had running were put back to be retried")
	require.Contains(t, r.stdout, "everything after "+until.UTC().Format(time.RFC3339)+" is missing")
	_, rpg := startPanelCluster(t, into)
	require.Empty(t, rpg.WALArchive().Dir, "a restored cluster does not archive into the old panel's archive by itself")
	require.Equal(t, []string{"acme", "before"}, tenantSlugs(t, rpg.SuperURL(embedded.Database)))
	c, err := pgx.Connect(ctx, rpg.OwnerURL())
	require.NoError(t, err)
	defer c.Close(ctx)
	var recoveredTo *time.Time
	require.NoError(t, c.QueryRow(ctx, `SELECT recovered_to FROM restores`).Scan(&recoveredTo))
	require.NotNil(t, recoveredTo)
	require.WithinDuration(t, until, *recoveredTo, time.Microsecond)
	var state string
	var errs []string
	require.NoError(t, c.QueryRow(ctx, `SELECT state::text, errors::text[] FROM river_job WHERE id = $1`, jobID).Scan(&state, &errs))
	require.Equal(t, "retryable", state)
	require.Len(t, errs, 1)
	require.Contains(t, errs[0], "interrupted: the database was restored to")

	// Without --until: everything the archive holds, to its last commit.
	into = filepath.Join(root, "restored-all")
	r = run(t, "", "restore", "--from="+dest, "--data-dir="+into, "--wal-archive="+archive)
	require.Equal(t, 0, r.code, r)
	_, apg := startPanelCluster(t, into)
	require.Equal(t, []string{"acme", "after", "before"}, tenantSlugs(t, apg.SuperURL(embedded.Database)))
}
