package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/modules/backup"
)

// backupCommands make and restore backups (docs/OPERATIONS.md, "Backup and restore").
func backupCommands() []Command {
	return []Command{
		define(Command{Name: "backup", Roles: panelRole, DB: true,
			Summary: "online, consistent backup of the panel's database with its secret key and audit anchors into a new directory (--to)",
			Detail: "The embedded cluster under --data-dir is copied with pg_basebackup while the panel runs (or started\n" +
				"for the copy when none runs); an external database (--database-url, a superuser's or BYPASSRLS role's\n" +
				"URL) is dumped with pg_dump. The backup is written beside --to and renamed into place once its\n" +
				"manifest (format, release, schema, times, system identifier, WAL range, SHA-256 of every file) is on\n" +
				"disk: a directory without manifest.json is no backup."},
			func(s *config.Set, o *backupOptions) {
				s.String(&o.to, "to", "", "", "the backup directory: new, or empty (required)")
				s.String(&o.secretKeyFile, "secret-key-file", "FLEET_SECRET_KEY_FILE", "", "the panel's secret key file (default DATA_DIR/secret.key)")
			}, runBackup),
		define(Command{Name: "restore", Roles: panelRole, DB: true,
			Summary: "restore a backup (--from) into an empty data directory (--data-dir), or an external backup into an empty database (--database-url)",
			Detail: "Refused: a data directory in use or not empty, a backup without its manifest (unfinished), with a\n" +
				"missing, truncated or altered file, or taken by a newer release. The restored database is migrated\n" +
				"to this release and marked as restored: a panel started on it holds every tenant's leases until a\n" +
				"complete look-up of the client's bookings has been applied (docs/CLAIMS.md, \"A restore never books\n" +
				"twice\"). Run it as the panel's user, with the panel stopped."},
			func(s *config.Set, o *restoreOptions) {
				s.String(&o.from, "from", "", "", "the backup directory (required)")
				s.String(&o.anchors, "anchors", "", "", "a newer audit/anchors.log than the backup's (the old host's): it proves which audit entries the backup lacks")
				s.String(&o.walArchive, "wal-archive", "", "", "the panel's WAL archive (its --wal-archive): replay it past the backup, to --until or to its end (point-in-time recovery of the embedded cluster)")
				s.String(&o.until, "until", "", "", "with --wal-archive, recover to this moment (RFC 3339, like 2026-12-02T09:30:00Z): every transaction committed until then, none after")
			}, runRestore),
	}
}

type backupOptions struct{ to, secretKeyFile string }

type restoreOptions struct{ from, anchors, walArchive, until string }

func runBackup(ctx context.Context, c *Call, o *backupOptions) error {
	if o.to == "" {
		return usage(errors.New("--to is required: the new directory the backup goes into"))
	}
	start := time.Now()
	m, err := backup.Backup(ctx, backup.Options{To: o.to, DataDir: c.Meta.DataDir, DatabaseURL: c.Meta.DatabaseURL,
		SecretKeyFile: o.secretKeyFile, SecretKeyInEnv: os.Getenv("FLEET_SECRET_KEY") != "",
		Release: c.build.Version, Log: c.Meta.Logger()})
	if err != nil {
		return err
	}
	var size int64
	for _, f := range m.Files {
		size += f.Size
	}
	fmt.Fprintf(c.Stdout, "backup %s: %s of the %s database (schema %s, release %s) in %s: %d files, %.1f MiB, taken %s to %s\n",
		m.ID, o.to, m.Kind, m.Schema, m.Release, time.Since(start).Round(time.Millisecond), len(m.Files),
		float64(size)/(1<<20), m.StartedAt.Format(time.RFC3339), m.FinishedAt.Format(time.RFC3339))
	fmt.Fprintf(c.Stdout, "secret key: %s\nanchors: %s\n", m.SecretKey, m.Anchors)
	return nil
}

func runRestore(ctx context.Context, c *Call, o *restoreOptions) error {
	if o.from == "" {
		return usage(errors.New("--from is required: the backup directory"))
	}
	if c.Meta.DatabaseURL == "" && !c.Flags.Given("data-dir") && os.Getenv("FLEET_DATA_DIR") == "" {
		return usage(errors.New("--data-dir is required: the empty data directory the backup goes into"))
	}
	var until time.Time
	if o.until != "" {
		t, err := time.Parse(time.RFC3339Nano, o.until)
		if err != nil {
			return usage(fmt.Errorf("--until %q is not an RFC 3339 time: give one like 2026-12-02T09:30:00Z (with its zone)", o.until))
		}
		until = t
	}
	r, err := backup.Restore(ctx, backup.RestoreOptions{From: o.from, DataDir: c.Meta.DataDir, DatabaseURL: c.Meta.DatabaseURL,
		Anchors: o.anchors, WALArchive: o.walArchive, Until: until,
		Release: c.build.Version, By: actor().Actor, Log: c.Meta.Logger()})
	if err != nil {
		return err
	}
	m := r.Manifest
	fmt.Fprintf(c.Stdout, "restored backup %s (%s database, release %s, taken %s to %s) into %s\n",
		m.ID, m.Kind, m.Release, m.StartedAt.Format(time.RFC3339), m.FinishedAt.Format(time.RFC3339), c.Meta.DataDir)
	if !r.RecoveredTo.IsZero() {
		fmt.Fprintf(c.Stdout, "recovered to %s: replayed the WAL archive's %d segment(s) %s to %s on timeline %d\n",
			r.RecoveredTo.Format(time.RFC3339Nano), r.Archive.Segments, r.Archive.First, r.Archive.Last, r.Archive.Timeline)
	}
	if r.JobsSettled > 0 {
		fmt.Fprintf(c.Stdout, "%d background job(s) the database still had running were put back to be retried\n", r.JobsSettled)
	}
	fmt.Fprintf(c.Stdout, "everything after %s is missing from it: a panel started on it leases nothing for a tenant until a complete look-up of the client's bookings has been applied (fencing tokens continue from %d)\n",
		r.LostFrom().Format(time.RFC3339), r.TokensFrom)
	return nil
}
