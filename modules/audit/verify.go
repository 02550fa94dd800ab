package audit

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/db"
)

// Report is the outcome of Verify.
type Report struct {
	Chains   int
	Entries  int
	Unsealed int
	Anchors  int
	// Checkpoints is how many chains stand on a checkpoint (their older
	// entries were dropped by retention).
	Checkpoints int
	// Problems are the findings; none means the log is intact.
	Problems []string
	// Restores is how many times the database was restored from a backup
	// (the restores table); Lost says, per chain, which anchored entries
	// a restore lost: anchored after its backup began and before it was
	// restored, missing from (or replaced in) the database. They are no
	// tampering: the anchors prove they existed.
	Restores int
	Lost     []string
}

// restoreWindow is the time a restore lost: from its backup's start to the
// restore.
type restoreWindow struct {
	id             int64
	from, restored time.Time
	// recovered: a point-in-time recovery, to from (else a backup taken then).
	recovered bool
}

// lostGap gathers one chain's anchors that a restore lost.
type lostGap struct {
	w            restoreWindow
	first, last  int64
	firstAt, end time.Time
}

func (g *lostGap) add(a anchorLine) {
	if g.first == 0 || a.seq < g.first {
		g.first = a.seq
	}
	if a.seq > g.last {
		g.last = a.seq
	}
	if g.firstAt.IsZero() || a.at.Before(g.firstAt) {
		g.firstAt = a.at
	}
	if a.at.After(g.end) {
		g.end = a.at
	}
}

func (g *lostGap) String() string {
	how := "from a backup taken"
	if g.w.recovered {
		how = "to a point in time,"
	}
	return fmt.Sprintf("seqs %d to %d, anchored between %s and %s, are not in this database: it was restored (restore %d) %s %s, and everything after that is missing; the anchors prove those entries existed — lost with the restore, not tampered with",
		g.first, g.last, g.firstAt.UTC().Format(time.RFC3339), g.end.UTC().Format(time.RFC3339), g.w.id, how, g.w.from.UTC().Format(time.RFC3339))
}

// lostIn returns the restore window an anchor falls in, if any.
func lostIn(ws []restoreWindow, a anchorLine) (restoreWindow, bool) {
	for _, w := range ws {
		if !a.at.Before(w.from) && a.at.Before(w.restored) {
			return w, true
		}
	}
	return restoreWindow{}, false
}

func readRestores(ctx context.Context, pool *pgxpool.Pool) ([]restoreWindow, error) {
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('public.restores') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return nil, err
	}
	rows, err := pool.Query(ctx, `SELECT id, COALESCE(recovered_to, backup_started_at), recovered_to IS NOT NULL, restored_at
		FROM restores ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("audit: verify: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (restoreWindow, error) {
		var w restoreWindow
		return w, r.Scan(&w.id, &w.from, &w.recovered, &w.restored)
	})
}

// OK reports whether nothing was found wrong.
func (r Report) OK() bool { return len(r.Problems) == 0 }

// Verify recomputes every chain from its entries and checks it against the
// seals and the anchors in anchorPath. It finds an altered entry (its hash
// no longer matches its seal), a deleted one in the middle (a seal without
// its entry, or a gap in the seals), and one deleted at the tail (the chain
// ends before a sequence number that was anchored). Each chain is read in
// its own tenant's scope, so Verify needs no cross-tenant access.
func Verify(ctx context.Context, pool *pgxpool.Pool, anchorPath string) (Report, error) {
	var rep Report
	anchors, err := readAnchors(anchorPath)
	if err != nil {
		return rep, err
	}
	rep.Anchors = len(anchors)
	windows, err := readRestores(ctx, pool)
	if err != nil {
		return rep, err
	}
	rep.Restores = len(windows)
	byChain := map[string][]anchorLine{}
	for _, a := range anchors {
		byChain[a.chain] = append(byChain[a.chain], a)
	}
	ids, err := chains(ctx, pool)
	if err != nil {
		return rep, err
	}
	seen := map[string]bool{}
	for _, chain := range ids {
		seen[chain] = true
		err := db.InTenant(ctx, pool, chain, func(tx pgx.Tx) error {
			return verifyChain(ctx, tx, chain, byChain[chain], windows, &rep)
		})
		if err != nil {
			return rep, err
		}
		rep.Chains++
	}
	for chain, as := range byChain {
		if seen[chain] {
			continue
		}
		var gap *lostGap
		lostAll := true
		for _, a := range as {
			w, lost := lostIn(windows, a)
			if !lost {
				lostAll = false
				break
			}
			if gap == nil {
				gap = &lostGap{w: w}
			}
			gap.add(a)
		}
		if lostAll {
			rep.Lost = append(rep.Lost, "chain "+chain+" (made after the backup): "+gap.String())
			continue
		}
		rep.Problems = append(rep.Problems, fmt.Sprintf("chain %s: anchored at seq %d (anchor line %d) but gone from the database", chain, as[len(as)-1].seq, as[len(as)-1].line))
	}
	sort.Strings(rep.Lost)
	return rep, nil
}

type seal struct {
	seq     int64
	entryID int64
	hash    []byte
}

func verifyChain(ctx context.Context, tx pgx.Tx, chain string, anchors []anchorLine, windows []restoreWindow, rep *Report) error {
	name := chain
	if chain == System {
		name = "system"
	}
	problem := func(format string, a ...any) {
		rep.Problems = append(rep.Problems, "chain "+name+": "+fmt.Sprintf(format, a...))
	}
	rows, err := tx.Query(ctx, `SELECT seq, entry_id, hash FROM audit_seals WHERE chain = $1 ORDER BY seq`, chain)
	if err != nil {
		return fmt.Errorf("audit: verify: %w", err)
	}
	var seals []seal
	for rows.Next() {
		var s seal
		if err := rows.Scan(&s.seq, &s.entryID, &s.hash); err != nil {
			rows.Close()
			return fmt.Errorf("audit: verify: %w", err)
		}
		seals = append(seals, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("audit: verify: %w", err)
	}
	entries := map[int64]record{}
	rows, err = tx.Query(ctx, `SELECT `+recordColumns+` FROM audit_log WHERE tenant_id = $1`, chain)
	if err != nil {
		return fmt.Errorf("audit: verify: %w", err)
	}
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			rows.Close()
			return fmt.Errorf("audit: verify: %w", err)
		}
		entries[r.ID] = r
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("audit: verify: %w", err)
	}
	rep.Entries += len(entries)
	// Entries dropped behind a checkpoint are gone on purpose: the chain is
	// checked from the newest checkpoint's hash, which must match its seal
	// while that seal is kept and must be anchored.
	cp, err := latestCheckpoint(ctx, tx, chain)
	if err != nil {
		return err
	}
	var prev []byte
	hashAt := map[int64][]byte{}
	sealed := map[int64]bool{}
	want := int64(1)
	if cp.Seq > 0 {
		rep.Checkpoints++
		anchored := false
		for _, a := range anchors {
			anchored = anchored || a.seq == cp.Seq && bytes.Equal(a.hash, cp.Hash)
		}
		if !anchored {
			problem("checkpoint at seq %d is not anchored (its anchor write failed, or the anchor file lost it)", cp.Seq)
		}
		if len(seals) == 0 || seals[0].seq > cp.Seq {
			// Dropped up to the checkpoint: go on from it.
			prev, want = cp.Hash, cp.Seq+1
			hashAt[cp.Seq] = cp.Hash
		}
	}
	for _, s := range seals {
		if cp.Seq > 0 && s.seq == cp.Seq && !bytes.Equal(s.hash, cp.Hash) {
			problem("seal %d differs from its checkpoint: the chain was rewritten", s.seq)
		}
		if s.seq != want {
			problem("seals %d to %d are missing (entries deleted from the middle)", want, s.seq-1)
		}
		want = s.seq + 1
		sealed[s.entryID] = true
		hashAt[s.seq] = s.hash
		r, ok := entries[s.entryID]
		switch {
		case !ok:
			problem("entry %d (seq %d) was deleted", s.entryID, s.seq)
		case !bytes.Equal(chainHash(prev, r), s.hash):
			problem("entry %d (seq %d, %s by %s) was altered after it was sealed", s.entryID, s.seq, r.Action, r.Actor)
		}
		// Chain on from the stored hash, so one altered entry is reported
		// once rather than as every entry after it.
		prev = s.hash
	}
	last := want - 1
	var gap *lostGap
	for _, a := range anchors {
		h, ok := hashAt[a.seq]
		// An anchor of the history a restore lost: its entry is missing,
		// or the restored chain went on past the backup with another one.
		if w, lost := lostIn(windows, a); lost && (a.seq > last || (ok && !bytes.Equal(h, a.hash))) {
			if gap == nil {
				gap = &lostGap{w: w}
			}
			gap.add(a)
			continue
		}
		switch {
		case a.seq < cp.Seq && !ok:
			// Dropped behind the checkpoint.
		case a.seq > last:
			problem("ends at seq %d but seq %d was anchored (anchor line %d): entries deleted at the tail", last, a.seq, a.line)
		case !ok:
		case !bytes.Equal(h, a.hash):
			problem("seal %d differs from its anchor (line %d): the chain was rewritten", a.seq, a.line)
		}
	}
	if gap != nil {
		rep.Lost = append(rep.Lost, "chain "+name+": "+gap.String())
	}
	for id := range entries {
		if !sealed[id] {
			rep.Unsealed++
		}
	}
	// The sealer works forward from its horizon: an entry of a transaction
	// below it that has no seal will never get one. It can only be there
	// because someone inserted it with a back-dated transaction id (or
	// sealed around it).
	rows, err = tx.Query(ctx, `SELECT l.id, l.action, l.actor FROM audit_log l JOIN audit_chains c ON c.chain = l.tenant_id
		WHERE l.tenant_id = $1 AND l.txid < c.horizon
			AND NOT EXISTS (SELECT 1 FROM audit_seals s WHERE s.chain = $1 AND s.entry_id = l.id)
		ORDER BY l.id`, chain)
	if err != nil {
		return fmt.Errorf("audit: verify: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var action, actor string
		if err := rows.Scan(&id, &action, &actor); err != nil {
			return fmt.Errorf("audit: verify: %w", err)
		}
		problem("entry %d (%s by %s) is older than the sealed head but in no chain: it was slipped in behind the sealer", id, action, actor)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("audit: verify: %w", err)
	}
	return nil
}
