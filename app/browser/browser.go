// Package browser is the one Chromium launcher every role and every test
// uses. It drives Debian's chromium through go-rod with an explicit binary
// path and never downloads a browser: a missing binary is a clear error that
// names the package to install and the variable to set.
package browser

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/cdp"
	"github.com/go-rod/rod/lib/launcher"
	"github.com/go-rod/rod/lib/launcher/flags"
	"github.com/go-rod/rod/lib/proto"

	"github.com/fleetwright/fleetwright/app/unit"
)

// DefaultBinary is where Debian's chromium package installs the browser.
const DefaultBinary = "/usr/bin/chromium"

// EnvBinary overrides the binary path when Options.Binary is empty.
const EnvBinary = "FLEET_CHROMIUM"

// EnvUser names the unprivileged user Chromium runs as when this process is
// root, when Options.User is empty.
const EnvUser = "FLEET_BROWSER_USER"

// DefaultUser is that user when neither Options.User nor $FLEET_BROWSER_USER
// names one: it exists on every Debian system.
const DefaultUser = "nobody"

// BaseFlags are the switches every launch carries, besides --headless, a
// fresh --user-data-dir and --remote-debugging-pipe. They keep Chromium
// from phoning home, updating itself or needing a GPU or /dev/shm. Chromium's
// sandbox stays on: there is no --no-sandbox here (see Options.NoSandbox).
// WebRTC may use UDP only through the proxy (none does, so no UDP at all):
// STUN and TURN would otherwise let a page send packets around the egress
// guard's proxy to any address and port.
var BaseFlags = []string{
	"webrtc-ip-handling-policy=disable_non_proxied_udp",
	"disable-gpu",
	"disable-quic",
	"disable-background-networking",
	"disable-component-update",
	"disable-sync",
	"no-first-run",
	"disable-dev-shm-usage",
}

// Options configure one browser process. The per-account traits (user
// agent, language, timezone, viewport) are applied both as launch switches
// and, for pages opened with Browser.Page, through CDP emulation, so that
// navigator, HTTP headers and Intl all agree.
type Options struct {
	// Binary is the Chromium executable; empty means $FLEET_CHROMIUM, then
	// /usr/bin/chromium.
	Binary string
	// UserAgent replaces Chromium's user agent when set.
	UserAgent string
	// Language is the UI language and the first Accept-Language entry
	// ("en-US"). AcceptLanguage, when set, is the comma-separated list
	// of languages without q-values ("en-US,en"; Chromium adds them);
	// otherwise it is derived from Language.
	Language       string
	AcceptLanguage string
	// Timezone is an IANA name ("America/Chicago").
	Timezone string
	// Width and Height set the viewport; zero means 1280×800.
	Width, Height int
	// UserDataDir, when set, is a persistent profile the caller keeps
	// (created 0700 if missing): Close leaves it. When Chromium runs as
	// another user (this process is root), the profile and everything in it
	// are handed to that user, and every directory above it must let that
	// user through, or Launch fails at once naming the one that does not.
	// Empty means a fresh temporary profile that Close removes.
	UserDataDir string
	// Headful shows a window instead of running headless.
	Headful bool
	// ExtraFlags are additional switches without the leading dashes
	// ("name" or "name=value"), for a caller that knows why it needs them.
	ExtraFlags []string
	// User is the unprivileged user Chromium runs as when this process is
	// root (Chromium's sandbox refuses root, and the browser must not hold
	// the agent's files): empty means $FLEET_BROWSER_USER, then "nobody".
	// Ignored when not root: Chromium then runs as this process's user.
	User string
	// NoSandbox turns Chromium's sandbox off: the escape hatch for a
	// container that cannot give it user namespaces (--browser-no-sandbox).
	// Every launch with it logs a warning.
	NoSandbox bool
	// Log receives that warning; nil means slog.Default().
	Log *slog.Logger
	// StartTimeout bounds how long Chromium may take to answer on its
	// DevTools pipe; zero means DefaultStartTimeout. Past it, Chromium is
	// killed and Launch returns its last lines on stderr.
	StartTimeout time.Duration
}

// DefaultStartTimeout is Options.StartTimeout's default: a cold Chromium on
// a loaded machine takes seconds, never a minute.
const DefaultStartTimeout = 60 * time.Second

// Browser is a running Chromium with its CDP connection. Close kills the
// whole process group and removes the user-data dir.
type Browser struct {
	*rod.Browser
	opts    Options
	pid     int
	dataDir string
	keepDir bool
	cmd     *exec.Cmd
	exited  chan struct{}
	pipe    *pipe
	user    runAs
	stderr  tail

	closeOnce sync.Once
	closeErr  error
	stopOnce  sync.Once
	stopErr   error
}

// ErrNoBinary is returned (wrapped) when the Chromium binary is missing.
var ErrNoBinary = errors.New("browser: chromium binary not found")

// Binary resolves the executable path from opts, FLEET_CHROMIUM and the default.
func Binary(opts Options) string {
	if opts.Binary != "" {
		return opts.Binary
	}
	if v := os.Getenv(EnvBinary); v != "" {
		return v
	}
	return DefaultBinary
}

func checkBinary(bin string) error {
	st, err := os.Stat(bin)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w at %s: install the Debian package \"chromium\" (apt-get install chromium) or set %s to the binary's path", ErrNoBinary, bin, EnvBinary)
		}
		return fmt.Errorf("browser: check %s: %w", bin, err)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%w: %s is not an executable file: install the Debian package \"chromium\" or set %s", ErrNoBinary, bin, EnvBinary)
	}
	return nil
}

func (o Options) acceptLanguage() string {
	if o.AcceptLanguage != "" {
		return o.AcceptLanguage
	}
	if o.Language == "" {
		return ""
	}
	// Chromium adds the q-values itself; it wants the bare list.
	if base, _, _ := strings.Cut(o.Language, "-"); base != o.Language {
		return o.Language + "," + base
	}
	return o.Language
}

func (o Options) size() (int, int) {
	w, h := o.Width, o.Height
	if w <= 0 {
		w = 1280
	}
	if h <= 0 {
		h = 800
	}
	return w, h
}

// Launch starts a headless Chromium and connects to it. The context bounds
// the start only; the browser lives until Close.
func Launch(ctx context.Context, opts Options) (*Browser, error) {
	bin := Binary(opts)
	if err := checkBinary(bin); err != nil {
		return nil, err
	}
	who, err := browserUser(opts)
	if err != nil {
		return nil, err
	}
	keep := opts.UserDataDir != ""
	dir, tmp, err := userDataDir(who, opts.UserDataDir)
	if err != nil {
		return nil, err
	}
	w, h := opts.size()

	l := launcher.New().Context(ctx)
	// Replace go-rod's defaults wholesale: exactly our switches, no leakless
	// helper (the process group is killed by Close), never a download.
	l.Flags = map[flags.Flag][]string{
		flags.Bin:         {bin},
		flags.UserDataDir: {dir},
		// CDP over two pipes only this process holds, instead of a TCP
		// port any local process could connect to.
		"remote-debugging-pipe": nil,
		"window-size":           {strconv.Itoa(w), strconv.Itoa(h)},
	}
	if !opts.Headful {
		l.Flags[flags.Headless] = nil
	}
	for _, f := range append(append([]string(nil), BaseFlags...), opts.ExtraFlags...) {
		name, val, hasVal := strings.Cut(f, "=")
		if hasVal {
			l.Flags[flags.Flag(name)] = []string{val}
		} else {
			l.Flags[flags.Flag(name)] = nil
		}
	}
	if opts.UserAgent != "" {
		l.Flags["user-agent"] = []string{opts.UserAgent}
	}
	if opts.Language != "" {
		l.Flags["lang"] = []string{opts.Language}
	}
	if al := opts.acceptLanguage(); al != "" {
		l.Flags["accept-lang"] = []string{al}
	}
	if opts.NoSandbox {
		l.Flags["no-sandbox"] = nil
		log := opts.Log
		if log == nil {
			log = slog.Default()
		}
		log.Warn("browser: Chromium runs WITHOUT its sandbox (--browser-no-sandbox): a page that exploits the renderer runs as "+
			who.name+" with everything that user can read; give the container user namespaces and drop the flag",
			"binary", bin, "user", who.name)
	}
	env, err := browserEnv(who, dir, tmp, opts.Timezone)
	if err != nil {
		if !keep {
			_ = os.RemoveAll(dir)
		}
		return nil, err
	}
	l.Flags[flags.Env] = env

	// Chromium is started by us, not by go-rod, so it gets the parent-death
	// signal from unit.StartProcess: a SIGKILLed agent takes its browser
	// down instead of leaving it running (go-rod's own launch has no such
	// hook, and its leakless helper is an extra binary).
	b := &Browser{opts: opts, dataDir: dir, keepDir: keep, user: who}
	if err := b.start(ctx, l); err != nil {
		_ = b.kill()
		return nil, fmt.Errorf("browser: launch %s: %w", bin, err)
	}
	return b, nil
}

// browserEnv is Chromium's environment: this process's, with the timezone
// and, for a switched user, a HOME, XDG dirs and TMPDIR of that user's own
// (it cannot read root's; its caches and crash dumps go under its data dir).
// The dirs exist and belong to that user before Chromium starts.
func browserEnv(who runAs, dir, tmp, tz string) ([]string, error) {
	env := os.Environ()
	if tz != "" {
		env = append(env, "TZ="+tz)
	}
	if !who.switched {
		return env, nil
	}
	kept := env[:0]
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		// root's session dirs: unusable by the browser's user.
		if k == "XDG_RUNTIME_DIR" || k == "XDG_DATA_HOME" || k == "XDG_STATE_HOME" {
			continue
		}
		kept = append(kept, kv)
	}
	env = kept
	sub := map[string]string{"XDG_CONFIG_HOME": ".config", "XDG_CACHE_HOME": ".cache", "XDG_DATA_HOME": ".local/share", "XDG_STATE_HOME": ".local/state"}
	env = append(env, "HOME="+dir, "TMPDIR="+tmp)
	for _, k := range []string{"XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"} {
		d := filepath.Join(dir, sub[k])
		if err := mkdirFor(who, dir, d); err != nil {
			return nil, err
		}
		env = append(env, k+"="+d)
	}
	return env, nil
}

// mkdirFor creates d (under base, which who owns) and the dirs between,
// owned by who.
func mkdirFor(who runAs, base, d string) error {
	rel, err := filepath.Rel(base, d)
	if err != nil {
		return fmt.Errorf("browser: %s: %w", d, err)
	}
	cur := base
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		cur = filepath.Join(cur, part)
		if err := os.Mkdir(cur, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("browser: %s for %s, who runs Chromium: %w", cur, who.name, err)
		}
		if err := os.Lchown(cur, int(who.uid), int(who.gid)); err != nil {
			return fmt.Errorf("browser: %s for %s, who runs Chromium: %w", cur, who.name, err)
		}
	}
	return nil
}

// PID is the browser's main process id (also its process group id).
func (b *Browser) PID() int { return b.pid }

// User is the name of the user Chromium runs as.
func (b *Browser) User() string { return b.user.name }

// Sandboxed reports whether Chromium runs with its sandbox (always, unless
// Options.NoSandbox).
func (b *Browser) Sandboxed() bool { return !b.opts.NoSandbox }

// DataDir is the user-data dir (removed by Close unless Options.UserDataDir set it).
func (b *Browser) DataDir() string { return b.dataDir }

// Page opens a blank page with the options' user agent, Accept-Language,
// timezone and viewport applied through CDP, so the traits hold even where
// a launch switch does not reach (workers, Intl, the first request).
func (b *Browser) Page(ctx context.Context) (*rod.Page, error) {
	p, err := b.Browser.Context(ctx).Page(proto.TargetCreateTarget{URL: "about:blank"})
	if err != nil {
		return nil, fmt.Errorf("browser: new page: %w", err)
	}
	if err := b.emulate(p); err != nil {
		_ = p.Close()
		return nil, err
	}
	return p, nil
}

// PageVia opens a blank page, emulated like Page, in a new browser context
// whose only proxy is proxyURL, loopback included. dispose closes the
// context with its pages. One Chromium can so serve pages through several
// proxies (a crawler's pool) at once.
func (b *Browser) PageVia(ctx context.Context, proxyURL string) (page *rod.Page, dispose func(), err error) {
	res, err := proto.TargetCreateBrowserContext{DisposeOnDetach: true, ProxyServer: proxyURL,
		ProxyBypassList: "<-loopback>"}.Call(b.Browser.Context(ctx))
	if err != nil {
		return nil, nil, fmt.Errorf("browser: new context: %w", err)
	}
	dispose = func() {
		_ = proto.TargetDisposeBrowserContext{BrowserContextID: res.BrowserContextID}.Call(b.Browser)
	}
	inContext := *b.Browser
	inContext.BrowserContextID = res.BrowserContextID
	p, err := inContext.Context(ctx).Page(proto.TargetCreateTarget{URL: "about:blank"})
	if err != nil {
		dispose()
		return nil, nil, fmt.Errorf("browser: new page: %w", err)
	}
	if err := b.emulate(p); err != nil {
		_ = p.Close()
		dispose()
		return nil, nil, err
	}
	return p, dispose, nil
}

func (b *Browser) emulate(p *rod.Page) error {
	o := b.opts
	if o.UserAgent != "" || o.acceptLanguage() != "" {
		ua := o.UserAgent
		if ua == "" {
			v, err := proto.BrowserGetVersion{}.Call(p)
			if err != nil {
				return fmt.Errorf("browser: version: %w", err)
			}
			ua = v.UserAgent
		}
		if err := (proto.NetworkSetUserAgentOverride{UserAgent: ua, AcceptLanguage: o.acceptLanguage()}).Call(p); err != nil {
			return fmt.Errorf("browser: user agent override: %w", err)
		}
	}
	if o.Language != "" {
		if err := (proto.EmulationSetLocaleOverride{Locale: strings.ReplaceAll(o.Language, "-", "_")}).Call(p); err != nil {
			return fmt.Errorf("browser: locale override: %w", err)
		}
	}
	if o.Timezone != "" {
		if err := (proto.EmulationSetTimezoneOverride{TimezoneID: o.Timezone}).Call(p); err != nil {
			return fmt.Errorf("browser: timezone override: %w", err)
		}
	}
	w, h := o.size()
	if err := (proto.EmulationSetDeviceMetricsOverride{Width: w, Height: h, DeviceScaleFactor: 1}).Call(p); err != nil {
		return fmt.Errorf("browser: viewport: %w", err)
	}
	return nil
}

// Close ends the CDP connection, kills Chromium's whole process group and
// removes the user-data dir. It is safe to call more than once.
func (b *Browser) Close() error {
	b.closeOnce.Do(func() {
		if b.Browser != nil {
			// A polite close first lets Chromium flush; the kill below
			// makes sure no helper process outlives us either way.
			done := make(chan struct{})
			go func() { _ = b.Browser.Close(); close(done) }()
			select {
			case <-done:
			case <-time.After(2 * time.Second):
			}
			if b.keepDir {
				// A profile that stays must be written out: Chromium saves
				// its cookies (sign-ins) and preferences on its way out,
				// after Browser.close has already answered.
				select {
				case <-b.exited:
				case <-time.After(10 * time.Second):
				}
			}
		}
		b.closeErr = b.kill()
	})
	return b.closeErr
}

func (b *Browser) kill() error {
	err := b.stop()
	if b.keepDir {
		return err
	}
	if rerr := os.RemoveAll(b.dataDir); rerr != nil {
		return errors.Join(err, fmt.Errorf("browser: remove user-data dir: %w", rerr))
	}
	return err
}

// stop kills Chromium's process group, waits for it to be gone and closes
// the pipe (which ends go-rod's reader and every call still waiting). Only
// the first call acts: a pid is never signalled after it was reaped.
func (b *Browser) stop() error {
	b.stopOnce.Do(func() {
		if b.pid > 0 {
			killGroup(b.pid)
			select {
			case <-b.exited:
			case <-time.After(10 * time.Second):
				b.stopErr = fmt.Errorf("browser: chromium pid %d did not exit", b.pid)
			}
			waitGroupGone(b.pid, 5*time.Second)
		}
		if b.pipe != nil {
			_ = b.pipe.Close()
		}
	})
	return b.stopErr
}

func killGroup(pid int) {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

// waitGroupGone waits until no process of the group is left, so a test that
// checks for survivors right after Close does not race the kernel.
func waitGroupGone(pgid int, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if len(GroupMembers(pgid)) == 0 {
			return
		}
		killGroup(pgid)
		time.Sleep(20 * time.Millisecond)
	}
}

// GroupMembers lists live (non-zombie) processes whose process group is
// pgid, read from /proc. Tests use it to prove nothing survived Close.
func GroupMembers(pgid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the parenthesised command name: state ppid pgrp ...
		s := string(raw)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid {
			out = append(out, pid)
		}
	}
	return out
}

// start runs Chromium with the launcher's arguments, its DevTools pipes as
// fds 3 and 4, as the browser's user, and connects go-rod over the pipes.
func (b *Browser) start(ctx context.Context, l *launcher.Launcher) error {
	bin := l.Get(flags.Bin)
	cmd := exec.Command(bin, l.FormatArgs()...)
	if env, ok := l.GetFlags(flags.Env); ok {
		cmd.Env = env
	}
	cmd.Dir = b.dataDir
	p, childIn, childOut, err := newPipes()
	if err != nil {
		return err
	}
	b.pipe = p
	cmd.ExtraFiles = []*os.File{childIn, childOut} // fd 3: Chromium reads; fd 4: it writes
	if b.user.switched {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: b.user.uid, Gid: b.user.gid, NoSetGroups: true}}
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		_ = childIn.Close()
		_ = childOut.Close()
		return err
	}
	err = unit.StartProcess(cmd, syscall.SIGKILL)
	// Chromium holds its own copies now; ours would keep the pipe open
	// after Chromium dies, and a read would never see the end.
	_ = childIn.Close()
	_ = childOut.Close()
	if err != nil {
		if errors.Is(err, fs.ErrPermission) && b.user.switched {
			// exec reports a chdir it could not make as the binary's fault.
			return fmt.Errorf("%w: %s, who runs Chromium, may not run %s or enter its working dir %s", err, b.user.name, bin, b.dataDir)
		}
		return err
	}
	b.cmd, b.pid, b.exited = cmd, cmd.Process.Pid, make(chan struct{})
	go func() {
		// Keep draining stderr for the browser's whole life: a full pipe
		// would block Chromium. The last lines explain a failed start.
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			b.stderr.add(sc.Text())
		}
		_, _ = io.Copy(io.Discard, stderr)
		_ = cmd.Wait()
		close(b.exited)
	}()

	// One round trip proves Chromium is up and speaking CDP on the pipe.
	// go-rod's Connect waits on a context that must outlive the start (its
	// event loop hangs off it), so the bound is kept here: a Chromium that
	// neither answers nor exits (a profile it cannot use, a sandbox that
	// cannot start) is killed after the timeout, which ends the pipe and
	// with it every call still waiting.
	rb := rod.New().Client(cdp.New().Start(p))
	connected := make(chan error, 1)
	go func() {
		err := rb.Connect()
		if err == nil {
			_, err = proto.BrowserGetVersion{}.Call(rb)
		}
		connected <- err
	}()
	limit := b.opts.StartTimeout
	if limit <= 0 {
		limit = DefaultStartTimeout
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	var cause error
	exited, answered := false, false
	select {
	case err = <-connected:
		if err == nil {
			b.Browser = rb
			return nil
		}
		cause, answered = err, true
		// A closed pipe mostly means Chromium exited: let it be reaped, so
		// that its status and last words are complete.
		select {
		case <-b.exited:
			exited = true
		case <-time.After(2 * time.Second):
		}
	case <-b.exited:
		exited = true
	case <-timer.C:
		cause = fmt.Errorf("chromium did not answer on its DevTools pipe within %s and was killed", limit)
	case <-ctx.Done():
		cause = ctx.Err()
	}
	_ = b.stop()
	if !answered {
		<-connected // the pipe is closed: Connect returns
	}
	if errors.Is(cause, context.Canceled) || errors.Is(cause, context.DeadlineExceeded) {
		return fmt.Errorf("start interrupted: %w", cause)
	}
	return b.startError(cause, exited)
}

// startError explains a failed start: Chromium's exit status and its last
// lines on stderr, which say why far better than the pipe can.
func (b *Browser) startError(cause error, exited bool) error {
	msg := "chromium"
	if exited {
		msg += " exited during its start (" + b.cmd.ProcessState.String() + ")"
		if cause != nil {
			msg += ": " + cause.Error()
		}
	} else {
		msg = cause.Error()
	}
	last := b.stderr.lines()
	if len(last) > 0 {
		msg += "; its last words: " + strings.Join(last, " | ")
	}
	if strings.Contains(strings.Join(last, "\n"), "sandbox") {
		msg += " — Chromium's sandbox needs unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; " +
			"in a container, a seccomp profile that allows them); only where that is impossible, run with --browser-no-sandbox"
	}
	if b.user.switched {
		msg += " (Chromium ran as " + b.user.name + ", with its profile in " + b.dataDir + ")"
	}
	return errors.New(msg)
}

// tail keeps the last lines Chromium wrote on stderr.
type tail struct {
	mu   sync.Mutex
	last []string
}

func (t *tail) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(line) > 300 {
		line = line[:300]
	}
	t.last = append(t.last, line)
	if len(t.last) > 6 {
		t.last = t.last[len(t.last)-6:]
	}
}

func (t *tail) lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.last...)
}
