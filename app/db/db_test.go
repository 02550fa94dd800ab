package db_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/migrations"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestConcurrentMigrationsApplyOnce(t *testing.T) {
	ctx := context.Background()
	d := testenv.EmptyDB(t)
	log := slog.New(slog.DiscardHandler)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pool, err := db.Open(ctx, d.OwnerURL, 2)
			if err != nil {
				errs[i] = err
				return
			}
			defer pool.Close()
			errs[i] = db.Migrate(ctx, pool, migrations.FS, embedded.AppRole, "test", log)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	var n int
	require.NoError(t, d.Owner.QueryRow(ctx, "SELECT count(*) FROM installation").Scan(&n))
	require.Equal(t, 1, n, "the first migration ran exactly once")
	require.NoError(t, d.Owner.QueryRow(ctx, "SELECT count(*) FROM river_job").Scan(&n), "River's tables are installed in the same step")

	// The application role can use what the owner created, without owning it.
	_, err := d.App.Exec(ctx, "INSERT INTO panel_replicas VALUES (gen_random_uuid(), 'h', 'l', 'v', 1, now(), now())")
	require.NoError(t, err)
	_, err = d.App.Exec(ctx, "CREATE TABLE sneaky (x int)")
	require.Error(t, err, "the application role cannot create tables")
}

func TestFailedMigrationRollsBackAndNamesTheFile(t *testing.T) {
	ctx := context.Background()
	d := testenv.EmptyDB(t)
	files := fstest.MapFS{
		"0001_ok.sql":  {Data: []byte("CREATE TABLE a (x int);")},
		"0002_bad.sql": {Data: []byte("CREATE TABLE b (x int); SELECT nonsense_function();")},
	}
	err := db.Migrate(ctx, d.Owner, files, embedded.AppRole, "test", slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, "0002_bad.sql")
	var exists bool
	require.NoError(t, d.Owner.QueryRow(ctx, "SELECT to_regclass('b') IS NOT NULL").Scan(&exists))
	require.False(t, exists, "a failed migration leaves nothing behind")
	require.NoError(t, d.Owner.QueryRow(ctx, "SELECT to_regclass('a') IS NOT NULL").Scan(&exists))
	require.True(t, exists)
}

func TestCheckAppRoleRefusesOwnerAndSuperuser(t *testing.T) {
	ctx := context.Background()
	d := testenv.DB(t)
	require.NoError(t, db.CheckAppRole(ctx, d.App))
	require.ErrorContains(t, db.CheckAppRole(ctx, d.Owner), "owns")
	super, err := db.Open(ctx, d.SuperURL, 2)
	require.NoError(t, err)
	defer super.Close()
	require.ErrorContains(t, db.CheckAppRole(ctx, super), "superuser")
}

func TestMalformedURLDoesNotEchoThePassword(t *testing.T) {
	_, err := db.Open(context.Background(), "postgres://u:s3cretpw@%zz/db", 2)
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cretpw")
}

func TestSchemaOfANewerReleaseIsRefusedAndLeftAlone(t *testing.T) {
	ctx := context.Background()
	d := testenv.EmptyDB(t)
	log := slog.New(slog.DiscardHandler)
	older := fstest.MapFS{"0001_a.sql": {Data: []byte("CREATE TABLE a (x int);")}}
	newer := fstest.MapFS{
		"0001_a.sql": {Data: []byte("CREATE TABLE a (x int);")},
		"0002_b.sql": {Data: []byte("CREATE TABLE b (x int);")},
	}
	require.NoError(t, db.Migrate(ctx, d.Owner, newer, embedded.AppRole, "v2.0.0", log))
	var release string
	require.NoError(t, d.Owner.QueryRow(ctx, "SELECT release FROM schema_migrations WHERE version = '0002_b'").Scan(&release))
	require.Equal(t, "v2.0.0", release, "each migration names the release that applied it")

	// The older binary does not ship 0002_b: refused, with the version, the
	// release that wrote it and what to do.
	err := db.Migrate(ctx, d.Owner, older, embedded.AppRole, "v1.9.0", log)
	var unknown *db.UnknownMigrationError
	require.ErrorAs(t, err, &unknown)
	require.Len(t, unknown.Migrations, 1)
	require.Equal(t, "0002_b", unknown.Migrations[0].Version)
	for _, want := range []string{"0002_b", "release v2.0.0", "release v1.9.0", "restore the backup"} {
		require.ErrorContains(t, err, want)
	}

	// A version recorded before releases were (or by hand) is refused too,
	// and refused before any pending migration of this binary is applied.
	_, err = d.Owner.Exec(ctx, "INSERT INTO schema_migrations (version) VALUES ('9999_from_a_newer_release')")
	require.NoError(t, err)
	newest := fstest.MapFS{
		"0001_a.sql": newer["0001_a.sql"], "0002_b.sql": newer["0002_b.sql"],
		"0003_c.sql": {Data: []byte("CREATE TABLE c (x int);")},
	}
	err = db.Migrate(ctx, d.Owner, newest, embedded.AppRole, "v2.1.0", log)
	require.ErrorContains(t, err, "migration 9999_from_a_newer_release (applied by an unrecorded release")
	var exists bool
	require.NoError(t, d.Owner.QueryRow(ctx, "SELECT to_regclass('c') IS NOT NULL").Scan(&exists))
	require.False(t, exists, "nothing is applied to a schema this binary cannot read")
}
