package embedded

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
)

// metricValue reads one series of the embedded metrics from reg.
func metricValue(t *testing.T, reg *prometheus.Registry, name, service string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "service" && l.GetValue() == service {
					if m.Counter != nil {
						return m.Counter.GetValue()
					}
					return m.Gauge.GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{service=%q}", name, service)
	return 0
}

// killAndRestart SIGKILLs pid, lets the fake clock run through the
// backoff and waits until a new process runs.
func killAndRestart(t *testing.T, clk *clock.Fake, pid int, current func() (int, string)) int {
	t.Helper()
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	require.True(t, clk.BlockUntil(1, 20*time.Second), "the supervisor waits out its backoff")
	clk.Advance(time.Minute)
	var now int
	require.Eventually(t, func() bool {
		n, st := current()
		now = n
		return st == StateRunning && n != 0 && n != pid
	}, 60*time.Second, 20*time.Millisecond, "started again")
	return now
}

func TestSupervisedRedisComesBackThenSpendsItsBudget(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(dataDir(t), "redis")
	r, err := StartRedis(ctx, RedisConfig{Dir: dir})
	require.NoError(t, err)
	defer r.Stop()
	clk := clock.NewFake(time.Unix(0, 0))
	reg := prometheus.NewRegistry()
	var gaveUp atomic.Int32
	r.Supervise(Supervision{Service: "redis:t", Clock: clk, Metrics: NewMetrics(reg),
		OnGiveUp: func(string) { gaveUp.Add(1) }})
	require.Equal(t, StateRunning, r.State())

	// A client made before the death keeps working afterwards: same socket,
	// same password, same data.
	opts, err := redis.ParseURL(r.URL(0))
	require.NoError(t, err)
	c := redis.NewClient(opts)
	defer c.Close()
	require.NoError(t, c.Set(ctx, "kept", "yes", 0).Err())
	// The write is in the append-only file (what survives a SIGKILL: the
	// page cache keeps what redis-server wrote; fsync matters only for a
	// power loss).
	require.Eventually(t, func() bool { return aofHolds(dir, "kept") }, 10*time.Second, 10*time.Millisecond,
		"the append-only file holds the write")

	current := func() (int, string) { return r.Pid(), r.State() }
	pid := killAndRestart(t, clk, r.Pid(), current)
	require.Eventually(t, func() bool { return c.Ping(ctx).Err() == nil }, 10*time.Second, 20*time.Millisecond)
	v, err := c.Get(ctx, "kept").Result()
	require.NoError(t, err)
	require.Equal(t, "yes", v)
	require.Equal(t, 1.0, metricValue(t, reg, "fleet_embedded_restarts_total", "redis:t"))
	require.Equal(t, 1.0, metricValue(t, reg, "fleet_embedded_up", "redis:t"))

	// Four more deaths within the window are restarted, each after twice the
	// last pause; the sixth is one too many.
	for i := 0; i < 4; i++ {
		pid = killAndRestart(t, clk, pid, current)
	}
	require.Equal(t, 5.0, metricValue(t, reg, "fleet_embedded_restarts_total", "redis:t"))
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	require.Eventually(t, func() bool { return r.State() == StateFailed }, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, int32(1), gaveUp.Load(), "the alarm is raised once")
	require.Equal(t, 1.0, metricValue(t, reg, "fleet_embedded_failed", "redis:t"))
	require.Equal(t, 0.0, metricValue(t, reg, "fleet_embedded_up", "redis:t"))
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second}, clk.Sleeps())
}

// aofHolds reports whether an append-only file under dir holds s.
func aofHolds(dir, s string) bool {
	found := false
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.Contains(d.Name(), ".aof") {
			return nil
		}
		if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, []byte(s)) {
			found = true
		}
		return nil
	})
	return found
}

func TestSupervisedRedisStoppedOnPurposeStaysDown(t *testing.T) {
	r, err := StartRedis(context.Background(), RedisConfig{Dir: filepath.Join(dataDir(t), "redis")})
	require.NoError(t, err)
	clk := clock.NewFake(time.Unix(0, 0))
	r.Supervise(Supervision{Service: "redis:t", Clock: clk})
	pid := r.Pid()
	r.Stop()
	require.Equal(t, StateStopped, r.State())
	require.Error(t, syscall.Kill(pid, 0), "redis-server stopped")
	clk.Advance(time.Hour)
	// Real time, not an event: what is shown is that nothing happens, so
	// a wrongful restart gets a moment to show.
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, pid, r.Pid(), "not started again")
	require.Zero(t, clk.Pending())
}

func TestSupervisedPostgresComesBackAfterEveryProcessIsKilled(t *testing.T) {
	ctx := context.Background()
	pg, err := StartPostgres(ctx, PostgresConfig{Dir: filepath.Join(dataDir(t), "postgres"), NoSync: true})
	require.NoError(t, err)
	defer pg.Stop()
	clk := clock.NewFake(time.Unix(0, 0))
	reg := prometheus.NewRegistry()
	pg.Supervise(Supervision{Service: "postgres", Clock: clk, Metrics: NewMetrics(reg)})

	pool, err := pgxpool.New(ctx, pg.OwnerURL())
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('before')")
	require.NoError(t, err)

	procs := pg.Processes()
	require.Contains(t, procs, pg.Pid())
	require.GreaterOrEqual(t, len(procs), 3, "postmaster, backends and helpers: %v", procs)
	old := pg.Pid()
	// Every process at once, as the OOM killer's worst day or the load
	// test's postgres_restart would.
	for _, pid := range procs {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	require.True(t, clk.BlockUntil(1, 20*time.Second))
	clk.Advance(time.Minute)
	require.Eventually(t, func() bool { return pg.State() == StateRunning && pg.Pid() != old }, 90*time.Second, 50*time.Millisecond)

	// The same pool reconnects: committed data survived crash recovery.
	var v string
	require.Eventually(t, func() bool { return pool.QueryRow(ctx, "SELECT v FROM kept").Scan(&v) == nil }, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, "before", v)
	require.Equal(t, 1.0, metricValue(t, reg, "fleet_embedded_restarts_total", "postgres"))
	now := pg.Processes()
	for _, pid := range procs {
		require.NotContains(t, now, pid)
		// Gone, or a zombie waiting for an init that does not reap.
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		require.True(t, len(b) == 0 || strings.Contains(string(b), ") Z "), "pid %d of the old cluster is gone: %s", pid, b)
	}
}
