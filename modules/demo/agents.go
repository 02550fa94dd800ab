package demo

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fleetwright/fleetwright/app/browser"
	"github.com/fleetwright/fleetwright/app/unit"
)

// The limits of deploy/systemd/fleetwright-agent.service: restart on failure
// after 10 s, at most 5 starts in 600 s, never after exit status 78 (the
// agent retired itself), SIGTERM then SIGKILL after 45 s.
const (
	restartSec         = 10 * time.Second
	startLimitInterval = 600 * time.Second
	startLimitBurst    = 5
	exitRetired        = 78
	stopTimeout        = 45 * time.Second
)

// fleetProcs are the demo's agent processes, each under its own unit.
type fleetProcs struct {
	units       []*unit.Unit
	tmps        []string
	logs        []*os.File
	stopJanitor chan struct{}
	janitorDone chan struct{}
}

// LogFile is where an agent process's output goes.
func LogFile(dataDir string, a Agent) string { return filepath.Join(dataDir, "logs", a.Key+".log") }

// maxTmpDir is the longest TMPDIR Chromium can use: it binds a Unix socket
// at TMPDIR/org.chromium.Chromium.XXXXXX/SingletonSocket, and a socket path
// has at most 107 bytes.
const maxTmpDir = 60

// TempRoot is where agents' TMPDIRs go when the data dir's path is too long
// for them: a short directory of this data dir's own under the system's.
func TempRoot(dataDir string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(filepath.Clean(dataDir)))
	return filepath.Join(os.TempDir(), fmt.Sprintf("fleet-demo-%08x", h.Sum32()))
}

// TmpDir is an agent's TMPDIR: in its state dir, unless that path is too
// long for Chromium's socket.
func TmpDir(dataDir string, a Agent) string {
	if d := filepath.Join(AgentDir(dataDir, a), "tmp"); len(d) <= maxTmpDir {
		return d
	}
	return filepath.Join(TempRoot(dataDir), a.Key)
}

// ProcessDirs are the directories every process the demo starts names on its
// command line (state dirs, data dirs, Chromium's user-data dirs): a process
// naming one of them after the demo stopped was left behind.
func ProcessDirs(dataDir string) []string {
	return []string{dataDir, TempRoot(dataDir)}
}

// agentEnv is the environment of an agent process: the demo's, minus the
// FLEET_ variables meant for the demo itself, with HOME and TMPDIR in the
// agent's state dir, as the systemd unit does (Chromium's profile, crash
// dumps and temporary user-data dir stay there and leave with it).
func agentEnv(dir, tmp string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME", "TMPDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME":
			continue
		}
		if strings.HasPrefix(k, "FLEET_") && k != "FLEET_CHROMIUM" && k != "FLEET_BROWSER_USER" && k != "FLEET_LOG_FORMAT" && k != "FLEET_LOG_LEVEL" {
			continue
		}
		env = append(env, kv)
	}
	home := filepath.Join(dir, "home")
	return append(env, "HOME="+home, "TMPDIR="+tmp,
		"XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "XDG_CACHE_HOME="+filepath.Join(home, ".cache"))
}

// startAgents starts one supervised process per agent: the same binary,
// `--role=agent`, its token file and state dir.
func startAgents(exe, dataDir, panelURL string, agents []Agent, log *slog.Logger) (*fleetProcs, error) {
	fp := &fleetProcs{stopJanitor: make(chan struct{})}
	if err := os.MkdirAll(filepath.Join(dataDir, "logs"), 0o700); err != nil {
		return nil, fmt.Errorf("demo: logs dir: %w", err)
	}
	for _, a := range agents {
		dir := AgentDir(dataDir, a)
		tmp := TmpDir(dataDir, a)
		// Profiles a killed run left behind; no browser uses them now.
		_ = os.RemoveAll(tmp)
		for _, d := range []string{filepath.Join(dir, "home"), tmp} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				fp.stop(context.Background())
				return nil, fmt.Errorf("demo: agent dir: %w", err)
			}
		}
		if err := browserReach(dataDir, dir, tmp); err != nil {
			// Chromium then keeps its profile under /tmp: it still runs,
			// only the janitor cannot tell whose it is.
			log.Warn("demo: the browser's user cannot use the agent's TMPDIR", "agent", a.Name(), "err", err)
		}
		out, err := os.OpenFile(LogFile(dataDir, a), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			fp.stop(context.Background())
			return nil, fmt.Errorf("demo: agent log: %w", err)
		}
		fp.logs = append(fp.logs, out)
		fp.units = append(fp.units, unit.Start(unit.Spec{
			Name: a.Name(), Path: exe, Dir: dir, Env: agentEnv(dir, tmp), Output: out,
			Args: []string{"--role=agent", "--panel=" + panelURL, "--token-file=" + TokenFile(dataDir, a),
				"--state-dir=" + dir, "--browser-slots=1"},
			RestartSec: restartSec, StartLimitInterval: startLimitInterval, StartLimitBurst: startLimitBurst,
			RestartPreventExitStatus: []int{exitRetired}, StopTimeout: stopTimeout,
		}, log, nil))
		fp.tmps = append(fp.tmps, tmp)
	}
	return fp, nil
}

// startJanitor starts sweeping, once every unit is in fp.
func (fp *fleetProcs) startJanitor(log *slog.Logger) {
	fp.janitorDone = make(chan struct{})
	go fp.janitor(log)
}

// janitor sweeps every agent's TMPDIR every two seconds (see sweep).
func (fp *fleetProcs) janitor(log *slog.Logger) {
	defer close(fp.janitorDone)
	t := time.NewTicker(janitorEvery)
	defer t.Stop()
	for {
		select {
		case <-fp.stopJanitor:
			return
		case <-t.C:
		}
		for i, u := range fp.units {
			_, _, pid, _ := u.Status()
			sweep(fp.tmps[i], pid, log)
		}
	}
}

// janitorEvery is how often leftovers of crashed agents are looked for.
const janitorEvery = 2 * time.Second

// stop sends every agent SIGTERM at once and waits for all of them (each
// gets SIGKILL after its stop timeout).
func (fp *fleetProcs) stop(ctx context.Context) {
	close(fp.stopJanitor)
	if fp.janitorDone != nil {
		<-fp.janitorDone
	}
	var wg sync.WaitGroup
	for _, u := range fp.units {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u.Stop(ctx)
		}()
	}
	wg.Wait()
	for _, f := range fp.logs {
		_ = f.Close()
	}
}

// browserReach lets the unprivileged user Chromium runs as when the demo runs
// as root (app/browser) reach the agent's TMPDIR, where its profiles live so
// that the janitor finds them: the directories on the way become 0711
// (enter, not list; the agent's files stay 0600) and the TMPDIR its own.
// Not root: nothing to do.
func browserReach(dataDir, agentDir, tmp string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	for _, d := range []string{filepath.Dir(agentDir), agentDir, TempRoot(dataDir)} {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() && strings.HasPrefix(tmp, d+string(filepath.Separator)) {
			if err := os.Chmod(d, fi.Mode().Perm()|0o011); err != nil {
				return fmt.Errorf("demo: agent dir: %w", err)
			}
		}
	}
	if err := browser.PrepareTmpDir(tmp); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	return nil
}
