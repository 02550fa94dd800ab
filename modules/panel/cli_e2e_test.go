package panel_test

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/factory"
)

// TestAdminCommandsAndAuditVerifyAgainstTheEmbeddedDatabase runs the
// commands with and without a panel on the data dir, then tampers with the
// log as the cluster's superuser and expects audit verify to say so.
func TestAdminCommandsAndAuditVerifyAgainstTheEmbeddedDatabase(t *testing.T) {
	dir := dataDir(t)
	bin := testenv.Binary(t)
	run := func(args ...string) (int, string) {
		p := testenv.Start(t, bin, append(args, "--data-dir="+dir))
		code := p.Wait(90 * time.Second)
		return code, p.Output()
	}
	// No panel running: the command starts the cluster itself.
	code, out := run("admin", "create-user", "--email=first@fleet.test", "--role=admin")
	require.Equal(t, 0, code, out)
	m := regexp.MustCompile(`one-time password: (\S+)`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	require.Len(t, m[1], 20)
	code, out = run("admin", "create-user", "--email=first@fleet.test", "--role=admin")
	require.Equal(t, 1, code)
	require.Contains(t, out, "already exists")
	code, out = run("admin", "create-user", "--email=x@fleet.test", "--role=boss")
	require.Equal(t, 2, code)
	require.Contains(t, out, "must be one of admin, operator, viewer")

	// With a panel running on the same data dir, the commands attach to its cluster.
	p, _ := startPanel(t, dir, "--audit-seal-interval=1s")
	code, out = run("admin", "disable-user", "--email=first@fleet.test")
	require.Equal(t, 0, code, out)
	code, out = run("admin", "reset-mfa", "--email=nobody@fleet.test")
	require.Equal(t, 1, code)
	require.Contains(t, out, "no user with email nobody@fleet.test")
	p.WaitFor(`msg="audit anchor" component=audit chain=00000000-0000-0000-0000-000000000000 seq=2`, 30*time.Second)
	code, out = run("audit", "verify")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "audit verify: OK")

	// A superuser edits the creation entry behind the app's back.
	ctx := context.Background()
	pg, err := embedded.Attach(ctx, filepath.Join(dir, "postgres"))
	require.NoError(t, err)
	c, err := pgx.Connect(ctx, pg.SuperURL(embedded.Database))
	require.NoError(t, err)
	defer c.Close(ctx)
	_, err = c.Exec(ctx, "SET session_replication_role = replica")
	require.NoError(t, err)
	_, err = c.Exec(ctx, "UPDATE audit_log SET detail = '{\"role\": \"viewer\"}' WHERE action = 'user.created'")
	require.NoError(t, err)
	code, out = run("audit", "verify")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "was altered after it was sealed")
	require.True(t, strings.Contains(out, "tampered"), out)

	// admin pause|resume, with the panel running: the switches flip and the
	// console's audit log records the CLI user (the system chain for the
	// fleet, the tenant's chain for a tenant).
	code, out = run("admin", "pause")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "paused: the whole fleet")
	var paused bool
	require.NoError(t, c.QueryRow(ctx, "SELECT paused FROM fleet_switches").Scan(&paused))
	require.True(t, paused)
	code, out = run("admin", "resume")
	require.Equal(t, 0, code, out)
	tenantID := factory.TenantOn(t, c, "acme", "Acme")
	code, out = run("admin", "pause", "--tenant=acme")
	require.Equal(t, 0, code, out)
	require.NoError(t, c.QueryRow(ctx, "SELECT paused FROM tenants WHERE id = $1", tenantID).Scan(&paused))
	require.True(t, paused)
	code, out = run("admin", "pause", "--tenant=nobody")
	require.Equal(t, 1, code, out)
	rows, err := c.Query(ctx, `SELECT tenant_id::text || ' ' || action || ' ' || actor FROM audit_log
		WHERE action IN ('claim.pause', 'claim.resume') ORDER BY id`)
	require.NoError(t, err)
	entries, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, entries, 3, entries)
	for i, want := range []string{audit.System + " claim.pause cli", audit.System + " claim.resume cli", tenantID + " claim.pause cli"} {
		require.True(t, strings.HasPrefix(entries[i], want), entries[i])
	}

	// admin dispatch-mode: a new tenant dispatches in assign (migration
	// 0140); the command moves it to race and back, audited as the CLI user
	// with the value before; a mode the panel does not have is refused.
	code, out = run("admin", "dispatch-mode", "--tenant=acme", "--mode=race")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "tenant acme dispatches in race mode (was assign)")
	code, out = run("admin", "dispatch-mode", "--tenant=acme", "--mode=fastest")
	require.NotEqual(t, 0, code, out)
	var mode, before string
	require.NoError(t, c.QueryRow(ctx, "SELECT dispatch_mode FROM tenants WHERE id = $1", tenantID).Scan(&mode))
	require.Equal(t, "race", mode, "a refused mode changes nothing")
	require.NoError(t, c.QueryRow(ctx, `SELECT detail->>'before' FROM audit_log WHERE tenant_id = $1 AND action = 'claim.dispatch_mode'
		AND actor LIKE 'cli%' ORDER BY id DESC LIMIT 1`, tenantID).Scan(&before))
	require.Equal(t, "assign", before)
}
