package testenv_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
)

// TestHAHarness starts the cluster and the Sentinel set and checks what the
// HA tests rely on: a multi-host URL reaches the primary, which has a
// synchronous standby, and the failover client finds the Redis master.
func TestHAHarness(t *testing.T) {
	c := testenv.HAPostgres(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.AppURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var recovery bool
	var syncs int
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&recovery))
	su, err := pgx.Connect(ctx, c.SuperURL)
	require.NoError(t, err)
	defer su.Close(ctx)
	require.NoError(t, su.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync','quorum')`).Scan(&syncs))
	require.False(t, recovery)
	require.Equal(t, 1, syncs)

	r := testenv.HARedis(t)
	opts, err := redis.ParseFailoverURL(r.URL())
	require.NoError(t, err)
	rc := redis.NewFailoverClient(opts)
	defer rc.Close()
	require.NoError(t, rc.Set(ctx, "k", "v", 0).Err())
}
