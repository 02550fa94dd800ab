package panel_test

import (
	"context"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/panel"
)

// A stopping panel first fails /readyz while it keeps answering, for the
// drain period, and only then closes its listener.
func TestStoppingPanelFailsReadinessWhileItStillServes(t *testing.T) {
	d := testenv.DB(t)
	dir, err := os.MkdirTemp(testenv.Dir(t), "drain-")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- panel.Run(ctx, panel.Config{Listen: "127.0.0.1:0", DataDir: dir,
			DatabaseURL: d.OwnerURL, DatabaseAppURL: d.AppURL, RedisURL: testenv.RedisURL(t), DBMaxConns: 8, PGMaxConnections: 300,
			ShutdownTimeout: 5 * time.Second, Drain: 3 * time.Second, SessionIdle: 30 * time.Minute, SessionMax: time.Hour,
			AuditSealInterval: time.Minute, Ready: func(a string) { addr <- a }}, testenv.Logger(t))
	}()
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case err := <-done:
		t.Fatalf("panel did not start: %v", err)
	}
	status := func(path string) int {
		resp, err := http.Get(base + path)
		if err != nil {
			return -1
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Eventually(t, func() bool { return status("/readyz") == http.StatusOK }, 30*time.Second, 50*time.Millisecond)

	cancel()
	require.Eventually(t, func() bool { return status("/readyz") == http.StatusServiceUnavailable }, 2*time.Second, 20*time.Millisecond,
		"/readyz fails first")
	require.Equal(t, http.StatusOK, status("/healthz"), "and the panel still serves while it drains")
	require.Equal(t, http.StatusOK, status("/signin"), "pages too")
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the panel did not stop after its drain")
	}
	require.Equal(t, -1, status("/healthz"), "then it closes")
}
