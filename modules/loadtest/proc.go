package loadtest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fleetwright/fleetwright/app/unit"
)

// proc is one supervised child process of the run (a panel replica or an
// agent) with its output captured to a log file.
type proc struct {
	name    string
	u       *unit.Unit
	out     *sink
	agent   *agentPlan // nil for a panel
	agentID string
	replica int
	// relay carries an agent's connection to its replica (agent_panel_partition).
	relay *relay
}

// sink writes a child's output to its log file and counts the lines that
// match a marker (a panel's "panel ready", once per start).
type sink struct {
	mu      sync.Mutex
	f       *os.File
	partial []byte
	marker  []byte
	marks   int
	alarms  int // "ALARM: cell failing" lines
	restore int // "cell restored" lines
	// count is the process's log volume (logvolume.go).
	count *logCount
}

func newSink(path, marker string, count *logCount) (*sink, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("loadtest: open log: %w", err)
	}
	return &sink{f: f, marker: []byte(marker), count: count}, nil
}

func (s *sink) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count.add(b)
	n, err := s.f.Write(b)
	buf := append(s.partial, b...)
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			break
		}
		line := buf[:i]
		s.count.countHeld(line)
		if len(s.marker) > 0 && bytes.Contains(line, s.marker) {
			s.marks++
		}
		if bytes.Contains(line, []byte("ALARM: cell failing")) {
			s.alarms++
		}
		if bytes.Contains(line, []byte("cell restored")) {
			s.restore++
		}
		buf = buf[i+1:]
	}
	if len(buf) > 64<<10 {
		buf = buf[len(buf)-64<<10:]
	}
	s.partial = append([]byte(nil), buf...)
	return n, err
}

func (s *sink) counts() (marks, alarms, restored int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.marks, s.alarms, s.restore
}

func (s *sink) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.f.Close()
}

// waitMarks waits until the sink has seen at least n markers.
func (s *sink) waitMarks(ctx context.Context, n int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if m, _, _ := s.counts(); m >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("loadtest: no %q within %s", s.marker, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// pid returns the child's current pid (0 when not running).
func (p *proc) pid() int {
	_, _, pid, _ := p.u.Status()
	return pid
}

// childEnv is this process's environment without any FLEET_ variable (the
// run's own settings must not leak into its children), plus extra.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLEET_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// freePort asks the kernel for a free loopback port. A replica restarted
// after a kill must come back on the same address, so ports are fixed for
// the run rather than :0 per start.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("loadtest: free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// reapUnder kills every process that carries the run's scratch directory
// in its command line or as its TMPDIR: Chromium instances (their
// user-data dirs live there) that an agent killed with SIGKILL left
// behind. This process and its ancestors are never touched. It returns
// how many it killed.
func reapUnder(scratch string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	spare := map[int]bool{}
	for pid := os.Getpid(); pid > 1 && !spare[pid]; pid = unit.ParentPID(pid) {
		spare[pid] = true
	}
	mark := []byte(scratch + string(filepath.Separator))
	env := []byte("TMPDIR=" + scratch + "\x00")
	killed := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || spare[pid] || pid <= 1 {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		environ, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if !bytes.Contains(cmdline, mark) && !bytes.Contains(environ, env) {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	return killed
}

// countBrowsers counts the Chromium browser processes (not their
// renderers and helpers) whose user-data dir is under scratch.
func countBrowsers(scratch string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	mark := []byte("--user-data-dir=" + scratch + string(filepath.Separator))
	n := 0
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if bytes.Contains(cmdline, mark) && !bytes.Contains(cmdline, []byte("--type=")) {
			n++
		}
	}
	return n
}
