package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Entry is one journaled action.
type Entry struct {
	OperationID string
	JobKey      string
	StartedAt   time.Time
	// FinishedAt is zero and Outcome empty while the action is in flight.
	FinishedAt time.Time
	Outcome    string
}

// OutcomeUnknown is recorded when an action failed in a way that leaves its
// effect on the board uncertain (timeout, 5xx, lost connection, crash).
const OutcomeUnknown = "unknown"

// Begin journals an action before it is sent. Any error wraps ErrJournal:
// the caller must not act.
func (s *Store) Begin(ctx context.Context, operationID, jobKey string, at time.Time) error {
	if operationID == "" {
		return fmt.Errorf("%w: empty operation id", ErrJournal)
	}
	if _, err := s.db.ExecContext(ctx, `INSERT INTO journal (operation_id, job_key, started_at) VALUES (?, ?, ?)`,
		operationID, jobKey, ts(at)); err != nil {
		return fmt.Errorf("%w: begin %s: %v", ErrJournal, operationID, err)
	}
	return nil
}

// Finish records an action's outcome.
func (s *Store) Finish(ctx context.Context, operationID, outcome string, at time.Time) error {
	res, err := s.db.ExecContext(ctx, `UPDATE journal SET finished_at = ?, outcome = ? WHERE operation_id = ? AND finished_at IS NULL`,
		ts(at), outcome, operationID)
	if err != nil {
		return fmt.Errorf("%w: finish %s: %v", ErrJournal, operationID, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("%w: finish %s: not in flight", ErrJournal, operationID)
	}
	return nil
}

// Do journals an action, runs it and records its outcome. If the journal
// cannot be written first, act is never called and the error wraps
// ErrJournal. If act fails without an outcome, OutcomeUnknown is recorded:
// an uncertain action is reconciled, never retried blind. If the outcome
// cannot be recorded the entry stays in flight, which a restart reads as
// unknown — the safe side.
func (s *Store) Do(ctx context.Context, operationID, jobKey string, now func() time.Time,
	act func(ctx context.Context) (outcome string, err error)) error {
	if err := s.Begin(ctx, operationID, jobKey, now()); err != nil {
		return err
	}
	outcome, err := act(ctx)
	if err != nil && outcome == "" {
		outcome = OutcomeUnknown
	}
	if ferr := s.Finish(ctx, operationID, outcome, now()); ferr != nil {
		if err != nil {
			return fmt.Errorf("store: action %s: %w (and %v)", operationID, err, ferr)
		}
		return ferr
	}
	if err != nil {
		return fmt.Errorf("store: action %s: %w", operationID, err)
	}
	return nil
}

// InFlight returns the actions begun and not finished, oldest first: after
// a restart, each is an outcome to reconcile.
func (s *Store) InFlight(ctx context.Context) ([]Entry, error) {
	return s.entries(ctx, `WHERE finished_at IS NULL`)
}

// Journal returns every journaled action, oldest first.
func (s *Store) Journal(ctx context.Context) ([]Entry, error) { return s.entries(ctx, "") }

func (s *Store) entries(ctx context.Context, where string) ([]Entry, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT operation_id, job_key, started_at, finished_at, outcome FROM journal `+
		where+` ORDER BY started_at, operation_id`)
	if err != nil {
		return nil, fmt.Errorf("store: read journal: %w", err)
	}
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		var e Entry
		var started string
		var finished, outcome sql.NullString
		if err := rows.Scan(&e.OperationID, &e.JobKey, &started, &finished, &outcome); err != nil {
			return nil, fmt.Errorf("store: read journal: %w", err)
		}
		e.StartedAt, e.FinishedAt, e.Outcome = parseTS(started), parseTS(finished.String), outcome.String
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: read journal: %w", err)
	}
	return out, nil
}
