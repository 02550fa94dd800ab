package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/account"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// TestAdminCommandsOnTheDatabase runs each admin command in-process and
// checks the database, not only the output.
func TestAdminCommandsOnTheDatabase(t *testing.T) {
	b := setup(t)
	ctx := context.Background()

	// create-user: a generated password is shown once; one from stdin is
	// never echoed; a second account on the address is refused.
	r := b.run(t, "", "admin", "create-user", "--email=first@fleet.test", "--role=admin")
	require.Equal(t, 0, r.code, r)
	m := regexp.MustCompile(`one-time password: (\S+)`).FindStringSubmatch(r.stdout)
	require.NotNil(t, m, r)
	testenv.Secret(t, m[1])
	u, err := account.UserByEmail(ctx, b.d.App, "first@fleet.test")
	require.NoError(t, err)
	require.EqualValues(t, "admin", u.Role)
	// Both passwords are someone else's choice: one-time, to be replaced at
	// the first sign-in (TestOneTimePasswordMustBeChangedAtFirstSignIn).
	mustChange := func(email string) int {
		return b.count(t, `SELECT count(*) FROM users WHERE email = '`+email+`' AND must_change_password`)
	}
	require.Equal(t, 1, mustChange("first@fleet.test"), "a generated password must be changed at first sign-in")
	const typed = "Typed-In-Password-4471"
	testenv.Secret(t, typed)
	r = b.run(t, typed+"\n", "admin", "create-user", "--email=second@fleet.test", "--password-stdin")
	require.Equal(t, 0, r.code, r)
	require.NotContains(t, r.stdout+r.stderr, typed)
	require.NotContains(t, r.stdout, "one-time password")
	require.Contains(t, r.stdout, "created operator second@fleet.test")
	require.Equal(t, 1, mustChange("second@fleet.test"), "a typed initial password is one-time too")
	r = b.run(t, "", "admin", "create-user", "--email=first@fleet.test")
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "already exists")

	// reset-mfa and disable-user name the person; an unknown one is 1.
	r = b.run(t, "", "admin", "reset-mfa", "--email=nobody@fleet.test")
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "fleetwright admin reset-mfa: no user with email nobody@fleet.test")
	r = b.run(t, "", "admin", "reset-mfa", "--email=first@fleet.test")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "two-factor authentication of first@fleet.test was reset")
	r = b.run(t, "", "admin", "disable-user", "--email=second@fleet.test")
	require.Equal(t, 0, r.code, r)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM users WHERE email = 'second@fleet.test' AND disabled_at IS NOT NULL`))

	// pause and resume, of the fleet and of a tenant; an unknown tenant
	// changes nothing.
	r = b.run(t, "", "admin", "pause")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "paused: the whole fleet")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM fleet_switches WHERE paused`))
	r = b.run(t, "", "admin", "resume")
	require.Equal(t, 0, r.code, r)
	require.Zero(t, b.count(t, `SELECT count(*) FROM fleet_switches WHERE paused`))
	r = b.run(t, "", "admin", "pause", "--tenant=acme")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "paused: tenant acme")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM tenants WHERE id = $1 AND paused`, b.acme.ID))
	r = b.run(t, "", "admin", "resume", "--tenant=nobody")
	require.Equal(t, 1, r.code, r)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM tenants WHERE id = $1 AND paused`, b.acme.ID))

	// dispatch-mode, with the value before.
	r = b.run(t, "", "admin", "dispatch-mode", "--tenant=acme", "--mode=race")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "tenant acme dispatches in race mode (was assign)")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM tenants WHERE id = $1 AND dispatch_mode = 'race'`, b.acme.ID))

	// issue-agent-token: a new token, printed once; the old one is gone.
	v, err := vault.New(make([]byte, vault.KeySize))
	require.NoError(t, err)
	st := fleet.NewStore(b.d.App, v)
	acct, err := st.CreateAccount(ctx, b.acme.ID, fleet.AccountInput{Key: "acct", BoardURL: "http://127.0.0.1:9", Client: "acme", Username: "u",
		Password: "unused-pw-1", TOTPSecret: "JBSWY3DPEHPK3PXP", Workers: []wire.WorkerSpec{{Name: "w", Kind: "watcher"}}}, audit.Entry{Actor: "test"})
	require.NoError(t, err)
	_, old, err := st.CreateAgent(ctx, b.acme.ID, acct, "agent-1", audit.Entry{Actor: "test"})
	require.NoError(t, err)
	r = b.run(t, "", "admin", "issue-agent-token", "--tenant=acme", "--agent=agent-9")
	require.Equal(t, 1, r.code, r)
	r = b.run(t, "", "admin", "issue-agent-token", "--tenant=acme", "--agent=agent-1", "--new-installation")
	require.Equal(t, 0, r.code, r)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	token := lines[len(lines)-1]
	testenv.Secret(t, token)
	require.NotEqual(t, old, token)
	_, err = st.Authenticate(ctx, token)
	require.NoError(t, err, "the new token is the agent's")
	_, err = st.Authenticate(ctx, old)
	require.Error(t, err, "the old token stopped working")

	// Every change above is in the audit log as the CLI user.
	require.Positive(t, b.count(t, `SELECT count(*) FROM audit_log WHERE actor LIKE 'cli%' AND action = 'claim.dispatch_mode'`))
	require.Positive(t, b.count(t, `SELECT count(*) FROM audit_log WHERE actor LIKE 'cli%' AND action = 'claim.pause'`))
}

// TestAuditVerifyFindsAnEditBehindTheAppsBack seals and anchors the log,
// verifies it (0), edits a sealed entry as the superuser and expects 1.
func TestAuditVerifyFindsAnEditBehindTheAppsBack(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	require.Equal(t, 0, b.run(t, "", "admin", "pause", "--tenant=acme").code)
	heads, err := audit.Seal(ctx, b.d.App)
	require.NoError(t, err)
	require.NoError(t, audit.NewAnchor(audit.AnchorFile(b.dataDir), testenv.Logger(t)).Write(time.Now(), heads))
	r := b.run(t, "", "audit", "verify")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "audit verify: OK")

	c, err := pgx.Connect(ctx, b.d.SuperURL)
	require.NoError(t, err)
	defer c.Close(ctx)
	_, err = c.Exec(ctx, "SET session_replication_role = replica")
	require.NoError(t, err)
	_, err = c.Exec(ctx, `UPDATE audit_log SET detail = '{"paused": false}' WHERE action = 'claim.pause'`)
	require.NoError(t, err)
	r = b.run(t, "", "audit", "verify")
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stdout, "PROBLEM:")
	require.Contains(t, r.stderr, "fleetwright audit verify:")
	require.Contains(t, r.stderr, "tampered")
}

// TestAgentResetStateClearsTheStateFile: the agent's database (and its
// WAL) is gone afterwards; other files of the directory stay.
func TestAgentResetStateClearsTheStateFile(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"agent.db", "agent.db-wal", "keep.txt"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte("state"), 0o600))
	}
	r := run(t, "", "agent", "reset-state", "--state-dir="+dir)
	require.Equal(t, 0, r.code, r)
	require.Equal(t, "agent state cleared: "+dir+"\n", r.stdout)
	require.NoFileExists(t, filepath.Join(dir, "agent.db"))
	require.NoFileExists(t, filepath.Join(dir, "agent.db-wal"))
	require.FileExists(t, filepath.Join(dir, "keep.txt"))
}
