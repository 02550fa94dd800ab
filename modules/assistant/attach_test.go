package assistant_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/proto"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/browser"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/assistant"
	"github.com/fleetwright/fleetwright/modules/assistant/eval"
	"github.com/fleetwright/fleetwright/modules/assistant/model/stub"
	"github.com/fleetwright/fleetwright/modules/assistant/store"
)

// personsChromium starts Chromium the way docs/ASSISTANT.md tells a person
// to for the second way of attaching: remote debugging on a non-default
// profile (--user-data-dir of its own; Chrome 136+ refuses the default
// one). As root it runs as the browser's unprivileged user, with its
// sandbox — no test passes --no-sandbox. It returns the DevTools address.
func personsChromium(t *testing.T) (addr string, pid int) {
	t.Helper()
	parent := testenv.SharedTempDir(t)
	require.NoError(t, browser.LetThrough(parent, ""))
	profile := filepath.Join(parent, "chrome-assistant")
	require.NoError(t, os.Mkdir(profile, 0o700))
	args := []string{"--headless", "--remote-debugging-port=0", "--user-data-dir=" + profile}
	for _, f := range browser.BaseFlags {
		args = append(args, "--"+f)
	}
	cmd := exec.Command(browser.Binary(browser.Options{}), append(args, "about:blank")...)
	cmd.Env = append(os.Environ(), "HOME="+profile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if os.Geteuid() == 0 {
		u, err := user.Lookup(browser.DefaultUser)
		require.NoError(t, err)
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		require.NoError(t, os.Chown(profile, uid, gid))
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
	}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	// Chromium writes the port it chose into the profile.
	var port string
	require.Eventually(t, func() bool {
		raw, err := os.ReadFile(filepath.Join(profile, "DevToolsActivePort"))
		if err != nil {
			return false
		}
		port, _, _ = strings.Cut(string(raw), "\n")
		return port != ""
	}, 60*time.Second, 50*time.Millisecond, "Chromium wrote its DevToolsActivePort")
	return "http://127.0.0.1:" + port, cmd.Process.Pid
}

// browserWS is the browser's ws:// DevTools URL, from /json/version.
func browserWS(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get(addr + "/json/version")
	require.NoError(t, err)
	defer resp.Body.Close()
	var v struct {
		WS string `json:"webSocketDebuggerUrl"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	require.True(t, strings.HasPrefix(v.WS, "ws://127.0.0.1:"), v.WS)
	return v.WS
}

// devtoolsPages lists the page targets of the Chromium at addr.
func devtoolsPages(t *testing.T, addr string) []string {
	t.Helper()
	resp, err := http.Get(addr + "/json/list")
	require.NoError(t, err)
	defer resp.Body.Close()
	var ts []struct{ Type, URL string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&ts))
	var out []string
	for _, x := range ts {
		if x.Type == "page" {
			out = append(out, x.URL)
		}
	}
	return out
}

// The second way of reaching the person's browser: attach to a running
// Chromium started with remote debugging on a non-default profile, by its
// http:// address and by its ws:// browser URL. The task's tab opens in
// that browser, and stopping the assistant leaves the browser running.
// (The third way, Chrome 144+'s switch in chrome://inspect, needs a person
// to turn it on and accept Chrome's prompt: it has no automated test.)
func TestAttachToARunningChromium(t *testing.T) {
	addr, pid := personsChromium(t)
	script := stub.Script{Steps: []stub.Step{
		step("open_tab", map[string]any{"name": "brief", "url": "$url:/brief"}),
		step("read_page", map[string]any{}),
	}}
	f := start(t, script, func(c *assistant.Config) { c.Attach = addr })
	id, err := f.Submit("Read the brief", f.urls("/brief"), nil)
	require.NoError(t, err)
	task, err := f.Wait(id, 60*time.Second, false, store.StatusDone, store.StatusFailed, store.StatusStopped)
	require.NoError(t, err)
	require.Equal(t, store.StatusDone, task.Status, task.StopReason)
	require.Equal(t, []string{"brief"}, task.Tabs)
	require.Contains(t, devtoolsPages(t, addr), f.StudioURL+"/brief", "the tab is in the person's browser")
	_, home, err := f.Get("/")
	require.NoError(t, err)
	require.Contains(t, home, "Read the brief")

	// Between tasks the person's own tab in that browser is theirs: its
	// requests pass the assistant's filter.
	ws := browserWS(t, addr)
	person := rod.New().ControlURL(ws)
	require.NoError(t, person.Connect())
	pp, err := person.Page(proto.TargetCreateTarget{URL: f.StudioURL + "/"})
	require.NoError(t, err)
	require.NoError(t, pp.Timeout(30*time.Second).WaitLoad())
	txt, err := pp.Timeout(10 * time.Second).Eval(`() => document.body.innerText`)
	require.NoError(t, err)
	require.Contains(t, txt.Value.String(), "A sandbox to rehearse the assistant on", "the person's own page loaded")
	require.NoError(t, pp.Close())

	// Stopped, the assistant leaves the person's browser running.
	require.NoError(t, f.StopAssistant())
	require.NoError(t, syscall.Kill(pid, 0), "the attached Chromium still runs")
	require.Contains(t, devtoolsPages(t, addr), f.StudioURL+"/brief")

	// By the browser's ws:// URL (what chrome://inspect shows) as well.
	f.model.SetScript(stub.Script{Steps: []stub.Step{step("open_tab", map[string]any{"name": "calendar", "url": "$url:/calendar"})}})
	cfg := assistant.Config{ModelURL: f.modelURL, Model: "stub", StateDir: f.StateDir, Attach: ws,
		Limits: store.Limits{Steps: 10, WallTime: time.Minute, Tabs: 4}, EgressAllow: []string{"127.0.0.1/32"}, EgressPorts: []string{eval.Port(f.StudioURL)}}
	require.NoError(t, f.StartAssistant(context.Background(), cfg, testLogger(f.log)))
	id, err = f.Submit("Open the calendar", f.urls("/calendar"), nil)
	require.NoError(t, err)
	task, err = f.Wait(id, 60*time.Second, false, store.StatusDone, store.StatusFailed, store.StatusStopped)
	require.NoError(t, err)
	require.Equal(t, store.StatusDone, task.Status, task.StopReason)
	require.Contains(t, devtoolsPages(t, addr), f.StudioURL+"/calendar")

	// A wrong address is a clear error, not a hang.
	err = assistant.Run(context.Background(), assistant.Config{Listen: "127.0.0.1:0", StateDir: testenv.SharedTempDir(t), Model: "stub",
		ModelURL: f.modelURL, Attach: "http://127.0.0.1:9"}, testLogger(f.log))
	require.ErrorContains(t, err, fmt.Sprintf("attach to %s", "http://127.0.0.1:9"))
	require.ErrorContains(t, err, "--remote-debugging-port on a non-default profile")
}
