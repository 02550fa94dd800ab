package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Lock is an exclusive, process-lifetime lock on a data directory. The kernel
// releases it when the process dies, however it dies, so a SIGKILLed panel
// never leaves a stale lock behind.
type Lock struct {
	f *os.File
}

// ErrLocked is returned when another process holds the data directory.
var ErrLocked = errors.New("embedded: data directory is in use")

// LockDataDir creates dir if needed and takes its lock without waiting.
func LockDataDir(dir, owner string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("embedded: create data dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, "fleetwright.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		if errors.Is(err, syscall.EROFS) || errors.Is(err, os.ErrPermission) {
			return nil, readOnly(dir, path, err)
		}
		return nil, fmt.Errorf("embedded: open lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, locked(dir, path)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(owner+" (pid "+strconv.Itoa(os.Getpid())+")\n"), 0)
	return &Lock{f: f}, nil
}

// readOnly handles a data directory this process may only read (a one-shot
// unit with ReadOnlyPaths=, or another user's directory): a shared lock,
// which needs no write access, tells whether a panel holds it. Held, the
// caller attaches to that panel's cluster as with ErrLocked; free, nothing
// here could start the cluster, and the error says so.
func readOnly(dir, path string, cause error) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("embedded: %s is read-only here and holds no lock file (%v): it is not a panel's data directory, or no panel ever ran on it; check --data-dir", dir, cause)
	}
	if err != nil {
		return fmt.Errorf("embedded: open lock %s: %w", path, err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return locked(dir, path)
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return fmt.Errorf("embedded: no panel is running on %s and it is read-only here (%v), so its embedded Postgres cannot be started: run this while the panel runs, or with write access to --data-dir", dir, cause)
}

// locked is ErrLocked naming the lock's holder.
func locked(dir, path string) error {
	// The holder writes its name right after it took the lock; a panel
	// that lost a start race reads the file in between: wait for the name
	// a moment (bounded) rather than call the panel "another process".
	var holder string
	for i := 0; i < 40 && holder == ""; i++ {
		if i > 0 {
			time.Sleep(5 * time.Millisecond)
		}
		b, _ := os.ReadFile(path)
		holder = strings.TrimSpace(string(b))
	}
	if holder == "" {
		holder = "another process"
	}
	abs, _ := filepath.Abs(dir)
	return fmt.Errorf("%w: %s is held by %s; stop it first or choose another --data-dir", ErrLocked, abs, holder)
}

// Release drops the lock.
func (l *Lock) Release() {
	if l == nil || l.f == nil {
		return
	}
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	_ = l.f.Close()
	l.f = nil
}
