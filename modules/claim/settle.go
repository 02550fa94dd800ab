package claim

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fleetwright/fleetwright/app/db"
)

// A claim statement whose connection is lost after it was sent may have
// committed or not: the panel cannot tell from the error (a primary killed
// between its commit and its answer, a failover, a cut network). Such a
// statement is never run again; it is settled by reading its row back, on a
// fresh connection (the pool's next one reaches the new primary), by the
// operation id the panel chose for it before sending. A row found is the
// statement's own commit, and it is acknowledged only after a synchronous
// commit of the reader's, which returns once everything before it in the
// WAL is on the synchronous standby too: a row seen on a primary that
// committed it locally and then lost its standby is not acknowledged before
// it is on two nodes. A row not found means not granted: the worker is
// told so and acts on nothing, which is always safe (a commit that lands
// later is a lease nobody uses; it expires, or the sweeper settles it).

// SettleFor bounds how long an unknown commit is read back for: a Patroni
// failover takes ttl plus a loop (seconds to half a minute).
var SettleFor = 45 * time.Second

// unknownCommit reports whether err leaves a statement's commit unknown: the
// request may have reached the server, and no answer from it says whether
// it committed. A server's error (a *pgconn.PgError) means the implicit
// transaction rolled back; an error before sending (SafeToRetry) means it
// never ran.
func unknownCommit(err error) bool {
	if err == nil || errors.Is(err, pgx.ErrNoRows) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return false
	}
	var r *Refusal
	if errors.As(err, &r) {
		return false
	}
	return !pgconn.SafeToRetry(err)
}

// newOperationID is a random (version 4) UUID: chosen by the panel before the
// statement is sent, so the statement's row can be found again.
func newOperationID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// readBack runs read (in the tenant's scope) until it answers, on fresh
// connections, for up to SettleFor; when found, it then waits for a
// synchronous commit of its own (see above) before reporting the row.
func (s *Store) readBack(ctx context.Context, tenant string, read func(ctx context.Context, tx pgx.Tx) (bool, error)) (bool, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), SettleFor)
	defer cancel()
	var last error
	for {
		var found bool
		err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
			var err error
			found, err = read(ctx, tx)
			return err
		})
		if err == nil && found {
			// The row is acknowledged once it is on the synchronous standby
			// too: a commit of the reader's own that writes WAL waits for
			// everything before it (a tenant that accepted single-node
			// durability while the hold is on commits locally, and so is
			// its row).
			if _, commit := s.durability(tenant); commit != "local" {
				err = db.WaitReplicated(ctx, s.pool)
			}
		}
		if err == nil {
			return found, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("claim: the commit's result is unknown and could not be read back within %s: %w", SettleFor, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// settleLease reads back a lease statement whose commit is unknown.
func (s *Store) settleLease(ctx context.Context, req LeaseRequest, op string) (Lease, bool, error) {
	l := Lease{Key: req.Key}
	found, err := s.readBack(ctx, req.Tenant, func(ctx context.Context, tx pgx.Tx) (bool, error) {
		var remainingMS int64
		err := tx.QueryRow(ctx, `SELECT token, operation_id::text, leased_at, lease_expires_at,
			(extract(epoch FROM lease_expires_at - clock_timestamp()) * 1000)::bigint, attempts,
			(SELECT booking_key::text FROM claim_jobs WHERE tenant_id = $1 AND job_key = $2), claim_keys_honoured($1)
			FROM claims WHERE tenant_id = $1 AND target_job_key = $2 AND operation_id = $3::uuid AND state = 'LEASED'
			  AND lease_expires_at > clock_timestamp()`, req.Tenant, req.Key, op).
			Scan(&l.Token, &l.OperationID, &l.LeasedAt, &l.ExpiresAt, &remainingMS, &l.Attempt, &l.BookingKey, &l.KeysHonoured)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		l.Remaining = time.Duration(remainingMS) * time.Millisecond
		return err == nil, err
	})
	return l, found, err
}

// settleGrants reads back grant statements (one transaction's) whose commit
// is unknown, by their operation ids; it returns the grants found by id.
func (s *Store) settleGrants(ctx context.Context, tenant string, ops []string) (map[string]Grant, error) {
	out := map[string]Grant{}
	_, err := s.readBack(ctx, tenant, func(ctx context.Context, tx pgx.Tx) (bool, error) {
		clear(out)
		rows, err := tx.Query(ctx, `SELECT target_job_key, token, operation_id::text, leased_at, lease_expires_at, act_deadline,
			(extract(epoch FROM lease_expires_at - leased_at) * 1000)::bigint,
			(SELECT booking_key::text FROM claim_jobs j WHERE j.tenant_id = $1 AND j.job_key = target_job_key), claim_keys_honoured($1)
			FROM claims WHERE tenant_id = $1 AND operation_id = ANY($2::uuid[]) AND state = 'ACTING'`, tenant, ops)
		if err != nil {
			return false, err
		}
		defer rows.Close()
		for rows.Next() {
			var g Grant
			var withinMS int64
			if err := rows.Scan(&g.Key, &g.Token, &g.OperationID, &g.GrantedAt, &g.SendBy, &g.ActDeadline, &withinMS,
				&g.BookingKey, &g.KeysHonoured); err != nil {
				return false, err
			}
			g.SendWithin = time.Duration(withinMS) * time.Millisecond
			g.Recorded = true
			out[g.OperationID] = g
		}
		return len(out) > 0, rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// settleActing reads back a LEASED → ACTING statement whose commit is
// unknown: the claim ACTING under the request's token and holder.
func (s *Store) settleActing(ctx context.Context, tenant, key string, token int64, h Holder) (ActGrant, bool, error) {
	var g ActGrant
	found, err := s.readBack(ctx, tenant, func(ctx context.Context, tx pgx.Tx) (bool, error) {
		err := tx.QueryRow(ctx, `SELECT operation_id::text, act_deadline FROM claims
			WHERE tenant_id = $1 AND target_job_key = $2 AND token = $3 AND holder_agent = $4 AND holder_worker = $5
			  AND state = 'ACTING'`, tenant, key, token, h.Agent, h.Worker).Scan(&g.OperationID, &g.Deadline)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		return err == nil, err
	})
	return g, found, err
}

// ErrCommitLost is a claim statement whose connection was lost before its
// answer, read back and not found: nothing was granted.
var ErrCommitLost = errors.New("claim: the connection was lost before the answer, and the statement's row is not in the database: not granted")
