package audit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/db"
)

// record is an entry as stored, in the form that is hashed.
type record struct {
	ID      int64
	Tenant  string
	At      time.Time
	ActorID string
	Actor   string
	Action  string
	Target  string
	Detail  string
	// IP is the clear address of entries written before keyed hashes
	// (migration 0120); IPMac the keyed hash of newer ones.
	IP    string
	IPMac string
}

// recordColumns are audit_log's hashed columns, unqualified: no column of
// audit_seals shares a name with them, so they also read from a join.
const recordColumns = `id, tenant_id::text, at, COALESCE(actor_id::text, ''), actor, action, target, detail::text, ip, ip_mac`

// dest are the scan targets of recordColumns.
func (r *record) dest() []any {
	return []any{&r.ID, &r.Tenant, &r.At, &r.ActorID, &r.Actor, &r.Action, &r.Target, &r.Detail, &r.IP, &r.IPMac}
}

func scanRecord(row pgx.Row) (record, error) {
	var r record
	err := row.Scan(r.dest()...)
	return r, err
}

// canonical is the entry's hashed form: each field length-prefixed, so no
// two different entries share it. The clear address kept beside the chain
// (audit_addresses) is not part of it: retention deletes it freely. Time is at microseconds, as Postgres keeps it.
func (r record) canonical() []byte {
	var b bytes.Buffer
	field := func(s string) {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(s)))
		b.Write(n[:])
		b.WriteString(s)
	}
	field(strconv.FormatInt(r.ID, 10))
	field(r.Tenant)
	field(strconv.FormatInt(r.At.UnixMicro(), 10))
	field(r.ActorID)
	field(r.Actor)
	field(r.Action)
	field(r.Target)
	field(r.Detail)
	field(r.IP)
	// The keyed hash of the client's address, for entries written since
	// migration 0120. Entries before it have none and hash exactly as they
	// were sealed, so a chain mixing both verifies; the fields being
	// length-prefixed, no entry with it encodes like one without.
	if r.IPMac != "" {
		field(r.IPMac)
	}
	return b.Bytes()
}

func chainHash(prev []byte, r record) []byte {
	h := sha256.New()
	h.Write(prev)
	h.Write(r.canonical())
	return h.Sum(nil)
}

// Head is the last seal of a chain.
type Head struct {
	Chain string
	Seq   int64
	Hash  []byte
}

// chains lists every chain that may hold entries: the system's, every
// tenant's, and any recorded before.
func chains(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	rows, err := pool.Query(ctx, `SELECT $1::uuid::text UNION SELECT id::text FROM tenants UNION SELECT chain::text FROM audit_chains ORDER BY 1`, System)
	if err != nil {
		return nil, fmt.Errorf("audit: list chains: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("audit: list chains: %w", err)
	}
	return out, nil
}

// Seal extends every chain with the entries whose transactions have ended,
// in transaction order, and returns the heads that moved. Running it twice at
// once is safe: the chain's row lock serialises sealers, and a fork would
// violate the seals' primary key.
func Seal(ctx context.Context, pool *pgxpool.Pool) ([]Head, error) {
	ids, err := chains(ctx, pool)
	if err != nil {
		return nil, err
	}
	var moved []Head
	for _, chain := range ids {
		var head Head
		err := db.InTenant(ctx, pool, chain, func(tx pgx.Tx) error {
			var err error
			head, err = sealChain(ctx, tx, chain)
			return err
		})
		if err != nil {
			return moved, err
		}
		if head.Seq > 0 {
			moved = append(moved, head)
		}
	}
	return moved, nil
}

func sealChain(ctx context.Context, tx pgx.Tx, chain string) (Head, error) {
	// The horizon comes first, before this transaction has an id of its
	// own: every transaction below it has ended, so no entry below it can
	// still appear.
	var horizon pgtype.Text
	if err := tx.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text`).Scan(&horizon); err != nil {
		return Head{}, fmt.Errorf("audit: seal: horizon: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO audit_chains (chain) VALUES ($1) ON CONFLICT DO NOTHING`, chain); err != nil {
		return Head{}, fmt.Errorf("audit: seal: %w", err)
	}
	var from string
	if err := tx.QueryRow(ctx, `SELECT horizon::text FROM audit_chains WHERE chain = $1 FOR UPDATE`, chain).Scan(&from); err != nil {
		return Head{}, fmt.Errorf("audit: seal: %w", err)
	}
	head := Head{Chain: chain}
	err := tx.QueryRow(ctx, `SELECT seq, hash FROM audit_seals WHERE chain = $1 ORDER BY seq DESC LIMIT 1`, chain).Scan(&head.Seq, &head.Hash)
	if err == pgx.ErrNoRows {
		// Every seal may have been dropped behind a checkpoint: the chain
		// goes on from it.
		cp, cerr := latestCheckpoint(ctx, tx, chain)
		if cerr != nil {
			return Head{}, cerr
		}
		head.Seq, head.Hash, err = cp.Seq, cp.Hash, nil
	}
	if err != nil {
		return Head{}, fmt.Errorf("audit: seal: head: %w", err)
	}
	rows, err := tx.Query(ctx, `SELECT `+recordColumns+` FROM audit_log
		WHERE tenant_id = $1 AND txid >= $2::xid8 AND txid < $3::xid8 ORDER BY txid, id`, chain, from, horizon.String)
	if err != nil {
		return Head{}, fmt.Errorf("audit: seal: read: %w", err)
	}
	var seals [][]any
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			rows.Close()
			return Head{}, fmt.Errorf("audit: seal: read: %w", err)
		}
		head.Seq++
		head.Hash = chainHash(head.Hash, r)
		seals = append(seals, []any{chain, head.Seq, r.ID, head.Hash})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Head{}, fmt.Errorf("audit: seal: read: %w", err)
	}
	if len(seals) > 0 {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"audit_seals"}, []string{"chain", "seq", "entry_id", "hash"}, pgx.CopyFromRows(seals)); err != nil {
			return Head{}, fmt.Errorf("audit: seal: write: %w", err)
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE audit_chains SET horizon = $2::xid8 WHERE chain = $1 AND horizon < $2::xid8`, chain, horizon.String); err != nil {
		return Head{}, fmt.Errorf("audit: seal: %w", err)
	}
	if len(seals) == 0 {
		return Head{}, nil
	}
	return head, nil
}

// Anchor appends chain heads to a file outside the database. The file is
// opened append-only and synced after each write; the database roles cannot
// reach it, so rewriting history in the database no longer matches it.
type Anchor struct {
	path string
	log  *slog.Logger
	mu   sync.Mutex
}

// AnchorFile is the anchor file's path under a data directory.
func AnchorFile(dataDir string) string { return filepath.Join(dataDir, "audit", "anchors.log") }

// NewAnchor returns an anchor writing to path (created 0600 on first write).
func NewAnchor(path string, log *slog.Logger) *Anchor { return &Anchor{path: path, log: log} }

// Write appends one line per head: time, chain, seq, hash. It also logs them,
// so the process log (journald) holds a second copy.
func (a *Anchor) Write(at time.Time, heads []Head) error {
	if len(heads) == 0 {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(a.path), 0o700); err != nil {
		return fmt.Errorf("audit: anchor: %w", err)
	}
	f, err := os.OpenFile(a.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("audit: anchor: %w", err)
	}
	defer f.Close()
	var b strings.Builder
	for _, h := range heads {
		fmt.Fprintf(&b, "%s %s %d %s\n", at.UTC().Format(time.RFC3339Nano), h.Chain, h.Seq, hex.EncodeToString(h.Hash))
		a.log.Info("audit anchor", "chain", h.Chain, "seq", h.Seq, "hash", hex.EncodeToString(h.Hash))
	}
	if _, err := f.WriteString(b.String()); err != nil {
		return fmt.Errorf("audit: anchor: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("audit: anchor: %w", err)
	}
	return nil
}

// anchorLine is one parsed line of the anchor file.
type anchorLine struct {
	line  int
	at    time.Time
	chain string
	seq   int64
	hash  []byte
}

func readAnchors(path string) ([]anchorLine, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("audit: read anchors: %w", err)
	}
	var out []anchorLine
	for i, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if len(f) != 4 {
			return nil, fmt.Errorf("audit: %s line %d is damaged", path, i+1)
		}
		seq, err1 := strconv.ParseInt(f[2], 10, 64)
		h, err2 := hex.DecodeString(f[3])
		if err1 != nil || err2 != nil || len(h) != sha256.Size {
			return nil, fmt.Errorf("audit: %s line %d is damaged", path, i+1)
		}
		at, err := time.Parse(time.RFC3339Nano, f[0])
		if err != nil {
			return nil, fmt.Errorf("audit: %s line %d is damaged", path, i+1)
		}
		out = append(out, anchorLine{line: i + 1, at: at, chain: f[1], seq: seq, hash: h})
	}
	return out, nil
}
