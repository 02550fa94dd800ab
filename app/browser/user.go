package browser

import (
	"errors"
	"fmt"
	"io/fs"
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

// userDataDir returns Chromium's user-data dir, owned by its user, and the
// TMPDIR Chromium gets. Chromium binds its singleton socket under TMPDIR, so
// that must be writable by its user and short (a socket path has at most
// 107 bytes): for a switched user, $TMPDIR when that user can reach and
// write it (a runner prepares it with PrepareTmpDir), else /tmp.
//
// With persistent empty the dir is a fresh one under that TMPDIR. Else it is
// the caller's persistent profile: created 0700 if missing and, for a
// switched user, handed over to that user with everything in it (a profile
// an earlier run as root left behind would otherwise be unwritable and
// Chromium would not start). A switched user must be able to reach it: when
// a directory above it bars the way, the error names that directory and
// what to do, rather than Chromium failing in a way it does not explain.
func userDataDir(who runAs, persistent string) (dir, tmp string, err error) {
	tmp = os.TempDir()
	if who.switched && !(reachable(tmp, who) && writable(tmp, who)) {
		tmp = "/tmp"
		if !reachable(tmp, who) || !writable(tmp, who) {
			return "", "", fmt.Errorf("browser: neither $TMPDIR nor /tmp can be written by %s, who runs Chromium: set TMPDIR to a directory %s may write (mode 1777 or its own)", who.name, who.name)
		}
	}
	if persistent != "" {
		dir, err = persistentDir(who, persistent)
		return dir, tmp, err
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

// persistentDir prepares the caller's persistent profile for who.
func persistentDir(who runAs, dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("browser: profile %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("browser: profile %s: %w", dir, err)
	}
	if !who.switched {
		return dir, nil
	}
	if bar := barrier(filepath.Dir(dir), who); bar != "" {
		return "", fmt.Errorf("browser: the profile %s is out of reach of %s, who runs Chromium because this process is root: %s; "+
			"let %s through (chmod o+x on that directory), keep the profile under a directory it may enter, or run as a non-root user",
			dir, who.name, bar, who.name)
	}
	// Hand the profile and everything in it to the browser's user; walk it
	// only when something in it is not that user's yet.
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == who.uid && st.Gid == who.gid {
			return nil
		}
		return os.Lchown(p, int(who.uid), int(who.gid))
	})
	if err == nil {
		err = os.Chmod(dir, 0o700)
	}
	if err != nil {
		return "", fmt.Errorf("browser: hand the profile %s to %s, who runs Chromium: %w", dir, who.name, err)
	}
	return dir, nil
}

// LetThrough lets Chromium's user (name, or $FLEET_BROWSER_USER, else
// nobody) enter dir, which this process owns, when this process is root:
// dir gains the execute bit for others — enter, not list; the files in it
// keep their own modes (0600 for state and keys) — so that a persistent
// profile under it is reachable. The directories above dir are left as
// they are: when one of them bars the way, the error names it. Not root:
// nothing to do.
func LetThrough(dir, name string) error {
	who, err := browserUser(Options{User: name})
	if err != nil || !who.switched {
		return err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("browser: %s: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("browser: %w", err)
	}
	if mode := fi.Mode().Perm(); mode&0o001 == 0 {
		if err := os.Chmod(dir, mode|0o001); err != nil {
			return fmt.Errorf("browser: let %s, who runs Chromium, through %s: %w", who.name, dir, err)
		}
	}
	if bar := barrier(dir, who); bar != "" {
		return fmt.Errorf("browser: %s, who runs Chromium because this process is root, cannot reach %s: %s; "+
			"let it through (chmod o+x on that directory), choose a directory it may enter, or run as a non-root user",
			who.name, dir, bar)
	}
	return nil
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
func reachable(dir string, who runAs) bool { return barrier(dir, who) == "" }

// barrier describes the first directory from the root down to dir (dir
// included) that who may not traverse, or returns "" when there is none.
func barrier(dir string, who runAs) string {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err.Error()
	}
	var chain []string
	for d := dir; ; d = filepath.Dir(d) {
		chain = append(chain, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	for i := len(chain) - 1; i >= 0; i-- {
		d := chain[i]
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Sprintf("%s: %v", d, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return d + " has no owner to check"
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
			owner := strconv.Itoa(int(st.Uid))
			if u, err := user.LookupId(owner); err == nil {
				owner = u.Username
			}
			return fmt.Sprintf("%s (mode %04o, owner %s) does not let it through", d, mode, owner)
		}
	}
	return ""
}
