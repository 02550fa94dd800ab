package panel_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/panel"
)

// The metrics name tenants, agents and model spend: they are served on a
// listener of their own (loopback by default), never on the console's port
// without the bearer token of --metrics-token-file.
func TestMetricsAreNotOnTheConsolesPortWithoutAToken(t *testing.T) {
	d := testenv.DB(t)
	dir, err := os.MkdirTemp(testenv.Dir(t), "metrics-")
	require.NoError(t, err)
	var last *panel.Panel
	start := func(cfg panel.Config) (*panel.Panel, error) {
		if last != nil { // one data dir (and its secret key) for every start
			last.Stop()
			last = nil
		}
		cfg.Listen, cfg.DataDir = "127.0.0.1:0", dir
		cfg.DatabaseURL, cfg.DatabaseAppURL, cfg.RedisURL = d.OwnerURL, d.AppURL, testenv.RedisURL(t)
		cfg.DBMaxConns, cfg.PGMaxConnections, cfg.ShutdownTimeout = 8, 300, 5*time.Second
		cfg.SessionIdle, cfg.SessionMax, cfg.AuditSealInterval = 30*time.Minute, time.Hour, time.Minute
		p, err := panel.Start(context.Background(), cfg, testenv.Logger(t))
		if err == nil {
			go func() { _ = p.Serve() }()
			last = p
		}
		return p, err
	}
	t.Cleanup(func() {
		if last != nil {
			last.Stop()
		}
	})
	get := func(url, token string) (int, string) {
		req, err := http.NewRequest("GET", url, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}

	p, err := start(panel.Config{MetricsListen: "127.0.0.1:0"})
	require.NoError(t, err)
	code, body := get("http://"+p.Addr()+"/metrics", "")
	require.Equal(t, http.StatusNotFound, code, "no metrics on the console's port")
	require.False(t, strings.Contains(body, "fleet_"))
	code, body = get("http://"+p.MetricsAddr()+"/metrics", "")
	require.Equal(t, http.StatusOK, code)
	require.True(t, strings.Contains(body, "fleet_cell_up"), "the metrics are served")
	code, _ = get("http://"+p.MetricsAddr()+"/signin", "")
	require.Equal(t, http.StatusNotFound, code, "the metrics listener serves nothing else")

	// With a token file: on both addresses, only with the token.
	const token = "7f3c0a9e51d24b68a0c4e2f1"
	file := filepath.Join(t.TempDir(), "metrics.token")
	require.NoError(t, os.WriteFile(file, []byte(token+"\n"), 0o600))
	p, err = start(panel.Config{MetricsListen: "127.0.0.1:0", MetricsTokenFile: file})
	require.NoError(t, err)
	for _, url := range []string{"http://" + p.Addr() + "/metrics", "http://" + p.MetricsAddr() + "/metrics"} {
		code, body = get(url, "")
		require.Equal(t, http.StatusUnauthorized, code, url)
		require.False(t, strings.Contains(body, "fleet_"))
		code, _ = get(url, "not-the-token-at-all")
		require.Equal(t, http.StatusUnauthorized, code, url)
		code, body = get(url, token)
		require.Equal(t, http.StatusOK, code, url)
		require.True(t, strings.Contains(body, "fleet_cell_up"), "the metrics are served")
	}

	// Off loopback without a token, or with a token too short: refused.
	_, err = start(panel.Config{MetricsListen: "0.0.0.0:0"})
	require.ErrorContains(t, err, "--metrics-token-file")
	short := filepath.Join(t.TempDir(), "short.token")
	require.NoError(t, os.WriteFile(short, []byte("abc"), 0o600))
	_, err = start(panel.Config{MetricsListen: "127.0.0.1:0", MetricsTokenFile: short})
	require.ErrorContains(t, err, "at least 16 characters")
	_, err = start(panel.Config{MetricsListen: "nonsense"})
	require.ErrorContains(t, err, "--metrics-listen")
}
