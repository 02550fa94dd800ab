package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
)

// RetiredMark says the agent retired itself; it refuses to start until the
// state is reset on purpose (ResetState).
type RetiredMark struct {
	At     time.Time
	Reason string
}

// Retired returns the retired mark, and false if the agent is not retired.
func (s *Store) Retired(ctx context.Context) (RetiredMark, bool, error) {
	at, ok, err := s.getMeta(ctx, "retired_at")
	if err != nil || !ok {
		return RetiredMark{}, false, err
	}
	reason, _, err := s.getMeta(ctx, "retired_reason")
	if err != nil {
		return RetiredMark{}, false, err
	}
	return RetiredMark{At: parseTS(at), Reason: reason}, true, nil
}

// Retire wipes every secret (credentials, cookies) so that no byte of them
// remains in any file of the state dir, then marks the store retired. The
// journal (operation ids and job keys, no secrets) and the installation id
// are kept for whoever investigates.
//
// How: the secrets are deleted with secure_delete on, the database is
// vacuumed and the WAL checkpointed and truncated (so even a crash halfway
// leaves no old page images behind); then the database is closed and its
// files (main, -wal, -shm, -journal) are overwritten with zeros, synced and
// removed, and a fresh database receives the kept rows and the mark. On a
// copy-on-write filesystem or an SSD the old blocks may survive on the
// device; the files themselves hold nothing.
func (s *Store) Retire(ctx context.Context, reason string, at time.Time) error {
	journal, err := s.Journal(ctx)
	if err != nil {
		return err
	}
	auth, err := s.Auth(ctx)
	if err != nil {
		return err
	}
	for _, q := range []string{
		`DELETE FROM credentials`, `DELETE FROM cookies`, `VACUUM`, `PRAGMA wal_checkpoint(TRUNCATE)`,
	} {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("store: retire: %s: %w", q, err)
		}
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("store: retire: close: %w", err)
	}
	if err := shredDB(s.path); err != nil {
		return err
	}
	fresh, err := Open(ctx, s.dir)
	if err != nil {
		return fmt.Errorf("store: retire: reopen: %w", err)
	}
	s.db = fresh.db
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: retire: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	for _, e := range journal {
		var finished, outcome any
		if !e.FinishedAt.IsZero() {
			finished, outcome = ts(e.FinishedAt), e.Outcome
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO journal (operation_id, job_key, started_at, finished_at, outcome)
			VALUES (?, ?, ?, ?, ?)`, e.OperationID, e.JobKey, ts(e.StartedAt), finished, outcome); err != nil {
			return fmt.Errorf("store: retire: keep journal: %w", err)
		}
	}
	for k, v := range map[string]string{
		"retired_at": ts(at), "retired_reason": reason,
		"installation_id": auth.InstallationID, "agent_id": auth.AgentID,
	} {
		if err := setMeta(ctx, tx, k, v); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: retire: commit: %w", err)
	}
	return nil
}

// ResetState deletes the agent's state database in dir (shredding it first),
// so a retired agent may start again. It is the deliberate reset behind
// `fleetwright agent reset-state --state-dir DIR`; deleting the dir by hand
// does the same.
func ResetState(dir string) error {
	return shredDB(dir + string(os.PathSeparator) + FileName)
}

func shredDB(path string) error {
	for _, p := range []string{path, path + "-wal", path + "-shm", path + "-journal"} {
		if err := ShredFile(p); err != nil {
			return err
		}
	}
	return nil
}

// ShredFile overwrites a file with zeros, syncs it and removes it. A missing
// file is not an error.
func ShredFile(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: shred: %w", err)
	}
	fi, err := f.Stat()
	if err == nil {
		_, err = io.CopyN(f, zeroReader{}, fi.Size())
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("store: shred %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("store: shred: %w", err)
	}
	return nil
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
