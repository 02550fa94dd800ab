package db

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// InTenant runs fn in a transaction scoped to tenantID: row-level security
// shows and accepts only that tenant's rows. The setting is transaction-local
// (set_config's third argument), never session-wide, so a pooled connection
// cannot carry one tenant's scope into another's request.
func InTenant(ctx context.Context, pool *pgxpool.Pool, tenantID string, fn func(pgx.Tx) error) error {
	if tenantID == "" {
		return fmt.Errorf("db: no tenant given")
	}
	// A commit whose synchronous wait was cut short is not a success (see
	// syncrep.go).
	return trackedTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('app.tenant_id', $1, true)", tenantID); err != nil {
			return fmt.Errorf("db: set tenant: %w", err)
		}
		return fn(tx)
	})
}

// TenantRow runs one statement in tenant scope in a single round trip: the
// scope and the statement are pipelined as one implicit transaction (the
// extended protocol commits at the batch's Sync), so the transaction-local
// setting applies to the statement and dies with it. Hot paths use it.
func TenantRow(ctx context.Context, pool *pgxpool.Pool, tenantID, sql string, args ...any) pgx.Row {
	b := &pgx.Batch{}
	b.Queue("SELECT set_config('app.tenant_id', $1, true)", tenantID)
	b.Queue(sql, args...)
	return &batchRow{ctx: ctx, pool: pool, b: b}
}

type batchRow struct {
	ctx  context.Context
	pool *pgxpool.Pool
	b    *pgx.Batch
}

func (r *batchRow) Scan(dest ...any) error {
	br := SendBatch(r.ctx, r.pool, r.b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return fmt.Errorf("db: set tenant: %w", err)
	}
	err := br.QueryRow().Scan(dest...)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return err
}
