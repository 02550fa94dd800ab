package cli_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/cli"
	"github.com/fleetwright/fleetwright/modules/tenant"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var roles = []string{"panel", "agent", "board", "demo", "assistant"}

func table() *cli.Table { return cli.New(cli.Build{Version: "v-test", Roles: roles}) }

// result is what one in-process run of a command left.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// run runs the command line args in-process with stdin.
func run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errb testenv.SyncBuffer
	code := table().Run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return result{code, out.String(), errb.String()}
}

// bundle is a test's database with one tenant, acme, and the database
// flags that point the commands at it.
type bundle struct {
	d       *testenv.Database
	dataDir string
	acme    tenant.Tenant
}

func setup(t *testing.T) *bundle {
	t.Helper()
	d := testenv.DB(t)
	acme, err := tenant.Create(context.Background(), d.App, "acme", "Acme", audit.Entry{Actor: "test"})
	require.NoError(t, err)
	return &bundle{d: d, dataDir: t.TempDir(), acme: acme}
}

// run runs a database command against the bundle's database.
func (b *bundle) run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return run(t, stdin, append(args, "--database-url="+b.d.OwnerURL, "--database-app-url="+b.d.AppURL, "--data-dir="+b.dataDir)...)
}

// count reads one number as the superuser, behind row-level security.
func (b *bundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, b.d.SuperURL)
	require.NoError(t, err)
	defer c.Close(ctx)
	var n int
	require.NoError(t, c.QueryRow(ctx, sql, args...).Scan(&n), sql)
	return n
}
