package deploy

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/migrations"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/tenant"
)

// sandboxed runs a unit's own ExecStart= under the file-system view its
// sandboxing gives it, rebuilt with mounts in a private mount namespace:
// ProtectSystem=strict makes / read-only, ReadOnlyPaths= and ReadWritePaths=
// bind what the test provides at the unit's paths (binds maps a unit path
// to a real directory), PrivateTmp= gives an empty /tmp, WorkingDirectory=
// is the start directory, and the unit's binary path is the binary under
// test; %i is replaced by instance. systemd-analyze verify cannot catch a
// command that its own sandbox breaks; this can. It needs root, as systemd
// does to build the sandbox (unshare --mount): a user namespace would hide
// the embedded cluster's socket behind its unmapped owner.
func sandboxed(t *testing.T, name, instance string, binds map[string]string, env []string) (int, string) {
	t.Helper()
	u := parseUnit(t, name)
	svc := u["Service"]
	exe := strings.ReplaceAll(u.one(t, "Service", "ExecStart"), "%i", instance)
	bin := strings.Fields(exe)[0]
	require.Equal(t, "/usr/local/bin/fleetwright", bin, "the unit runs the installed binary")

	var sh []string
	add := func(format string, args ...any) { sh = append(sh, fmt.Sprintf(format, args...)) }
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	add("set -e")
	add("mount --make-rprivate /")
	// The unit's paths are mounted over fresh tmpfs parents, so nothing of
	// this host's /var/lib or /usr/local/bin shows through or is touched.
	parents := map[string]bool{filepath.Dir(bin): true}
	for p := range binds {
		parents[filepath.Dir(p)] = true
	}
	for p := range parents {
		add("mount -t tmpfs -o mode=0755 tmpfs %s", q(p))
	}
	add("touch %s && mount --bind %s %s", q(bin), q(testenv.Binary(t)), q(bin))
	fields := func(key string) []string {
		var out []string
		for _, v := range svc[key] {
			out = append(out, strings.Fields(v)...)
		}
		return out
	}
	for p, real := range binds {
		add("mkdir -p %s && mount --bind %s %s", q(p), q(real), q(p))
	}
	require.Equal(t, "strict", u.one(t, "Service", "ProtectSystem"), "%s: the sandbox rebuilt here is ProtectSystem=strict's", name)
	// ProtectSystem=strict: everything read-only but what is listed writable.
	add("mount -o remount,bind,ro /")
	for _, p := range append(append([]string{bin}, mapKeys(binds)...), mapKeys(parents)...) {
		add("mount -o remount,bind,ro %s", q(p))
	}
	for _, p := range append(fields("ReadWritePaths"), u.writable()...) {
		if _, ok := binds[p]; ok {
			add("mount -o remount,bind,rw %s", q(p))
		}
	}
	for _, p := range fields("ReadOnlyPaths") {
		require.Contains(t, binds, p, "%s: ReadOnlyPaths=%s needs a directory from the test", name, p)
		add("mount -o remount,bind,ro %s", q(p))
	}
	if len(svc["PrivateTmp"]) > 0 && u.one(t, "Service", "PrivateTmp") == "true" {
		add("mount -t tmpfs -o mode=1777 tmpfs /tmp")
	}
	if wd := svc["WorkingDirectory"]; len(wd) > 0 {
		add("cd %s", q(wd[len(wd)-1]))
	}
	add("exec %s", exe)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "sh", "-c", strings.Join(sh, "\n"))
	// The unit's EnvironmentFile= is the operator's; the test gives its own.
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}, env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return code, string(out)
}

func mapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestAuditVerifyUnitWorksAsShipped runs the audit-verify unit's command
// line with its data directory read-only, beside a running panel's embedded
// cluster (the panel holds the data directory's lock, as it does when the
// timer fires): it verifies the chain. With no panel running it says why it
// cannot, instead of failing on the lock file.
func TestAuditVerifyUnitWorksAsShipped(t *testing.T) {
	ctx := context.Background()
	dir, err := os.MkdirTemp(testenv.Dir(t), "uv-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	lock, err := embedded.LockDataDir(dir, "fleetwright --role=panel")
	require.NoError(t, err)
	pg, err := embedded.StartPostgres(ctx, embedded.PostgresConfig{Dir: filepath.Join(dir, "postgres"), NoSync: true})
	require.NoError(t, err)
	defer pg.Stop()
	owner, err := db.Open(ctx, pg.OwnerURL(), 2)
	require.NoError(t, err)
	require.NoError(t, db.Migrate(ctx, owner, migrations.FS, embedded.AppRole, "test", slog.New(slog.DiscardHandler)))
	owner.Close()
	app, err := db.Open(ctx, pg.AppURL(), 2)
	require.NoError(t, err)
	_, err = tenant.Create(ctx, app, "acme", "Acme", audit.Entry{Actor: "test"})
	app.Close()
	require.NoError(t, err)

	binds := map[string]string{"/var/lib/fleetwright": dir}
	code, out := sandboxed(t, "fleetwright-audit-verify.service", "", binds, nil)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "audit verify: OK")
	require.Contains(t, out, "2 chains, 2 entries", "the system's chain and acme's")
	require.NotContains(t, out, "read-only file system")

	// The lock file was only read: still the panel's.
	b, err := os.ReadFile(filepath.Join(dir, "fleetwright.lock"))
	require.NoError(t, err)
	require.Contains(t, string(b), "fleetwright --role=panel")

	// No panel: nothing could start the cluster read-only, and it says so.
	lock.Release()
	pg.Stop()
	code, out = sandboxed(t, "fleetwright-audit-verify.service", "", binds, nil)
	require.NotEqual(t, 0, code, out)
	require.Contains(t, out, "no panel is running on /var/lib/fleetwright and it is read-only here")
}

// TestFailureUnitWorksAsShipped runs the failure notice's command line
// under its own sandbox (read-only system, private /tmp, no writable path).
func TestFailureUnitWorksAsShipped(t *testing.T) {
	code, out := sandboxed(t, "fleetwright-failure@.service", "fleetwright-agent.service", nil, nil)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "unit fleetwright-agent.service on")
}
