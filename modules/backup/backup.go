package backup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/audit"
)

// Options configure Backup.
type Options struct {
	// To is the backup directory: it must not exist or be empty.
	To string
	// DataDir is the panel's data directory (its embedded cluster, its
	// secret key and its anchors).
	DataDir string
	// DatabaseURL, when set, is an external database, dumped with pg_dump;
	// its role must bypass row-level security (a superuser, or BYPASSRLS).
	DatabaseURL string
	// SecretKeyFile is the panel's key file (default DataDir/secret.key);
	// SecretKeyInEnv says the panel takes its key from FLEET_SECRET_KEY,
	// which the backup then does not hold.
	SecretKeyFile  string
	SecretKeyInEnv bool
	// Release is this binary's version.
	Release string
	Log     *slog.Logger
}

// ErrNotEmpty refuses a backup into a directory that holds something.
var ErrNotEmpty = errors.New("backup: the directory is not empty")

// Backup writes an online, consistent backup to o.To and returns its
// manifest. It works whether or not a panel runs on the data directory:
// with one, it copies that panel's running cluster; without, it starts the
// cluster for the copy and stops it again.
func Backup(ctx context.Context, o Options) (Manifest, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	m := Manifest{Format: FormatVersion, ID: newID(), Release: o.Release}
	to, err := filepath.Abs(o.To)
	if err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	if err := mustBeEmpty(to); err != nil {
		return m, err
	}
	parent := filepath.Dir(to)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return m, fmt.Errorf("backup: create %s: %w", parent, err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(to)+".partial-")
	if err != nil {
		return m, fmt.Errorf("backup: %w", full(err, to))
	}
	done := false
	defer func() {
		if !done {
			_ = os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o700); err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	if o.DatabaseURL != "" {
		err = dumpExternal(ctx, o, tmp, &m)
	} else {
		err = copyEmbedded(ctx, o, tmp, &m)
	}
	if err != nil {
		return m, full(err, to)
	}
	if err := o.copySecrets(tmp, &m); err != nil {
		return m, full(err, to)
	}
	if m.Files, err = listFiles(tmp); err != nil {
		return m, fmt.Errorf("backup: checksums: %w", err)
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := writeFile(filepath.Join(tmp, ManifestName), append(b, '\n'), 0o600); err != nil {
		return m, full(err, to)
	}
	if err := syncDir(tmp); err != nil {
		return m, full(err, to)
	}
	// An empty target is replaced by the rename (rename(2) allows it);
	// between the check and here nothing else may have filled it.
	if err := os.Rename(tmp, to); err != nil {
		return m, fmt.Errorf("backup: move the finished backup to %s: %w", to, err)
	}
	done = true
	_ = syncDir(parent)
	return m, nil
}

// full turns a "no space left" anywhere in the copy into one clear error.
func full(err error, to string) error {
	if embedded.DiskFull(err) {
		return fmt.Errorf("backup: the disk under %s is full (no space left on device); nothing was kept (the partial copy was removed): free space there or choose another --to", filepath.Dir(to))
	}
	return err
}

// mustBeEmpty refuses a directory that holds anything, and a file.
func mustBeEmpty(dir string) error {
	st, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%w: %s is a file; choose a new directory for --to", ErrNotEmpty, dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("%w: %s holds %d entries (%s…); a backup goes into a new or empty directory: choose another --to, or move what is there away", ErrNotEmpty, dir, len(entries), entries[0].Name())
	}
	return nil
}

// copyEmbedded base-backs-up the embedded cluster under o.DataDir.
func copyEmbedded(ctx context.Context, o Options, tmp string, m *Manifest) error {
	m.Kind = KindEmbedded
	pgDir := filepath.Join(o.DataDir, "postgres")
	if _, err := os.Stat(filepath.Join(pgDir, "credentials.json")); err != nil {
		return fmt.Errorf("backup: no embedded cluster under %s (%v): check --data-dir, or give --database-url for an external database", o.DataDir, err)
	}
	var pg *embedded.Postgres
	lock, err := embedded.LockDataDir(o.DataDir, "fleetwright backup")
	switch {
	case err == nil:
		defer lock.Release()
		if pg, err = embedded.StartPostgres(ctx, embedded.PostgresConfig{Dir: pgDir, Logger: o.Log}); err != nil {
			return err
		}
		defer pg.Stop()
	case errors.Is(err, embedded.ErrLocked):
		if pg, err = embedded.Attach(ctx, pgDir); err != nil {
			return err
		}
	default:
		return err
	}
	if err := readSchema(ctx, pg.OwnerURL(), m); err != nil {
		return err
	}
	if m.StartedAt, err = dbNow(ctx, pg.OwnerURL()); err != nil {
		return err
	}
	dest := filepath.Join(tmp, clusterDir)
	if err := os.Mkdir(dest, 0o700); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	info, err := pg.BaseBackup(ctx, filepath.Join(dest, "data"))
	if err != nil {
		return err
	}
	if m.FinishedAt, err = dbNow(ctx, pg.OwnerURL()); err != nil {
		return err
	}
	m.SystemIdentifier, m.StartLSN, m.EndLSN, m.PostgresVersion = info.SystemIdentifier, info.StartLSN, info.EndLSN, info.ServerVersion
	// The role passwords: the restored cluster's roles keep them.
	return copyFile(filepath.Join(pgDir, "credentials.json"), filepath.Join(dest, "credentials.json"), 0o600)
}

// dumpExternal dumps an external database with pg_dump (custom format).
func dumpExternal(ctx context.Context, o Options, tmp string, m *Manifest) error {
	m.Kind = KindExternal
	bin, err := embedded.Binary("pg_dump")
	if err != nil {
		return err
	}
	if err := readSchema(ctx, o.DatabaseURL, m); err != nil {
		return err
	}
	c, err := pgx.Connect(ctx, o.DatabaseURL)
	if err != nil {
		return fmt.Errorf("backup: connect: %w", err)
	}
	var bypass bool
	err = c.QueryRow(ctx, `SELECT rolsuper OR rolbypassrls, current_setting('server_version'), pg_current_wal_lsn()::text
		FROM pg_roles WHERE rolname = current_user`).Scan(&bypass, &m.PostgresVersion, &m.StartLSN)
	if err == nil {
		// Readable by superusers and pg_read_all_stats; the manifest can do without it.
		_ = c.QueryRow(ctx, `SELECT system_identifier::text FROM pg_control_system()`).Scan(&m.SystemIdentifier)
	}
	c.Close(ctx)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if !bypass {
		return errors.New("backup: --database-url's role is subject to row-level security, so pg_dump cannot read every tenant's rows: give a superuser's URL (or a role with BYPASSRLS) for the backup")
	}
	if m.StartedAt, err = dbNow(ctx, o.DatabaseURL); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, bin, "--format=custom", "--file="+filepath.Join(tmp, dumpFile), "--dbname="+o.DatabaseURL)
	cmd.Env = []string{"LANG=C.UTF-8", "LC_ALL=C.UTF-8", "PATH=" + os.Getenv("PATH")}
	if out, err := cmd.CombinedOutput(); err != nil {
		msg := lastLines(string(out))
		if strings.Contains(msg, "No space left on device") {
			return fmt.Errorf("backup: pg_dump: %w: %s", errNoSpace, msg)
		}
		return fmt.Errorf("backup: pg_dump failed: %v: %s", err, msg)
	}
	m.FinishedAt, err = dbNow(ctx, o.DatabaseURL)
	return err
}

// dbNow is the database's clock, the one the claims' times are on.
func dbNow(ctx context.Context, url string) (time.Time, error) {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return time.Time{}, fmt.Errorf("backup: connect: %w", err)
	}
	defer c.Close(ctx)
	var t time.Time
	if err := c.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&t); err != nil {
		return t, fmt.Errorf("backup: %w", err)
	}
	return t.UTC(), nil
}

var errNoSpace = errors.New("no space left on device")

// readSchema records the migrations the database holds.
func readSchema(ctx context.Context, url string, m *Manifest) error {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("backup: connect: %w", err)
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		return fmt.Errorf("backup: read the schema's migrations (is this the panel's database?): %w", err)
	}
	m.Migrations, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if len(m.Migrations) > 0 {
		m.Schema = m.Migrations[len(m.Migrations)-1]
	}
	return nil
}

// copySecrets puts the secret key and the anchors beside the database.
func (o Options) copySecrets(tmp string, m *Manifest) error {
	keyPath := o.SecretKeyFile
	if keyPath == "" {
		keyPath = filepath.Join(o.DataDir, "secret.key")
	}
	switch _, err := os.Stat(keyPath); {
	case o.SecretKeyInEnv:
		m.SecretKey = "not included: the panel takes its key from FLEET_SECRET_KEY; keep that value with this backup"
	case err == nil:
		if err := copyFile(keyPath, filepath.Join(tmp, keyFile), 0o600); err != nil {
			return err
		}
		m.SecretKey = "included: " + keyFile
		// A rotation under way: some values open only with the next key.
		if _, err := os.Stat(vault.NextFile(keyPath)); err == nil {
			if err := copyFile(vault.NextFile(keyPath), filepath.Join(tmp, nextKeyFile), 0o600); err != nil {
				return err
			}
			m.SecretKey += " and " + nextKeyFile + " (a key rotation was under way: both keys travel; run admin rotate-key after restoring to finish it)"
		}
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("backup: no secret key at %s: without it every sealed credential in the backup is lost; give the panel's --secret-key-file (or FLEET_SECRET_KEY)", keyPath)
	default:
		return fmt.Errorf("backup: %w", err)
	}
	anchors := audit.AnchorFile(o.DataDir)
	switch _, err := os.Stat(anchors); {
	case err == nil:
		if err := os.MkdirAll(filepath.Join(tmp, filepath.Dir(anchorFile)), 0o700); err != nil {
			return fmt.Errorf("backup: %w", err)
		}
		if err := copyFile(anchors, filepath.Join(tmp, anchorFile), 0o600); err != nil {
			return err
		}
		m.Anchors = "included: " + anchorFile
	case errors.Is(err, fs.ErrNotExist):
		m.Anchors = "none: no anchor was written under " + filepath.Dir(anchors) + " yet (the anchors are on the sealing leader's host)"
	default:
		return fmt.Errorf("backup: %w", err)
	}
	return nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("backup: write %s: %w", dst, err)
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return fmt.Errorf("backup: write %s: %w", dst, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("backup: write %s: %w", dst, err)
	}
	return nil
}

func writeFile(path string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("backup: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("backup: write %s: %w", path, err)
	}
	return f.Close()
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("backup: sync %s: %w", dir, err)
	}
	return nil
}

func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return time.Now().UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b)
}

func lastLines(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}
