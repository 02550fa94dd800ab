package cli_test

import (
	"context"
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

// migrate says so when the schema is current, and refuses (exit 1, nothing
// changed) a schema holding a migration this binary does not ship.
func TestMigrateRefusesASchemaOfANewerRelease(t *testing.T) {
	b := setup(t)
	r := b.run(t, "", "migrate")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "migrations up to date")

	_, err := b.d.Owner.Exec(context.Background(), "INSERT INTO schema_migrations (version) VALUES ('9999_from_a_newer_release')")
	require.NoError(t, err)
	r = b.run(t, "", "migrate")
	require.NotEqual(t, 0, r.code, r)
	require.NotContains(t, r.stdout, "up to date", r)
	require.Contains(t, r.stderr, "9999_from_a_newer_release", r)
	require.Contains(t, r.stderr, "this binary (release v-test) does not ship", r)
	require.Contains(t, r.stderr, "Run the release that applied it", r)
}
