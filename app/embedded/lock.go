package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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
		return nil, fmt.Errorf("embedded: open lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		holder := strings.TrimSpace(string(b))
		if holder == "" {
			holder = "another process"
		}
		abs, _ := filepath.Abs(dir)
		return nil, fmt.Errorf("%w: %s is held by %s; stop it first or choose another --data-dir", ErrLocked, abs, holder)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(owner+" (pid "+strconv.Itoa(os.Getpid())+")\n"), 0)
	return &Lock{f: f}, nil
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
