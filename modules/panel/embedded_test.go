package panel_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/panel"
)

// An embedded service that spends its restart budget raises a critical
// system alarm; supervising it again (the next panel start) resolves it.
func TestEmbeddedServiceSpentBudgetRaisesTheAlarm(t *testing.T) {
	ctx := context.Background()
	d := testenv.DB(t)
	dir, err := os.MkdirTemp(testenv.Dir(t), "embedded-")
	require.NoError(t, err)
	p, err := panel.Start(ctx, panel.Config{Listen: "127.0.0.1:0", DataDir: dir,
		DatabaseURL: d.OwnerURL, DatabaseAppURL: d.AppURL, RedisURL: testenv.RedisURL(t), DBMaxConns: 8, PGMaxConnections: 300,
		ShutdownTimeout: 5 * time.Second, SessionIdle: 30 * time.Minute, SessionMax: time.Hour, AuditSealInterval: time.Minute}, testenv.Logger(t))
	require.NoError(t, err)
	defer p.Stop()

	rd, err := embedded.StartRedis(ctx, embedded.RedisConfig{Dir: filepath.Join(dir, "redis-t")})
	require.NoError(t, err)
	defer rd.Stop()
	clk := clock.NewFake(time.Unix(0, 0))
	sup := p.Supervision("redis:t")
	sup.Clock, sup.StartLimitBurst = clk, 1
	rd.Supervise(sup)

	pid := rd.Pid()
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	require.True(t, clk.BlockUntil(1, 20*time.Second))
	clk.Advance(time.Minute)
	require.Eventually(t, func() bool { return rd.State() == embedded.StateRunning && rd.Pid() != pid }, 30*time.Second, 20*time.Millisecond)
	open, err := alarm.IsOpen(ctx, d.App, alarm.System, "embedded.failed", "redis:t")
	require.NoError(t, err)
	require.False(t, open, "one restart is within the budget")

	require.NoError(t, syscall.Kill(rd.Pid(), syscall.SIGKILL))
	require.Eventually(t, func() bool { return rd.State() == embedded.StateFailed }, 30*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		open, err := alarm.IsOpen(ctx, d.App, alarm.System, "embedded.failed", "redis:t")
		return err == nil && open
	}, 10*time.Second, 20*time.Millisecond, "the spent budget is an open alarm")

	_ = p.Supervision("redis:t")
	open, err = alarm.IsOpen(ctx, d.App, alarm.System, "embedded.failed", "redis:t")
	require.NoError(t, err)
	require.False(t, open, "supervising it again resolves the alarm")
}
