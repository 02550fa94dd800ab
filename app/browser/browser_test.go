package browser_test

import (
	"bufio"
	"context"
	"fmt"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/app/unit"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fleetwright/fleetwright/app/browser"
)

// The process-lifetime spawner thread of app/unit is not a leak.
func TestMain(m *testing.M) { testenv.MainNoLeaks(m, goleak.IgnoreTopFunction(unit.SpawnerFunction)) }

// processesUsing lists live processes whose command line mentions dir: every
// Chromium helper carries --user-data-dir, so this finds survivors even if
// one left the process group.
func processesUsing(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var out []string
	for _, e := range ents {
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(raw) == 0 {
			continue
		}
		st, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if i := strings.LastIndexByte(string(st), ')'); i >= 0 && strings.HasPrefix(strings.TrimSpace(string(st)[i+1:]), "Z") {
			continue
		}
		if strings.Contains(string(raw), dir) {
			out = append(out, e.Name()+" "+strings.ReplaceAll(string(raw), "\x00", " ")[:60])
		}
	}
	return out
}

func TestLaunchRendersAndLeavesNothing(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<html><body><h1 id="t">hello</h1><p id="ua">%s</p><p id="al">%s</p>
<script>document.getElementById('t').textContent='rendered by js';
document.title=Intl.DateTimeFormat().resolvedOptions().timeZone+'|'+navigator.language+'|'+innerWidth</script></body></html>`,
			r.UserAgent(), r.Header.Get("Accept-Language"))
	}))
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := browser.Launch(ctx, browser.Options{
		UserAgent: "FleetTest/1.0 (X11; Linux x86_64)",
		Language:  "de-DE",
		Timezone:  "America/Chicago",
		Width:     1024, Height: 700,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	dir, pid := b.DataDir(), b.PID()
	require.DirExists(t, dir)
	require.NotEmpty(t, browser.GroupMembers(pid), "chromium runs in its own process group")

	p, err := b.Page(ctx)
	require.NoError(t, err)
	require.NoError(t, p.Navigate(srv.URL))
	require.NoError(t, p.WaitLoad())
	el, err := p.Element("#t")
	require.NoError(t, err)
	txt, err := el.Text()
	require.NoError(t, err)
	require.Equal(t, "rendered by js", txt)
	ua := p.MustElement("#ua").MustText()
	require.Equal(t, "FleetTest/1.0 (X11; Linux x86_64)", ua)
	require.Equal(t, "de-DE,de;q=0.9", p.MustElement("#al").MustText())
	title := p.MustInfo().Title
	require.Equal(t, "America/Chicago|de-DE|1024", title)

	require.NoError(t, b.Close())
	require.NoError(t, b.Close(), "Close twice is fine")
	require.Empty(t, browser.GroupMembers(pid), "no process of the group survives Close")
	require.Empty(t, processesUsing(t, dir), "no chromium process mentions the data dir")
	require.NoDirExists(t, dir)
}

func TestMissingBinaryNamesPackageAndVariable(t *testing.T) {
	_, err := browser.Launch(context.Background(), browser.Options{Binary: "/nonexistent/chromium"})
	require.ErrorIs(t, err, browser.ErrNoBinary)
	require.Contains(t, err.Error(), `"chromium"`)
	require.Contains(t, err.Error(), "FLEET_CHROMIUM")
}

func TestBinaryFromEnvironment(t *testing.T) {
	t.Setenv("FLEET_CHROMIUM", "/nonexistent/from-env")
	require.Equal(t, "/nonexistent/from-env", browser.Binary(browser.Options{}))
	require.Equal(t, "/x", browser.Binary(browser.Options{Binary: "/x"}))
	_, err := browser.Launch(context.Background(), browser.Options{})
	require.ErrorContains(t, err, "/nonexistent/from-env")
}

func TestCancelledStartLeavesNothing(t *testing.T) {
	// A TMPDIR of its own: other test binaries launch Chromium in /tmp
	// at the same time.
	tmp, err := os.MkdirTemp("", "fleet-cancel-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	require.NoError(t, browser.PrepareTmpDir(tmp))
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = browser.Launch(ctx, browser.Options{})
	require.Error(t, err)
	left, _ := filepath.Glob(filepath.Join(tmp, "fleet-chromium-*"))
	require.Empty(t, left, "a failed launch removes its data dir")
}

// TestChromiumDiesWithItsParent: a process that launched Chromium is killed
// with SIGKILL (no chance to Close); Chromium goes down with it through the
// parent-death signal instead of running on.
func TestChromiumDiesWithItsParent(t *testing.T) {
	if os.Getenv("FLEET_BROWSER_PARENT") == "1" {
		// The parent role, run in a child process by the test below.
		b, err := browser.Launch(context.Background(), browser.Options{})
		if err != nil {
			fmt.Println("launch failed:", err)
			os.Exit(1)
		}
		fmt.Printf("chromium pid %d\n", b.PID())
		// Real time: this child lives until the test SIGKILLs it; the
		// minute only bounds it should the test not.
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestChromiumDiesWithItsParent$")
	cmd.Env = append(os.Environ(), "FLEET_BROWSER_PARENT=1")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var pid int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "chromium pid %d", &pid); err == nil {
			break
		}
	}
	require.NotZero(t, pid, "the child launched Chromium")
	go func() { _, _ = io.Copy(io.Discard, out) }()
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	require.Eventually(t, func() bool { return len(browser.GroupMembers(pid)) == 0 }, 10*time.Second, 50*time.Millisecond,
		"Chromium's processes are gone")
}
