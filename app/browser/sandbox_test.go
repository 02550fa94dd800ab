package browser_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/browser"
	"github.com/fleetwright/fleetwright/app/testenv"
)

func procField(t *testing.T, pid int, field string) string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return strings.Fields(v)[0]
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return ""
}

func ns(t *testing.T, pid int, kind string) string {
	t.Helper()
	l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, kind))
	require.NoError(t, err)
	return l
}

func cmdline(pid int) string {
	raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.ReplaceAll(string(raw), "\x00", " ")
}

// listeningInodes are the socket inodes of every TCP socket in LISTEN state.
func listeningInodes(t *testing.T) map[string]bool {
	out := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, line := range strings.Split(string(raw), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) > 9 && fs[3] == "0A" {
				out[fs[9]] = true
			}
		}
	}
	return out
}

// TestChromiumRunsSandboxedOverAPipe: Chromium runs with its sandbox — each
// renderer in user and PID namespaces of its own and under a seccomp-bpf
// filter, and chrome://sandbox says so — as an unprivileged user when the
// test runs as root, and it is driven over --remote-debugging-pipe: no
// process of the browser listens on any TCP port.
func TestChromiumRunsSandboxedOverAPipe(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<html><body><h1 id="t">sandboxed</h1></body></html>`)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := browser.Launch(ctx, browser.Options{Log: testenv.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	require.True(t, b.Sandboxed())
	p, err := b.Page(ctx)
	require.NoError(t, err)
	require.NoError(t, p.Navigate(srv.URL))
	require.NoError(t, p.WaitLoad())
	require.Equal(t, "sandboxed", p.MustElement("#t").MustText())

	pid := b.PID()
	cl := cmdline(pid)
	require.Contains(t, cl, "--remote-debugging-pipe")
	require.NotContains(t, cl, "--remote-debugging-port")
	require.NotContains(t, cl, "--no-sandbox")

	// Who runs it: never root.
	uid := procField(t, pid, "Uid")
	require.NotEqual(t, "0", uid, "Chromium never runs as root")
	if os.Geteuid() == 0 {
		u, err := user.LookupId(uid)
		require.NoError(t, err)
		require.Equal(t, b.User(), u.Username)
		require.Equal(t, browser.DefaultUser, b.User())
	} else {
		require.Equal(t, strconv.Itoa(os.Geteuid()), uid)
	}

	// The renderers are sandboxed: namespaces of their own and seccomp-bpf.
	var renderers []int
	members := browser.GroupMembers(pid)
	for _, m := range members {
		if strings.Contains(cmdline(m), "--type=renderer") {
			renderers = append(renderers, m)
		}
	}
	require.NotEmpty(t, renderers, "a page has a renderer process")
	for _, r := range renderers {
		require.NotEqual(t, ns(t, pid, "user"), ns(t, r, "user"), "renderer %d in its own user namespace", r)
		require.NotEqual(t, ns(t, pid, "pid"), ns(t, r, "pid"), "renderer %d in its own PID namespace", r)
		require.NotEqual(t, ns(t, pid, "net"), ns(t, r, "net"), "renderer %d without the network", r)
		require.Equal(t, "2", procField(t, r, "Seccomp"), "renderer %d under a seccomp-bpf filter", r)
	}

	// Chromium's own verdict.
	sp, err := b.Page(ctx)
	require.NoError(t, err)
	require.NoError(t, sp.Navigate("chrome://sandbox"))
	require.NoError(t, sp.WaitLoad())
	require.Eventually(t, func() bool {
		txt, err := sp.Eval(`() => document.body.innerText`)
		return err == nil && strings.Contains(txt.Value.String(), "You are adequately sandboxed")
	}, 10*time.Second, 100*time.Millisecond, "chrome://sandbox reports the sandbox on")

	// No TCP listener in any of its processes: CDP is the pipe only.
	listen := listeningInodes(t)
	for _, m := range browser.GroupMembers(pid) {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", m))
		for _, fd := range fds {
			l, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", m), fd.Name()))
			if err != nil {
				continue
			}
			if ino, ok := strings.CutPrefix(l, "socket:["); ok {
				require.False(t, listen[strings.TrimSuffix(ino, "]")], "process %d (%s) listens on TCP", m, cmdline(m)[:60])
			}
		}
	}

	// The data dir belongs to Chromium's user; Close removes it and every process.
	fi, err := os.Stat(b.DataDir())
	require.NoError(t, err)
	require.Equal(t, uid, strconv.Itoa(int(fi.Sys().(*syscall.Stat_t).Uid)))
	require.NoError(t, b.Close())
	require.Empty(t, browser.GroupMembers(pid))
	require.NoDirExists(t, b.DataDir())
}

// TestNoSandboxEscapeHatchWarnsAtEveryStart checks the escape hatch with a
// stand-in binary that records its arguments and exits: Chromium itself is
// never started without its sandbox by any test. Every start warns, and the
// stand-in's exit is reported with its last words.
func TestNoSandboxEscapeHatchWarnsAtEveryStart(t *testing.T) {
	dir := t.TempDir()
	// As root the stand-in runs as the browser's user, who must reach it.
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	require.NoError(t, os.Chmod(dir, 0o777))
	args := filepath.Join(dir, "args")
	stand := filepath.Join(dir, "chromium")
	require.NoError(t, os.WriteFile(stand, []byte("#!/bin/sh\necho \"$@\" > "+args+" 2>/dev/null\necho 'stand-in: not a browser' >&2\nexit 3\n"), 0o755))
	logs := &testenv.SyncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	for i := range 2 {
		_, err := browser.Launch(context.Background(), browser.Options{Binary: stand, NoSandbox: true, Log: log})
		require.ErrorContains(t, err, "stand-in: not a browser")
		require.Equal(t, i+1, strings.Count(logs.String(), "WITHOUT its sandbox"), "one warning per start")
	}
	require.Contains(t, logs.String(), "level=WARN")
	_, err := browser.Launch(context.Background(), browser.Options{Binary: stand, Log: log})
	require.Error(t, err)
	require.Equal(t, 2, strings.Count(logs.String(), "WITHOUT its sandbox"), "no warning without the hatch")
}

// TestRootNeedsAnUnprivilegedBrowserUser: as root, Chromium runs as the user
// named by Options.User or $FLEET_BROWSER_USER; a missing one is a clear
// error that says how to create it. (As another user the setting does not
// apply: Chromium runs as that user.)
func TestRootNeedsAnUnprivilegedBrowserUser(t *testing.T) {
	t.Setenv(browser.EnvUser, "fleet-no-such-user")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := browser.Launch(ctx, browser.Options{})
	if os.Geteuid() == 0 {
		require.ErrorContains(t, err, `"fleet-no-such-user" does not exist`)
		require.ErrorContains(t, err, "useradd --system")
		require.ErrorContains(t, err, browser.EnvUser)
		return
	}
	require.NoError(t, err)
	require.NoError(t, b.Close())
}
