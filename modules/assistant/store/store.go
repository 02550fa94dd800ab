// Package store is the assistant's local state: one SQLite database (WAL,
// synchronous FULL) under --state-dir holding tasks, their steps, pending
// approvals, the journal of approved risky actions, drafts, settings and
// sealed secrets. The dir is 0700 and the files 0600.
package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"
)

// FileName is the database inside the state dir.
const FileName = "assistant.db"

// Task states.
const (
	StatusQueued      = "queued"
	StatusRunning     = "running"
	StatusWaiting     = "awaiting approval"
	StatusAsking      = "asking the person"
	StatusPaused      = "paused"
	StatusStopped     = "stopped"     // a limit or the person ended it; StopReason says which
	StatusDone        = "done"        // the model finished
	StatusFailed      = "failed"      // an error the task cannot get past
	StatusInterrupted = "interrupted" // a restart cut it; resumable from its last step
	StatusUnknown     = "unknown"     // an approved risky action may or may not have happened
)

// Store is the open state database.
type Store struct {
	db  *sql.DB
	dir string
}

const schema = `
CREATE TABLE IF NOT EXISTS settings (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tasks (
	id            INTEGER PRIMARY KEY AUTOINCREMENT,
	goal          TEXT NOT NULL,
	start_urls    TEXT NOT NULL,
	status        TEXT NOT NULL,
	stop_reason   TEXT NOT NULL DEFAULT '',
	model         TEXT NOT NULL DEFAULT '',
	mode          TEXT NOT NULL DEFAULT '',
	limits        TEXT NOT NULL DEFAULT '{}',
	tabs          TEXT NOT NULL DEFAULT '{}',
	keep_label    INTEGER NOT NULL DEFAULT 1,
	label_note    TEXT NOT NULL DEFAULT '',
	created_at    TEXT NOT NULL,
	updated_at    TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS steps (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	task_id     INTEGER NOT NULL REFERENCES tasks(id),
	n           INTEGER NOT NULL,
	tool        TEXT NOT NULL,
	args        TEXT NOT NULL,
	result      TEXT NOT NULL,
	error       TEXT NOT NULL DEFAULT '',
	screenshot  BLOB,
	tokens_in   INTEGER NOT NULL DEFAULT 0,
	tokens_out  INTEGER NOT NULL DEFAULT 0,
	cost_micro  INTEGER NOT NULL DEFAULT 0,
	millis      INTEGER NOT NULL DEFAULT 0,
	mode        TEXT NOT NULL DEFAULT '',
	created_at  TEXT NOT NULL,
	UNIQUE (task_id, n)
);
CREATE TABLE IF NOT EXISTS messages (
	task_id  INTEGER NOT NULL REFERENCES tasks(id),
	n        INTEGER NOT NULL,
	body     TEXT NOT NULL,
	PRIMARY KEY (task_id, n)
);
CREATE TABLE IF NOT EXISTS approvals (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	task_id     INTEGER NOT NULL REFERENCES tasks(id),
	action      TEXT NOT NULL,
	screenshot  BLOB,
	status      TEXT NOT NULL,
	values_json TEXT NOT NULL DEFAULT '{}',
	created_at  TEXT NOT NULL,
	decided_at  TEXT
);
CREATE TABLE IF NOT EXISTS journal (
	op_id       TEXT PRIMARY KEY,
	task_id     INTEGER NOT NULL,
	approval_id INTEGER NOT NULL,
	what        TEXT NOT NULL,
	started_at  TEXT NOT NULL,
	finished_at TEXT,
	outcome     TEXT
);
CREATE TABLE IF NOT EXISTS drafts (
	task_id INTEGER NOT NULL,
	name    TEXT NOT NULL,
	body    TEXT NOT NULL,
	PRIMARY KEY (task_id, name)
);
CREATE TABLE IF NOT EXISTS secrets (
	name    TEXT PRIMARY KEY,
	sealed  BLOB NOT NULL,
	origins TEXT NOT NULL DEFAULT '',
	no_ask  TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS task_origins (
	task_id INTEGER PRIMARY KEY REFERENCES tasks(id),
	origin  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS model_modes (
	model  TEXT PRIMARY KEY,
	mode   TEXT NOT NULL,
	reason TEXT NOT NULL
);
`

// Open opens (creating if needed) the state database in dir.
func Open(ctx context.Context, dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: create state dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: state dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: create database file: %w", err)
	}
	_ = f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("store: %w", err)
		}
	}
	db, err := sql.Open("sqlite", "file:"+path+
		"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=secure_delete(ON)&_pragma=busy_timeout(5000)&_pragma=foreign_keys(ON)")
	if err != nil {
		return nil, fmt.Errorf("store: open database: %w", err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, schema); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: create schema in %s: %w", path, err)
	}
	if err := addColumns(ctx, db); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: upgrade schema in %s: %w", path, err)
	}
	return &Store{db: db, dir: dir}, nil
}

// Close closes the database.
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

// Setting reads a setting; ok is false when it was never set.
func (s *Store) Setting(ctx context.Context, key string) (string, bool, error) {
	var v string
	err := s.db.QueryRowContext(ctx, `SELECT value FROM settings WHERE key = ?`, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("store: read setting %s: %w", key, err)
	}
	return v, true, nil
}

// SetSetting writes a setting.
func (s *Store) SetSetting(ctx context.Context, key, value string) error {
	if _, err := s.db.ExecContext(ctx, `INSERT INTO settings (key, value) VALUES (?, ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`, key, value); err != nil {
		return fmt.Errorf("store: write setting %s: %w", key, err)
	}
	return nil
}

// Limits cap one task; zero means no cap from this source.
type Limits struct {
	Tokens   int           `json:"tokens,omitempty"`
	CostUSD  float64       `json:"cost_usd,omitempty"`
	Steps    int           `json:"steps,omitempty"`
	WallTime time.Duration `json:"wall_time,omitempty"`
	Tabs     int           `json:"tabs,omitempty"`
}

// Task is one piece of work the person gave the assistant.
type Task struct {
	ID         int64
	Goal       string
	StartURLs  []string
	Status     string
	StopReason string
	Model      string
	Mode       string
	Limits     Limits
	// Tabs maps the task's names for its tabs ("brief") to browser target ids.
	Tabs map[string]string
	// KeepLabel is false only when the person removed the AI-generated
	// label for this task; LabelNote records that decision.
	KeepLabel bool
	LabelNote string
	CreatedAt time.Time
	UpdatedAt time.Time
	// Totals over the task's steps.
	Steps     int
	TokensIn  int
	TokensOut int
	CostMicro int64
	// Origin says who gave a task that did not come from the person's own
	// UI ("the panel, by ops@acme.test"); empty for the person's.
	Origin string
}

// CreateTask records a new queued task.
func (s *Store) CreateTask(ctx context.Context, goal string, urls []string, model string, lim Limits, now time.Time) (int64, error) {
	u, _ := json.Marshal(urls)
	l, _ := json.Marshal(lim)
	res, err := s.db.ExecContext(ctx, `INSERT INTO tasks (goal, start_urls, status, model, limits, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, goal, string(u), StatusQueued, model, string(l), ts(now), ts(now))
	if err != nil {
		return 0, fmt.Errorf("store: create task: %w", err)
	}
	return res.LastInsertId()
}

const taskCols = `t.id, t.goal, t.start_urls, t.status, t.stop_reason, t.model, t.mode, t.limits, t.tabs, t.keep_label, t.label_note, t.created_at, t.updated_at,
	(SELECT count(*) FROM steps WHERE task_id = t.id), (SELECT coalesce(sum(tokens_in),0) FROM steps WHERE task_id = t.id),
	(SELECT coalesce(sum(tokens_out),0) FROM steps WHERE task_id = t.id), (SELECT coalesce(sum(cost_micro),0) FROM steps WHERE task_id = t.id),
	coalesce((SELECT origin FROM task_origins WHERE task_id = t.id), '')`

func scanTask(sc interface{ Scan(...any) error }) (Task, error) {
	var t Task
	var urls, lim, tabs, created, updated string
	var keep int
	if err := sc.Scan(&t.ID, &t.Goal, &urls, &t.Status, &t.StopReason, &t.Model, &t.Mode, &lim, &tabs, &keep, &t.LabelNote, &created, &updated,
		&t.Steps, &t.TokensIn, &t.TokensOut, &t.CostMicro, &t.Origin); err != nil {
		return Task{}, err
	}
	_ = json.Unmarshal([]byte(urls), &t.StartURLs)
	_ = json.Unmarshal([]byte(lim), &t.Limits)
	t.Tabs = map[string]string{}
	_ = json.Unmarshal([]byte(tabs), &t.Tabs)
	t.KeepLabel = keep != 0
	t.CreatedAt, t.UpdatedAt = parseTS(created), parseTS(updated)
	return t, nil
}

// SetOrigin records who gave a task (see Task.Origin).
func (s *Store) SetOrigin(ctx context.Context, id int64, origin string) error {
	if _, err := s.db.ExecContext(ctx, `INSERT OR REPLACE INTO task_origins (task_id, origin) VALUES (?, ?)`, id, origin); err != nil {
		return fmt.Errorf("store: task %d origin: %w", id, err)
	}
	return nil
}

// ErrNotFound is returned for a task or approval that does not exist.
var ErrNotFound = errors.New("store: not found")

// Task reads one task with its totals.
func (s *Store) Task(ctx context.Context, id int64) (Task, error) {
	t, err := scanTask(s.db.QueryRowContext(ctx, `SELECT `+taskCols+` FROM tasks t WHERE t.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Task{}, fmt.Errorf("store: task %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Task{}, fmt.Errorf("store: read task %d: %w", id, err)
	}
	return t, nil
}

// Tasks lists tasks, newest first.
func (s *Store) Tasks(ctx context.Context, limit int) ([]Task, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+taskCols+` FROM tasks t ORDER BY t.id DESC LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("store: list tasks: %w", err)
	}
	defer rows.Close()
	var out []Task
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list tasks: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// SetStatus changes a task's status and stop reason.
func (s *Store) SetStatus(ctx context.Context, id int64, status, reason string, now time.Time) error {
	if _, err := s.db.ExecContext(ctx, `UPDATE tasks SET status = ?, stop_reason = ?, updated_at = ? WHERE id = ?`, status, reason, ts(now), id); err != nil {
		return fmt.Errorf("store: task %d status: %w", id, err)
	}
	return nil
}

// SetMode records which calling mode the task's model runs in.
func (s *Store) SetMode(ctx context.Context, id int64, mode string) error {
	if _, err := s.db.ExecContext(ctx, `UPDATE tasks SET mode = ? WHERE id = ?`, mode, id); err != nil {
		return fmt.Errorf("store: task %d mode: %w", id, err)
	}
	return nil
}

// SetTabs remembers which tab holds what for a task.
func (s *Store) SetTabs(ctx context.Context, id int64, tabs map[string]string) error {
	b, _ := json.Marshal(tabs)
	if _, err := s.db.ExecContext(ctx, `UPDATE tasks SET tabs = ? WHERE id = ?`, string(b), id); err != nil {
		return fmt.Errorf("store: task %d tabs: %w", id, err)
	}
	return nil
}

// SetLabel records the person's decision on the AI-generated label.
func (s *Store) SetLabel(ctx context.Context, id int64, keep bool, note string) error {
	k := 0
	if keep {
		k = 1
	}
	if _, err := s.db.ExecContext(ctx, `UPDATE tasks SET keep_label = ?, label_note = ? WHERE id = ?`, k, note, id); err != nil {
		return fmt.Errorf("store: task %d label: %w", id, err)
	}
	return nil
}

// MarkInterrupted turns every task a previous process left running into
// interrupted (resumable), and returns their ids.
func (s *Store) MarkInterrupted(ctx context.Context, now time.Time) ([]int64, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM tasks WHERE status IN (?, ?, ?, ?)`, StatusRunning, StatusWaiting, StatusAsking, StatusQueued)
	if err != nil {
		return nil, fmt.Errorf("store: interrupted tasks: %w", err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("store: interrupted tasks: %w", err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	for _, id := range ids {
		if err := s.SetStatus(ctx, id, StatusInterrupted, "the assistant restarted; resume from the last completed step", now); err != nil {
			return nil, err
		}
	}
	// Pending approvals of an interrupted task are void: the page behind
	// them is gone. Resuming asks again.
	if _, err := s.db.ExecContext(ctx, `UPDATE approvals SET status = 'void', decided_at = ? WHERE status = 'pending'`, ts(now)); err != nil {
		return nil, fmt.Errorf("store: void approvals: %w", err)
	}
	return ids, nil
}

// Step is one recorded action of a task.
type Step struct {
	TaskID     int64
	N          int
	Tool       string
	Args       string
	Result     string
	Error      string
	Screenshot []byte
	TokensIn   int
	TokensOut  int
	CostMicro  int64
	Millis     int64
	Mode       string
	CreatedAt  time.Time
}

// AddStep records a step; N must be the next number for the task.
func (s *Store) AddStep(ctx context.Context, st Step) error {
	if _, err := s.db.ExecContext(ctx, `INSERT INTO steps (task_id, n, tool, args, result, error, screenshot, tokens_in, tokens_out, cost_micro, millis, mode, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, st.TaskID, st.N, st.Tool, st.Args, st.Result, st.Error, st.Screenshot,
		st.TokensIn, st.TokensOut, st.CostMicro, st.Millis, st.Mode, ts(st.CreatedAt)); err != nil {
		return fmt.Errorf("store: task %d step %d: %w", st.TaskID, st.N, err)
	}
	return nil
}

// Steps lists a task's steps in order (screenshots left out).
func (s *Store) Steps(ctx context.Context, taskID int64) ([]Step, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT task_id, n, tool, args, result, error, tokens_in, tokens_out, cost_micro, millis, mode, created_at, screenshot IS NOT NULL
		FROM steps WHERE task_id = ? ORDER BY n`, taskID)
	if err != nil {
		return nil, fmt.Errorf("store: steps of %d: %w", taskID, err)
	}
	defer rows.Close()
	var out []Step
	for rows.Next() {
		var st Step
		var created string
		var shot bool
		if err := rows.Scan(&st.TaskID, &st.N, &st.Tool, &st.Args, &st.Result, &st.Error, &st.TokensIn, &st.TokensOut, &st.CostMicro, &st.Millis, &st.Mode, &created, &shot); err != nil {
			return nil, fmt.Errorf("store: steps of %d: %w", taskID, err)
		}
		st.CreatedAt = parseTS(created)
		if shot {
			st.Screenshot = []byte{}
		}
		out = append(out, st)
	}
	return out, rows.Err()
}

// StepScreenshot returns one step's screenshot (PNG), nil if none.
func (s *Store) StepScreenshot(ctx context.Context, taskID int64, n int) ([]byte, error) {
	var b []byte
	err := s.db.QueryRowContext(ctx, `SELECT screenshot FROM steps WHERE task_id = ? AND n = ?`, taskID, n).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("store: screenshot: %w", err)
	}
	return b, nil
}

// Usage is a sum of model use.
type Usage struct {
	Tokens    int
	CostMicro int64
	Steps     int
}

// UsageSince sums every task's steps recorded at or after t (the day's use).
func (s *Store) UsageSince(ctx context.Context, t time.Time) (Usage, error) {
	var u Usage
	err := s.db.QueryRowContext(ctx, `SELECT coalesce(sum(tokens_in + tokens_out),0), coalesce(sum(cost_micro),0), count(*) FROM steps WHERE created_at >= ?`, ts(t)).
		Scan(&u.Tokens, &u.CostMicro, &u.Steps)
	if err != nil {
		return Usage{}, fmt.Errorf("store: usage: %w", err)
	}
	return u, nil
}

// SaveMessages replaces the task's conversation (already redacted: secrets
// appear only as placeholders), so a resumed task continues it.
func (s *Store) SaveMessages(ctx context.Context, taskID int64, bodies []string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: messages: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `DELETE FROM messages WHERE task_id = ?`, taskID); err != nil {
		return fmt.Errorf("store: messages: %w", err)
	}
	for i, b := range bodies {
		if _, err := tx.ExecContext(ctx, `INSERT INTO messages (task_id, n, body) VALUES (?, ?, ?)`, taskID, i, b); err != nil {
			return fmt.Errorf("store: messages: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: messages: %w", err)
	}
	return nil
}

// Messages reads the task's saved conversation.
func (s *Store) Messages(ctx context.Context, taskID int64) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT body FROM messages WHERE task_id = ? ORDER BY n`, taskID)
	if err != nil {
		return nil, fmt.Errorf("store: messages: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var b string
		if err := rows.Scan(&b); err != nil {
			return nil, fmt.Errorf("store: messages: %w", err)
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

// Approval is a risky action held for the person.
type Approval struct {
	ID         int64
	TaskID     int64
	Action     string // JSON of the gate's description
	Screenshot []byte
	Status     string // pending, approved, denied, void
	Values     map[string]string
	CreatedAt  time.Time
	// DecidedAt is when the person approved or denied it (nil while pending).
	DecidedAt *time.Time
}

// AddApproval records a held action.
func (s *Store) AddApproval(ctx context.Context, taskID int64, action string, shot []byte, now time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, `INSERT INTO approvals (task_id, action, screenshot, status, created_at) VALUES (?, ?, ?, 'pending', ?)`,
		taskID, action, shot, ts(now))
	if err != nil {
		return 0, fmt.Errorf("store: add approval: %w", err)
	}
	return res.LastInsertId()
}

// Decide records the person's decision on a pending approval; it fails
// with ErrNotFound when the approval is not pending any more.
func (s *Store) Decide(ctx context.Context, id int64, status string, values map[string]string, now time.Time) error {
	v, _ := json.Marshal(values)
	res, err := s.db.ExecContext(ctx, `UPDATE approvals SET status = ?, values_json = ?, decided_at = ? WHERE id = ? AND status = 'pending'`,
		status, string(v), ts(now), id)
	if err != nil {
		return fmt.Errorf("store: decide approval %d: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("store: approval %d is not pending: %w", id, ErrNotFound)
	}
	return nil
}

// Approval reads one approval.
func (s *Store) Approval(ctx context.Context, id int64) (Approval, error) {
	var a Approval
	var vals, created string
	var decided sql.NullString
	err := s.db.QueryRowContext(ctx, `SELECT id, task_id, action, screenshot, status, values_json, created_at, decided_at FROM approvals WHERE id = ?`, id).
		Scan(&a.ID, &a.TaskID, &a.Action, &a.Screenshot, &a.Status, &vals, &created, &decided)
	if errors.Is(err, sql.ErrNoRows) {
		return Approval{}, fmt.Errorf("store: approval %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Approval{}, fmt.Errorf("store: approval %d: %w", id, err)
	}
	_ = json.Unmarshal([]byte(vals), &a.Values)
	a.CreatedAt = parseTS(created)
	if decided.Valid {
		t := parseTS(decided.String)
		a.DecidedAt = &t
	}
	return a, nil
}

// PendingApprovals lists the approvals waiting for the person.
func (s *Store) PendingApprovals(ctx context.Context) ([]Approval, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, task_id, action, status, created_at FROM approvals WHERE status = 'pending' ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("store: pending approvals: %w", err)
	}
	defer rows.Close()
	var out []Approval
	for rows.Next() {
		var a Approval
		var created string
		if err := rows.Scan(&a.ID, &a.TaskID, &a.Action, &a.Status, &created); err != nil {
			return nil, fmt.Errorf("store: pending approvals: %w", err)
		}
		a.CreatedAt = parseTS(created)
		out = append(out, a)
	}
	return out, rows.Err()
}

// ErrJournal wraps a failed journal write: an action that cannot be
// recorded before it is sent must not be sent.
var ErrJournal = errors.New("store: journal write failed; do not act")

// BeginRisky journals an approved risky action before it is carried out.
func (s *Store) BeginRisky(ctx context.Context, opID string, taskID, approvalID int64, what string, now time.Time) error {
	if _, err := s.db.ExecContext(ctx, `INSERT INTO journal (op_id, task_id, approval_id, what, started_at) VALUES (?, ?, ?, ?, ?)`,
		opID, taskID, approvalID, what, ts(now)); err != nil {
		return fmt.Errorf("%w: %w", ErrJournal, err)
	}
	return nil
}

// FinishRisky records the outcome of a journaled action.
func (s *Store) FinishRisky(ctx context.Context, opID, outcome string, now time.Time) error {
	if _, err := s.db.ExecContext(ctx, `UPDATE journal SET finished_at = ?, outcome = ? WHERE op_id = ?`, ts(now), outcome, opID); err != nil {
		return fmt.Errorf("store: journal %s: %w", opID, err)
	}
	return nil
}

// JournalEntry is one journaled risky action.
type JournalEntry struct {
	OpID       string
	TaskID     int64
	ApprovalID int64
	What       string
	StartedAt  time.Time
	// FinishedAt and Outcome ("done", or "unknown: …") are unset while the
	// action is under way or was cut off by a crash.
	FinishedAt *time.Time
	Outcome    string
}

// Journal lists a task's journaled risky actions, oldest first: what the
// assistant did with the person's approval, and how it ended.
func (s *Store) Journal(ctx context.Context, taskID int64) ([]JournalEntry, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT op_id, task_id, approval_id, what, started_at, finished_at, COALESCE(outcome, '')
		FROM journal WHERE task_id = ? ORDER BY started_at`, taskID)
	if err != nil {
		return nil, fmt.Errorf("store: journal of task %d: %w", taskID, err)
	}
	defer rows.Close()
	var out []JournalEntry
	for rows.Next() {
		var e JournalEntry
		var started string
		var finished sql.NullString
		if err := rows.Scan(&e.OpID, &e.TaskID, &e.ApprovalID, &e.What, &started, &finished, &e.Outcome); err != nil {
			return nil, fmt.Errorf("store: journal of task %d: %w", taskID, err)
		}
		e.StartedAt = parseTS(started)
		if finished.Valid {
			t := parseTS(finished.String)
			e.FinishedAt = &t
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// Unfinished lists journaled actions with no recorded outcome: after a
// restart each is UNKNOWN (it may or may not have happened).
func (s *Store) Unfinished(ctx context.Context) ([]JournalEntry, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT op_id, task_id, approval_id, what, started_at FROM journal WHERE finished_at IS NULL ORDER BY started_at`)
	if err != nil {
		return nil, fmt.Errorf("store: journal: %w", err)
	}
	defer rows.Close()
	var out []JournalEntry
	for rows.Next() {
		var e JournalEntry
		var started string
		if err := rows.Scan(&e.OpID, &e.TaskID, &e.ApprovalID, &e.What, &started); err != nil {
			return nil, fmt.Errorf("store: journal: %w", err)
		}
		e.StartedAt = parseTS(started)
		out = append(out, e)
	}
	return out, rows.Err()
}

// SaveDraft stores a draft the model wrote.
func (s *Store) SaveDraft(ctx context.Context, taskID int64, name, body string) error {
	if _, err := s.db.ExecContext(ctx, `INSERT INTO drafts (task_id, name, body) VALUES (?, ?, ?)
		ON CONFLICT (task_id, name) DO UPDATE SET body = excluded.body`, taskID, name, body); err != nil {
		return fmt.Errorf("store: draft: %w", err)
	}
	return nil
}

// Drafts returns a task's drafts by name.
func (s *Store) Drafts(ctx context.Context, taskID int64) (map[string]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, body FROM drafts WHERE task_id = ?`, taskID)
	if err != nil {
		return nil, fmt.Errorf("store: drafts: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var n, b string
		if err := rows.Scan(&n, &b); err != nil {
			return nil, fmt.Errorf("store: drafts: %w", err)
		}
		out[n] = b
	}
	return out, rows.Err()
}

// Secret is a sealed secret with the origins (scheme://host[:port]) it
// may be typed on, and those of them where it is typed without asking.
type Secret struct {
	Name    string
	Sealed  []byte
	Origins []string
	NoAsk   []string
}

// addColumns brings a state dir written by an older version up to date
// (CREATE TABLE IF NOT EXISTS leaves an existing table as it was).
func addColumns(ctx context.Context, db *sql.DB) error {
	have := map[string]bool{}
	rows, err := db.QueryContext(ctx, `SELECT name FROM pragma_table_info('secrets')`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return err
		}
		have[n] = true
	}
	rows.Close()
	for _, c := range []string{"origins", "no_ask"} {
		if !have[c] {
			if _, err := db.ExecContext(ctx, `ALTER TABLE secrets ADD COLUMN `+c+` TEXT NOT NULL DEFAULT ''`); err != nil {
				return err
			}
		}
	}
	return nil
}

// PutSecret stores a sealed secret under its placeholder name, with its
// origins.
func (s *Store) PutSecret(ctx context.Context, sec Secret) error {
	if _, err := s.db.ExecContext(ctx, `INSERT INTO secrets (name, sealed, origins, no_ask) VALUES (?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET sealed = excluded.sealed, origins = excluded.origins, no_ask = excluded.no_ask`,
		sec.Name, sec.Sealed, strings.Join(sec.Origins, "\n"), strings.Join(sec.NoAsk, "\n")); err != nil {
		return fmt.Errorf("store: secret %s: %w", sec.Name, err)
	}
	return nil
}

// Secrets returns every sealed secret by name.
func (s *Store) Secrets(ctx context.Context) (map[string]Secret, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, sealed, origins, no_ask FROM secrets`)
	if err != nil {
		return nil, fmt.Errorf("store: secrets: %w", err)
	}
	defer rows.Close()
	out := map[string]Secret{}
	for rows.Next() {
		var sec Secret
		var origins, noAsk string
		if err := rows.Scan(&sec.Name, &sec.Sealed, &origins, &noAsk); err != nil {
			return nil, fmt.Errorf("store: secrets: %w", err)
		}
		sec.Origins, sec.NoAsk = splitLines(origins), splitLines(noAsk)
		out[sec.Name] = sec
	}
	return out, rows.Err()
}

func splitLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// ModelMode is how a model is called: "tools" or "structured", and why.
type ModelMode struct{ Mode, Reason string }

// ModelMode reads the remembered mode of a model.
func (s *Store) ModelMode(ctx context.Context, model string) (ModelMode, bool, error) {
	var m ModelMode
	err := s.db.QueryRowContext(ctx, `SELECT mode, reason FROM model_modes WHERE model = ?`, model).Scan(&m.Mode, &m.Reason)
	if errors.Is(err, sql.ErrNoRows) {
		return ModelMode{}, false, nil
	}
	if err != nil {
		return ModelMode{}, false, fmt.Errorf("store: model mode: %w", err)
	}
	return m, true, nil
}

// SetModelMode remembers the mode chosen for a model.
func (s *Store) SetModelMode(ctx context.Context, model string, m ModelMode) error {
	if _, err := s.db.ExecContext(ctx, `INSERT INTO model_modes (model, mode, reason) VALUES (?, ?, ?)
		ON CONFLICT (model) DO UPDATE SET mode = excluded.mode, reason = excluded.reason`, model, m.Mode, m.Reason); err != nil {
		return fmt.Errorf("store: model mode: %w", err)
	}
	return nil
}
