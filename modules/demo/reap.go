package demo

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
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
