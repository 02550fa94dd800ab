package privacy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/account"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/privacy"
	"github.com/fleetwright/fleetwright/modules/tenant"
	"github.com/fleetwright/fleetwright/modules/wire"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type line struct {
	Table string         `json:"table"`
	Row   map[string]any `json:"row"`
}

func lines(t *testing.T, b []byte) []line {
	var out []line
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l line
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l), sc.Text())
		out = append(out, l)
	}
	return out
}

// TestExportAndEraseATenant: the export holds the tenant's rows and none
// of another tenant's, and no secret; the erase removes every row of the
// tenant and the tenant, leaves the other tenant alone, keeps the sealed
// audit chain verifiable, and both are audited.
func TestExportAndEraseATenant(t *testing.T) {
	d := testenv.DB(t)
	ctx := context.Background()
	ops := audit.Entry{Actor: "ops@example.com"}
	acme, err := tenant.Create(ctx, d.App, "acme", "Acme", ops)
	require.NoError(t, err)
	other, err := tenant.Create(ctx, d.App, "other", "Other", ops)
	require.NoError(t, err)
	v := testenv.Vault(t)
	st := fleet.NewStore(d.App, v)
	const password = "Platform-Password-7781"
	testenv.Secret(t, password)
	for _, tn := range []tenant.Tenant{acme, other} {
		acct, err := st.CreateAccount(ctx, tn.ID, fleet.AccountInput{Key: "acct-" + tn.Slug, BoardURL: "http://127.0.0.1:9", Client: tn.Slug, Username: "u-" + tn.Slug,
			Password: password, TOTPSecret: "JBSWY3DPEHPK3PXP", Workers: []wire.WorkerSpec{{Name: "w", Kind: "watcher"}}}, ops)
		require.NoError(t, err)
		_, _, err = st.CreateAgent(ctx, tn.ID, acct, "agent-"+tn.Slug, ops)
		require.NoError(t, err)
	}

	var buf bytes.Buffer
	counts, err := privacy.ExportTenant(ctx, d.App, ops, acme.ID, &buf)
	require.NoError(t, err)
	require.Equal(t, 1, counts["accounts"])
	require.Equal(t, 1, counts["agents"])
	require.Positive(t, counts["audit_log"])
	out := buf.String()
	require.NotContains(t, out, "u-other", "another tenant's rows")
	require.NotContains(t, out, "secret_box")
	require.NotContains(t, out, "token_hash")
	require.NotContains(t, out, password)
	tables := map[string]int{}
	for _, l := range lines(t, buf.Bytes()) {
		tables[l.Table]++
		if l.Table == "accounts" {
			require.Equal(t, "u-acme", l.Row["username"])
		}
	}
	require.Equal(t, 1, tables["tenants"])

	// Seal and anchor, then erase.
	path := filepath.Join(t.TempDir(), "anchors.log")
	heads, err := audit.Seal(ctx, d.App)
	require.NoError(t, err)
	require.NoError(t, audit.NewAnchor(path, testenv.Logger(t)).Write(time.Now(), heads))
	counts, err = privacy.EraseTenant(ctx, d.Owner, ops, acme.ID)
	require.NoError(t, err)
	require.Equal(t, 1, counts["accounts"])
	require.Equal(t, 1, counts["agents"])

	super, err := pgx.Connect(ctx, d.SuperURL)
	require.NoError(t, err)
	defer super.Close(ctx)
	count := func(sql string, args ...any) int {
		var n int
		require.NoError(t, super.QueryRow(ctx, sql, args...).Scan(&n), sql)
		return n
	}
	require.Zero(t, count(`SELECT count(*) FROM tenants WHERE id = $1`, acme.ID))
	require.Zero(t, count(`SELECT count(*) FROM accounts WHERE tenant_id = $1`, acme.ID))
	require.Zero(t, count(`SELECT count(*) FROM agents WHERE tenant_id = $1`, acme.ID))
	require.Equal(t, 1, count(`SELECT count(*) FROM accounts WHERE tenant_id = $1`, other.ID), "the other tenant is untouched")
	require.Positive(t, count(`SELECT count(*) FROM audit_log WHERE tenant_id = $1`, acme.ID), "the sealed chain stays")
	require.Equal(t, 1, count(`SELECT count(*) FROM audit_log WHERE tenant_id = $1 AND action = 'tenant.erase'`, acme.ID))
	require.Equal(t, 1, count(`SELECT count(*) FROM audit_log WHERE tenant_id = $1 AND action = 'tenant.erase' AND target = $2`, audit.System, acme.ID))
	require.Equal(t, 1, count(`SELECT count(*) FROM audit_log WHERE tenant_id = $1 AND action = 'tenant.export'`, audit.System))
	_, err = audit.Seal(ctx, d.App)
	require.NoError(t, err)
	rep, err := audit.Verify(ctx, d.App, path)
	require.NoError(t, err)
	require.True(t, rep.OK(), rep.Problems)
}

func TestExportAndEraseAPerson(t *testing.T) {
	d := testenv.DB(t)
	ctx := context.Background()
	ops := audit.Entry{Actor: "ops@example.com"}
	acme, err := tenant.Create(ctx, d.App, "acme", "Acme", ops)
	require.NoError(t, err)
	const pw = "correct horse battery"
	u, err := account.CreateUser(ctx, d.App, account.NewUser{Email: "Dana@Example.com", Role: auth.Operator, Password: pw}, ops)
	require.NoError(t, err)
	require.NoError(t, account.SetGrants(ctx, d.App, u.ID, []string{acme.ID}, ops))

	var buf bytes.Buffer
	n, err := privacy.ExportUser(ctx, d.Owner, ops, "dana@example.com", &buf)
	require.NoError(t, err)
	require.Equal(t, 2, n, "the account and its grant")
	require.Contains(t, buf.String(), "Dana@Example.com")
	require.NotContains(t, buf.String(), "password_hash")
	require.NotContains(t, buf.String(), "argon2")

	require.NoError(t, privacy.EraseUser(ctx, d.Owner, ops, "dana@example.com"))
	super, err := pgx.Connect(ctx, d.SuperURL)
	require.NoError(t, err)
	defer super.Close(ctx)
	var email string
	var disabled bool
	var grants int
	require.NoError(t, super.QueryRow(ctx, `SELECT email, disabled_at IS NOT NULL FROM users WHERE id = $1`, u.ID).Scan(&email, &disabled))
	require.True(t, strings.HasSuffix(email, "@erased.invalid"), email)
	require.True(t, disabled)
	require.NoError(t, super.QueryRow(ctx, `SELECT count(*) FROM tenant_grants WHERE user_id = $1`, u.ID).Scan(&grants))
	require.Zero(t, grants)
	_, err = account.UserByEmail(ctx, d.App, "dana@example.com")
	require.Error(t, err, "no account answers to the address any more")
	require.ErrorContains(t, privacy.EraseUser(ctx, d.Owner, ops, "nobody@example.com"), `no user with email "nobody@example.com"`)
}
