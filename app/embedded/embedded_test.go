package embedded

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// dataDir returns a directory the postgres system user can reach.
func dataDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "fleet-embedded-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(d, 0o755))
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func TestPostgresStartsReusesAndSurvivesAnOrphan(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(dataDir(t), "postgres")
	pg, err := StartPostgres(ctx, PostgresConfig{Dir: dir, NoSync: true})
	require.NoError(t, err)

	owner, err := pgx.Connect(ctx, pg.OwnerURL())
	require.NoError(t, err)
	_, err = owner.Exec(ctx, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('first run')")
	require.NoError(t, err)
	owner.Close(ctx)

	app, err := pgx.Connect(ctx, pg.AppURL())
	require.NoError(t, err)
	var super, bypass bool
	var maxConn int
	require.NoError(t, app.QueryRow(ctx, "SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user").Scan(&super, &bypass))
	require.NoError(t, app.QueryRow(ctx, "SELECT current_setting('max_connections')::int").Scan(&maxConn))
	app.Close(ctx)
	require.False(t, super)
	require.False(t, bypass)
	require.GreaterOrEqual(t, maxConn, 200)

	// Only a Unix socket: no TCP listener.
	var listen string
	c, err := pgx.Connect(ctx, pg.SuperURL("postgres"))
	require.NoError(t, err)
	require.NoError(t, c.QueryRow(ctx, "SHOW listen_addresses").Scan(&listen))
	c.Close(ctx)
	require.Equal(t, "", listen)

	// A killed panel leaves its postmaster behind: the next start must stop it
	// and come up on the same data.
	orphan := pg.Pid()
	pg2, err := StartPostgres(ctx, PostgresConfig{Dir: dir})
	require.NoError(t, err)
	defer pg2.Stop()
	require.NotEqual(t, orphan, pg2.Pid())
	require.Error(t, syscall.Kill(orphan, 0), "the orphaned postmaster is gone")
	c, err = pgx.Connect(ctx, pg2.OwnerURL())
	require.NoError(t, err)
	var v string
	require.NoError(t, c.QueryRow(ctx, "SELECT v FROM kept").Scan(&v))
	c.Close(ctx)
	require.Equal(t, "first run", v)

	pg2.Stop()
	require.Error(t, syscall.Kill(pg2.Pid(), 0), "postgres stopped")
	_, err = os.Stat(filepath.Join(dir, "data", "postmaster.pid"))
	require.True(t, errors.Is(err, os.ErrNotExist), "clean shutdown removes the pid file")
}

func TestStalePidFileOfAnotherProcessIsIgnored(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(dataDir(t), "postgres")
	pg, err := StartPostgres(ctx, PostgresConfig{Dir: dir, NoSync: true})
	require.NoError(t, err)
	pg.Stop()
	// A pid that now belongs to an unrelated process (ours).
	pidFile := filepath.Join(dir, "data", "postmaster.pid")
	require.NoError(t, os.WriteFile(pidFile, []byte("1\n"), 0o600))
	pg, err = StartPostgres(ctx, PostgresConfig{Dir: dir})
	require.NoError(t, err)
	pg.Stop()
}

func TestMissingBinariesSayWhatToInstall(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	old := pgSearchGlob
	pgSearchGlob = t.TempDir() + "/*/bin/"
	defer func() { pgSearchGlob = old }()
	_, err := StartPostgres(context.Background(), PostgresConfig{Dir: t.TempDir()})
	require.ErrorContains(t, err, "apt-get install postgresql")
	require.ErrorContains(t, err, "FLEET_DATABASE_URL")

	_, err = StartRedis(context.Background(), RedisConfig{Dir: t.TempDir()})
	require.ErrorContains(t, err, "apt-get install redis-server")
	require.ErrorContains(t, err, "FLEET_REDIS_URL")
}

func TestRedisKeepsDataAcrossRestartAndOrphans(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(dataDir(t), "redis")
	r, err := StartRedis(ctx, RedisConfig{Dir: dir})
	require.NoError(t, err)
	opts, err := redis.ParseURL(r.URL(0))
	require.NoError(t, err)
	c := redis.NewClient(opts)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	c.Close()

	orphan := r.Pid()
	r2, err := StartRedis(ctx, RedisConfig{Dir: dir})
	require.NoError(t, err)
	defer r2.Stop()
	require.Error(t, syscall.Kill(orphan, 0), "the orphaned redis-server is gone")
	opts, _ = redis.ParseURL(r2.URL(0))
	c = redis.NewClient(opts)
	defer c.Close()
	v, err := c.Get(ctx, "k").Result()
	require.NoError(t, err)
	require.Equal(t, "v", v)

	// Without the password nothing is served.
	opts.Password = ""
	anon := redis.NewClient(opts)
	defer anon.Close()
	require.Error(t, anon.Ping(ctx).Err())
}

func TestLongDataDirUsesAShortSocketDir(t *testing.T) {
	long := filepath.Join(dataDir(t), strings.Repeat("d", 90))
	got := shortSocketDir(long, ".s.PGSQL.5432")
	require.Less(t, len(filepath.Join(got, ".s.PGSQL.5432")), 108)
	require.Equal(t, got, shortSocketDir(long, ".s.PGSQL.5432"), "stable across starts")
}

func TestDataDirLockAdmitsOne(t *testing.T) {
	dir := t.TempDir()
	l, err := LockDataDir(dir, "panel")
	require.NoError(t, err)
	_, err = LockDataDir(dir, "panel")
	require.ErrorIs(t, err, ErrLocked)
	require.ErrorContains(t, err, "pid")
	l.Release()
	l, err = LockDataDir(dir, "panel")
	require.NoError(t, err)
	l.Release()
}
