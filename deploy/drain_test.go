package deploy

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
)

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestRollingRestartBehindCaddyAnswersEveryRequest puts Debian's Caddy, with
// the shipped Caddyfile's retry and health settings, in front of two panel
// replicas sharing one database and one secret key, and restarts them one at
// a time (SIGTERM, as systemd stops them) under a steady request load: every
// request is answered, none with a 502.
func TestRollingRestartBehindCaddyAnswersEveryRequest(t *testing.T) {
	caddy, err := exec.LookPath("caddy")
	require.NoError(t, err, "caddy not found: install Debian's caddy package (make deps)")
	bin := testenv.Binary(t)
	d := testenv.DB(t)
	redis := testenv.RedisURL(t)
	root, err := os.MkdirTemp(testenv.Dir(t), "roll-")
	require.NoError(t, err)

	ports := []int{freePort(t), freePort(t)}
	keyFile := filepath.Join(root, "secret.key")
	start := func(i int) *exec.Cmd {
		dir := filepath.Join(root, fmt.Sprint("replica-", i))
		args := []string{"--role=panel", fmt.Sprintf("--listen=127.0.0.1:%d", ports[i]), "--data-dir=" + dir,
			"--database-url=" + d.OwnerURL, "--database-app-url=" + d.AppURL, "--redis-url=" + redis,
			"--db-max-conns=8", "--drain=2s", "--trusted-proxies=127.0.0.1",
			// Two replicas on one host: each its own metrics port.
			"--metrics-listen=127.0.0.1:0"}
		if _, err := os.Stat(keyFile); err == nil {
			args = append(args, "--secret-key-file="+keyFile)
		}
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "FLEET_LOG_LEVEL=warn")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		require.NoError(t, cmd.Start())
		require.Eventually(t, func() bool {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[i]))
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}, 90*time.Second, 100*time.Millisecond, "replica %d ready", i)
		if _, err := os.Stat(keyFile); err != nil {
			// The first replica made the key; every other one shares it.
			b, err := os.ReadFile(filepath.Join(dir, "secret.key"))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(keyFile, b, 0o600))
		}
		return cmd
	}
	stop := func(cmd *exec.Cmd) {
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		require.NoError(t, cmd.Wait(), "a drained panel exits 0")
	}
	replicas := []*exec.Cmd{start(0), start(1)}
	defer func() {
		for _, c := range replicas {
			if c.ProcessState == nil {
				_ = c.Process.Kill()
				_ = c.Wait()
			}
		}
	}()

	// The shipped proxy settings, on plain HTTP on loopback.
	front := freePort(t)
	cfg := fmt.Sprintf(`{
	admin off
	auto_https off
}
http://127.0.0.1:%d {
	reverse_proxy 127.0.0.1:%d 127.0.0.1:%d {
		lb_policy least_conn
		lb_try_duration 5s
		lb_try_interval 250ms
		health_uri /readyz
		health_interval 1s
	}
}
`, front, ports[0], ports[1])
	cf := filepath.Join(root, "Caddyfile")
	require.NoError(t, os.WriteFile(cf, []byte(cfg), 0o644))
	cc := exec.Command(caddy, "run", "--adapter", "caddyfile", "--config", cf)
	cc.Env = append(os.Environ(), "HOME="+root, "XDG_DATA_HOME="+root, "XDG_CONFIG_HOME="+root)
	require.NoError(t, cc.Start())
	defer func() { _ = cc.Process.Kill(); _ = cc.Wait() }()
	url := fmt.Sprintf("http://127.0.0.1:%d/signin", front)
	require.Eventually(t, func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 100*time.Millisecond, "caddy up")

	// A steady load: four clients, one request after another.
	ctx, cancel := context.WithCancel(context.Background())
	var sent, ok atomic.Int64
	var mu sync.Mutex
	bad := map[string]int{}
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 15 * time.Second}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				sent.Add(1)
				resp, err := client.Get(url)
				if err != nil {
					mu.Lock()
					bad[err.Error()]++
					mu.Unlock()
					continue
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					ok.Add(1)
				} else {
					mu.Lock()
					bad[resp.Status]++
					mu.Unlock()
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	for i := range replicas {
		stop(replicas[i])
		replicas[i] = start(i)
	}
	cancel()
	wg.Wait()
	t.Logf("%d requests during the rolling restart, %d answered 200", sent.Load(), ok.Load())
	require.Empty(t, bad, "every request answered")
	require.Equal(t, sent.Load(), ok.Load())
	require.Greater(t, ok.Load(), int64(100), "the load really ran through the restart")
}
