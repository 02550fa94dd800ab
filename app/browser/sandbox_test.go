package browser_test

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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

// TestPersistentProfileIsTheBrowserUsers: a persistent profile (the
// assistant's, under its state dir) is handed to the user Chromium runs as,
// with whatever an earlier run as root left in it; Chromium starts on it,
// keeps a cookie in it, and Close leaves it for the next start, which sends
// the cookie back. Everything in the profile is that user's.
func TestPersistentProfileIsTheBrowserUsers(t *testing.T) {
	var cookies []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r) // the favicon
			return
		}
		mu.Lock()
		cookies = append(cookies, r.Header.Get("Cookie"))
		mu.Unlock()
		http.SetCookie(w, &http.Cookie{Name: "seen", Value: "1", MaxAge: 3600, Path: "/"})
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<html><body>profile</body></html>`)
	}))
	defer srv.Close()
	parent := testenv.SharedTempDir(t)
	require.NoError(t, browser.LetThrough(parent, ""))
	profile := filepath.Join(parent, "profile")
	// What an earlier run as root (before the browser had a user of its
	// own) would have left: a root-owned profile with a root-owned file.
	require.NoError(t, os.MkdirAll(filepath.Join(profile, "Default"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(profile, "Default", "Left Behind"), []byte("x"), 0o600))

	var uid string
	for round := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		b, err := browser.Launch(ctx, browser.Options{UserDataDir: profile, Log: testenv.Logger(t)})
		require.NoError(t, err, "round %d", round)
		require.Equal(t, profile, b.DataDir())
		uid = procField(t, b.PID(), "Uid")
		require.NotEqual(t, "0", uid)
		p, err := b.Page(ctx)
		require.NoError(t, err)
		require.NoError(t, p.Navigate(srv.URL))
		require.NoError(t, p.WaitLoad())
		require.NoError(t, b.Close())
		cancel()
		require.DirExists(t, profile, "round %d: Close keeps the profile", round)
	}
	mu.Lock()
	require.Len(t, cookies, 2)
	require.Empty(t, cookies[0])
	require.Equal(t, "seen=1", cookies[1], "the second start used the profile the first one wrote")
	mu.Unlock()
	n := 0
	require.NoError(t, filepath.WalkDir(profile, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		fi, err := os.Lstat(p)
		require.NoError(t, err)
		require.Equal(t, uid, strconv.Itoa(int(fi.Sys().(*syscall.Stat_t).Uid)), "%s belongs to Chromium's user", p)
		n++
		return nil
	}))
	require.Greater(t, n, 5, "Chromium wrote its profile")
}

// TestUnreachableProfileFailsAtOnce: as root, a persistent profile under a
// directory the browser's user may not enter (t.TempDir's parent is private
// to root) is refused before Chromium starts, with an error that names the
// directory and what to do. This is what hung the assistant's tests when
// the sandbox first landed. Not root: Chromium runs as this user, who
// reaches the dir, and starts.
func TestUnreachableProfileFailsAtOnce(t *testing.T) {
	private := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(private), 0o700))
	profile := filepath.Join(private, "state", "profile")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := browser.Launch(ctx, browser.Options{UserDataDir: profile, Log: testenv.Logger(t)})
	if os.Geteuid() != 0 {
		require.NoError(t, err)
		require.NoError(t, b.Close())
		return
	}
	require.Error(t, err)
	require.ErrorContains(t, err, "the profile "+profile+" is out of reach of nobody")
	require.ErrorContains(t, err, filepath.Dir(private)+" (mode 0700, owner root) does not let it through")
	require.ErrorContains(t, err, "chmod o+x")

	// LetThrough opens the state dir itself but names a barrier above it.
	err = browser.LetThrough(filepath.Join(private, "state"), "")
	require.ErrorContains(t, err, filepath.Dir(private)+" (mode 0700, owner root) does not let it through")
}

// TestSilentChromiumIsKilledAfterTheStartTimeout: a browser that neither
// answers on its DevTools pipe nor exits (a stand-in binary that only
// complains and sleeps: the real Chromium is never made to hang) is killed
// after Options.StartTimeout, and Launch returns its last stderr lines
// instead of waiting forever.
func TestSilentChromiumIsKilledAfterTheStartTimeout(t *testing.T) {
	dir := testenv.SharedTempDir(t)
	require.NoError(t, os.Chmod(dir, 0o777)) // the stand-in runs as the browser's user
	pidFile := filepath.Join(dir, "pid")
	stand := filepath.Join(dir, "chromium")
	require.NoError(t, os.WriteFile(stand, []byte("#!/bin/sh\necho $$ > "+pidFile+"\necho 'stand-in: cannot open the profile, waiting' >&2\nexec sleep 600\n"), 0o755))
	start := time.Now()
	_, err := browser.Launch(context.Background(), browser.Options{Binary: stand, StartTimeout: 2 * time.Second, Log: testenv.Logger(t)})
	require.Error(t, err)
	require.ErrorContains(t, err, "did not answer on its DevTools pipe within 2s and was killed")
	require.ErrorContains(t, err, "stand-in: cannot open the profile, waiting")
	require.Less(t, time.Since(start), 30*time.Second, "bounded: the timeout plus the kill")
	raw, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	require.NoError(t, err)
	require.Empty(t, browser.GroupMembers(pid), "the stand-in and its children are gone")
}
