package audit_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/migrations"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/factory"
)

// appendFrom appends one entry made from address ip in tenant's chain and
// returns its id.
func appendFrom(ctx context.Context, t *testing.T, d *testenv.Database, tenant, action, ip string) int64 {
	var id int64
	require.NoError(t, db.InTenant(ctx, d.App, tenant, func(tx pgx.Tx) error {
		if err := audit.Append(ctx, tx, audit.Entry{Actor: "op@example.com", Action: action, Target: "t", IP: ip}); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT max(id) FROM audit_log`).Scan(&id)
	}))
	return id
}

// chained reads an entry's chained address columns behind row-level security.
func chained(t *testing.T, super *pgx.Conn, id int64) (ip, mac string) {
	t.Helper()
	require.NoError(t, super.QueryRow(context.Background(), `SELECT ip, ip_mac FROM audit_log WHERE id = $1`, id).Scan(&ip, &mac))
	return ip, mac
}

// TestClientAddressIsKeyedInTheChainAndClearBesideIt: an entry made from an
// address holds only HMAC-SHA256(its month's key, address) in the chained
// row; the clear address is readable beside it in the tenant's scope only;
// the key is stored sealed; one address hashes alike within a month and
// differently in the next; nothing puts a clear address into the chained
// table, nor attaches one to an older entry.
func TestClientAddressIsKeyedInTheChainAndClearBesideIt(t *testing.T) {
	ctx := context.Background()
	d := testenv.DB(t)
	a, b := factory.Tenant(t, d, "aaa", "aaa"), factory.Tenant(t, d, "bbb", "bbb")
	v := testenv.Vault(t)
	fake := clock.NewFake(time.Date(2026, 3, 31, 23, 0, 0, 0, time.UTC))
	ctx = audit.WithAddressKeys(ctx, audit.NewAddressKeys(d.App, v, fake))
	super, err := pgx.Connect(ctx, d.SuperURL)
	require.NoError(t, err)
	defer super.Close(ctx)

	const addr = "203.0.113.7"
	e1 := appendFrom(ctx, t, d, a, "fleet.agent.pause", addr+":51234") // a port is dropped
	e2 := appendFrom(ctx, t, d, a, "claim.pause", addr)
	fake.Advance(2 * time.Hour) // 2026-04-01 01:00 UTC
	e3 := appendFrom(ctx, t, d, a, "claim.resume", addr)
	e4 := appendFrom(ctx, t, d, a, "claim.pause", "2001:db8::1")

	// The chained rows: no clear address, a keyed hash with its month.
	ip1, mac1 := chained(t, super, e1)
	ip2, mac2 := chained(t, super, e2)
	ip3, mac3 := chained(t, super, e3)
	_, mac4 := chained(t, super, e4)
	require.Empty(t, ip1+ip2+ip3)
	require.True(t, strings.HasPrefix(mac1, "2026-03:"), mac1)
	require.True(t, strings.HasPrefix(mac3, "2026-04:"), mac3)
	require.Equal(t, mac1, mac2, "one address, one month: one hash")
	require.NotEqual(t, mac1[8:], mac3[8:], "one address in two months hashes differently")
	require.NotEqual(t, mac3, mac4)
	var clearInChain int
	require.NoError(t, super.QueryRow(ctx, `SELECT count(*) FROM audit_log l
		WHERE l.ip <> '' OR l::text LIKE '%203.0.113.7%' OR l::text LIKE '%2001:db8%'`).Scan(&clearInChain))
	require.Zero(t, clearInChain, "no clear address anywhere in the chained table")

	// It is exactly HMAC-SHA256 under the month's key, which is stored
	// sealed with the panel's key and bound to its month.
	for month, mac := range map[string]string{"2026-03": mac1, "2026-04": mac3} {
		var sealed []byte
		require.NoError(t, super.QueryRow(ctx, `SELECT sealed FROM audit_address_keys WHERE month = $1`, month).Scan(&sealed))
		key, err := v.Open(sealed, "audit_address_key:"+month)
		require.NoError(t, err)
		require.Len(t, key, 32)
		require.NotContains(t, string(sealed), string(key))
		_, err = v.Open(sealed, "audit_address_key:2026-05")
		require.Error(t, err, "a key copied to another month does not open")
		h := hmac.New(sha256.New, key)
		h.Write([]byte(addr))
		require.Equal(t, month+":"+hex.EncodeToString(h.Sum(nil)), mac)
	}

	// The clear address, in the tenant's scope only.
	clear := func(tenant string) []string {
		var out []string
		require.NoError(t, db.InTenant(ctx, d.App, tenant, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `SELECT ip FROM audit_addresses ORDER BY entry_id`)
			if err != nil {
				return err
			}
			out, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		}))
		return out
	}
	require.Equal(t, []string{addr, addr, addr, "2001:db8::1"}, clear(a))
	require.Empty(t, clear(b))
	var sameTime bool
	require.NoError(t, super.QueryRow(ctx, `SELECT c.at = l.at FROM audit_addresses c JOIN audit_log l ON l.id = c.entry_id WHERE c.entry_id = $1`, e1).Scan(&sameTime))
	require.True(t, sameTime, "the clear row takes its entry's time")

	// Nothing writes a clear address into the chained table any more, nor
	// attaches one to an entry of another transaction, nor changes one.
	inA := func(sql string, args ...any) error {
		return db.InTenant(ctx, d.App, a, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, sql, args...)
			return err
		})
	}
	require.ErrorContains(t, inA(`INSERT INTO audit_log (actor, action, ip) VALUES ('mallory', 'x.y', '198.51.100.1')`), "audit_log_no_clear_ip")
	require.ErrorContains(t, inA(`INSERT INTO audit_log (actor, action, ip_mac) VALUES ('mallory', 'x.y', '198.51.100.1')`), "audit_log_ip_mac_form")
	require.ErrorContains(t, inA(`INSERT INTO audit_addresses (entry_id, ip) VALUES ($1, '198.51.100.1')`, e2), "is not one this transaction appended")
	require.ErrorContains(t, inA(`UPDATE audit_addresses SET ip = '198.51.100.1'`), "permission denied")

	// Keys and clear rows are outside the chain: it verifies, and still
	// does once both are gone.
	path := filepath.Join(t.TempDir(), "anchors.log")
	seal(t, d, audit.NewAnchor(path, testenv.Logger(t)))
	rep := verify(t, d, path)
	require.True(t, rep.OK(), rep.Problems)
	require.NoError(t, inA(`DELETE FROM audit_addresses`))
	months, err := audit.DeleteAddressKeysBefore(ctx, d.App, "2026-04")
	require.NoError(t, err)
	require.Equal(t, []string{"2026-03"}, months)
	rep = verify(t, d, path)
	require.True(t, rep.OK(), rep.Problems)
	require.Equal(t, 4, rep.Entries)

	// Another secret key cannot open the stored key: appending with an
	// address says what to do, and appends nothing.
	wrong := audit.NewAddressKeys(d.App, testenv.Vault(t), fake)
	ctx = audit.WithAddressKeys(ctx, wrong)
	err = db.InTenant(ctx, d.App, a, func(tx pgx.Tx) error {
		return audit.Append(ctx, tx, audit.Entry{Actor: "op", Action: "claim.pause", IP: addr})
	})
	require.ErrorContains(t, err, "start the panel with the secret key it was sealed with")
	require.ErrorContains(t, wrong.Ensure(ctx), "does not open with this secret key")
	rep = verify(t, d, path)
	require.Equal(t, 4, rep.Entries)
}

// TestAChainMixingClearAndKeyedAddressesVerifiesAcrossACheckpoint: entries
// written before migration 0120 (their address in clear in the chained
// row) are not rewritten by it and keep verifying; new entries carry keyed
// hashes; a checkpoint drops old entries (and the new ones' clear
// addresses with them) and `audit verify` passes across it.
func TestAChainMixingClearAndKeyedAddressesVerifiesAcrossACheckpoint(t *testing.T) {
	ctx := context.Background()
	d := testenv.EmptyDB(t)
	log := testenv.Logger(t)
	before := fstest.MapFS{}
	names, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	for _, n := range names {
		if n < "0120" {
			b, err := fs.ReadFile(migrations.FS, n)
			require.NoError(t, err)
			before[n] = &fstest.MapFile{Data: b}
		}
	}
	require.NoError(t, db.Migrate(ctx, d.Owner, before, embedded.AppRole, "test", log))
	a := factory.Tenant(t, d, "aaa", "aaa")
	// As the code before it did: the address in clear in the entry.
	for _, ip := range []string{"198.51.100.1", "198.51.100.2"} {
		require.NoError(t, db.InTenant(ctx, d.App, a, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO audit_log (actor, action, target, ip) VALUES ('op', 'old.thing', 't', $1)`, ip)
			return err
		}))
	}
	type rowState struct{ Ctid, Xmin, IP string }
	oldRows := func() []rowState {
		var out []rowState
		require.NoError(t, db.InTenant(ctx, d.Owner, a, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `SELECT ctid::text, xmin::text, ip FROM audit_log WHERE action = 'old.thing' ORDER BY id`)
			if err != nil {
				return err
			}
			out, err = pgx.CollectRows(rows, pgx.RowToStructByPos[rowState])
			return err
		}))
		return out
	}
	old := oldRows()
	require.Len(t, old, 2)
	require.NoError(t, db.Migrate(ctx, d.Owner, migrations.FS, embedded.AppRole, "test", log))
	require.Equal(t, old, oldRows(), "the migration rewrote no row (same place, same writer, same address)")
	path := filepath.Join(t.TempDir(), "anchors.log")
	anchor := audit.NewAnchor(path, log)
	seal(t, d, anchor)
	// An old entry hashes exactly as the sealer before 0120 hashed it
	// (nine length-prefixed fields, the clear address the last), so seals
	// written by it still match.
	var s1 []byte
	var r struct {
		ID                                         int64
		Tenant                                     string
		At                                         time.Time
		ActorID, Actor, Action, Target, Detail, IP string
	}
	require.NoError(t, db.InTenant(ctx, d.Owner, a, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT s.hash, l.id, l.tenant_id::text, l.at, COALESCE(l.actor_id::text, ''), l.actor, l.action, l.target, l.detail::text, l.ip
			FROM audit_seals s JOIN audit_log l ON l.id = s.entry_id WHERE s.chain = $1 AND s.seq = 1`, a).
			Scan(&s1, &r.ID, &r.Tenant, &r.At, &r.ActorID, &r.Actor, &r.Action, &r.Target, &r.Detail, &r.IP)
	}))
	require.Equal(t, "198.51.100.1", r.IP)
	h := sha256.New()
	for _, f := range []string{strconv.FormatInt(r.ID, 10), r.Tenant, strconv.FormatInt(r.At.UnixMicro(), 10), r.ActorID, r.Actor, r.Action, r.Target, r.Detail, r.IP} {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	require.Equal(t, h.Sum(nil), s1)
	rep := verify(t, d, path)
	require.True(t, rep.OK(), rep.Problems)

	ctx = audit.WithAddressKeys(ctx, audit.NewAddressKeys(d.App, testenv.Vault(t), nil))
	appendFrom(ctx, t, d, a, "new.thing", "198.51.100.1")
	seal(t, d, anchor)
	cut := dbNow(t, d)
	newer := appendFrom(ctx, t, d, a, "new.thing", "198.51.100.3")
	seal(t, d, anchor)
	rep = verify(t, d, path)
	require.True(t, rep.OK(), rep.Problems)
	require.Equal(t, 4, rep.Entries)

	// Drop the two old entries and the first new one behind a checkpoint:
	// its clear address goes with it, the newest keeps its own.
	p, err := audit.DropBefore(ctx, d.App, anchor, a, cut)
	require.NoError(t, err)
	require.EqualValues(t, 3, p.Entries)
	super, err := pgx.Connect(ctx, d.SuperURL)
	require.NoError(t, err)
	defer super.Close(ctx)
	var ids []int64
	rows, err := super.Query(ctx, `SELECT entry_id FROM audit_addresses ORDER BY entry_id`)
	require.NoError(t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{newer}, ids)
	appendFrom(ctx, t, d, a, "newest.thing", "198.51.100.4")
	seal(t, d, anchor)
	rep = verify(t, d, path)
	require.True(t, rep.OK(), rep.Problems)
	require.Equal(t, 1, rep.Checkpoints)
	require.Equal(t, 2, rep.Entries)
}

// TestShownAddress: pages show the clear address while kept, an old
// entry's own, else "expired" with the month and the start of the hash.
func TestShownAddress(t *testing.T) {
	mac := "2026-03:" + strings.Repeat("ab", 32)
	require.Equal(t, "203.0.113.7", audit.ShownAddress("203.0.113.7", "", mac))
	require.Equal(t, "198.51.100.1", audit.ShownAddress("", "198.51.100.1", ""))
	require.Equal(t, "expired (2026-03 abababababab…)", audit.ShownAddress("", "", mac))
	require.Empty(t, audit.ShownAddress("", "", ""))
	require.Equal(t, "203.0.113.7", audit.NormalizeAddress("203.0.113.7:443"))
	require.Equal(t, "2001:db8::1", audit.NormalizeAddress("[2001:db8::1]:443"))
	require.Equal(t, "192.0.2.1", audit.NormalizeAddress("::ffff:192.0.2.1"))
	require.Equal(t, "unix-socket", audit.NormalizeAddress(" unix-socket "))
}

// TestWithoutAddressKeysTheAddressStaysOutOfTheChain: a process holding no
// address keys for the database (no panel secret key) keeps the address
// beside the chain only, never in the chained row.
func TestWithoutAddressKeysTheAddressStaysOutOfTheChain(t *testing.T) {
	ctx := context.Background()
	d := testenv.DB(t)
	a := factory.Tenant(t, d, "aaa", "aaa")
	id := appendFrom(ctx, t, d, a, "claim.pause", "203.0.113.7")
	super, err := pgx.Connect(ctx, d.SuperURL)
	require.NoError(t, err)
	defer super.Close(ctx)
	ip, mac := chained(t, super, id)
	require.Empty(t, ip)
	require.Empty(t, mac)
	var clear string
	require.NoError(t, super.QueryRow(ctx, `SELECT ip FROM audit_addresses WHERE entry_id = $1`, id).Scan(&clear))
	require.Equal(t, "203.0.113.7", clear)
}
