package board

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver, registered as "sqlite"
)

// store writes the board's state through to SQLite so a restart keeps loads,
// accounts, bookings and the event log. A nil db is the memory mode: every
// write is a no-op and the in-memory state is all there is.
type store struct {
	db *sql.DB
}

const schema = `
CREATE TABLE IF NOT EXISTS loads (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS accounts (
	username TEXT PRIMARY KEY, client TEXT NOT NULL, salt BLOB NOT NULL, pw_hash BLOB NOT NULL,
	totp_secret TEXT NOT NULL, last_step INTEGER NOT NULL DEFAULT 0, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS bookings (id INTEGER PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY, body TEXT NOT NULL);
`

func openStore(ctx context.Context, path string) (*store, error) {
	if path == "memory" {
		return &store{}, nil
	}
	// WAL with synchronous=NORMAL: a commit survives a crash of this process
	// (the restart case the board promises); a power cut may lose the last
	// transactions, which a sandbox can live with.
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(5000)&_pragma=foreign_keys(1)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("board: open %s: %w", path, err)
	}
	// One writer: every write happens under the board's lock anyway.
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("board: create schema in %s: %w", path, err)
	}
	return &store{db: db}, nil
}

func (s *store) close() error {
	if s.db == nil {
		return nil
	}
	return s.db.Close()
}

func (s *store) exec(ctx context.Context, what, q string, args ...any) error {
	if s.db == nil {
		return nil
	}
	if _, err := s.db.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("board: store %s: %w", what, err)
	}
	return nil
}

func (s *store) putLoad(ctx context.Context, l *Load) error {
	if s.db == nil {
		return nil
	}
	b, _ := json.Marshal(l)
	return s.exec(ctx, "load", `INSERT INTO loads(seq, id, body) VALUES(?, ?, ?)`, l.Seq, l.ID, string(b))
}

func (s *store) putBooking(ctx context.Context, bk *Booking) error {
	if s.db == nil {
		return nil
	}
	b, _ := json.Marshal(bk)
	return s.exec(ctx, "booking", `INSERT INTO bookings(id, body) VALUES(?, ?)`, bk.ID, string(b))
}

func (s *store) putEvent(ctx context.Context, e *Event) error {
	if s.db == nil {
		return nil
	}
	b, _ := json.Marshal(e)
	return s.exec(ctx, "event", `INSERT INTO events(seq, body) VALUES(?, ?)`, e.Seq, string(b))
}

func (s *store) putAccount(ctx context.Context, a *account) error {
	return s.exec(ctx, "account", `INSERT INTO accounts(username, client, salt, pw_hash, totp_secret, last_step, created_at) VALUES(?, ?, ?, ?, ?, ?, ?)`,
		a.Username, a.Client, a.salt, a.hash, a.secret, a.lastStep, a.CreatedAt.UTC().Format(time.RFC3339Nano))
}

func (s *store) setLastStep(ctx context.Context, username string, step int64) error {
	return s.exec(ctx, "totp step", `UPDATE accounts SET last_step = ? WHERE username = ?`, step, username)
}

// snapshot is everything read back at start.
type snapshot struct {
	loads    []*Load
	accounts []*account
	bookings []*Booking
	events   []*Event
}

func (s *store) load(ctx context.Context) (*snapshot, error) {
	snap := &snapshot{}
	if s.db == nil {
		return snap, nil
	}
	if err := scanJSON(ctx, s.db, `SELECT body FROM loads ORDER BY seq`, func(b []byte) error {
		l := &Load{}
		snap.loads = append(snap.loads, l)
		return json.Unmarshal(b, l)
	}); err != nil {
		return nil, fmt.Errorf("board: read loads: %w", err)
	}
	if err := scanJSON(ctx, s.db, `SELECT body FROM bookings ORDER BY id`, func(b []byte) error {
		bk := &Booking{}
		snap.bookings = append(snap.bookings, bk)
		return json.Unmarshal(b, bk)
	}); err != nil {
		return nil, fmt.Errorf("board: read bookings: %w", err)
	}
	if err := scanJSON(ctx, s.db, `SELECT body FROM events ORDER BY seq`, func(b []byte) error {
		e := &Event{}
		snap.events = append(snap.events, e)
		return json.Unmarshal(b, e)
	}); err != nil {
		return nil, fmt.Errorf("board: read events: %w", err)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT username, client, salt, pw_hash, totp_secret, last_step, created_at FROM accounts ORDER BY username`)
	if err != nil {
		return nil, fmt.Errorf("board: read accounts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		a := &account{}
		var created string
		if err := rows.Scan(&a.Username, &a.Client, &a.salt, &a.hash, &a.secret, &a.lastStep, &created); err != nil {
			return nil, fmt.Errorf("board: read accounts: %w", err)
		}
		a.CreatedAt, _ = time.Parse(time.RFC3339Nano, created)
		snap.accounts = append(snap.accounts, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("board: read accounts: %w", err)
	}
	return snap, nil
}

func scanJSON(ctx context.Context, db *sql.DB, q string, f func([]byte) error) error {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return err
		}
		if err := f(b); err != nil {
			return err
		}
	}
	return rows.Err()
}
