package bench

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Statement is one normalised statement's part of the database's execution
// time over the saturated step (pg_stat_statements, top-level statements:
// a trigger's work is counted in the statement that fired it).
type Statement struct {
	// Query is the normalised text (parameters as $n, never values),
	// whitespace collapsed, cut at 160 characters.
	Query string `json:"query"`
	// CallsPerJob divides its calls by the step's finished jobs.
	CallsPerJob float64 `json:"calls_per_job"`
	MeanMS      float64 `json:"mean_ms"`
	// Share is its part of all statements' execution time in the step.
	Share float64 `json:"share"`
}

// statementTracker reads pg_stat_statements of a private cluster.
type statementTracker struct{ super *pgxpool.Pool }

// reset starts a new count (a no-op without a tracker).
func (t *statementTracker) reset(ctx context.Context) {
	if t == nil || t.super == nil {
		return
	}
	_, _ = t.super.Exec(ctx, `SELECT pg_stat_statements_reset()`)
	_, _ = t.super.Exec(ctx, `SELECT pg_stat_reset()`)
}

// Function is one PL/pgSQL function's (mostly the claim tables' triggers)
// part of the saturated step: its own time, without what it called.
type Function struct {
	Name        string  `json:"name"`
	CallsPerJob float64 `json:"calls_per_job"`
	// SelfMeanMS is its own time per call (track_functions = pl).
	SelfMeanMS float64 `json:"self_mean_ms"`
	// Share is its own time's part of all statements' execution time.
	Share float64 `json:"share"`
}

// functions returns the n functions with most own time since reset.
func (t *statementTracker) functions(ctx context.Context, n, jobs int) ([]Function, error) {
	if t == nil || t.super == nil || jobs <= 0 {
		return nil, nil
	}
	// Function statistics reach the shared view when a backend goes idle
	// (at most a second late); the step's wait for its last job gave them
	// that time.
	rows, err := t.super.Query(ctx, `
		SELECT f.funcname, f.calls, f.self_time / NULLIF(f.calls, 0),
		       f.self_time / NULLIF((SELECT sum(total_exec_time) FROM pg_stat_statements), 0)
		  FROM pg_stat_user_functions f
		 ORDER BY f.self_time DESC
		 LIMIT $1`, n)
	if err != nil {
		return nil, fmt.Errorf("bench: read pg_stat_user_functions: %w", err)
	}
	defer rows.Close()
	var out []Function
	for rows.Next() {
		var f Function
		var calls int64
		var mean, share *float64
		if err := rows.Scan(&f.Name, &calls, &mean, &share); err != nil {
			return nil, fmt.Errorf("bench: read pg_stat_user_functions: %w", err)
		}
		f.CallsPerJob = math.Round(float64(calls)/float64(jobs)*100) / 100
		if mean != nil {
			f.SelfMeanMS = math.Round(*mean*1000) / 1000
		}
		if share != nil {
			f.Share = math.Round(*share*1000) / 1000
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("bench: read pg_stat_user_functions: %w", err)
	}
	return out, nil
}

// top returns the n statements that took most execution time since reset.
func (t *statementTracker) top(ctx context.Context, n, jobs int) ([]Statement, error) {
	if t == nil || t.super == nil || jobs <= 0 {
		return nil, nil
	}
	rows, err := t.super.Query(ctx, `
		SELECT query, calls, mean_exec_time, total_exec_time / NULLIF(sum(total_exec_time) OVER (), 0)
		  FROM pg_stat_statements
		 ORDER BY total_exec_time DESC
		 LIMIT $1`, n)
	if err != nil {
		return nil, fmt.Errorf("bench: read pg_stat_statements: %w", err)
	}
	defer rows.Close()
	var out []Statement
	for rows.Next() {
		var q string
		var calls int64
		var mean float64
		var share *float64
		if err := rows.Scan(&q, &calls, &mean, &share); err != nil {
			return nil, fmt.Errorf("bench: read pg_stat_statements: %w", err)
		}
		q = strings.Join(strings.Fields(q), " ")
		if r := []rune(q); len(r) > 160 {
			q = string(r[:159]) + "…"
		}
		st := Statement{Query: q, CallsPerJob: math.Round(float64(calls)/float64(jobs)*100) / 100, MeanMS: math.Round(mean*1000) / 1000}
		if share != nil {
			st.Share = math.Round(*share*1000) / 1000
		}
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("bench: read pg_stat_statements: %w", err)
	}
	return out, nil
}
