// Package backup makes and restores the panel's backups: an online,
// consistent copy of its database (pg_basebackup of the embedded cluster,
// or pg_dump of an external one), the secret key and the audit anchors,
// described by a manifest with a SHA-256 checksum of every file. A backup
// is written into a temporary directory beside its target and renamed into
// place once its manifest, written last, is on disk, so nothing half-written
// ever looks like a backup. A restore goes only into an empty data
// directory, refuses a damaged, partial or newer backup with what is wrong,
// and marks the database as restored (the restores table), which the claim
// engine and audit verify read (docs/OPERATIONS.md, "Backup and restore").
package backup

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// FormatVersion is the manifest format this release writes and reads; a
// manifest of a higher format was written by a newer release.
const FormatVersion = 1

// ManifestName is the manifest's file name in a backup directory.
const ManifestName = "manifest.json"

// Kinds of backup.
const (
	// KindEmbedded is a base backup of the embedded cluster (postgres/).
	KindEmbedded = "embedded"
	// KindExternal is a pg_dump of an external database (database.dump).
	KindExternal = "external"
)

// Paths inside a backup.
const (
	dumpFile   = "database.dump"
	clusterDir = "postgres"
	keyFile    = "secret.key"
	// nextKeyFile is the key a rotation under way moves to (app/vault):
	// values already re-sealed open only with it.
	nextKeyFile = "secret.key.next"
	anchorFile  = "audit/anchors.log"
)

// Manifest describes one backup.
type Manifest struct {
	Format  int    `json:"format"`
	ID      string `json:"id"`
	Kind    string `json:"kind"`
	Release string `json:"release"`
	// Schema is the newest migration applied; Migrations are all of them.
	Schema     string   `json:"schema"`
	Migrations []string `json:"migrations"`
	// The backup holds everything committed before StartedAt, and may hold
	// what was committed until FinishedAt.
	StartedAt        time.Time `json:"started_at"`
	FinishedAt       time.Time `json:"finished_at"`
	SystemIdentifier string    `json:"system_identifier,omitempty"`
	StartLSN         string    `json:"start_lsn,omitempty"`
	EndLSN           string    `json:"end_lsn,omitempty"`
	PostgresVersion  string    `json:"postgres_version,omitempty"`
	// SecretKey and Anchors say whether they travel with the backup, and
	// if not, why.
	SecretKey string `json:"secret_key"`
	Anchors   string `json:"anchors"`
	Files     []File `json:"files"`
}

// File is one file of a backup.
type File struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// has reports whether the backup holds path.
func (m Manifest) has(path string) bool {
	for _, f := range m.Files {
		if f.Path == path {
			return true
		}
	}
	return false
}

// ErrNotABackup is returned by Verify for a directory with no manifest.
var ErrNotABackup = errors.New("backup: not a finished backup")

// Verify reads dir's manifest and checks every file against it: present,
// of its size and checksum, and no file the manifest does not name. It
// returns the manifest and, when anything is wrong, an error listing what
// (at most ten findings) and what to do.
func Verify(dir string) (Manifest, error) {
	var m Manifest
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(dir); serr != nil {
			return m, fmt.Errorf("%w: %s: %v", ErrNotABackup, dir, serr)
		}
		return m, fmt.Errorf("%w: %s has no %s (a backup writes it last: this one did not finish, or this is not a backup directory); take a new backup, or use another one", ErrNotABackup, dir, ManifestName)
	}
	if err != nil {
		return m, fmt.Errorf("backup: read manifest: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil || m.Format == 0 || m.ID == "" {
		return m, fmt.Errorf("backup: %s is damaged (not a manifest this release can read); use another backup", filepath.Join(dir, ManifestName))
	}
	if m.Format > FormatVersion {
		return m, fmt.Errorf("backup: %s was written by a newer release (%s, manifest format %d; this release reads format %d): restore it with release %s or newer", dir, m.Release, m.Format, FormatVersion, m.Release)
	}
	var problems []string
	listed := map[string]bool{ManifestName: true}
	for _, f := range m.Files {
		listed[f.Path] = true
		p, err := inside(dir, f.Path)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		st, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			problems = append(problems, f.Path+" is missing")
			continue
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s: %v", f.Path, err))
			continue
		case st.Size() != f.Size:
			problems = append(problems, fmt.Sprintf("%s is %d bytes, the manifest says %d (truncated or overwritten)", f.Path, st.Size(), f.Size))
			continue
		}
		sum, err := fileSum(p)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", f.Path, err))
		} else if sum != f.SHA256 {
			problems = append(problems, f.Path+" does not match its checksum (damaged or altered)")
		}
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if !listed[filepath.ToSlash(rel)] {
			problems = append(problems, filepath.ToSlash(rel)+" is not in the manifest")
		}
		return nil
	})
	if len(problems) > 0 {
		n := len(problems)
		if n > 10 {
			problems = append(problems[:10], fmt.Sprintf("and %d more", n-10))
		}
		return m, fmt.Errorf("backup: %s is damaged: %d problem(s): %s; nothing was restored: use another backup (or copy this one again from where it is kept)",
			dir, n, strings.Join(problems, "; "))
	}
	return m, nil
}

// inside joins a manifest path to dir, refusing one that leaves it.
func inside(dir, rel string) (string, error) {
	clean := filepath.Clean(filepath.FromSlash(rel))
	if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("%s leaves the backup directory", rel)
	}
	return filepath.Join(dir, clean), nil
}

func fileSum(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// listFiles checksums every file under dir, sorted by path.
func listFiles(dir string) ([]File, error) {
	var out []File
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		st, err := d.Info()
		if err != nil {
			return err
		}
		sum, err := fileSum(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, File{Path: filepath.ToSlash(rel), Size: st.Size(), SHA256: sum})
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, err
}
