package unit

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
)

func spec(t *testing.T, script string) Spec {
	return Spec{Name: "t", Path: "/bin/sh", Args: []string{"-c", script}, Output: io.Discard,
		RestartSec: time.Second, StartLimitInterval: 300 * time.Second, StartLimitBurst: 5,
		RestartPreventExitStatus: []int{78}, StopTimeout: 2 * time.Second}
}

func log() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestFailingUnitRestartsThenHitsTheStartLimit(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	u := Start(spec(t, "exit 3"), log(), clk)
	for i := 0; i < 4; i++ {
		require.True(t, clk.BlockUntil(1, 10*time.Second), "waiting for restart %d", i+1)
		clk.Advance(time.Second)
	}
	require.True(t, clk.BlockUntil(1, 10*time.Second))
	clk.Advance(time.Second)
	select {
	case <-u.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("unit did not give up")
	}
	state, restarts, _, code := u.Status()
	require.Equal(t, Failed, state)
	require.Equal(t, 5, restarts, "five starts after the first, the sixth refused")
	require.Equal(t, 3, code)
}

func TestFailuresSpreadOutKeepRestarting(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	u := Start(spec(t, "exit 1"), log(), clk)
	defer u.Stop(context.Background())
	for i := 0; i < 12; i++ {
		require.True(t, clk.BlockUntil(1, 10*time.Second))
		clk.Advance(61 * time.Second) // five per 300 s are allowed
	}
	state, restarts, _, _ := u.Status()
	require.NotEqual(t, Failed, state)
	require.GreaterOrEqual(t, restarts, 11)
}

func TestRestartPreventExitStatusAndCleanExit(t *testing.T) {
	u := Start(spec(t, "exit 78"), log(), nil)
	<-u.Done()
	state, restarts, _, _ := u.Status()
	require.Equal(t, Finished, state)
	require.Zero(t, restarts)

	u = Start(spec(t, "exit 0"), log(), nil)
	<-u.Done()
	state, _, _, _ = u.Status()
	require.Equal(t, Exited, state)
}

func TestStopKillsTheProcessGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child")
	// A shell that ignores SIGTERM and has a child of its own.
	u := Start(spec(t, "trap '' TERM; sleep 300 & echo $! > "+pidFile+"; wait"), log(), nil)
	require.Eventually(t, func() bool { _, err := os.Stat(pidFile); return err == nil }, 5*time.Second, 10*time.Millisecond)
	b, _ := os.ReadFile(pidFile)
	var child int
	for _, c := range string(b) {
		if c >= '0' && c <= '9' {
			child = child*10 + int(c-'0')
		}
	}
	start := time.Now()
	u.Stop(context.Background())
	require.Less(t, time.Since(start), 10*time.Second)
	state, _, _, _ := u.Status()
	require.Equal(t, Exited, state)
	require.Eventually(t, func() bool { return syscall.Kill(child, 0) != nil }, 5*time.Second, 20*time.Millisecond, "the grandchild died with the group")
}
