package panel_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/app/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// dataDir returns a data directory the postgres system user can reach.
func dataDir(t *testing.T) string {
	d, err := os.MkdirTemp(testenv.Dir(t), "panel-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(d, 0o755))
	return d
}

func startPanel(t *testing.T, dir string, extra ...string) (*testenv.Proc, string) {
	p := testenv.Start(t, testenv.Binary(t), append([]string{"--role=panel", "--listen=127.0.0.1:0", "--data-dir=" + dir}, extra...))
	url := p.WaitFor(`panel ready" console=(http://127\.0\.0\.1:\d+)/`, 60*time.Second)
	return p, url
}

func httpGet(t *testing.T, url string) (int, string) {
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// installation reads the installation id from the running panel's cluster
// (the console itself is behind sign-in, which redirects the landing page).
func installation(t *testing.T, url, dir string) string {
	code, body := httpGet(t, url+"/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `data-testid="signin-form"`, "the console asks to sign in")
	ctx := context.Background()
	pg, err := embedded.Attach(ctx, filepath.Join(dir, "postgres"))
	require.NoError(t, err)
	pool, err := db.Open(ctx, pg.AppURL(), 2)
	require.NoError(t, err)
	defer pool.Close()
	var id string
	require.NoError(t, pool.QueryRow(ctx, "SELECT id::text FROM installation").Scan(&id))
	return id
}

func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	// A zombie is dead for our purposes.
	return !strings.Contains(string(b), ") Z ")
}

func childPids(t *testing.T, dir string) (pg, rds int) {
	read := func(p string) int {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		n, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
		require.NoError(t, err)
		return n
	}
	return read(filepath.Join(dir, "postgres", "data", "postmaster.pid")), read(filepath.Join(dir, "redis", "redis.pid"))
}

func TestPanelServesStopsCleanlyAndRecoversFromSIGKILL(t *testing.T) {
	dir := dataDir(t)
	p, url := startPanel(t, dir)

	code, _ := httpGet(t, url+"/readyz")
	require.Equal(t, http.StatusOK, code)
	code, body := httpGet(t, url+"/readyz?verbose=1")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `"name":"redis:default","ok":true`)
	code, body = httpGet(t, p.MetricsURL(10*time.Second))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "fleet_dependency_up")
	code, _ = httpGet(t, url+"/metrics")
	require.Equal(t, http.StatusNotFound, code, "metrics are not on the console's port")
	id := installation(t, url, dir)
	code, body = httpGet(t, url+"/no-such-page")
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, body, `data-testid="error-page"`)

	// SIGKILL leaves no chance to clean up; the next start must recover the
	// same data (the cluster's stale pid included).
	pg, rds := childPids(t, dir)
	p.Signal(syscall.SIGKILL)
	p.Wait(10 * time.Second)
	p, url = startPanel(t, dir)
	require.Equal(t, id, installation(t, url, dir), "same database after SIGKILL")

	// SIGINT drains and stops both child services.
	pg2, rds2 := childPids(t, dir)
	p.Signal(syscall.SIGINT)
	require.Equal(t, 0, p.Wait(60*time.Second), p.Output())
	require.Contains(t, p.Output(), "panel stopped")
	for _, pid := range []int{pg, rds, pg2, rds2} {
		require.Eventually(t, func() bool { return !alive(pid) }, 10*time.Second, 50*time.Millisecond, "pid %d still running", pid)
	}
}

func TestTwoPanelsOnOneDataDirExactlyOneRuns(t *testing.T) {
	dir := dataDir(t)
	bin := testenv.Binary(t)
	args := []string{"--role=panel", "--listen=127.0.0.1:0", "--data-dir=" + dir}
	a := testenv.Start(t, bin, args)
	b := testenv.Start(t, bin, args)
	var loser, winner *testenv.Proc
	select {
	case <-a.Exited():
		loser, winner = a, b
	case <-b.Exited():
		loser, winner = b, a
	case <-time.After(60 * time.Second):
		t.Fatalf("neither panel exited:\n%s\n%s", a.Output(), b.Output())
	}
	require.Equal(t, 1, loser.Wait(time.Second))
	require.Contains(t, loser.Output(), "is held by a fleetwright panel")
	require.Contains(t, loser.Output(), "choose another --data-dir")
	winner.WaitFor(`panel ready"`, 60*time.Second)
	winner.Signal(syscall.SIGTERM)
	require.Equal(t, 0, winner.Wait(60*time.Second))
}

func TestBadInvocationsAreOneLineWithStatus2(t *testing.T) {
	bin := testenv.Binary(t)
	for _, args := range [][]string{{"--role=nope"}, {"--listen"}, {"frobnicate"}, {"--db-max-conns=many"}} {
		p := testenv.Start(t, bin, args)
		require.Equal(t, 2, p.Wait(10*time.Second), args)
		out := strings.TrimSpace(p.Output())
		require.NotContains(t, out, "\n", "one line: %q", out)
		require.Contains(t, out, "fleetwright --help")
	}
	p := testenv.Start(t, bin, []string{"--role=nope"})
	p.Wait(10 * time.Second)
	require.Contains(t, p.Output(), "must be one of panel")

	p = testenv.Start(t, bin, []string{"--help"})
	require.Equal(t, 0, p.Wait(10*time.Second))
	for _, want := range []string{"--listen", "FLEET_LISTEN", "127.0.0.1:8080", "--data-dir", "FLEET_DATA_DIR", "./var", "panel"} {
		require.Contains(t, p.Output(), want)
	}
	p = testenv.Start(t, bin, []string{"version"})
	require.Equal(t, 0, p.Wait(10*time.Second))
	require.Contains(t, p.Output(), "fleetwright ")

	p = testenv.Start(t, bin, nil, "FLEET_LISTEN=not-an-address:x", "FLEET_DATA_DIR="+dataDir(t))
	require.Equal(t, 1, p.Wait(60*time.Second))
	require.Contains(t, p.Output(), "choose another --listen")
}
