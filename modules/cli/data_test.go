package cli_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/account"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/limit"
	"github.com/fleetwright/fleetwright/modules/retention"
	"github.com/fleetwright/fleetwright/modules/tenant"
	"github.com/fleetwright/fleetwright/modules/wire"
)

func TestLimitShowAndSet(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	r := b.run(t, "", "limit", "show")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^LIMIT\s+GLOBAL$`, r.stdout)
	require.Regexp(t, `(?m)^run_time\s+none$`, r.stdout)

	r = b.run(t, "", "limit", "set", "run_time", "30m")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "global: run_time set to 30m")
	r = b.run(t, "", "limit", "set", "retries", "3", "--tenant=acme")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "tenant acme: retries set to 3")
	require.Regexp(t, `(?m)^retries\s+3\s+none\s+3 \(tenant\)$`, r.stdout)
	l, err := limit.Load(ctx, b.d.App, b.acme.ID)
	require.NoError(t, err)
	require.True(t, l.Get(limit.Retries).Set)
	require.EqualValues(t, 3, l.Get(limit.Retries).Value)
	require.Equal(t, "global", l.Get(limit.RunTime).From)

	r = b.run(t, "", "limit", "show", "--tenant=acme")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^LIMIT\s+TENANT\s+GLOBAL\s+APPLIES$`, r.stdout)
	require.Regexp(t, `(?m)^run_time\s+none\s+30m0s\s+30m0s \(global\)$`, r.stdout)

	r = b.run(t, "", "limit", "set", "run_time", "none")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "global: run_time removed")
	l, err = limit.Load(ctx, b.d.App, limit.Global)
	require.NoError(t, err)
	require.False(t, l.Get(limit.RunTime).Set)

	r = b.run(t, "", "limit", "set", "retries", "1", "--tenant=nobody")
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "fleetwright limit set: ")
	l, err = limit.Load(ctx, b.d.App, b.acme.ID)
	require.NoError(t, err)
	require.EqualValues(t, 3, l.Get(limit.Retries).Value, "a refused set changes nothing")
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM audit_log WHERE actor LIKE 'cli%' AND action = 'limit.set'`), "each set and the removal, audited")
}

func TestRetentionShowSetAndRun(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	r := b.run(t, "", "retention", "show")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^KIND\s+KEPT\s+FROM$`, r.stdout)
	require.Regexp(t, `(?m)^alarms\s+90 days\s+default$`, r.stdout)

	r = b.run(t, "", "retention", "set", "alarms", "30", "--tenant=acme")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^alarms\s+30 days\s+tenant$`, r.stdout)
	s, err := retention.Load(ctx, b.d.App, b.acme.ID)
	require.NoError(t, err)
	days, from := s.Days(retention.Alarms)
	require.Equal(t, 30, days)
	require.Equal(t, "tenant", from)
	r = b.run(t, "", "retention", "set", "crawl_items", "forever")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^crawl_items\s+forever\s+global$`, r.stdout)
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM audit_log WHERE actor LIKE 'cli%' AND action = 'retention.set'`))

	// run prunes what is past the tenant's 30 days, and only that.
	super, err := pgx.Connect(ctx, b.d.SuperURL)
	require.NoError(t, err)
	defer super.Close(ctx)
	alarm := func(key string, resolved time.Time) {
		_, err := super.Exec(ctx, `INSERT INTO alarms (tenant_id, kind, key, severity, summary, raised_at, last_seen_at, resolved_at)
			VALUES ($1, 'test.alarm', $2, 'info', 's', $3, $3, $3)`, b.acme.ID, key, resolved)
		require.NoError(t, err)
	}
	alarm("old", time.Now().Add(-40*24*time.Hour))
	alarm("new", time.Now().Add(-20*24*time.Hour))
	r = b.run(t, "", "retention", "run")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "acme: alarms: 1 pruned")
	require.Contains(t, r.stdout, "retention: ")
	require.Zero(t, b.count(t, `SELECT count(*) FROM alarms WHERE key = 'old'`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM alarms WHERE key = 'new'`))

	r = b.run(t, "", "retention", "set", "alarms", "default", "--tenant=acme")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^alarms\s+90 days\s+default$`, r.stdout)
}

// jsonLines decodes an export: one {"table":…,"row":{…}} a line.
func jsonLines(t *testing.T, s string) map[string][]map[string]any {
	t.Helper()
	out := map[string][]map[string]any{}
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l struct {
			Table string         `json:"table"`
			Row   map[string]any `json:"row"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l), sc.Text())
		out[l.Table] = append(out[l.Table], l.Row)
	}
	return out
}

// TestPrivacyExportAndErase: the export holds the tenant's rows and no
// secret; erase refuses without its confirmation and then really erases
// the tenant, leaving the other one alone; a person's erase anonymises.
func TestPrivacyExportAndErase(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	ops := audit.Entry{Actor: "test"}
	other, err := tenant.Create(ctx, b.d.App, "other", "Other", ops)
	require.NoError(t, err)
	v, err := vault.New(make([]byte, vault.KeySize))
	require.NoError(t, err)
	st := fleet.NewStore(b.d.App, v)
	const password = "Platform-Password-5521"
	testenv.Secret(t, password)
	for _, tn := range []tenant.Tenant{b.acme, other} {
		_, err := st.CreateAccount(ctx, tn.ID, fleet.AccountInput{Key: "acct-" + tn.Slug, BoardURL: "http://127.0.0.1:9", Client: tn.Slug,
			Username: "u-" + tn.Slug, Password: password, TOTPSecret: "JBSWY3DPEHPK3PXP", Workers: []wire.WorkerSpec{{Name: "w", Kind: "watcher"}}}, ops)
		require.NoError(t, err)
	}

	r := b.run(t, "", "privacy", "export", "--tenant=acme")
	require.Equal(t, 0, r.code, r)
	rows := jsonLines(t, r.stdout)
	require.Len(t, rows["tenants"], 1)
	require.Equal(t, "acme", rows["tenants"][0]["slug"])
	require.Len(t, rows["accounts"], 1)
	require.Equal(t, "u-acme", rows["accounts"][0]["username"])
	require.NotContains(t, r.stdout, "u-other")
	require.NotContains(t, r.stdout, password)

	out := filepath.Join(t.TempDir(), "acme.jsonl")
	r = b.run(t, "", "privacy", "export", "--tenant=acme", "--out="+out)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "accounts: 1 rows")
	require.Contains(t, r.stdout, "exported tenant acme")
	fi, err := os.Stat(out)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	r = b.run(t, "", "privacy", "export", "--tenant=acme", "--out="+out)
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "it must not exist yet")

	// Without its confirmation, or with the wrong one, nothing is erased.
	for _, confirm := range []string{"", "--confirm=other", "--confirm=ACME"} {
		args := []string{"privacy", "erase", "--tenant=acme"}
		if confirm != "" {
			args = append(args, confirm)
		}
		r = b.run(t, "", args...)
		require.Equal(t, 2, r.code, r)
		require.Contains(t, r.stderr, "nothing erased")
		require.Equal(t, 1, b.count(t, `SELECT count(*) FROM tenants WHERE id = $1`, b.acme.ID))
		require.Equal(t, 1, b.count(t, `SELECT count(*) FROM accounts WHERE tenant_id = $1`, b.acme.ID))
	}
	r = b.run(t, "", "privacy", "erase", "--tenant=acme", "--confirm=acme")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "accounts: 1 rows")
	require.Contains(t, r.stdout, "erased tenant acme")
	require.Zero(t, b.count(t, `SELECT count(*) FROM tenants WHERE id = $1`, b.acme.ID))
	require.Zero(t, b.count(t, `SELECT count(*) FROM accounts WHERE tenant_id = $1`, b.acme.ID))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM accounts WHERE tenant_id = $1`, other.ID), "the other tenant is untouched")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM audit_log WHERE action = 'tenant.erase' AND target = $1 AND actor LIKE 'cli%'`, b.acme.ID))
	r = b.run(t, "", "privacy", "export", "--tenant=acme")
	require.Equal(t, 1, r.code, "the tenant is gone: %s", r)

	// A person.
	_, err = account.CreateUser(ctx, b.d.App, account.NewUser{Email: "dana@fleet.test", Role: auth.Operator, Password: "correct horse battery"}, ops)
	require.NoError(t, err)
	r = b.run(t, "", "privacy", "export", "--email=dana@fleet.test")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "dana@fleet.test")
	require.NotContains(t, r.stdout, "argon2")
	r = b.run(t, "", "privacy", "erase", "--email=dana@fleet.test")
	require.Equal(t, 2, r.code, r)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM users WHERE email = 'dana@fleet.test' AND disabled_at IS NULL`))
	r = b.run(t, "", "privacy", "erase", "--email=dana@fleet.test", "--confirm=dana@fleet.test")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "erased dana@fleet.test")
	require.Zero(t, b.count(t, `SELECT count(*) FROM users WHERE email = 'dana@fleet.test'`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM users WHERE email LIKE '%@erased.invalid' AND disabled_at IS NOT NULL`))
}
