package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Action is a journaled claim action with what a restart needs to report
// it: the worker and the fencing token.
type Action struct {
	Entry
	Worker string
	Token  int64
}

// BeginAction journals a claim action before it is sent, with its worker
// and token, in one transaction. Any error wraps ErrJournal: do not act.
func (s *Store) BeginAction(ctx context.Context, operationID, jobKey, worker string, token int64, at time.Time) error {
	if operationID == "" {
		return fmt.Errorf("%w: empty operation id", ErrJournal)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%w: begin %s: %v", ErrJournal, operationID, err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `INSERT INTO journal (operation_id, job_key, started_at) VALUES (?, ?, ?)`,
		operationID, jobKey, ts(at)); err != nil {
		return fmt.Errorf("%w: begin %s: %v", ErrJournal, operationID, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO actions (operation_id, worker, token) VALUES (?, ?, ?)`,
		operationID, worker, token); err != nil {
		return fmt.Errorf("%w: begin %s: %v", ErrJournal, operationID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%w: begin %s: %v", ErrJournal, operationID, err)
	}
	return nil
}

// FinishAction records an action's outcome and queues its report (body,
// keyed by requestID) in the outbox, in one transaction: the report stays
// queued until the panel acknowledges it (DeleteOutbox).
func (s *Store) FinishAction(ctx context.Context, operationID, outcome string, at time.Time, requestID string, body []byte) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%w: finish %s: %v", ErrJournal, operationID, err)
	}
	defer func() { _ = tx.Rollback() }()
	res, err := tx.ExecContext(ctx, `UPDATE journal SET finished_at = ?, outcome = ? WHERE operation_id = ? AND finished_at IS NULL`,
		ts(at), outcome, operationID)
	if err != nil {
		return fmt.Errorf("%w: finish %s: %v", ErrJournal, operationID, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("%w: finish %s: not in flight", ErrJournal, operationID)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO outbox (request_id, body, created_at) VALUES (?, ?, ?)
		ON CONFLICT (request_id) DO UPDATE SET body = excluded.body`, requestID, string(body), ts(at)); err != nil {
		return fmt.Errorf("%w: queue report %s: %v", ErrJournal, operationID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%w: finish %s: %v", ErrJournal, operationID, err)
	}
	return nil
}

// InFlightActions returns the claim actions begun and not finished, oldest
// first, with their worker and token.
func (s *Store) InFlightActions(ctx context.Context) ([]Action, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT j.operation_id, j.job_key, j.started_at, a.worker, a.token
		FROM journal j JOIN actions a USING (operation_id) WHERE j.finished_at IS NULL ORDER BY j.started_at, j.operation_id`)
	if err != nil {
		return nil, fmt.Errorf("store: read journal: %w", err)
	}
	defer rows.Close()
	var out []Action
	for rows.Next() {
		var a Action
		var started string
		if err := rows.Scan(&a.OperationID, &a.JobKey, &started, &a.Worker, &a.Token); err != nil {
			return nil, fmt.Errorf("store: read journal: %w", err)
		}
		a.StartedAt = parseTS(started)
		out = append(out, a)
	}
	return out, rows.Err()
}

// Queued is one report waiting for the panel's acknowledgement.
type Queued struct {
	RequestID string
	Body      []byte
}

// Outbox returns the queued reports, oldest first.
func (s *Store) Outbox(ctx context.Context) ([]Queued, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT request_id, body FROM outbox ORDER BY created_at, request_id`)
	if err != nil {
		return nil, fmt.Errorf("store: read outbox: %w", err)
	}
	defer rows.Close()
	var out []Queued
	for rows.Next() {
		var q Queued
		var b string
		if err := rows.Scan(&q.RequestID, &b); err != nil {
			return nil, fmt.Errorf("store: read outbox: %w", err)
		}
		q.Body = []byte(b)
		out = append(out, q)
	}
	return out, rows.Err()
}

// DeleteOutbox drops an acknowledged report.
func (s *Store) DeleteOutbox(ctx context.Context, requestID string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM outbox WHERE request_id = ?`, requestID); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("store: delete outbox %s: %w", requestID, err)
	}
	return nil
}
