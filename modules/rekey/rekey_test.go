package rekey_test

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/account"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/crawl"
	"github.com/fleetwright/fleetwright/modules/crawl/spec"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/notify"
	"github.com/fleetwright/fleetwright/modules/rekey"
	"github.com/fleetwright/fleetwright/modules/tenant"
	"github.com/fleetwright/fleetwright/modules/wire"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var by = audit.Entry{Actor: "test"}

// notSealed are the bytea columns that hold no sealed value, each with why.
var notSealed = map[string]string{
	"sessions.token_hash":    "SHA-256 of a session cookie",
	"agents.token_hash":      "SHA-256 of an agent token",
	"audit_seals.hash":       "the chain's hash",
	"river_job.unique_key":   "River's uniqueness key of a job",
	"audit_checkpoints.hash": "the chain's hash at a checkpoint",
	"crawl_items.hash":       "content hash of a crawled item",
}

// TestEverySealedColumnIsDeclared holds rekey.Columns against the schema:
// a bytea column, or one whose comment says it is sealed, that is neither
// declared nor listed above with its reason fails here — a rotation would
// leave its values under the old key, unreadable once it is retired.
func TestEverySealedColumnIsDeclared(t *testing.T) {
	d := testenv.DB(t)
	ctx := context.Background()
	declared := map[string]bool{}
	for _, c := range rekey.Columns() {
		declared[c.Table+"."+c.Column] = true
	}
	rows, err := d.Owner.Query(ctx, `
		SELECT c.table_name || '.' || c.column_name, c.data_type, coalesce(col_description(format('%I', c.table_name)::regclass, c.ordinal_position::int), '')
		FROM information_schema.columns c
		JOIN information_schema.tables t USING (table_schema, table_name)
		WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE'`)
	require.NoError(t, err)
	type col struct{ name, typ, comment string }
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (col, error) {
		var c col
		return c, r.Scan(&c.name, &c.typ, &c.comment)
	})
	require.NoError(t, err)
	require.NotEmpty(t, cols)
	exists := map[string]bool{}
	for _, c := range cols {
		exists[c.name] = true
		sealedByComment := strings.Contains(strings.ToLower(c.comment), "sealed")
		if (c.typ == "bytea" || sealedByComment) && !declared[c.name] {
			_, ok := notSealed[c.name]
			assert.True(t, ok && !sealedByComment, "%s (%s, %q) may hold sealed values the key rotation does not know: declare it in its module's SealedColumns and in rekey.Columns, or list it in notSealed with why", c.name, c.typ, c.comment)
		}
	}
	for name := range declared {
		require.True(t, exists[name], "declared sealed column %s is not in the schema", name)
	}
	for name := range notSealed {
		require.True(t, exists[name], "notSealed lists %s, which is not in the schema", name)
	}
}

// world is a database with one value of every kind the panel seals,
// written by the modules' own code with the vault of keyFile.
type world struct {
	d       *testenv.Database
	keyFile string
	tenant  string
	account string
	// passwords the modules sealed, to read back.
	accountPassword string
	count           int
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx := context.Background()
	d := testenv.DB(t)
	w := &world{d: d, keyFile: filepath.Join(t.TempDir(), "secret.key")}
	v, err := vault.LoadRing("", w.keyFile, true)
	require.NoError(t, err)
	acme, err := tenant.Create(ctx, d.App, "acme", "Acme", by)
	require.NoError(t, err)
	w.tenant = acme.ID

	w.accountPassword = "platform-pw-" + hex.EncodeToString(randBytes(4))
	testenv.Secret(t, w.accountPassword)
	st := fleet.NewStore(d.App, v)
	w.account, err = st.CreateAccount(ctx, acme.ID, fleet.AccountInput{Key: "acct-1", BoardURL: "http://127.0.0.1:9", Client: "acme",
		Username: "u1", Password: w.accountPassword, TOTPSecret: "JBSWY3DPEHPK3PXP", Workers: []wire.WorkerSpec{{Name: "w", Kind: "watcher"}}}, by)
	require.NoError(t, err)

	// An account sealed before values named their key (version 1).
	cur, _, err := vault.ReadRing(w.keyFile)
	require.NoError(t, err)
	var legacyID string
	require.NoError(t, db.InTenant(ctx, d.App, acme.ID, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, "SELECT gen_random_uuid()::text").Scan(&legacyID); err != nil {
			return err
		}
		box := legacySeal(t, cur, []byte(`{"p":"legacy-platform-pw-7731","t":""}`), "account:"+legacyID)
		_, err := tx.Exec(ctx, `INSERT INTO accounts (id, tenant_id, account_key, region, board_url, username, client, secret_box, workers)
			VALUES ($1, $2, 'acct-legacy', 'us-east', 'http://127.0.0.1:9', 'u0', 'acme', $3, '[]')`, legacyID, acme.ID, box)
		return err
	}))
	testenv.Secret(t, "legacy-platform-pw-7731")

	// An operator's TOTP seed, sealed the way the panel seals one left in clear.
	u, err := account.CreateUser(ctx, d.App, account.NewUser{Email: "op@fleet.test", Role: "admin", Password: "Operator-Pass-9931"}, by)
	require.NoError(t, err)
	testenv.Secret(t, "Operator-Pass-9931", "KRSXG5CTMVRXEZLU")
	_, err = d.App.Exec(ctx, `UPDATE users SET totp_secret = 'KRSXG5CTMVRXEZLU' WHERE id::text = $1`, u.ID)
	require.NoError(t, err)
	_, err = d.App.Exec(ctx, `INSERT INTO sessions (token_hash, user_id, enrol_secret, created_at, last_seen_at, expires_at)
		VALUES ($1, $2, 'GEZDGNBVGY3TQOJQ', now(), now(), now() + interval '1 hour')`, randBytes(32), u.ID)
	require.NoError(t, err)
	testenv.Secret(t, "GEZDGNBVGY3TQOJQ")
	n, err := account.SealStoredSeeds(ctx, d.App, v)
	require.NoError(t, err)
	require.Equal(t, 2, n)

	// A webhook channel's secret.
	nt := notify.New(d.App, v, notify.Config{})
	require.NoError(t, pgx.BeginFunc(ctx, d.App, func(tx pgx.Tx) error {
		secret, err := nt.Create(ctx, tx, notify.Channel{Name: "ops", Kind: "webhook", Target: "http://127.0.0.1:9/hook", MinSeverity: "warning", Enabled: true}, "test")
		testenv.Secret(t, secret)
		return err
	}))

	// The audit log's monthly address keys.
	require.NoError(t, audit.NewAddressKeys(d.App, v, clock.Real{}).Ensure(ctx))

	// A proxy's password and a captcha solver's API key.
	cs := crawl.NewStore(d.App, spec.Options{})
	cs.SetVault(v)
	_, err = cs.SetPool(ctx, acme.ID, by, crawl.PoolInput{Name: "p"})
	require.NoError(t, err)
	testenv.Secret(t, "proxy-password-5521", "solver-api-key-8812")
	_, err = cs.AddProxy(ctx, acme.ID, by, "p", crawl.ProxyInput{URL: "http://127.0.0.1:3128", Username: "pu", Password: "proxy-password-5521"})
	require.NoError(t, err)
	_, err = cs.AuthoriseCaptcha(ctx, acme.ID, by, crawl.CaptchaAuthInput{Solver: "acme-solver", Endpoint: "http://127.0.0.1:9/solve",
		Reference: "contract 12", APIKey: "solver-api-key-8812"}, []string{"acme-solver"})
	require.NoError(t, err)

	// A relayed fetch's proxy credentials.
	col := rekeyColumn(t, "crawl_relay.creds")
	require.NoError(t, db.InTenant(ctx, d.Owner, acme.ID, func(tx pgx.Tx) error {
		var id string
		if err := tx.QueryRow(ctx, `INSERT INTO crawl_relay (tenant_id, agent_id, from_replica, task) VALUES ($1, gen_random_uuid(), gen_random_uuid(), '{}') RETURNING id::text`, acme.ID).Scan(&id); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE crawl_relay SET creds = $2 WHERE id::text = $1`, id, v.Seal([]byte("relay-credentials-6610"), col.Contexts(id, "")[0]))
		return err
	}))

	// Every declared column holds a value: the rotation is tried on each.
	st2, err := rekey.Census(ctx, d.Owner, rekey.Columns())
	require.NoError(t, err)
	for name, byKey := range st2 {
		total := 0
		for _, k := range byKey {
			total += k
		}
		require.Positive(t, total, "the test seals nothing into %s", name)
		w.count += total
	}
	return w
}

func rekeyColumn(t *testing.T, name string) vault.Column {
	t.Helper()
	for _, c := range rekey.Columns() {
		if c.Table+"."+c.Column == name {
			return c
		}
	}
	t.Fatalf("no column %s", name)
	return vault.Column{}
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// legacySeal seals as the vault did before values named their key:
// version 1, nonce, ciphertext.
func legacySeal(t *testing.T, key, pt []byte, context string) []byte {
	t.Helper()
	block, err := aes.NewCipher(key)
	require.NoError(t, err)
	aead, err := cipher.NewGCM(block)
	require.NoError(t, err)
	nonce := randBytes(aead.NonceSize())
	return aead.Seal(append([]byte{1}, nonce...), nonce, pt, []byte(context))
}

// openAll opens every declared value with v and returns how many opened.
func openAll(t *testing.T, w *world, v *vault.Vault) int {
	t.Helper()
	ctx := context.Background()
	n := 0
	for _, col := range rekey.Columns() {
		scopes := []string{""}
		if col.Tenant {
			scopes = []string{w.tenant}
		}
		for _, s := range scopes {
			run := func(tx pgx.Tx) error {
				rows, err := tx.Query(ctx, col.Select)
				if err != nil {
					return err
				}
				defer rows.Close()
				for rows.Next() {
					var id, material string
					var raw []byte
					if err := rows.Scan(&id, &material, &raw); err != nil {
						return err
					}
					sealed := raw
					if col.TextPrefix != "" {
						sealed = decodeText(t, col, raw)
					}
					var opened bool
					for _, c := range col.Contexts(id, material) {
						if _, err := v.Open(sealed, c); err == nil {
							opened = true
							break
						}
					}
					require.True(t, opened, "%s.%s %s does not open", col.Table, col.Column, id)
					n++
				}
				return rows.Err()
			}
			if s == "" {
				require.NoError(t, pgx.BeginFunc(ctx, w.d.Owner, run))
			} else {
				require.NoError(t, db.InTenant(ctx, w.d.Owner, s, run))
			}
		}
	}
	return n
}

func decodeText(t *testing.T, col vault.Column, raw []byte) []byte {
	t.Helper()
	rest, ok := strings.CutPrefix(string(raw), col.TextPrefix)
	require.True(t, ok)
	b, err := base64.RawStdEncoding.DecodeString(rest)
	require.NoError(t, err)
	return b
}

// TestRotateReSealsEverythingAndRetiresTheOldKey rotates a database holding
// a value of every sealed kind (and one sealed before values named their
// key): afterwards the new key alone opens every value, through the
// modules' own readers too, and the old key is gone from the files.
func TestRotateReSealsEverythingAndRetiresTheOldKey(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	oldKey, _, err := vault.ReadRing(w.keyFile)
	require.NoError(t, err)
	oldID := vault.KeyID(oldKey)

	var out bytes.Buffer
	res, err := rekey.Rotate(ctx, w.d.App, w.d.Owner, rekey.Columns(), rekey.Options{KeyFile: w.keyFile, Batch: 3, Out: &out, By: by})
	require.NoError(t, err, out.String())
	require.Equal(t, oldID, res.From)
	require.NotEqual(t, res.From, res.To)
	total := 0
	for _, k := range res.Resealed {
		total += k
	}
	require.Equal(t, w.count, total, "every value re-sealed once: %v", res.Resealed)
	require.Contains(t, out.String(), "key "+oldID+" retired")

	newKey, next, err := vault.ReadRing(w.keyFile)
	require.NoError(t, err)
	require.Nil(t, next, "secret.key.next is gone once the rotation is done")
	require.Equal(t, res.To, vault.KeyID(newKey))
	st, err := rekey.Census(ctx, w.d.Owner, rekey.Columns())
	require.NoError(t, err)
	for name, byKey := range st {
		require.Len(t, byKey, 1, name)
		require.Contains(t, byKey, res.To, name)
	}

	only, err := vault.New(newKey)
	require.NoError(t, err)
	require.Equal(t, w.count, openAll(t, w, only))
	creds, err := fleet.NewStore(w.d.App, only).SealedCredentials(ctx, w.tenant)
	require.NoError(t, err)
	require.Equal(t, w.accountPassword, creds["acct-1"].Password)
	require.Equal(t, "legacy-platform-pw-7731", creds["acct-legacy"].Password, "a value sealed before key ids was re-sealed with its own context")
	require.NoError(t, audit.NewAddressKeys(w.d.App, only, clock.Real{}).Ensure(ctx), "the audit address keys open with the new key")
	old, err := vault.New(oldKey)
	require.NoError(t, err)
	_, err = fleet.NewStore(w.d.App, old).SealedCredentials(ctx, w.tenant)
	require.Error(t, err, "the old key opens nothing any more")

	var actions []string
	super, err := pgx.Connect(ctx, w.d.SuperURL)
	require.NoError(t, err)
	defer super.Close(ctx)
	rows, err := super.Query(ctx, `SELECT action FROM audit_log WHERE action LIKE 'vault.%' ORDER BY id`)
	require.NoError(t, err)
	actions, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"vault.rotate_key.start", "vault.rotate_key.done"}, actions)
}

// TestRotateRefusesWithoutTheOldKey: with the key file missing, or holding a
// key that did not seal the values, the rotation changes nothing and says
// what to do.
func TestRotateRefusesWithoutTheOldKey(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	before, err := rekey.Census(ctx, w.d.Owner, rekey.Columns())
	require.NoError(t, err)
	orig, err := os.ReadFile(w.keyFile)
	require.NoError(t, err)

	require.NoError(t, os.Remove(w.keyFile))
	_, err = rekey.Rotate(ctx, w.d.App, w.d.Owner, rekey.Columns(), rekey.Options{KeyFile: w.keyFile, By: by})
	require.ErrorContains(t, err, "restore it from your backup")
	_, err = os.Stat(vault.NextFile(w.keyFile))
	require.ErrorIs(t, err, os.ErrNotExist, "no new key is written without the old one")

	// Another key in its place (the panel made a fresh one, say).
	_, err = vault.Load("", w.keyFile, true)
	require.NoError(t, err)
	_, err = rekey.Rotate(ctx, w.d.App, w.d.Owner, rekey.Columns(), rekey.Options{KeyFile: w.keyFile, By: by})
	var mk *rekey.MissingKeyError
	require.ErrorAs(t, err, &mk)
	require.Contains(t, err.Error(), "accounts.secret_box: 2")
	require.Contains(t, err.Error(), "which is in neither file")
	require.Contains(t, err.Error(), "nothing was changed")
	_, err = os.Stat(vault.NextFile(w.keyFile))
	require.ErrorIs(t, err, os.ErrNotExist)
	after, err := rekey.Census(ctx, w.d.Owner, rekey.Columns())
	require.NoError(t, err)
	require.Equal(t, before, after)

	// With the right key back, it runs.
	require.NoError(t, os.WriteFile(w.keyFile, orig, 0o600))
	_, err = rekey.Rotate(ctx, w.d.App, w.d.Owner, rekey.Columns(), rekey.Options{KeyFile: w.keyFile, By: by})
	require.NoError(t, err)
}

// TestRotateWaitsForEveryReplica: a live replica that does not hold the new
// key stops the rotation before any value is sealed with it; once its
// heartbeat reports the key (read from the files, as a panel's does), the
// rotation resumes with the same new key.
func TestRotateWaitsForEveryReplica(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	replica, err := vault.LoadRing("", w.keyFile, false)
	require.NoError(t, err)
	beat := func() {
		_, err := w.d.App.Exec(ctx, `INSERT INTO panel_replicas (id, host, listen, version, pid, started_at, last_seen, key_ids)
			VALUES ('00000000-0000-4000-8000-000000000001', 'host-b', ':8080', 'v-test', 4242, now(), now(), $1)
			ON CONFLICT (id) DO UPDATE SET last_seen = now(), key_ids = $1`, replica.KeyIDs())
		require.NoError(t, err)
	}
	// A replica on another host, whose copy of the files has no next key.
	elsewhere := filepath.Join(t.TempDir(), "secret.key")
	orig, err := os.ReadFile(w.keyFile)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(elsewhere, orig, 0o600))
	replica, err = vault.LoadRing("", elsewhere, false)
	require.NoError(t, err)
	beat()

	before, err := rekey.Census(ctx, w.d.Owner, rekey.Columns())
	require.NoError(t, err)
	_, err = rekey.Rotate(ctx, w.d.App, w.d.Owner, rekey.Columns(), rekey.Options{KeyFile: w.keyFile, Wait: 1500 * time.Millisecond, By: by})
	require.ErrorContains(t, err, "host-b pid 4242")
	require.ErrorContains(t, err, "Nothing more was re-sealed")
	after, err := rekey.Census(ctx, w.d.Owner, rekey.Columns())
	require.NoError(t, err)
	require.Equal(t, before, after)
	_, next, err := vault.ReadRing(w.keyFile)
	require.NoError(t, err)
	require.NotNil(t, next)

	// The operator copies secret.key.next to the replica's host; its next
	// heartbeat reports it, without a restart.
	nb, err := os.ReadFile(vault.NextFile(w.keyFile))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(vault.NextFile(elsewhere), nb, 0o600))
	beat()
	require.True(t, slices.Contains(replica.KeyIDs(), vault.KeyID(next)))
	var out bytes.Buffer
	res, err := rekey.Rotate(ctx, w.d.App, w.d.Owner, rekey.Columns(), rekey.Options{KeyFile: w.keyFile, Wait: 5 * time.Second, Out: &out, By: by})
	require.NoError(t, err, out.String())
	require.Equal(t, vault.KeyID(next), res.To, "the resumed rotation keeps the key it wrote")
	require.Contains(t, out.String(), "resuming the rotation")
	require.Equal(t, w.count, openAll(t, w, replica), "the replica opens every re-sealed value")
}
