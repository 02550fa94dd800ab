package db

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A commit under synchronous replication waits until a standby has its WAL.
// Postgres lets that wait be cut short — by a cancel request
// (pg_cancel_backend, a statement_timeout on COMMIT, a pooler's query
// timeout) or a terminate (pg_terminate_backend, a shutdown) — and keeps
// the commit on the primary alone; a canceled wait even answers the client
// as if the commit had succeeded, with only a WARNING before the answer
// ("canceling wait for synchronous replication … The transaction has
// already committed locally, but might not have been replicated to the
// standby"). A claim acknowledged on that answer is lost if the primary
// dies before a standby has it, and the next sighting leases the load
// again.
//
// So every pool this package opens marks a connection on which such a
// warning arrives (the notice handler runs while the answer is read), and
// the writes that must not be acknowledged from one node — InTenant,
// SendBatch, WaitReplicated — report ErrSyncWaitCanceled instead of
// success: the claim statements then settle the commit by reading their row
// back under a synchronous commit of their own (modules/claim, settle.go).
// The warning is told by its unlocalised severity and its SQLSTATE — 01000,
// the unspecified warning the canceled wait raises, or 57P01, the
// terminate — never by its text, which lc_messages translates. Another
// warning of those codes (none of the panel's statements raises one) only
// turns a success into a read-back.

// ErrSyncWaitCanceled says a commit's wait for its synchronous standby was
// cut short: the commit may be on the primary alone, so its result must be
// settled as unknown, never acknowledged.
var ErrSyncWaitCanceled = errors.New("db: the commit's wait for the synchronous standby was canceled; it may be on the primary alone")

// warnedKey marks, in a connection's CustomData, a canceled synchronous wait.
const warnedKey = "fleet.sync_wait_canceled"

// noticeMu guards the CustomData maps, which the notice handler (the
// reading goroutine) and the pool's users touch.
var noticeMu sync.Mutex

// markCanceledSyncWait is the pools' notice handler.
func markCanceledSyncWait(c *pgconn.PgConn, n *pgconn.Notice) {
	if !canceledSyncWait(n) {
		return
	}
	noticeMu.Lock()
	c.CustomData()[warnedKey] = true
	noticeMu.Unlock()
}

// canceledSyncWait reports whether n is the warning of a synchronous
// replication wait cut short.
func canceledSyncWait(n *pgconn.Notice) bool {
	sev := n.SeverityUnlocalized
	if sev == "" {
		sev = n.Severity
	}
	return sev == "WARNING" && (n.Code == "01000" || n.Code == "57P01")
}

// takeCanceledSyncWait reports whether a synchronous wait was canceled on c
// since the last call, and clears the mark.
func takeCanceledSyncWait(c *pgconn.PgConn) bool {
	noticeMu.Lock()
	defer noticeMu.Unlock()
	d := c.CustomData()
	was, _ := d[warnedKey].(bool)
	delete(d, warnedKey)
	return was
}

// SendBatch sends b on a connection of its own, like pool.SendBatch, and
// its results' Close reports ErrSyncWaitCanceled when the batch's commit
// did not wait for its synchronous standby to the end.
func SendBatch(ctx context.Context, pool *pgxpool.Pool, b *pgx.Batch) pgx.BatchResults {
	c, err := pool.Acquire(ctx)
	if err != nil {
		// The pool answers with the same failure, sending nothing.
		dead, cancel := context.WithCancel(ctx)
		cancel()
		return pool.SendBatch(dead, b)
	}
	pc := c.Conn().PgConn()
	takeCanceledSyncWait(pc)
	return &trackedBatch{BatchResults: c.SendBatch(ctx, b), conn: c, pc: pc}
}

type trackedBatch struct {
	pgx.BatchResults
	conn   *pgxpool.Conn
	pc     *pgconn.PgConn
	closed bool
	err    error
}

func (t *trackedBatch) Close() error {
	if t.closed {
		return t.err
	}
	t.closed = true
	t.err = t.BatchResults.Close()
	if t.err == nil && takeCanceledSyncWait(t.pc) {
		t.err = ErrSyncWaitCanceled
	}
	t.conn.Release()
	return t.err
}

// WaitReplicated returns once every commit the primary made before it is on
// its synchronous standby (when the cluster has one; at once on a single
// node): its own transaction writes a WAL record, and a commit that wrote
// WAL waits for the standby's flush of everything before it. (A
// transaction that only takes an xid writes no WAL before its commit
// record and does not wait.) A wait cut short is ErrSyncWaitCanceled.
func WaitReplicated(ctx context.Context, pool *pgxpool.Pool) error {
	err := trackedTx(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT set_config('synchronous_commit', 'on', true), pg_logical_emit_message(true, 'fleetwright', 'replicated')`)
		return err
	})
	if err != nil {
		return fmt.Errorf("db: wait for the standby: %w", err)
	}
	return nil
}

// trackedTx runs fn in a transaction on a connection of its own and
// reports ErrSyncWaitCanceled when the commit's wait for its synchronous
// standby was cut short.
func trackedTx(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	pc := c.Conn().PgConn()
	takeCanceledSyncWait(pc)
	err = pgx.BeginFunc(ctx, c, fn)
	if err == nil && takeCanceledSyncWait(pc) {
		err = ErrSyncWaitCanceled
	}
	return err
}
