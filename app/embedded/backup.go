package embedded

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
)

// BaseBackupInfo is what a base backup says about itself.
type BaseBackupInfo struct {
	// SystemIdentifier is the cluster's pg_control system identifier.
	SystemIdentifier string
	// StartLSN and EndLSN bound the WAL the backup needs: restored, the
	// cluster is consistent as of EndLSN.
	StartLSN, EndLSN string
	// ServerVersion is the server's version (SHOW server_version).
	ServerVersion string
}

// BaseBackup copies the running cluster into dest (which must not exist)
// with pg_basebackup over its Unix socket: an online, consistent copy in
// plain format, with the WAL it needs streamed beside it (-X stream) and
// a fast checkpoint, so the copy starts at once. The backup runs as the
// cluster's superuser, which may replicate by initdb's own rules.
func (p *Postgres) BaseBackup(ctx context.Context, dest string) (BaseBackupInfo, error) {
	var info BaseBackupInfo
	bin, err := findPGBinary("pg_basebackup")
	if err != nil {
		return info, err
	}
	c, err := pgx.Connect(ctx, p.SuperURL("postgres"))
	if err != nil {
		return info, fmt.Errorf("embedded: backup: connect: %w", err)
	}
	err = c.QueryRow(ctx, `SELECT system_identifier::text, current_setting('server_version') FROM pg_control_system()`).
		Scan(&info.SystemIdentifier, &info.ServerVersion)
	c.Close(ctx)
	if err != nil {
		return info, fmt.Errorf("embedded: backup: %w", err)
	}
	cmd := exec.CommandContext(ctx, bin, "-D", dest, "-F", "p", "-X", "stream", "-c", "fast",
		"--no-password", "-h", p.socket, "-p", strconv.Itoa(pgPort), "-U", SuperRole, "-l", "fleetwright backup")
	// The password reaches pg_basebackup through its environment only.
	cmd.Env = []string{"LANG=C.UTF-8", "LC_ALL=C.UTF-8", "PGPASSWORD=" + p.creds.Super, "PATH=" + os.Getenv("PATH")}
	if out, err := cmd.CombinedOutput(); err != nil {
		if ctx.Err() != nil {
			return info, fmt.Errorf("embedded: backup: %w", ctx.Err())
		}
		msg := lastLines(string(out), 5)
		if strings.Contains(msg, "No space left on device") {
			return info, fmt.Errorf("embedded: backup: the disk under %s is full (no space left on device): %s", filepath.Dir(dest), msg)
		}
		return info, fmt.Errorf("embedded: backup: pg_basebackup failed: %v: %s", err, msg)
	}
	info.StartLSN, info.EndLSN = walRange(filepath.Join(dest, "backup_manifest"))
	return info, nil
}

// walRange reads the WAL range a base backup needs from its backup_manifest
// (Start-LSN, End-LSN of its WAL-Ranges); empty when it cannot be read.
func walRange(manifest string) (start, end string) {
	f, err := os.Open(manifest)
	if err != nil {
		return "", ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		for _, kv := range []struct {
			key string
			to  *string
		}{{`"Start-LSN": "`, &start}, {`"End-LSN": "`, &end}} {
			if i := strings.Index(line, kv.key); i >= 0 {
				rest := line[i+len(kv.key):]
				if j := strings.IndexByte(rest, '"'); j >= 0 {
					*kv.to = rest[:j]
				}
			}
		}
	}
	return start, end
}

// AdoptRestored hands a cluster directory copied from a backup (dir, as
// under PostgresConfig.Dir: dir/data and dir/credentials.json) to the user
// the database runs as, with the modes Postgres demands (0700 on its data
// directory), so StartPostgres can start it.
func AdoptRestored(dir string) error {
	who, err := databaseUser()
	if err != nil {
		return err
	}
	data := filepath.Join(dir, "data")
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("embedded: %w", err)
	}
	if err := os.Chmod(data, 0o700); err != nil {
		return fmt.Errorf("embedded: %w", err)
	}
	if who.cred == nil {
		return nil
	}
	return filepath.WalkDir(data, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(path, int(who.uid), int(who.gid)); err != nil {
			return fmt.Errorf("embedded: %w", err)
		}
		return nil
	})
}

// DiskFull reports whether err is the file system's "no space left".
func DiskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || (err != nil && strings.Contains(strings.ToLower(err.Error()), "no space left on device"))
}

// Binary finds a Postgres client program (pg_dump, pg_restore) the way the
// cluster's own binaries are found: FLEET_PG_BIN, the PATH, then the newest
// /usr/lib/postgresql/*/bin.
func Binary(name string) (string, error) { return findPGBinary(name) }
