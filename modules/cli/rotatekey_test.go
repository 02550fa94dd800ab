package cli_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/crawl"
	"github.com/fleetwright/fleetwright/modules/crawl/spec"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// proxyColumn is the declaration of crawl_proxies.secret.
func proxyColumn(t *testing.T) vault.Column {
	t.Helper()
	for _, c := range crawl.SealedColumns() {
		if c.Table == "crawl_proxies" {
			return c
		}
	}
	t.Fatal("crawl_proxies.secret is not declared")
	return vault.Column{}
}

// openProxies opens every proxy password with v and returns how many opened.
func openProxies(t *testing.T, b *bundle, v *vault.Vault) int {
	t.Helper()
	ctx := context.Background()
	col := proxyColumn(t)
	n := 0
	require.NoError(t, db.InTenant(ctx, b.d.Owner, b.acme.ID, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, col.Select)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, material string
			var sealed []byte
			if err := rows.Scan(&id, &material, &sealed); err != nil {
				return err
			}
			pt, err := v.Open(sealed, col.Contexts(id, material)[0])
			if err != nil {
				return fmt.Errorf("proxy %s: %w", id, err)
			}
			if string(pt) != "proxy-password-"+id[:8] {
				return fmt.Errorf("proxy %s opened to another password", id)
			}
			n++
		}
		return rows.Err()
	}))
	return n
}

// TestRotateKeySurvivesAKill runs the real binary's rotate-key beside a
// running panel, kills it with SIGKILL part way through the re-sealing,
// starts another panel on the half-rotated database, and runs rotate-key
// again: at every point every value opens, and at the end only the new key
// is left and it opens everything.
func TestRotateKeySurvivesAKill(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	keyFile := filepath.Join(b.dataDir, "secret.key")
	v, err := vault.LoadRing("", keyFile, true)
	require.NoError(t, err)
	oldKey, _, err := vault.ReadRing(keyFile)
	require.NoError(t, err)
	oldID := vault.KeyID(oldKey)

	// A platform account, and enough proxies that re-sealing them in
	// paced batches takes seconds.
	st := fleet.NewStore(b.d.App, v)
	const accountPassword = "platform-password-90210"
	testenv.Secret(t, accountPassword)
	_, err = st.CreateAccount(ctx, b.acme.ID, fleet.AccountInput{Key: "acct", BoardURL: "http://127.0.0.1:9", Client: "acme", Username: "u",
		Password: accountPassword, TOTPSecret: "JBSWY3DPEHPK3PXP", Workers: []wire.WorkerSpec{{Name: "w", Kind: "watcher"}}}, audit.Entry{Actor: "test"})
	require.NoError(t, err)
	cs := crawl.NewStore(b.d.App, spec.Options{})
	cs.SetVault(v)
	_, err = cs.SetPool(ctx, b.acme.ID, audit.Entry{Actor: "test"}, crawl.PoolInput{Name: "big"})
	require.NoError(t, err)
	const proxies = 1500
	col := proxyColumn(t)
	require.NoError(t, db.InTenant(ctx, b.d.Owner, b.acme.ID, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `INSERT INTO crawl_proxies (tenant_id, pool_id, scheme, host, port)
			SELECT app_tenant(), p.id, 'http', '127.0.0.1', g FROM crawl_proxy_pools p, generate_series(1, $1) g RETURNING id::text`, proxies)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, id := range ids {
			if _, err := tx.Exec(ctx, `UPDATE crawl_proxies SET secret = $2 WHERE id::text = $1`, id,
				v.Seal([]byte("proxy-password-"+id[:8]), col.Contexts(id, "")[0])); err != nil {
				return err
			}
		}
		return nil
	}))
	require.Equal(t, proxies, openProxies(t, b, v))

	bin := testenv.Binary(t)
	dbFlags := []string{"--database-url=" + b.d.OwnerURL, "--database-app-url=" + b.d.AppURL, "--data-dir=" + b.dataDir}
	panelEnv := []string{"FLEET_DATABASE_URL=" + b.d.OwnerURL, "FLEET_DATABASE_APP_URL=" + b.d.AppURL, "FLEET_REDIS_URL=" + testenv.RedisURL(t)}
	startPanel := func(name string) *testenv.Proc {
		dir := filepath.Join(b.dataDir, name)
		require.NoError(t, os.MkdirAll(dir, 0o700))
		p := testenv.Start(t, bin, []string{"--role=panel", "--listen=127.0.0.1:0", "--data-dir=" + dir, "--secret-key-file=" + keyFile}, panelEnv...)
		p.WaitFor(`panel ready`, 2*time.Minute)
		return p
	}
	// A replica running from before the rotation: it must pick the new
	// key up without a restart (the rotation waits for it).
	startPanel("panel-a")

	newKeyID := func() string {
		k, err := os.ReadFile(vault.NextFile(keyFile))
		if err != nil {
			return ""
		}
		key, err := vault.ParseKey(string(k))
		require.NoError(t, err)
		return vault.KeyID(key)
	}
	underNew := func(id string) int {
		return b.count(t, `SELECT count(*) FROM crawl_proxies WHERE substring(secret from 2 for 8) = decode($1, 'hex')`, id)
	}

	rot := testenv.Start(t, bin, append([]string{"admin", "rotate-key", "--batch=10", "--pace=25ms", "--wait=1m"}, dbFlags...))
	var to string
	require.Eventually(t, func() bool {
		if to == "" {
			to = newKeyID()
		}
		return to != "" && underNew(to) >= 100
	}, 2*time.Minute, 10*time.Millisecond, "rotate-key re-seals")
	rot.Signal(syscall.SIGKILL)
	rot.Wait(10 * time.Second)
	half := underNew(to)
	require.Greater(t, half, 0)
	require.Less(t, half, proxies, "killed part way: %s", rot.Output())
	require.Contains(t, rot.Output(), "new key "+to+" written to")

	// Half rotated: the files hold both keys, and every value opens with
	// them, as a panel starting now loads them.
	mid, err := vault.LoadRing("", keyFile, false)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{to, oldID}, mid.KeyIDs())
	require.Equal(t, proxies, openProxies(t, b, mid))
	creds, err := fleet.NewStore(b.d.App, mid).SealedCredentials(ctx, b.acme.ID)
	require.NoError(t, err)
	require.Equal(t, accountPassword, creds["acct"].Password)
	// A panel started in between starts (it opens the audit log's sealed
	// address keys at start) and keeps running through the resumed rotation.
	startPanel("panel-b")

	r := testenv.Start(t, bin, append([]string{"admin", "rotate-key", "--wait=1m"}, dbFlags...))
	require.Equal(t, 0, r.Wait(3*time.Minute), r.Output())
	out := r.Output()
	require.Contains(t, out, "resuming the rotation from key "+oldID+" to key "+to)
	require.Contains(t, out, "key "+oldID+" retired")
	require.Equal(t, proxies, underNew(to))

	cur, next, err := vault.ReadRing(keyFile)
	require.NoError(t, err)
	require.Nil(t, next)
	require.Equal(t, to, vault.KeyID(cur))
	only, err := vault.New(cur)
	require.NoError(t, err)
	require.Equal(t, proxies, openProxies(t, b, only))
	creds, err = fleet.NewStore(b.d.App, only).SealedCredentials(ctx, b.acme.ID)
	require.NoError(t, err)
	require.Equal(t, accountPassword, creds["acct"].Password)

	// key-status: every column under the new key alone.
	s := b.run(t, "", "admin", "key-status")
	require.Equal(t, 0, s.code, s)
	require.Contains(t, s.stdout, "crawl_proxies.secret")
	require.Contains(t, s.stdout, to+": "+fmt.Sprint(proxies))
	require.NotContains(t, s.stdout, oldID+":")
	require.Zero(t, b.count(t, `SELECT count(*) FROM panel_replicas WHERE last_seen > now() - interval '30 seconds' AND NOT ($1 = ANY (key_ids))`, to),
		"both running panels report the new key")
}

// TestRotateKeyRefusesWithoutItsKey: rotate-key with the key file missing,
// or with the key given in the environment, is refused with what to do, and
// writes nothing.
func TestRotateKeyRefusesWithoutItsKey(t *testing.T) {
	b := setup(t)
	r := b.run(t, "", "admin", "rotate-key")
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "restore it from your backup")
	require.Contains(t, r.stderr, "nothing was changed")
	_, err := os.Stat(vault.NextFile(filepath.Join(b.dataDir, "secret.key")))
	require.ErrorIs(t, err, os.ErrNotExist)

	t.Setenv("FLEET_SECRET_KEY", hex.EncodeToString(make([]byte, vault.KeySize)))
	r = b.run(t, "", "admin", "rotate-key")
	require.Equal(t, 2, r.code, r)
	require.Contains(t, r.stderr, "FLEET_SECRET_KEY is set")
	require.True(t, strings.Contains(r.stderr, "--secret-key-file"), r)
}
