// Package embedded runs the panel's private Postgres cluster and Redis server
// under its data directory when no external ones are configured, and owns the
// data directory's lock so two panels never share one.
package embedded

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fleetwright/fleetwright/app/unit"
)

// start launches cmd in its own process group with deathSig delivered when
// the panel dies, however it dies (see unit.StartProcess for why one locked
// thread starts every child).
func start(cmd *exec.Cmd, deathSig syscall.Signal) error {
	return unit.StartProcess(cmd, deathSig)
}

// runAs describes the system user the database runs as.
type runAs struct {
	uid, gid uint32
	name     string
	cred     *syscall.Credential
}

// databaseUser picks who runs initdb and postgres: the current user, or the
// `postgres` system user when running as root (initdb refuses root).
func databaseUser() (runAs, error) {
	if os.Geteuid() != 0 {
		u, _ := user.Current()
		name := strconv.Itoa(os.Geteuid())
		if u != nil {
			name = u.Username
		}
		return runAs{uid: uint32(os.Geteuid()), gid: uint32(os.Getegid()), name: name}, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return runAs{}, errors.New("embedded: running as root, and initdb refuses root: install the Debian package postgresql (it creates the postgres system user) or run fleetwright as a non-root user")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return runAs{uid: uint32(uid), gid: uint32(gid), name: "postgres",
		cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}}, nil
}

// checkReachable fails with advice when user r cannot traverse every parent of dir.
func checkReachable(dir string, r runAs) error {
	if r.cred == nil {
		return nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for p := filepath.Dir(abs); ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("embedded: %w", err)
		}
		sys := st.Sys().(*syscall.Stat_t)
		m := st.Mode().Perm()
		ok := m&0o001 != 0 || (sys.Uid == r.uid && m&0o100 != 0) || (sys.Gid == r.gid && m&0o010 != 0)
		if !ok {
			return fmt.Errorf("embedded: the %s user cannot reach %s because %s is not traversable: run `chmod o+x %s` or choose a --data-dir elsewhere (e.g. /var/lib/fleetwright)", r.name, abs, p, p)
		}
		if p == "/" {
			return nil
		}
	}
}

// findBinary looks for name in $FLEET_PG_BIN, then the PATH, then the newest
// /usr/lib/postgresql/*/bin.
func findPGBinary(name string) (string, error) {
	if d := os.Getenv("FLEET_PG_BIN"); d != "" {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		return "", fmt.Errorf("embedded: %s not found in FLEET_PG_BIN=%s", name, d)
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	matches, _ := filepath.Glob(pgSearchGlob + name)
	best, bestV := "", -1
	for _, m := range matches {
		v, err := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(m))))
		if err == nil && v > bestV {
			best, bestV = m, v
		}
	}
	if best != "" {
		return best, nil
	}
	return "", fmt.Errorf("embedded: %s not found in PATH or /usr/lib/postgresql/*/bin: install the Debian package postgresql (apt-get install postgresql), set FLEET_PG_BIN to its bin directory, or set FLEET_DATABASE_URL to use an existing server", name)
}

// processIs reports whether pid is alive and its command line contains want.
func processIs(pid int, want string) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	return bytes.Contains(b, []byte(want))
}

// processesIn lists the processes whose working directory is dir.
func processesIn(dir string) []int {
	if dir == "" {
		return nil
	}
	want, err := filepath.EvalSymlinks(dir)
	if err != nil {
		want = dir
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err != nil || cwd != want {
			continue
		}
		// A zombie has no working directory left; this one is alive.
		out = append(out, pid)
	}
	return out
}

// readPidFile returns the pid on the first line of path, or 0.
func readPidFile(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// stopOrphan stops a process a killed panel left running: sig first, then
// SIGKILL when it does not exit within grace.
func stopOrphan(pid int, sig syscall.Signal, grace time.Duration) error {
	if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	time.Sleep(100 * time.Millisecond)
	return nil
}

// waitExit waits for cmd to exit for up to grace, then kills it.
func waitExit(cmd *exec.Cmd, exited <-chan struct{}, grace time.Duration) {
	select {
	case <-exited:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// shortSocketDir returns dir when a socket path inside it fits the kernel's
// 107-byte limit, or a private directory under /tmp named after dir.
func shortSocketDir(dir, sockName string) string {
	if len(filepath.Join(dir, sockName)) < 100 {
		return dir
	}
	h := fnv32(dir)
	return filepath.Join(os.TempDir(), fmt.Sprintf("fleetwright-%08x", h))
}

func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// pgSearchGlob is where Debian installs Postgres versions side by side.
var pgSearchGlob = "/usr/lib/postgresql/*/bin/"
