package embedded

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// walArchiveFile, beside the cluster's credentials, records the WAL archive
// the panel was last started with. Every process that starts the cluster
// (the panel, migrate, an offline backup, a one-off command) reads it, so
// no start without the panel's flag leaves a segment unarchived — a gap a
// point-in-time recovery could not cross. A base backup does not copy it.
const walArchiveFile = "wal-archive.json"

// DefaultArchiveTimeout is how long a WAL segment may stay open before it
// is switched and archived: the most a point-in-time recovery can lose of
// a quiet cluster.
const DefaultArchiveTimeout = 5 * time.Minute

// WALArchive is where the embedded cluster archives its WAL.
type WALArchive struct {
	// Dir is the archive directory (absolute).
	Dir string `json:"dir"`
	// Timeout is archive_timeout: a segment is switched after this long.
	Timeout time.Duration `json:"timeout"`
}

// SetWALArchive records that the cluster under dir (as PostgresConfig.Dir)
// archives its WAL into a.Dir from its next start on, or, with a.Dir
// empty, that it no longer archives. It creates the archive directory for
// the database user and checks that Postgres's basic_archive module is
// installed. It returns the archive the cluster used before (Dir empty:
// none), so the panel can say when archiving stops.
func SetWALArchive(dir string, a WALArchive) (WALArchive, error) {
	path := filepath.Join(dir, walArchiveFile)
	prev, err := readWALArchive(dir)
	if err != nil {
		return prev, err
	}
	if a.Dir == "" {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return prev, fmt.Errorf("embedded: %w", err)
		}
		return prev, nil
	}
	if a.Timeout == 0 {
		a.Timeout = DefaultArchiveTimeout
	}
	if a.Timeout < time.Second || a.Timeout > 24*time.Hour {
		return prev, fmt.Errorf("embedded: --wal-archive-timeout must be between 1s and 24h, got %s", a.Timeout)
	}
	abs, err := filepath.Abs(a.Dir)
	if err != nil {
		return prev, fmt.Errorf("embedded: %w", err)
	}
	a.Dir = abs
	if err := checkArchiveLibrary(); err != nil {
		return prev, err
	}
	if err := prepareArchiveDir(abs); err != nil {
		return prev, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return prev, fmt.Errorf("embedded: %w", err)
	}
	b, _ := json.Marshal(a)
	return prev, writeFileAtomic(path, b, 0o600)
}

func readWALArchive(dir string) (WALArchive, error) {
	var a WALArchive
	b, err := os.ReadFile(filepath.Join(dir, walArchiveFile))
	if errors.Is(err, fs.ErrNotExist) {
		return a, nil
	}
	if err != nil {
		return a, fmt.Errorf("embedded: %w", err)
	}
	if err := json.Unmarshal(b, &a); err != nil || a.Dir == "" || !filepath.IsAbs(a.Dir) {
		return WALArchive{}, fmt.Errorf("embedded: %s is damaged: start the panel with --wal-archive (or without it) to write it again", filepath.Join(dir, walArchiveFile))
	}
	return a, nil
}

// archiveArgs are the settings that make the cluster archive into a.
// Postgres's own basic_archive module does the copy the safe way: into a
// temporary file in the archive, fsynced, then renamed to the segment's
// name (and the directory fsynced); a segment already there with the same
// bytes counts as archived (a retry after a crash), one with other bytes
// is an error, so the archive is never overwritten. A failed segment
// stays in pg_wal and is retried; pg_stat_archiver counts the failures.
func archiveArgs(a WALArchive) []string {
	return []string{
		"-c", "archive_mode=on",
		"-c", "archive_library=basic_archive",
		"-c", "basic_archive.archive_directory=" + a.Dir,
		"-c", "archive_timeout=" + strconv.Itoa(int(a.Timeout/time.Second)) + "s",
	}
}

// checkArchiveLibrary finds basic_archive in the server's library directory.
func checkArchiveLibrary() error {
	pgConfig, err := findPGBinary("pg_config")
	var lib string
	if err == nil {
		if out, err := exec.Command(pgConfig, "--pkglibdir").Output(); err == nil {
			lib = strings.TrimSpace(string(out))
		}
	}
	if lib == "" {
		postgres, err := findPGBinary("postgres")
		if err != nil {
			return err
		}
		lib = filepath.Join(filepath.Dir(filepath.Dir(postgres)), "lib")
	}
	if _, err := os.Stat(filepath.Join(lib, "basic_archive.so")); err != nil {
		return fmt.Errorf("embedded: --wal-archive needs Postgres's basic_archive module, not found in %s: install the server package that ships it (Debian's postgresql-15 does)", lib)
	}
	return nil
}

// prepareArchiveDir creates the archive directory and hands it to the
// database user, who writes it.
func prepareArchiveDir(dir string) error {
	who, err := databaseUser()
	if err != nil {
		return err
	}
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("embedded: create the WAL archive %s: %w", dir, err)
		}
		if who.cred != nil {
			if err := os.Chown(dir, int(who.uid), int(who.gid)); err != nil {
				return fmt.Errorf("embedded: %w", err)
			}
		}
	case err != nil:
		return fmt.Errorf("embedded: the WAL archive: %w", err)
	case !st.IsDir():
		return fmt.Errorf("embedded: --wal-archive %s is a file: give a directory", dir)
	}
	if err := checkReachable(filepath.Join(dir, "x"), who); err != nil {
		return err
	}
	return checkWritable(dir, who)
}

// checkWritable fails with advice when user r may not write into dir.
func checkWritable(dir string, r runAs) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("embedded: %w", err)
	}
	if r.cred == nil {
		if f, err := os.CreateTemp(dir, ".probe-"); err == nil {
			f.Close()
			return os.Remove(f.Name())
		}
		return fmt.Errorf("embedded: the WAL archive %s is not writable by this user: fix its permissions or choose another --wal-archive", dir)
	}
	sys := st.Sys().(*syscall.Stat_t)
	m := st.Mode().Perm()
	if m&0o003 == 0o003 || (sys.Uid == r.uid && m&0o300 == 0o300) || (sys.Gid == r.gid && m&0o030 == 0o030) {
		return nil
	}
	return fmt.Errorf("embedded: the %s user (who runs Postgres) cannot write the WAL archive %s: run `chown %s %s` or choose another --wal-archive", r.name, dir, r.name, dir)
}
