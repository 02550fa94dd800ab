package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// The kinds of the assistant's own data that retention covers. They live
// in this database on the person's machine, not in the panel's, so the
// assistant applies them itself.
const (
	// RetainConversations is a settled task's whole record: its goal, its
	// steps, its conversation with the model, its drafts and approvals.
	RetainConversations = "assistant_conversations"
	// RetainPageText is the text of the pages the assistant read
	// (read_page and extract results, in the steps and in the saved
	// conversation).
	RetainPageText = "assistant_page_text"
	// RetainScreenshots are the screenshots of steps and approvals.
	RetainScreenshots = "assistant_screenshots"
)

// RetentionDef describes one kind: its default in days (0: forever) and
// what pruning keeps regardless.
type RetentionDef struct {
	Kind    string
	Label   string
	Default int
	Keeps   string
}

// RetentionDefs are the kinds, in the order the CLI lists them.
var RetentionDefs = []RetentionDef{
	{RetainConversations, "Assistant tasks and their conversations", 90, "tasks not settled (running, waiting, paused, interrupted, unknown outcome) and their unfinished journal entries"},
	{RetainPageText, "Page text the assistant read", 30, "the text of tasks not settled (a resumed task needs it)"},
	{RetainScreenshots, "Screenshots of steps and approvals", 7, "pending approvals' screenshots and those of tasks not settled"},
}

// settled are the statuses whose task is over: only these are pruned. An
// unknown outcome is evidence a person still has to look at; an
// interrupted task can be resumed.
const settled = `('` + StatusDone + `', '` + StatusFailed + `', '` + StatusStopped + `')`

// PageTextPruned replaces page text past retention.
const PageTextPruned = "[page text removed: past its retention]"

func retentionKey(kind string) string { return "retention." + kind }

// Retention is how many days each kind is kept (0: forever), from the
// settings or the defaults.
func (s *Store) Retention(ctx context.Context) (map[string]int, error) {
	out := map[string]int{}
	for _, d := range RetentionDefs {
		out[d.Kind] = d.Default
		v, ok, err := s.Setting(ctx, retentionKey(d.Kind))
		if err != nil {
			return nil, err
		}
		if ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("store: retention %s is %q, not a number of days", d.Kind, v)
			}
			out[d.Kind] = n
		}
	}
	return out, nil
}

// ErrUnknownKind is returned for a kind the assistant does not keep.
var ErrUnknownKind = errors.New("store: unknown retention kind")

// SetRetention keeps kind for days (0: forever); ok false goes back to the
// default.
func (s *Store) SetRetention(ctx context.Context, kind string, days int, ok bool) error {
	known := false
	var names []string
	for _, d := range RetentionDefs {
		known = known || d.Kind == kind
		names = append(names, d.Kind)
	}
	if !known {
		return fmt.Errorf("%w %q (kinds: %s)", ErrUnknownKind, kind, strings.Join(names, ", "))
	}
	if days < 0 || days > 36500 {
		return fmt.Errorf("store: retention of %s must be 0 (forever) to 36500 days, not %d", kind, days)
	}
	if !ok {
		if _, err := s.db.ExecContext(ctx, `DELETE FROM settings WHERE key = ?`, retentionKey(kind)); err != nil {
			return fmt.Errorf("store: retention: %w", err)
		}
		return nil
	}
	return s.SetSetting(ctx, retentionKey(kind), strconv.Itoa(days))
}

// Pruned counts what one prune removed, per kind (tasks, page texts,
// screenshots).
type Pruned map[string]int64

// Prune removes what is past retention as of now: settled tasks whose last
// change is older than their kind's period. It is idempotent; the assistant
// runs it at start and every hour.
func (s *Store) Prune(ctx context.Context, now time.Time) (Pruned, error) {
	days, err := s.Retention(ctx)
	if err != nil {
		return nil, err
	}
	out := Pruned{}
	cut := func(kind string) (string, bool) {
		d := days[kind]
		if d == 0 {
			return "", false
		}
		return ts(now.Add(-time.Duration(d) * 24 * time.Hour)), true
	}
	old := `SELECT id FROM tasks WHERE status IN ` + settled + ` AND updated_at < ?`
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("store: prune: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	exec := func(kind, q string, args ...any) error {
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("store: prune %s: %w", kind, err)
		}
		n, _ := res.RowsAffected()
		out[kind] += n
		return nil
	}
	if c, ok := cut(RetainScreenshots); ok {
		if err := exec(RetainScreenshots, `UPDATE steps SET screenshot = NULL WHERE screenshot IS NOT NULL AND task_id IN (`+old+`)`, c); err != nil {
			return nil, err
		}
		if err := exec(RetainScreenshots, `UPDATE approvals SET screenshot = NULL WHERE screenshot IS NOT NULL AND status <> 'pending' AND task_id IN (`+old+`)`, c); err != nil {
			return nil, err
		}
	}
	if c, ok := cut(RetainPageText); ok {
		if err := exec(RetainPageText, `UPDATE steps SET result = ? WHERE tool IN ('read_page', 'extract') AND result <> ? AND task_id IN (`+old+`)`,
			PageTextPruned, PageTextPruned, c); err != nil {
			return nil, err
		}
		if err := exec(RetainPageText, `UPDATE messages SET body = json_set(body, '$.content', ?)
			WHERE json_extract(body, '$.role') = 'tool' AND json_extract(body, '$.tool_name') IN ('read_page', 'extract')
			AND json_extract(body, '$.content') <> ? AND task_id IN (`+old+`)`, PageTextPruned, PageTextPruned, c); err != nil {
			return nil, err
		}
	}
	if c, ok := cut(RetainConversations); ok {
		var ids []int64
		rows, err := tx.QueryContext(ctx, old, c)
		if err != nil {
			return nil, fmt.Errorf("store: prune: %w", err)
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, fmt.Errorf("store: prune: %w", err)
			}
			ids = append(ids, id)
		}
		rows.Close()
		for _, id := range ids {
			if err := deleteTask(ctx, tx, id); err != nil {
				return nil, err
			}
		}
		out[RetainConversations] += int64(len(ids))
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("store: prune: %w", err)
	}
	for k, v := range out {
		if v == 0 {
			delete(out, k)
		}
	}
	return out, nil
}

// taskTables are the tables holding a task's rows, children first.
var taskTables = []string{"steps", "messages", "approvals", "drafts", "task_origins", "journal"}

func deleteTask(ctx context.Context, tx *sql.Tx, id int64) error {
	for _, t := range taskTables {
		if _, err := tx.ExecContext(ctx, `DELETE FROM `+t+` WHERE task_id = ?`, id); err != nil {
			return fmt.Errorf("store: delete task %d (%s): %w", id, t, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM tasks WHERE id = ?`, id); err != nil {
		return fmt.Errorf("store: delete task %d: %w", id, err)
	}
	return nil
}

// exportTables are exported in this order. Secrets go out by name and the
// sites they are bound to only: their sealed values open only with this
// installation's key, and a plain value never leaves the store.
var exportTables = []struct{ name, query string }{
	{"settings", `SELECT * FROM settings`},
	{"tasks", `SELECT * FROM tasks ORDER BY id`},
	{"steps", `SELECT * FROM steps ORDER BY task_id, n`},
	{"messages", `SELECT * FROM messages ORDER BY task_id, n`},
	{"approvals", `SELECT * FROM approvals ORDER BY id`},
	{"journal", `SELECT * FROM journal ORDER BY started_at`},
	{"drafts", `SELECT * FROM drafts ORDER BY task_id, name`},
	{"task_origins", `SELECT * FROM task_origins ORDER BY task_id`},
	{"model_modes", `SELECT * FROM model_modes ORDER BY model`},
	{"secrets", `SELECT name, origins, no_ask FROM secrets ORDER BY name`},
}

// Export writes everything the assistant keeps about the person as JSON
// Lines, one row a line ({"table": …, "row": {…}}; blobs such as
// screenshots as base64), and returns the rows written per table.
func (s *Store) Export(ctx context.Context, w io.Writer) (map[string]int, error) {
	enc := json.NewEncoder(w)
	counts := map[string]int{}
	for _, t := range exportTables {
		rows, err := s.db.QueryContext(ctx, t.query)
		if err != nil {
			return counts, fmt.Errorf("store: export %s: %w", t.name, err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				rows.Close()
				return counts, fmt.Errorf("store: export %s: %w", t.name, err)
			}
			row := map[string]any{}
			for i, c := range cols {
				row[c] = vals[i] // []byte marshals as base64
			}
			if err := enc.Encode(map[string]any{"table": t.name, "row": row}); err != nil {
				rows.Close()
				return counts, fmt.Errorf("store: export: %w", err)
			}
			counts[t.name]++
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return counts, fmt.Errorf("store: export %s: %w", t.name, err)
		}
	}
	return counts, nil
}

// ErrTaskActive refuses an erase while a task still runs.
var ErrTaskActive = errors.New("store: a task is still under way (running, queued, waiting for approval or for the person); stop it first, then erase")

// Erase deletes everything the assistant keeps about the person: every
// task with its steps, conversation, screenshots, approvals, drafts and
// journal, the stored secrets and the model modes it learnt. Settings
// (limits, retention) stay. It refuses while a task is under way.
func (s *Store) Erase(ctx context.Context) (map[string]int64, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("store: erase: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var active int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM tasks WHERE status IN (?, ?, ?, ?)`,
		StatusQueued, StatusRunning, StatusWaiting, StatusAsking).Scan(&active); err != nil {
		return nil, fmt.Errorf("store: erase: %w", err)
	}
	if active > 0 {
		return nil, ErrTaskActive
	}
	counts := map[string]int64{}
	for _, t := range append(append([]string{}, taskTables...), "tasks", "secrets", "model_modes") {
		res, err := tx.ExecContext(ctx, `DELETE FROM `+t)
		if err != nil {
			return nil, fmt.Errorf("store: erase %s: %w", t, err)
		}
		n, _ := res.RowsAffected()
		counts[t] = n
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("store: erase: %w", err)
	}
	// The deleted pages go from the file too, not only from the index.
	if _, err := s.db.ExecContext(ctx, `VACUUM`); err != nil {
		return counts, fmt.Errorf("store: erase: vacuum: %w", err)
	}
	return counts, nil
}
