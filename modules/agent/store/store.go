// Package store is the agent's local state: an SQLite database (WAL) in the
// agent's state dir holding the account's credentials, its cookies, the
// installation id of the panel that last welcomed it, the unknown-token
// count, the retired mark and a journal of in-flight actions, so a restart
// knows what it was doing.
//
// The dir is 0700 and every file 0600. The agent's single connection keeps
// the pragmas (secure_delete, max_page_count in tests) on one connection.
package store

import (
	"context"
	"crypto/ecdh"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"

	"github.com/fleetwright/fleetwright/modules/wire"
)

// FileName is the database file inside the state dir; SQLite adds FileName
// plus "-wal" and "-shm" next to it.
const FileName = "agent.db"

// File modes of the state dir and its files.
const (
	DirMode  fs.FileMode = 0o700
	FileMode fs.FileMode = 0o600
)

// ErrJournal wraps every failed journal write. The caller must treat it as
// "do not act": an action that cannot be recorded before it is sent must not
// be sent (a restart would not know it happened).
var ErrJournal = errors.New("store: journal write failed; do not act")

// Store is the open state database.
type Store struct {
	db   *sql.DB
	dir  string
	path string
}

const schema = `
CREATE TABLE IF NOT EXISTS meta (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS credentials (
	id          INTEGER PRIMARY KEY CHECK (id = 1),
	username    TEXT NOT NULL,
	password    TEXT NOT NULL,
	totp_secret TEXT NOT NULL,
	updated_at  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS cookies (
	domain    TEXT NOT NULL,
	name      TEXT NOT NULL,
	path      TEXT NOT NULL,
	value     TEXT NOT NULL,
	expires   TEXT NOT NULL,
	secure    INTEGER NOT NULL,
	http_only INTEGER NOT NULL,
	PRIMARY KEY (domain, name, path)
);
CREATE TABLE IF NOT EXISTS journal (
	operation_id TEXT PRIMARY KEY,
	job_key      TEXT NOT NULL,
	started_at   TEXT NOT NULL,
	finished_at  TEXT,
	outcome      TEXT
);
CREATE TABLE IF NOT EXISTS actions (
	operation_id TEXT PRIMARY KEY,
	worker       TEXT NOT NULL,
	token        INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS outbox (
	request_id TEXT PRIMARY KEY,
	body       TEXT NOT NULL,
	created_at TEXT NOT NULL
);
`

// Open opens (creating if needed) the state database in dir.
func Open(ctx context.Context, dir string) (*Store, error) {
	if err := os.MkdirAll(dir, DirMode); err != nil {
		return nil, fmt.Errorf("store: create state dir: %w", err)
	}
	if err := tighten(dir, DirMode); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, FileName)
	// Create the file ourselves with 0600: SQLite gives its -wal and -shm
	// files the database file's permissions.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, FileMode)
	if err != nil {
		return nil, fmt.Errorf("store: create database file: %w", err)
	}
	_ = f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := tighten(p, FileMode); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	db, err := sql.Open("sqlite", "file:"+path+
		"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=secure_delete(ON)&_pragma=busy_timeout(5000)")
	if err != nil {
		return nil, fmt.Errorf("store: open database: %w", err)
	}
	// One connection: the agent is one process, and connection-level
	// pragmas then hold for every statement.
	db.SetMaxOpenConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	if _, err := db.ExecContext(ctx, schema); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: create schema: %w", err)
	}
	if err := addOrigins(ctx, db); err != nil {
		_ = db.Close()
		return nil, err
	}
	return &Store{db: db, dir: dir, path: path}, nil
}

// addOrigins gives a state made before credentials carried their origins
// the column (empty: credentials bound to no origin are sent nowhere).
func addOrigins(ctx context.Context, db *sql.DB) error {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('credentials') WHERE name = 'origins'`).Scan(&n); err != nil {
		return fmt.Errorf("store: read schema: %w", err)
	}
	if n > 0 {
		return nil
	}
	if _, err := db.ExecContext(ctx, `ALTER TABLE credentials ADD COLUMN origins TEXT NOT NULL DEFAULT ''`); err != nil {
		return fmt.Errorf("store: add credential origins: %w", err)
	}
	return nil
}

// tighten sets a path's permission bits to mode if they are wider.
func tighten(path string, mode fs.FileMode) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if fi.Mode().Perm()&^mode != 0 {
		if err := os.Chmod(path, mode); err != nil {
			return fmt.Errorf("store: %s has mode %o and cannot be made %o: %w", path, fi.Mode().Perm(), mode, err)
		}
	}
	return nil
}

// Close closes the database (SQLite checkpoints and removes -wal and -shm).
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("store: close: %w", err)
	}
	return nil
}

// Dir is the state dir.
func (s *Store) Dir() string { return s.dir }

func ts(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func parseTS(v string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, v)
	return t
}

func (s *Store) getMeta(ctx context.Context, key string) (string, bool, error) {
	var v string
	err := s.db.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = ?`, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("store: read %s: %w", key, err)
	}
	return v, true, nil
}

func setMeta(ctx context.Context, ex interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, key, value string) error {
	if _, err := ex.ExecContext(ctx, `INSERT INTO meta (key, value) VALUES (?, ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`, key, value); err != nil {
		return fmt.Errorf("store: write %s: %w", key, err)
	}
	return nil
}

// Auth is what the agent remembers about authentication across restarts.
type Auth struct {
	// InstallationID of the panel that last welcomed the agent ("" if none).
	InstallationID string
	// AgentID the panel gave it.
	AgentID string
	// UnknownTokenCount is the consecutive unknown-token answers counted.
	UnknownTokenCount int
}

// Auth reads the authentication state.
func (s *Store) Auth(ctx context.Context) (Auth, error) {
	var a Auth
	var err error
	if a.InstallationID, _, err = s.getMeta(ctx, "installation_id"); err != nil {
		return Auth{}, err
	}
	if a.AgentID, _, err = s.getMeta(ctx, "agent_id"); err != nil {
		return Auth{}, err
	}
	n, ok, err := s.getMeta(ctx, "unknown_token_count")
	if err != nil {
		return Auth{}, err
	}
	if ok {
		_, _ = fmt.Sscanf(n, "%d", &a.UnknownTokenCount)
	}
	return a, nil
}

// SetWelcomed records a welcome: the installation and agent ids, and the
// unknown-token count back to zero.
func (s *Store) SetWelcomed(ctx context.Context, installationID, agentID string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	for k, v := range map[string]string{"installation_id": installationID, "agent_id": agentID, "unknown_token_count": "0"} {
		if err := setMeta(ctx, tx, k, v); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: commit welcome: %w", err)
	}
	return nil
}

// SetUnknownTokenCount records the consecutive unknown-token count.
func (s *Store) SetUnknownTokenCount(ctx context.Context, n int) error {
	return setMeta(ctx, s.db, "unknown_token_count", fmt.Sprint(n))
}

// SaveCredentials replaces the account's credentials, with the origins the
// panel sealed them for (c.Origins; none: they are sent nowhere).
func (s *Store) SaveCredentials(ctx context.Context, c wire.Credentials, at time.Time) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO credentials (id, username, password, totp_secret, origins, updated_at)
		VALUES (1, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET username = excluded.username,
		password = excluded.password, totp_secret = excluded.totp_secret, origins = excluded.origins,
		updated_at = excluded.updated_at`,
		c.Username, c.Password.Reveal(), c.TOTPSecret.Reveal(), strings.Join(c.Origins, " "), ts(at))
	if err != nil {
		return fmt.Errorf("store: save credentials: %w", err)
	}
	return nil
}

// Credentials returns the stored credentials, and false if there are none.
func (s *Store) Credentials(ctx context.Context) (wire.Credentials, bool, error) {
	var user, pw, totp, origins string
	err := s.db.QueryRowContext(ctx, `SELECT username, password, totp_secret, origins FROM credentials WHERE id = 1`).Scan(&user, &pw, &totp, &origins)
	if errors.Is(err, sql.ErrNoRows) {
		return wire.Credentials{}, false, nil
	}
	if err != nil {
		return wire.Credentials{}, false, fmt.Errorf("store: read credentials: %w", err)
	}
	c := wire.Credentials{Username: user, Password: wire.NewSecret(pw), TOTPSecret: wire.NewSecret(totp)}
	if origins != "" {
		c.Origins = strings.Fields(origins)
	}
	return c, true, nil
}

// Cookie is one of the platform session's cookies.
type Cookie struct {
	Domain, Name, Path string
	Value              wire.Secret
	Expires            time.Time
	Secure, HTTPOnly   bool
}

// SaveCookies replaces all stored cookies.
func (s *Store) SaveCookies(ctx context.Context, cookies []Cookie) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `DELETE FROM cookies`); err != nil {
		return fmt.Errorf("store: clear cookies: %w", err)
	}
	for _, c := range cookies {
		if _, err := tx.ExecContext(ctx, `INSERT INTO cookies (domain, name, path, value, expires, secure, http_only)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, c.Domain, c.Name, c.Path, c.Value.Reveal(), ts(c.Expires), c.Secure, c.HTTPOnly); err != nil {
			return fmt.Errorf("store: save cookie: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: commit cookies: %w", err)
	}
	return nil
}

// Cookies returns the stored cookies.
func (s *Store) Cookies(ctx context.Context) ([]Cookie, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT domain, name, path, value, expires, secure, http_only FROM cookies ORDER BY domain, name, path`)
	if err != nil {
		return nil, fmt.Errorf("store: read cookies: %w", err)
	}
	defer rows.Close()
	var out []Cookie
	for rows.Next() {
		var c Cookie
		var v, exp string
		if err := rows.Scan(&c.Domain, &c.Name, &c.Path, &v, &exp, &c.Secure, &c.HTTPOnly); err != nil {
			return nil, fmt.Errorf("store: read cookie: %w", err)
		}
		c.Value, c.Expires = wire.NewSecret(v), parseTS(exp)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: read cookies: %w", err)
	}
	return out, nil
}

// InstallKey returns the agent's installation key (protocol v4), generating
// and storing it on first use. It never leaves the state dir: the panel only
// ever sees its public half, and seals the account's credentials to it. A
// retire or a reset of the state dir destroys it; the panel then needs an
// admin to accept the new installation.
func (s *Store) InstallKey(ctx context.Context) (*ecdh.PrivateKey, error) {
	v, ok, err := s.getMeta(ctx, "install_key")
	if err != nil {
		return nil, err
	}
	if ok {
		raw, err := base64.RawURLEncoding.DecodeString(v)
		if err != nil {
			return nil, fmt.Errorf("store: installation key is corrupt: %w", err)
		}
		k, err := ecdh.X25519().NewPrivateKey(raw)
		if err != nil {
			return nil, fmt.Errorf("store: installation key is corrupt: %w", err)
		}
		return k, nil
	}
	k, err := wire.NewInstallKey()
	if err != nil {
		return nil, err
	}
	// INSERT OR IGNORE, then read back: two openers racing keep one key.
	if _, err := s.db.ExecContext(ctx, `INSERT OR IGNORE INTO meta (key, value) VALUES ('install_key', ?)`,
		base64.RawURLEncoding.EncodeToString(k.Bytes())); err != nil {
		return nil, fmt.Errorf("store: save installation key: %w", err)
	}
	return s.InstallKey(ctx)
}
