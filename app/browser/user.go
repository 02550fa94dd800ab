package browser

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// runAs is who Chromium runs as.
type runAs struct {
	name     string
	uid, gid uint32
	// switched: this process is root and Chromium runs as name instead.
	switched bool
}

// browserUser picks Chromium's user: this process's own, or, when this
// process is root (tests, CI, `make run`), the unprivileged user of
// Options.User, $FLEET_BROWSER_USER or "nobody" — the way the embedded
// Postgres runs as `postgres`. Chromium's sandbox refuses to run as root,
// and a browser running as root could read the agent's token, credentials
// and state.
func browserUser(opts Options) (runAs, error) {
	if os.Geteuid() != 0 {
		name := strconv.Itoa(os.Geteuid())
		if u, err := user.LookupId(name); err == nil {
			name = u.Username
		}
		return runAs{name: name, uid: uint32(os.Geteuid()), gid: uint32(os.Getegid())}, nil
	}
	name := opts.User
	if name == "" {
		name = os.Getenv(EnvUser)
	}
	if name == "" {
		name = DefaultUser
	}
	u, err := user.Lookup(name)
	if err != nil {
		return runAs{}, fmt.Errorf("browser: running as root, Chromium must run as an unprivileged user, and %q does not exist: create it (useradd --system --no-create-home --shell /usr/sbin/nologin %s) or name another with %s",
			name, name, EnvUser)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return runAs{}, fmt.Errorf("browser: user %s: %w", name, err)
	}
	if uid == 0 {
		return runAs{}, fmt.Errorf("browser: %s names root; Chromium must run as an unprivileged user", EnvUser)
	}
	return runAs{name: name, uid: uint32(uid), gid: uint32(gid), switched: true}, nil
}

// userDataDir makes Chromium's fresh user-data dir, owned by its user, and
// returns it with the TMPDIR Chromium gets. Chromium binds its singleton
// socket under TMPDIR, so that must be writable by its user and short (a
// socket path has at most 107 bytes): for a switched user, $TMPDIR when that
// user can reach and write it (a runner prepares it with PrepareTmpDir),
// else /tmp.
func userDataDir(who runAs) (dir, tmp string, err error) {
	tmp = os.TempDir()
	if who.switched && !(reachable(tmp, who) && writable(tmp, who)) {
		tmp = "/tmp"
		if !reachable(tmp, who) || !writable(tmp, who) {
			return "", "", fmt.Errorf("browser: neither $TMPDIR nor /tmp can be written by %s, who runs Chromium", who.name)
		}
	}
	dir, err = os.MkdirTemp(tmp, "fleet-chromium-")
	if err != nil {
		return "", "", fmt.Errorf("browser: user-data dir: %w", err)
	}
	if who.switched {
		if err := os.Chown(dir, int(who.uid), int(who.gid)); err != nil {
			_ = os.RemoveAll(dir)
			return "", "", fmt.Errorf("browser: user-data dir for %s: %w", who.name, err)
		}
	}
	return dir, tmp, nil
}

// PrepareTmpDir makes dir fit to be the TMPDIR of the agents a runner (the
// demo, the load test) starts as root: owned by the user their Chromium will
// run as ($FLEET_BROWSER_USER, else nobody), mode 0700, so the browsers'
// profiles stay under it. The directories above it must let that user
// through (chmod o+x); an error says so. Not root: nothing to do.
func PrepareTmpDir(dir string) error {
	who, err := browserUser(Options{})
	if err != nil || !who.switched {
		return err
	}
	if err := os.Chown(dir, int(who.uid), int(who.gid)); err != nil {
		return fmt.Errorf("browser: TMPDIR %s for %s: %w", dir, who.name, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("browser: TMPDIR %s: %w", dir, err)
	}
	if !reachable(dir, who) {
		return fmt.Errorf("browser: %s, who runs Chromium, cannot reach %s: let it through the directories above (chmod o+x)", who.name, dir)
	}
	return nil
}

// writable reports whether who may create entries in dir.
func writable(dir string, who runAs) bool {
	fi, err := os.Stat(dir)
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	mode := fi.Mode().Perm()
	switch {
	case st.Uid == who.uid:
		return mode&0o300 == 0o300
	case st.Gid == who.gid:
		return mode&0o030 == 0o030
	}
	return mode&0o003 == 0o003
}

// reachable reports whether who may traverse dir and every directory above
// it (the execute bit of owner, group or others, as applies).
func reachable(dir string, who runAs) bool {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for {
		fi, err := os.Stat(dir)
		if err != nil {
			return false
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return false
		}
		mode := fi.Mode().Perm()
		var bit os.FileMode
		switch {
		case st.Uid == who.uid:
			bit = 0o100
		case st.Gid == who.gid:
			bit = 0o010
		default:
			bit = 0o001
		}
		if mode&bit == 0 {
			return false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return true
		}
		dir = parent
	}
}
