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
