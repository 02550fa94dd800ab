package demo

import (
	"bytes"
	"github.com/fleetwright/fleetwright/app/unit"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
)

// Procs lists the processes (other than this one) whose command line
// mentions dir: the agents run with their state dirs on theirs, and their
// Chromium with a user-data dir under the agent's TMPDIR.
func Procs(dir string) map[int]string {
	out := map[int]string{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	self := os.Getpid()
	needle := []byte(filepath.Clean(dir))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmd, needle) {
			continue
		}
		out[pid] = string(bytes.ReplaceAll(bytes.TrimRight(cmd, "\x00"), []byte{0}, []byte{' '}))
	}
	return out
}

// reap kills what is left under dir after the agents stopped: a Chromium
// whose agent was killed before it could close it.
func reap(dir string, log *slog.Logger) {
	for pid, cmd := range Procs(dir) {
		name := cmd
		if len(name) > 80 {
			name = name[:80]
		}
		log.Warn("demo: killing a process left behind", "pid", pid, "cmd", name)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// descends reports whether pid is root or one of its descendants.
func descends(pid, root int) bool {
	for i := 0; i < 64 && pid > 1; i++ {
		if pid == root {
			return true
		}
		pid = unit.ParentPID(pid)
	}
	return root > 0 && pid == root
}

// profileRe finds a Chromium profile (user-data dir) in a command line; the
// browser's helpers (crashpad runs detached, its parent is init) name it too.
var profileRe = regexp.MustCompile(`fleet-chromium-[0-9]+`)

// sweep kills the processes under an agent's TMPDIR that its running
// process (pid live, 0 when none) does not own: the Chromium of an earlier
// instance that was killed before it could close it, with the helpers of
// that profile. systemd does the same when a unit's main process dies
// (KillMode=mixed kills what is left in its cgroup); without it a crashing
// agent would leave a browser behind at every restart.
func sweep(tmp string, live int, log *slog.Logger) int {
	procs := Procs(tmp)
	owned := map[string]bool{}
	for pid, cmd := range procs {
		if live > 0 && descends(pid, live) {
			for _, p := range profileRe.FindAllString(cmd, -1) {
				owned[p] = true
			}
		}
	}
	killed := 0
	for pid, cmd := range procs {
		if live > 0 && descends(pid, live) {
			continue
		}
		p := profileRe.FindString(cmd)
		if p != "" && owned[p] {
			continue // a live browser's detached helper
		}
		log.Warn("demo: killing a process its agent left behind", "pid", pid, "profile", p)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		killed++
	}
	return killed
}
