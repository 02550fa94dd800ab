package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/db"
)

// Checkpoint is a sealed point of a chain behind which whole entries may
// be dropped: the seal (Seq, Hash) as stored when it was written, anchored
// to the file outside the database before anything was dropped.
type Checkpoint struct {
	Chain       string
	Seq         int64
	Hash        []byte
	CoversUntil time.Time
	At          time.Time
}

// latestCheckpoint is the chain's newest checkpoint (Seq 0: none).
func latestCheckpoint(ctx context.Context, tx pgx.Tx, chain string) (Checkpoint, error) {
	c := Checkpoint{Chain: chain}
	err := tx.QueryRow(ctx, `SELECT seq, hash, covers_until, at FROM audit_checkpoints WHERE chain = $1 ORDER BY seq DESC LIMIT 1`, chain).
		Scan(&c.Seq, &c.Hash, &c.CoversUntil, &c.At)
	if errors.Is(err, pgx.ErrNoRows) {
		return Checkpoint{Chain: chain}, nil
	}
	if err != nil {
		return c, fmt.Errorf("audit: checkpoint: %w", err)
	}
	return c, nil
}

// Checkpoints lists a chain's checkpoints, oldest first.
func Checkpoints(ctx context.Context, pool *pgxpool.Pool, chain string) ([]Checkpoint, error) {
	var out []Checkpoint
	err := db.InTenant(ctx, pool, chain, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT chain::text, seq, hash, covers_until, at FROM audit_checkpoints WHERE chain = $1 ORDER BY seq`, chain)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowToStructByPos[Checkpoint])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("audit: checkpoints: %w", err)
	}
	return out, nil
}

// Pruned is what DropBefore did to one chain.
type Pruned struct {
	Chain string
	// Checkpoint is the new checkpoint (Seq 0: nothing was old enough).
	Checkpoint Checkpoint
	// Entries is how many entries were dropped.
	Entries int64
}

// ErrChainBroken means a chain did not verify up to the point a
// checkpoint was to be written: nothing is dropped over tampering.
var ErrChainBroken = errors.New("audit: the chain does not verify up to the checkpoint; nothing dropped")

// DropBefore drops the chain's sealed entries older than before, behind a
// checkpoint: it seals what has ended, verifies the chain from its last
// checkpoint up to the newest sealed entry older than before, writes a
// checkpoint there (the database checks it against the seal), appends it
// to the anchor file (synced) and only then drops the entries and seals up
// to it. Entries not yet sealed are never dropped. A failed anchor write
// (a full disk) leaves the checkpoint unanchored and drops nothing; Verify
// reports such a checkpoint until a later one is anchored.
func DropBefore(ctx context.Context, pool *pgxpool.Pool, anchor *Anchor, chain string, before time.Time) (Pruned, error) {
	p := Pruned{Chain: chain}
	if _, err := Seal(ctx, pool); err != nil {
		return p, err
	}
	err := db.InTenant(ctx, pool, chain, func(tx pgx.Tx) error {
		last, err := latestCheckpoint(ctx, tx, chain)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT s.seq, s.hash, `+recordColumns+` FROM audit_seals s JOIN audit_log l ON l.id = s.entry_id
			WHERE s.chain = $1 AND s.seq > $2 AND l.at < $3 ORDER BY s.seq`, chain, last.Seq, before)
		if err != nil {
			return fmt.Errorf("audit: checkpoint: %w", err)
		}
		defer rows.Close()
		prev, want := last.Hash, last.Seq+1
		var cp Checkpoint
		for rows.Next() {
			var seq int64
			var hash []byte
			var r record
			if err := rows.Scan(append([]any{&seq, &hash}, r.dest()...)...); err != nil {
				return fmt.Errorf("audit: checkpoint: %w", err)
			}
			if seq != want {
				// A younger entry sealed between older ones (or one gone,
				// which Verify reports): the checkpoint stays before it.
				break
			}
			if !bytes.Equal(chainHash(prev, r), hash) {
				return fmt.Errorf("%w (chain %s, entry %d at seq %d was altered)", ErrChainBroken, chain, r.ID, seq)
			}
			prev, want = hash, seq+1
			cp = Checkpoint{Chain: chain, Seq: seq, Hash: hash, CoversUntil: r.At}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("audit: checkpoint: %w", err)
		}
		rows.Close()
		if cp.Seq == 0 {
			return nil
		}
		if err := tx.QueryRow(ctx, `INSERT INTO audit_checkpoints (chain, seq, hash, covers_until) VALUES ($1, $2, $3, $4) RETURNING at`,
			chain, cp.Seq, cp.Hash, cp.CoversUntil).Scan(&cp.At); err != nil {
			return fmt.Errorf("audit: checkpoint: %w", err)
		}
		p.Checkpoint = cp
		return nil
	})
	if err != nil || p.Checkpoint.Seq == 0 {
		return p, err
	}
	if err := anchor.Write(p.Checkpoint.At, []Head{{Chain: chain, Seq: p.Checkpoint.Seq, Hash: p.Checkpoint.Hash}}); err != nil {
		return p, fmt.Errorf("audit: checkpoint at seq %d not anchored, nothing dropped: %w", p.Checkpoint.Seq, err)
	}
	err = db.InTenant(ctx, pool, chain, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT audit_prune($1, $2)`, chain, p.Checkpoint.Seq).Scan(&p.Entries)
	})
	if err != nil {
		return p, fmt.Errorf("audit: drop before checkpoint: %w", err)
	}
	return p, nil
}
