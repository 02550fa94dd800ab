// Package rekey rotates the panel's secret key: every value sealed with it
// (vault.Column, declared by the modules that seal) is re-sealed under a new
// key, and the old key is retired once nothing uses it.
//
// The rotation is a sequence of steps that each leave every value readable:
//
//  1. a census opens every value with the key ring; a value no key of the
//     ring opens stops the rotation before anything changes;
//  2. the new key is written to secret.key.next (kept if a rotation that
//     stopped wrote it already); from then on every replica that follows
//     the file opens with both keys and seals with the new one;
//  3. the rotation waits until every live replica reports the new key;
//  4. values are re-sealed in small transactions, each row changed only if
//     it still holds the value read (compare and swap), until a census finds
//     none under another key;
//  5. the new key replaces secret.key (an atomic rename) and
//     secret.key.next goes: the old key is retired.
//
// A crash at any point leaves every value sealed with a key still in the
// files; running the rotation again resumes it.
package rekey

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/account"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/crawl"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/fleet/gateway"
	"github.com/fleetwright/fleetwright/modules/notify"
)

// Columns is every column of values sealed with the panel's key.
func Columns() []vault.Column {
	return slices.Concat(fleet.SealedColumns(), account.SealedColumns(), notify.SealedColumns(),
		audit.SealedColumns(), crawl.SealedColumns(), gateway.SealedColumns())
}

// Options are a rotation's settings.
type Options struct {
	// KeyFile is the panel's secret key file (secret.key).
	KeyFile string
	// Batch is how many values one transaction re-seals (default 100).
	Batch int
	// Pace is a pause between transactions, to go easy on a busy database.
	Pace time.Duration
	// Wait bounds how long live replicas get to report the new key
	// (default 60s; they look at the key file at every replica heartbeat).
	Wait time.Duration
	// Out receives one line per step.
	Out io.Writer
	// By is who the audit log records.
	By audit.Entry
}

// Result is what a finished rotation did.
type Result struct {
	From, To string
	// Resealed counts the values re-sealed, by column.
	Resealed map[string]int
}

// value is one sealed value as read.
type value struct {
	col                 int // index in the columns
	scope, id, material string
	raw                 []byte
}

// Status counts a column's values by the key that sealed them ("legacy":
// sealed before values named their key).
type Status map[string]map[string]int

// problem is a value the ring does not open.
type problem struct {
	col, id, why string
}

// MissingKeyError is a rotation refused because values do not open with the
// key ring: rotating now would leave them unreadable for good.
type MissingKeyError struct {
	File     string
	Problems []string
}

func (e *MissingKeyError) Error() string {
	return fmt.Sprintf("rekey: %d sealed values do not open with the keys in %s (and %s): %s; nothing was changed. "+
		"Put the key they were sealed with in %s (from a backup, or the file the panel runs with: --secret-key-file, FLEET_SECRET_KEY), then run rotate-key again; "+
		"a value whose key is lost for good must be entered again in the console (or its row deleted) first",
		len(e.Problems), e.File, vault.NextFile(e.File), strings.Join(e.Problems, "; "), e.File)
}

// Rotate runs (or resumes) a rotation on the database of app (the
// application role, for the replicas and the audit log) and owner (the
// owner role, which may change every sealed column).
func Rotate(ctx context.Context, app, owner *pgxpool.Pool, cols []vault.Column, o Options) (Result, error) {
	if o.Batch <= 0 {
		o.Batch = 100
	}
	if o.Wait <= 0 {
		o.Wait = 60 * time.Second
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	cur, next, err := vault.ReadRing(o.KeyFile)
	if err != nil {
		return Result{}, fmt.Errorf("rekey: %w: rotate-key re-seals every value with the key it was sealed with, so it needs the panel's current key in %s (restore it from your backup, or pass the panel's --secret-key-file)", err, o.KeyFile)
	}
	ring, err := vault.LoadRing("", o.KeyFile, false)
	if err != nil {
		return Result{}, fmt.Errorf("rekey: %w", err)
	}
	res := Result{From: vault.KeyID(cur), Resealed: map[string]int{}}
	if next != nil {
		res.To = vault.KeyID(next)
		fmt.Fprintf(o.Out, "resuming the rotation from key %s to key %s (%s)\n", res.From, res.To, vault.NextFile(o.KeyFile))
	}

	// 1. Every value must open before anything changes.
	vals, err := readAll(ctx, owner, cols)
	if err != nil {
		return res, err
	}
	if probs := check(ring, cols, vals); len(probs) > 0 {
		return res, missing(o.KeyFile, probs)
	}

	// 2. The new key, unless a rotation that stopped wrote it.
	if next == nil {
		k, err := vault.WriteNext(o.KeyFile)
		if err != nil {
			return res, fmt.Errorf("rekey: %w", err)
		}
		res.To = vault.KeyID(k)
		fmt.Fprintf(o.Out, "new key %s written to %s; key %s stays until nothing uses it\n", res.To, vault.NextFile(o.KeyFile), res.From)
	}
	if got := ring.SealingKeyID(); got != res.To {
		return res, fmt.Errorf("rekey: the key ring seals with key %s, not the new key %s: is %s changing under the rotation?", got, res.To, vault.NextFile(o.KeyFile))
	}
	if err := audited(ctx, app, o.By, "vault.rotate_key.start", map[string]any{"from": res.From, "to": res.To}); err != nil {
		return res, err
	}

	// 3. Every live replica must open and seal with the new key before a
	// value is sealed with it.
	if err := waitReplicas(ctx, app, res.To, o); err != nil {
		return res, err
	}

	// 4. Re-seal until a census finds nothing under another key.
	for pass := 1; ; pass++ {
		if pass > 1 {
			if vals, err = readAll(ctx, owner, cols); err != nil {
				return res, err
			}
		}
		var todo []value
		for _, v := range vals {
			if !under(cols[v.col], v, res.To) {
				todo = append(todo, v)
			}
		}
		if len(todo) == 0 {
			break
		}
		if pass > 5 {
			return res, fmt.Errorf("rekey: after %d passes %d values are still sealed with another key: a process writes them with the old key (a replica started with FLEET_SECRET_KEY, or one that does not read %s); nothing is lost — fix that process and run rotate-key again", pass-1, len(todo), vault.NextFile(o.KeyFile))
		}
		if probs := check(ring, cols, vals); len(probs) > 0 {
			return res, missing(o.KeyFile, probs)
		}
		n, err := reseal(ctx, owner, ring, cols, todo, o, res.Resealed)
		if err != nil {
			return res, err
		}
		fmt.Fprintf(o.Out, "pass %d: %d values re-sealed with key %s\n", pass, n, res.To)
	}

	// 5. Nothing uses the old key: retire it.
	if err := vault.Promote(o.KeyFile); err != nil {
		return res, fmt.Errorf("rekey: %w (every value is sealed with key %s; run rotate-key again to finish)", err, res.To)
	}
	if err := audited(ctx, app, o.By, "vault.rotate_key.done", map[string]any{"from": res.From, "to": res.To, "resealed": res.Resealed}); err != nil {
		return res, err
	}
	if res.From != res.To {
		fmt.Fprintf(o.Out, "key %s retired: no value is sealed with it; %s holds key %s\n", res.From, o.KeyFile, res.To)
	} else {
		fmt.Fprintf(o.Out, "every value is sealed with key %s (%s)\n", res.To, o.KeyFile)
	}
	return res, nil
}

// Census counts every column's values by the key that sealed them.
func Census(ctx context.Context, owner *pgxpool.Pool, cols []vault.Column) (Status, error) {
	vals, err := readAll(ctx, owner, cols)
	if err != nil {
		return nil, err
	}
	out := Status{}
	for _, col := range cols {
		out[col.Table+"."+col.Column] = map[string]int{}
	}
	for _, v := range vals {
		col := cols[v.col]
		sealed, ok := decode(col, v.raw)
		if !ok {
			continue
		}
		id, legacy, err := vault.SealedKeyID(sealed)
		switch {
		case err != nil:
			id = "damaged"
		case legacy:
			id = "legacy"
		}
		out[col.Table+"."+col.Column][id]++
	}
	return out, nil
}

// missing lists the problems, a few per column.
func missing(file string, probs []problem) error {
	by := map[string][]problem{}
	for _, p := range probs {
		by[p.col] = append(by[p.col], p)
	}
	names := make([]string, 0, len(by))
	for c := range by {
		names = append(names, c)
	}
	sort.Strings(names)
	var out []string
	for _, c := range names {
		ps := by[c]
		var ids []string
		for i, p := range ps {
			if i == 3 {
				ids = append(ids, fmt.Sprintf("and %d more", len(ps)-3))
				break
			}
			ids = append(ids, p.id+" ("+p.why+")")
		}
		out = append(out, fmt.Sprintf("%s: %d (%s)", c, len(ps), strings.Join(ids, ", ")))
	}
	return &MissingKeyError{File: file, Problems: out}
}

// readAll reads every column's values, tenant by tenant where the table is
// under row-level security.
func readAll(ctx context.Context, owner *pgxpool.Pool, cols []vault.Column) ([]value, error) {
	var tenants []string
	rows, err := owner.Query(ctx, `SELECT id::text FROM tenants ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("rekey: tenants: %w", err)
	}
	if tenants, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return nil, fmt.Errorf("rekey: tenants: %w", err)
	}
	var out []value
	for i, col := range cols {
		scopes := []string{""}
		if col.Tenant {
			scopes = tenants
		}
		for _, scope := range scopes {
			err := inScope(ctx, owner, scope, func(tx pgx.Tx) error {
				rows, err := tx.Query(ctx, col.Select)
				if err != nil {
					return err
				}
				defer rows.Close()
				for rows.Next() {
					v := value{col: i, scope: scope}
					if err := rows.Scan(&v.id, &v.material, &v.raw); err != nil {
						return err
					}
					out = append(out, v)
				}
				return rows.Err()
			})
			if err != nil {
				return nil, fmt.Errorf("rekey: read %s.%s: %w", col.Table, col.Column, err)
			}
		}
	}
	return out, nil
}

func inScope(ctx context.Context, pool *pgxpool.Pool, tenant string, fn func(pgx.Tx) error) error {
	if tenant == "" {
		return pgx.BeginFunc(ctx, pool, fn)
	}
	return db.InTenant(ctx, pool, tenant, fn)
}

// decode returns the sealed bytes of a value as stored; ok is false for a
// text value that is not sealed (no prefix).
func decode(col vault.Column, raw []byte) ([]byte, bool) {
	if col.TextPrefix == "" {
		return raw, true
	}
	rest, ok := strings.CutPrefix(string(raw), col.TextPrefix)
	if !ok {
		return nil, false
	}
	b, err := base64.RawStdEncoding.DecodeString(rest)
	if err != nil {
		return []byte{0}, true // damaged: no key opens it
	}
	return b, true
}

func encode(col vault.Column, sealed []byte) any {
	if col.TextPrefix == "" {
		return sealed
	}
	return col.TextPrefix + base64.RawStdEncoding.EncodeToString(sealed)
}

func stored(col vault.Column, raw []byte) any {
	if col.TextPrefix == "" {
		return raw
	}
	return string(raw)
}

// under reports whether a value is sealed with key id (or is not sealed).
func under(col vault.Column, v value, id string) bool {
	sealed, ok := decode(col, v.raw)
	if !ok {
		return true
	}
	got, legacy, err := vault.SealedKeyID(sealed)
	return err == nil && !legacy && got == id
}

// open opens a value with the ring, trying its contexts; it returns the
// plaintext and the context that opened it.
func open(ring *vault.Vault, col vault.Column, v value) ([]byte, string, error) {
	sealed, _ := decode(col, v.raw)
	var last error
	for _, c := range col.Contexts(v.id, v.material) {
		pt, err := ring.Open(sealed, c)
		if err == nil {
			return pt, c, nil
		}
		last = err
	}
	return nil, "", last
}

// check opens every value and returns those that do not open.
func check(ring *vault.Vault, cols []vault.Column, vals []value) []problem {
	var out []problem
	ids := ring.KeyIDs()
	for _, v := range vals {
		col := cols[v.col]
		sealed, ok := decode(col, v.raw)
		if !ok {
			continue
		}
		if _, _, err := open(ring, col, v); err != nil {
			why := "does not open: wrong key or damaged"
			if id, legacy, e := vault.SealedKeyID(sealed); e == nil && !legacy && !slices.Contains(ids, id) {
				why = "sealed with key " + id + ", which is in neither file"
			}
			out = append(out, problem{col: col.Table + "." + col.Column, id: v.id, why: why})
		}
	}
	return out
}

// reseal re-seals the values of todo with the ring's sealing key, batch by
// batch, each row only if it still holds the value read.
func reseal(ctx context.Context, owner *pgxpool.Pool, ring *vault.Vault, cols []vault.Column, todo []value, o Options, counts map[string]int) (int, error) {
	n := 0
	for start := 0; start < len(todo); {
		// A batch stays in one scope (one tenant's transaction).
		end := start + 1
		for end < len(todo) && end-start < o.Batch && todo[end].scope == todo[start].scope {
			end++
		}
		batch := todo[start:end]
		done := map[string]int{}
		err := inScope(ctx, owner, batch[0].scope, func(tx pgx.Tx) error {
			clear(done)
			for _, v := range batch {
				col := cols[v.col]
				pt, c, err := open(ring, col, v)
				if err != nil {
					return fmt.Errorf("%s.%s %s: %w", col.Table, col.Column, v.id, err)
				}
				tag, err := tx.Exec(ctx, col.Update, v.id, stored(col, v.raw), encode(col, ring.Seal(pt, c)))
				if err != nil {
					return fmt.Errorf("%s.%s %s: %w", col.Table, col.Column, v.id, err)
				}
				// A row changed meanwhile was sealed by its writer; the
				// next census looks at it again.
				if tag.RowsAffected() == 1 {
					done[col.Table+"."+col.Column]++
				}
			}
			return nil
		})
		if err != nil {
			return n, fmt.Errorf("rekey: re-seal: %w (nothing of this batch changed; run rotate-key again to resume)", err)
		}
		for c, k := range done {
			counts[c] += k
			n += k
		}
		start = end
		if o.Pace > 0 && start < len(todo) {
			select {
			case <-ctx.Done():
				return n, ctx.Err()
			case <-time.After(o.Pace):
			}
		}
	}
	return n, nil
}

// waitReplicas waits until every live panel replica reports key id among
// the keys it holds (panel_replicas.key_ids, written at each heartbeat).
func waitReplicas(ctx context.Context, app *pgxpool.Pool, id string, o Options) error {
	deadline := time.Now().Add(o.Wait)
	said := false
	for {
		rows, err := app.Query(ctx, `SELECT host, pid, coalesce(key_ids, '{}') FROM panel_replicas
			WHERE last_seen > now() - interval '30 seconds' AND NOT ($1 = ANY (coalesce(key_ids, '{}'))) ORDER BY host, pid`, id)
		if err != nil {
			return fmt.Errorf("rekey: replicas: %w", err)
		}
		var behind []string
		for rows.Next() {
			var host string
			var pid int
			var ids []string
			if err := rows.Scan(&host, &pid, &ids); err != nil {
				rows.Close()
				return fmt.Errorf("rekey: replicas: %w", err)
			}
			has := "no keys reported (an older release, or a replica on FLEET_SECRET_KEY)"
			if len(ids) > 0 {
				has = "keys " + strings.Join(ids, ", ")
			}
			behind = append(behind, fmt.Sprintf("%s pid %d (%s)", host, pid, has))
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("rekey: replicas: %w", err)
		}
		if len(behind) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rekey: %d live panel replicas do not hold the new key %s yet: %s. Nothing more was re-sealed. Give each the file %s beside its own --secret-key-file (same directory, same name), mode 0600; they read it within a heartbeat, without a restart. Then run rotate-key again",
				len(behind), id, strings.Join(behind, "; "), vault.NextFile(o.KeyFile))
		}
		if !said {
			fmt.Fprintf(o.Out, "waiting for %d panel replicas to pick up key %s: %s\n", len(behind), id, strings.Join(behind, "; "))
			said = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// audited appends an entry for the rotation to the audit log.
func audited(ctx context.Context, app *pgxpool.Pool, by audit.Entry, action string, detail map[string]any) error {
	by.Action, by.Target, by.Detail = action, "secret key", detail
	if by.Actor == "" {
		by.Actor = "cli"
	}
	if err := audit.InSystem(ctx, app, func(tx pgx.Tx) error { return audit.Append(ctx, tx, by) }); err != nil {
		return fmt.Errorf("rekey: %w", err)
	}
	return nil
}
