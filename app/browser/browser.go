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
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/launcher"
	"github.com/go-rod/rod/lib/launcher/flags"
	"github.com/go-rod/rod/lib/proto"

	"github.com/fleetwright/fleetwright/app/unit"
)

// DefaultBinary is where Debian's chromium package installs the browser.
const DefaultBinary = "/usr/bin/chromium"

// EnvBinary overrides the binary path when Options.Binary is empty.
const EnvBinary = "FLEET_CHROMIUM"

// BaseFlags are the switches every launch carries, besides --headless, a
// fresh --user-data-dir and --remote-debugging-port=0. They keep Chromium
// from phoning home, updating itself or needing a GPU or /dev/shm.
var BaseFlags = []string{
	"no-sandbox",
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
	// UserDataDir, when set, is a persistent profile the caller owns
	// (created 0700 if missing): Close keeps it. Empty means a fresh
	// temporary profile that Close removes.
	UserDataDir string
	// Headful shows a window instead of running headless.
	Headful bool
	// ExtraFlags are additional switches without the leading dashes
	// ("name" or "name=value"), for a caller that knows why it needs them.
	ExtraFlags []string
}

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

	closeOnce sync.Once
	closeErr  error
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
	dir, keep := opts.UserDataDir, opts.UserDataDir != ""
	var err error
	if keep {
		err = os.MkdirAll(dir, 0o700)
	} else {
		dir, err = os.MkdirTemp("", "fleet-chromium-")
	}
	if err != nil {
		return nil, fmt.Errorf("browser: user-data dir: %w", err)
	}
	w, h := opts.size()

	l := launcher.New().Context(ctx)
	// Replace go-rod's defaults wholesale: exactly our switches, no leakless
	// helper (the process group is killed by Close), never a download.
	l.Flags = map[flags.Flag][]string{
		flags.Bin:                 {bin},
		flags.UserDataDir:         {dir},
		flags.RemoteDebuggingPort: {"0"},
		"window-size":             {strconv.Itoa(w), strconv.Itoa(h)},
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
	if opts.Timezone != "" {
		l.Flags[flags.Env] = append(os.Environ(), "TZ="+opts.Timezone)
	}

	// Chromium is started by us, not by go-rod, so it gets the parent-death
	// signal from unit.StartProcess: a SIGKILLed agent takes its browser
	// down instead of leaving it running (go-rod's own launch has no such
	// hook, and its leakless helper is an extra binary).
	b := &Browser{opts: opts, dataDir: dir, keepDir: keep}
	u, err := b.start(ctx, l)
	if err != nil {
		b.kill()
		return nil, fmt.Errorf("browser: launch %s: %w", bin, err)
	}
	rb := rod.New().ControlURL(u)
	if err := rb.Connect(); err != nil {
		b.kill()
		return nil, fmt.Errorf("browser: connect: %w", err)
	}
	b.Browser = rb
	return b, nil
}

// PID is the browser's main process id (also its process group id).
func (b *Browser) PID() int { return b.pid }

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
		}
		b.closeErr = b.kill()
	})
	return b.closeErr
}

func (b *Browser) kill() error {
	if b.pid > 0 {
		killGroup(b.pid)
		select {
		case <-b.exited:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("browser: chromium pid %d did not exit", b.pid)
		}
		waitGroupGone(b.pid, 5*time.Second)
	}
	if b.keepDir {
		return nil
	}
	if err := os.RemoveAll(b.dataDir); err != nil {
		return fmt.Errorf("browser: remove user-data dir: %w", err)
	}
	return nil
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

// devtoolsRe finds the DevTools address Chromium prints on its stderr.
var devtoolsRe = regexp.MustCompile(`DevTools listening on (ws://\S+)`)

// start runs Chromium with the launcher's arguments and returns its DevTools
// WebSocket address.
func (b *Browser) start(ctx context.Context, l *launcher.Launcher) (string, error) {
	bin := l.Get(flags.Bin)
	cmd := exec.Command(bin, l.FormatArgs()...)
	if env, ok := l.GetFlags(flags.Env); ok {
		cmd.Env = env
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", err
	}
	if err := unit.StartProcess(cmd, syscall.SIGKILL); err != nil {
		return "", err
	}
	b.cmd, b.pid, b.exited = cmd, cmd.Process.Pid, make(chan struct{})
	found := make(chan string, 1)
	go func() {
		// Keep draining stderr for the browser's whole life: a full pipe
		// would block Chromium.
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if m := devtoolsRe.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		_ = cmd.Wait()
		close(b.exited)
	}()
	select {
	case u := <-found:
		return u, nil
	case <-b.exited:
		return "", errors.New("chromium exited before it listened for DevTools")
	case <-ctx.Done():
		return "", ctx.Err()
	case <-time.After(60 * time.Second):
		return "", errors.New("chromium did not listen for DevTools within 60 s")
	}
}
