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
			errs[i] = db.Migrate(ctx, pool, migrations.FS, embedded.AppRole, log)
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
	err := db.Migrate(ctx, d.Owner, files, embedded.AppRole, slog.New(slog.DiscardHandler))
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
