package cli_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
)

// TestMigrateAnEmptyDatabaseTwice: the schema appears and the second run
// finds nothing to do; a malformed application URL is refused unechoed.
func TestMigrateAnEmptyDatabaseTwice(t *testing.T) {
	d := testenv.EmptyDB(t)
	args := []string{"migrate", "--database-url=" + d.OwnerURL, "--database-app-url=" + d.AppURL, "--data-dir=" + t.TempDir()}
	for range 2 {
		r := run(t, "", args...)
		require.Equal(t, 0, r.code, r)
		require.Equal(t, "migrations up to date\n", r.stdout)
	}
	b := &bundle{d: d}
	require.Zero(t, b.count(t, `SELECT count(*) FROM tenants`))
	var n int
	require.NoError(t, d.Owner.QueryRow(t.Context(), `SELECT count(*) FROM schema_migrations`).Scan(&n))
	require.Positive(t, n)

	r := run(t, "", "migrate", "--database-url="+d.OwnerURL, "--database-app-url=postgres://%zz", "--data-dir="+t.TempDir())
	require.Equal(t, 2, r.code, r)
	require.Contains(t, r.stderr, "malformed database URL")
	require.NotContains(t, r.stderr, "%zz", "the URL is not echoed")
}
