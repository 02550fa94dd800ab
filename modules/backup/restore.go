package backup

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/migrations"
	"github.com/fleetwright/fleetwright/modules/audit"
)

// TokenGap is how far a restore moves the fencing-token sequence on: the
// lost history issued tokens the restored database never saw, and a token
// reissued to another lease could make an agent's old outcome look like
// the new lease's. No history issues a billion leases between a backup and
// its restore.
const TokenGap = 1_000_000_000

// RestoreOptions configure Restore.
type RestoreOptions struct {
	// From is the backup directory.
	From string
	// DataDir is the data directory restored into: it must not exist, or
	// be empty, and no process may hold it.
	DataDir string
	// DatabaseURL, for a backup of an external database, is a superuser's
	// URL of the empty database to restore it into.
	DatabaseURL string
	// Anchors, when set, is a newer anchors.log than the backup's (the old
	// host's, if it survived): it proves which audit entries existed after
	// the backup, and is used instead of the backup's once it is found to
	// hold every anchor the backup's does.
	Anchors string
	// WALArchive, for a backup of the embedded cluster, is the panel's WAL
	// archive (its --wal-archive): the restore replays it past the backup,
	// to Until or, with Until zero, to its end (point-in-time recovery).
	WALArchive string
	Until      time.Time
	// Now is the clock an Until in the future is refused by (time.Now).
	Now     func() time.Time
	Release string
	// By names who restored, for the restores row.
	By  string
	Log *slog.Logger
}

// Restored is what a restore did.
type Restored struct {
	Manifest Manifest
	// RestoredAt is the database's clock when the marker was written.
	RestoredAt time.Time
	// TokensBefore is the last fencing token the backup knew; TokensFrom
	// the first the restored database issues.
	TokensBefore, TokensFrom int64
	// RecoveredTo, after a point-in-time recovery, is the moment the
	// database holds everything committed until (zero: the backup's own
	// time); Archive is the WAL it replayed.
	RecoveredTo time.Time
	Archive     embedded.ArchiveSpan
	// JobsSettled counts the River jobs the restored database still had
	// running, put back to be retried (or discarded, out of attempts).
	JobsSettled int64
}

// LostFrom is where the history the restore lost begins.
func (r Restored) LostFrom() time.Time {
	if !r.RecoveredTo.IsZero() {
		return r.RecoveredTo
	}
	return r.Manifest.StartedAt
}

// Restore restores the backup o.From: the embedded cluster into
// o.DataDir/postgres (or a dump into the empty external database
// o.DatabaseURL), the secret key and the anchors into o.DataDir. It then
// migrates the restored database with this binary and records the restore
// in it (the restores row), so a panel started on it knows. On any failure
// what it wrote is removed again.
func Restore(ctx context.Context, o RestoreOptions) (Restored, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	var r Restored
	m, err := Verify(o.From)
	if err != nil {
		return r, err
	}
	r.Manifest = m
	if err := checkRelease(m, o.Release); err != nil {
		return r, err
	}
	switch {
	case m.Kind == KindExternal && o.DatabaseURL == "":
		return r, fmt.Errorf("backup: %s is a pg_dump of an external database: restore it with --database-url (a superuser's URL of an empty database)", o.From)
	case m.Kind == KindEmbedded && o.DatabaseURL != "":
		return r, fmt.Errorf("backup: %s is a base backup of the embedded cluster: restore it without --database-url, into an empty --data-dir", o.From)
	case m.Kind != KindEmbedded && m.Kind != KindExternal:
		return r, fmt.Errorf("backup: %s is of an unknown kind %q; use another backup", o.From, m.Kind)
	}
	if err := checkRecovery(o, m, &r); err != nil {
		return r, err
	}
	var anchors []byte
	if o.Anchors != "" {
		if anchors, err = newerAnchors(filepath.Join(o.From, anchorFile), o.Anchors); err != nil {
			return r, err
		}
	}
	lock, err := embedded.LockDataDir(o.DataDir, "fleetwright restore")
	if err != nil {
		if errors.Is(err, embedded.ErrLocked) {
			return r, fmt.Errorf("backup: %w; a restore goes only into a data directory nothing uses", err)
		}
		return r, err
	}
	defer lock.Release()
	if err := onlyLock(o.DataDir); err != nil {
		return r, err
	}
	written := []string{}
	ok := false
	defer func() {
		if !ok {
			for _, p := range written {
				_ = os.RemoveAll(p)
			}
		}
	}()
	if m.Kind == KindEmbedded {
		pgDir := filepath.Join(o.DataDir, "postgres")
		written = append(written, pgDir)
		if err := copyTree(filepath.Join(o.From, clusterDir), pgDir); err != nil {
			return r, err
		}
		if err := embedded.AdoptRestored(pgDir); err != nil {
			return r, err
		}
		if o.WALArchive != "" {
			rec, err := embedded.Recover(ctx, pgDir, embedded.Recovery{Archive: o.WALArchive, Until: o.Until, Logger: o.Log})
			if err != nil {
				return r, err
			}
			r.RecoveredTo = o.Until.UTC()
			if o.Until.IsZero() {
				// Everything committed until the last replayed commit is
				// there; a commit after the archive's end is lost.
				r.RecoveredTo = maxTime(rec.LastCommit, m.StartedAt)
			}
		}
		pg, err := embedded.StartPostgres(ctx, embedded.PostgresConfig{Dir: pgDir, Logger: o.Log})
		if err != nil {
			return r, fmt.Errorf("backup: the restored cluster does not start: %w", err)
		}
		err = migrateAndMark(ctx, pg.OwnerURL(), o, &r)
		pg.Stop()
		if err != nil {
			return r, err
		}
	} else {
		if err := restoreDump(ctx, o, filepath.Join(o.From, dumpFile)); err != nil {
			return r, err
		}
		if err := mark(ctx, o.DatabaseURL, o, &r); err != nil {
			return r, err
		}
	}
	if m.has(keyFile) {
		dst := filepath.Join(o.DataDir, "secret.key")
		written = append(written, dst)
		if err := copyFile(filepath.Join(o.From, keyFile), dst, 0o600); err != nil {
			return r, err
		}
		if m.has(nextKeyFile) {
			dst := vault.NextFile(dst)
			written = append(written, dst)
			if err := copyFile(filepath.Join(o.From, nextKeyFile), dst, 0o600); err != nil {
				return r, err
			}
		}
	}
	if m.has(anchorFile) || anchors != nil {
		dir := filepath.Dir(audit.AnchorFile(o.DataDir))
		written = append(written, dir)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return r, fmt.Errorf("backup: %w", err)
		}
		if anchors != nil {
			err = writeFile(audit.AnchorFile(o.DataDir), anchors, 0o600)
		} else {
			err = copyFile(filepath.Join(o.From, anchorFile), audit.AnchorFile(o.DataDir), 0o600)
		}
		if err != nil {
			return r, err
		}
	}
	ok = true
	return r, nil
}

// checkRecovery refuses a point-in-time recovery that cannot be done,
// before anything is written: an --until outside what the backup and its
// archive span, an archive with a gap or of another cluster.
func checkRecovery(o RestoreOptions, m Manifest, r *Restored) error {
	if o.WALArchive == "" {
		if !o.Until.IsZero() {
			return errors.New("backup: --until needs --wal-archive: a backup alone restores to its own time; give the WAL archive the panel wrote (its --wal-archive) to recover to a later moment")
		}
		return nil
	}
	if m.Kind != KindEmbedded {
		return fmt.Errorf("backup: %s is a pg_dump of an external database: --wal-archive replays the embedded cluster's WAL only; recover an external cluster with its own tools (docs/DEPLOY.md, \"Point-in-time recovery\")", o.From)
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	if !o.Until.IsZero() {
		if o.Until.Before(m.FinishedAt) {
			return fmt.Errorf("backup: --until %s is before backup %s finished (%s): a backup recovers only to a moment after its end; nothing was restored: choose an older backup, or an --until at or after %s",
				o.Until.UTC().Format(time.RFC3339Nano), m.ID, m.FinishedAt.Format(time.RFC3339Nano), m.FinishedAt.Format(time.RFC3339))
		}
		if t := now(); o.Until.After(t) {
			return fmt.Errorf("backup: --until %s is in the future (it is %s now); nothing was restored: give a past moment, or leave --until out to recover everything the archive holds",
				o.Until.UTC().Format(time.RFC3339), t.UTC().Format(time.RFC3339))
		}
	}
	span, err := embedded.CheckArchive(o.WALArchive, filepath.Join(o.From, clusterDir, "data"), m.SystemIdentifier, m.EndLSN)
	if err != nil {
		return fmt.Errorf("backup: --wal-archive %s: %w", o.WALArchive, err)
	}
	r.Archive = span
	return nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// checkRelease refuses a backup whose schema holds a migration this binary
// does not ship: it was taken by a newer release.
func checkRelease(m Manifest, release string) error {
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	shipped := map[string]bool{}
	for _, n := range names {
		shipped[strings.TrimSuffix(n, ".sql")] = true
	}
	var unknown []string
	for _, v := range m.Migrations {
		if !shipped[v] {
			unknown = append(unknown, v)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	if release == "" {
		release = "unknown"
	}
	return fmt.Errorf("backup: the backup was taken by release %s, whose schema holds migration %s that this binary (release %s) does not ship; nothing was restored: restore it with release %s or newer",
		m.Release, strings.Join(unknown, ", "), release, m.Release)
}

// onlyLock refuses a data directory holding anything but its lock file.
func onlyLock(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	var names []string
	for _, e := range entries {
		if e.Name() != "fleetwright.lock" {
			names = append(names, e.Name())
		}
	}
	if len(names) > 0 {
		sort.Strings(names)
		abs, _ := filepath.Abs(dir)
		return fmt.Errorf("backup: the data directory %s is not empty (%s): a restore goes only into an empty one, so nothing is overwritten; restore into a new --data-dir, or move this one aside first",
			abs, strings.Join(names, ", "))
	}
	return nil
}

// migrateAndMark brings the restored schema to this binary's (a backup of
// an older release) and writes the marker.
func migrateAndMark(ctx context.Context, ownerURL string, o RestoreOptions, r *Restored) error {
	pool, err := db.Open(ctx, ownerURL, 2)
	if err != nil {
		return err
	}
	err = db.Migrate(ctx, pool, migrations.FS, embedded.AppRole, o.Release, o.Log)
	pool.Close()
	if err != nil {
		return err
	}
	return mark(ctx, ownerURL, o, r)
}

// mark records the restore and moves the fencing tokens past the lost
// history's, in one transaction.
func mark(ctx context.Context, url string, o RestoreOptions, r *Restored) error {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("backup: connect: %w", err)
	}
	defer c.Close(ctx)
	return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass('public.restores') IS NOT NULL`).Scan(&exists); err != nil {
			return fmt.Errorf("backup: %w", err)
		}
		if !exists {
			return errors.New("backup: the restored schema predates restore markers (no restores table): start a panel of the backup's release on it once, so it migrates, then take a new backup")
		}
		if err := tx.QueryRow(ctx, `SELECT last_value FROM claim_token`).Scan(&r.TokensBefore); err != nil {
			return fmt.Errorf("backup: read the fencing tokens: %w", err)
		}
		r.TokensFrom = r.TokensBefore + TokenGap
		if _, err := tx.Exec(ctx, `SELECT setval('claim_token', $1, false)`, r.TokensFrom); err != nil {
			return fmt.Errorf("backup: move the fencing tokens on: %w", err)
		}
		m := r.Manifest
		err := tx.QueryRow(ctx, `INSERT INTO restores (backup_id, backup_started_at, backup_finished_at, backup_release,
				restored_by, release, tokens_before, tokens_from, recovered_to)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING restored_at`,
			m.ID, m.StartedAt, m.FinishedAt, m.Release, o.By, o.Release, r.TokensBefore, r.TokensFrom, nullTime(r.RecoveredTo)).Scan(&r.RestoredAt)
		if err != nil {
			return fmt.Errorf("backup: record the restore: %w", err)
		}
		r.JobsSettled, err = settleJobs(ctx, tx, r.LostFrom())
		return err
	})
}

// restoreDump loads a pg_dump into an empty external database.
func restoreDump(ctx context.Context, o RestoreOptions, dump string) error {
	c, err := pgx.Connect(ctx, o.DatabaseURL)
	if err != nil {
		return fmt.Errorf("backup: connect: %w", err)
	}
	var tables int
	err = c.QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') AND c.relkind IN ('r', 'p', 'S', 'v')`).Scan(&tables)
	c.Close(ctx)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if tables > 0 {
		return fmt.Errorf("backup: the database of --database-url is not empty (%d tables and sequences): a restore goes only into an empty database, so nothing is overwritten; create a new one (createdb -O %s NAME) and give its URL", tables, embedded.OwnerRole)
	}
	bin, err := embedded.Binary("pg_restore")
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, bin, "--exit-on-error", "--single-transaction", "--dbname="+o.DatabaseURL, dump)
	cmd.Env = []string{"LANG=C.UTF-8", "LC_ALL=C.UTF-8", "PATH=" + os.Getenv("PATH")}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("backup: pg_restore failed (nothing was restored: it runs in one transaction): %v: %s", err, lastLines(string(out)))
	}
	return nil
}

// newerAnchors reads the anchors file at newer and checks it holds every
// line of the backup's (at old); it is the file to restore.
func newerAnchors(old, newer string) ([]byte, error) {
	b, err := os.ReadFile(newer)
	if err != nil {
		return nil, fmt.Errorf("backup: --anchors: %w", err)
	}
	have := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		have[strings.TrimSpace(l)] = true
	}
	f, err := os.Open(old)
	if errors.Is(err, fs.ErrNotExist) {
		return b, nil
	}
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		if l := strings.TrimSpace(sc.Text()); l != "" && !have[l] {
			return nil, fmt.Errorf("backup: --anchors %s lacks line %d of the backup's anchors (%q): it is not a later copy of the same anchors file; give the old host's audit/anchors.log, or leave --anchors out", newer, n, l)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	return b, nil
}

// copyTree copies a backup's directory tree, keeping file modes.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("backup: %w", err)
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			if err := os.MkdirAll(target, 0o700); err != nil {
				return fmt.Errorf("backup: %w", err)
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("backup: %s is not a regular file; use another backup", p)
		}
		st, err := d.Info()
		if err != nil {
			return fmt.Errorf("backup: %w", err)
		}
		return copyFile(p, target, st.Mode().Perm())
	})
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// settleJobs settles the River jobs the restored database holds as running:
// whatever ran them was lost with the history after lostFrom, and River's
// rescuer would leave them running for an hour. Each goes back to be
// retried at once, as the rescuer does with a job whose worker died
// (River's jobs run at least once; a claim's outcome is decided by its
// evidence, never by a job having run), or is discarded when out of
// attempts; the error it carries says why.
func settleJobs(ctx context.Context, tx pgx.Tx, lostFrom time.Time) (int64, error) {
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass('public.river_job') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return 0, err
	}
	msg := "interrupted: the database was restored to " + lostFrom.UTC().Format(time.RFC3339) + "; whatever ran this attempt was lost with the history after it"
	tag, err := tx.Exec(ctx, `UPDATE river_job SET
			state = CASE WHEN attempt >= max_attempts THEN 'discarded'::river_job_state ELSE 'retryable'::river_job_state END,
			finalized_at = CASE WHEN attempt >= max_attempts THEN clock_timestamp() END,
			scheduled_at = clock_timestamp(),
			errors = array_append(errors, jsonb_build_object('at', clock_timestamp(), 'attempt', attempt, 'error', $1::text, 'trace', ''))
		WHERE state = 'running'`, msg)
	if err != nil {
		return 0, fmt.Errorf("backup: settle the running River jobs: %w", err)
	}
	return tag.RowsAffected(), nil
}
