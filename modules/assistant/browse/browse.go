// Package browse is the assistant's hold on the person's browser: it
// launches Chromium on a dedicated persistent profile (the default) or
// attaches to a Chrome the person started with remote debugging, keeps
// named tabs, reads pages into a compact numbered view with hidden text
// removed, and carries out clicks, typing and selection. Every request the
// browser makes passes a filter: a host outside the task's plan is refused
// before it leaves the machine.
package browse

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/proto"

	"github.com/fleetwright/fleetwright/app/browser"
)

// attachTimeout bounds connecting to a running Chrome.
const attachTimeout = 60 * time.Second

// Options choose how to reach the browser.
type Options struct {
	// Attach, when set, is the DevTools address of a running Chrome
	// (http://127.0.0.1:9222 or its ws:// URL); else Chromium is launched.
	Attach string
	// Profile is the dedicated persistent profile dir for a launch.
	Profile string
	// Binary overrides the Chromium binary.
	Binary string
	// Headful shows the browser window.
	Headful bool
	// Width and Height of the window (default 1280×800).
	Width, Height int
	// ExtraFlags go to a launched Chromium (the egress guard's proxy).
	ExtraFlags []string
	// User and NoSandbox are app/browser's: the user a launched Chromium
	// runs as when this process is root, and the sandbox escape hatch.
	User      string
	NoSandbox bool
	// Log receives app/browser's warnings (nil: slog.Default()).
	Log *slog.Logger
	// Check, when set, is asked about every request's host:port after the
	// plan admits it (the egress guard: special-purpose ranges, ports).
	Check func(ctx context.Context, hostport string) error
	// Writes sends the page's writes during an approved action (ClickOnce):
	// once each, on a connection of its own, through the egress guard.
	Writes http.RoundTripper
}

// Session is the connected browser.
type Session struct {
	rb     *rod.Browser
	cancel context.CancelFunc // ends an attached browser's connection
	owned  *browser.Browser
	router *rod.HijackRouter

	check func(ctx context.Context, hostport string) error
	// attached: the browser is the person's running Chrome.
	attached bool

	mu      sync.Mutex
	allow   func(host string) bool
	blocked []string

	// writes, writing, seen, inflight, idle and lost are ClickOnce's
	// (once.go), under mu.
	writes   http.RoundTripper
	writing  bool
	seen     chan struct{} // closed at the action's first write
	inflight int
	idle     *sync.Cond // inflight reached 0
	lost     []string
}

// Open launches or attaches.
func Open(ctx context.Context, o Options) (*Session, error) {
	s := &Session{check: o.Check, writes: o.Writes}
	s.idle = sync.NewCond(&s.mu)
	if o.Attach != "" {
		u := o.Attach
		if !strings.HasPrefix(u, "ws") {
			// http://host:port: ask Chrome for its WebSocket address.
			ws, err := resolveDevTools(ctx, u)
			if err != nil {
				return nil, fmt.Errorf("browse: attach to %s: %w (start Chrome with --remote-debugging-port on a non-default profile, or enable it in chrome://inspect on Chrome 144+)", u, err)
			}
			u = ws
		}
		// go-rod's event loop lives off the context Connect is given, so
		// the bound on connecting is kept here (Chrome 144+ waits for the
		// person to accept the connection in its own prompt).
		cctx, cancel := context.WithCancel(ctx)
		rb := rod.New().ControlURL(u).Context(cctx)
		connected := make(chan error, 1)
		go func() { connected <- rb.Connect() }()
		select {
		case err := <-connected:
			if err != nil {
				cancel()
				return nil, fmt.Errorf("browse: attach to %s: %w", o.Attach, err)
			}
		case <-time.After(attachTimeout):
			cancel()
			return nil, fmt.Errorf("browse: attach to %s: Chrome did not accept the connection within %s (with remote debugging switched on in chrome://inspect, Chrome asks you to allow it)", o.Attach, attachTimeout)
		}
		s.rb = rb.Context(context.Background())
		s.cancel, s.attached = cancel, true
	} else {
		b, err := browser.Launch(ctx, browser.Options{Binary: o.Binary, UserDataDir: o.Profile, Headful: o.Headful, Width: o.Width, Height: o.Height, ExtraFlags: o.ExtraFlags,
			User: o.User, NoSandbox: o.NoSandbox, Log: o.Log})
		if err != nil {
			return nil, fmt.Errorf("browse: %w", err)
		}
		s.owned, s.rb = b, b.Browser
	}
	s.router = s.rb.HijackRequests()
	if err := s.router.Add("*", "", s.filter); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("browse: request filter: %w", err)
	}
	go s.router.Run()
	return s, nil
}

// resolveDevTools asks the Chrome at addr (http://host:port) for its
// browser WebSocket URL, within a bounded time (go-rod's ResolveURL has no
// timeout and panics on a broken answer).
func resolveDevTools(ctx context.Context, addr string) (string, error) {
	base, err := url.Parse(addr)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return "", fmt.Errorf("%q is not a DevTools address like http://127.0.0.1:9222 or a ws:// URL", addr)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base.Scheme+"://"+base.Host+"/json/version", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("/json/version answered %s", resp.Status)
	}
	var v struct {
		WS string `json:"webSocketDebuggerUrl"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&v); err != nil || !strings.HasPrefix(v.WS, "ws") {
		return "", fmt.Errorf("/json/version gave no webSocketDebuggerUrl: is this a Chrome DevTools endpoint?")
	}
	ws, err := url.Parse(v.WS)
	if err != nil {
		return "", fmt.Errorf("/json/version: %w", err)
	}
	// Chrome names itself by the address it bound; keep the one we reached.
	ws.Host = base.Host
	return ws.String(), nil
}

// Close stops the filter and, for a launched browser, the browser (its
// profile stays). An attached Chrome is left running.
func (s *Session) Close() error {
	if s.router != nil {
		_ = s.router.Stop()
	}
	if s.owned != nil {
		return s.owned.Close()
	}
	if s.cancel != nil {
		s.cancel()
	}
	return nil
}

// SetAllow sets the rule every request must pass (nil: between tasks, a
// launched browser goes nowhere and an attached one is the person's again).
// While a task runs, every request of the browser — an attached Chrome's
// other tabs too — must pass it.
func (s *Session) SetAllow(f func(host string) bool) {
	s.mu.Lock()
	s.allow = f
	s.mu.Unlock()
}

// Blocked returns and clears the URLs refused since the last call.
func (s *Session) Blocked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.blocked
	s.blocked = nil
	return b
}

func (s *Session) filter(h *rod.Hijack) {
	u := h.Request.URL()
	s.mu.Lock()
	allow := s.allow
	s.mu.Unlock()
	switch u.Scheme {
	case "data", "blob", "about", "chrome", "devtools":
		h.ContinueRequest(&proto.FetchContinueRequest{})
		return
	}
	if allow == nil && s.attached {
		// An attached Chrome is the person's own: between tasks it is
		// theirs to browse. (A launched one goes nowhere between tasks.)
		h.ContinueRequest(&proto.FetchContinueRequest{})
		return
	}
	why := "not in the task's plan"
	if allow != nil && allow(Host(u)) {
		var err error
		if s.check != nil {
			port := u.Port()
			if port == "" {
				port = map[string]string{"http": "80", "https": "443", "ws": "80", "wss": "443"}[u.Scheme]
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err = s.check(ctx, net.JoinHostPort(u.Hostname(), port))
			cancel()
		}
		if err == nil {
			if s.inWrite(h) {
				s.sendOnce(h)
				return
			}
			h.ContinueRequest(&proto.FetchContinueRequest{})
			return
		}
		why = "refused by the egress guard: " + err.Error()
	}
	s.mu.Lock()
	s.blocked = append(s.blocked, u.Scheme+"://"+u.Host+u.Path+" ("+why+")")
	s.mu.Unlock()
	h.Response.Fail(proto.NetworkErrorReasonBlockedByClient)
}

// Host is the host[:port] a URL reaches, lower-cased, as the plan names it.
func Host(u *url.URL) string {
	h := strings.ToLower(u.Hostname())
	if p := u.Port(); p != "" {
		return net.JoinHostPort(h, p)
	}
	return h
}

// Tab is one open page.
type Tab struct {
	ID    string
	URL   string
	Title string
}

// Tabs lists the open page targets.
func (s *Session) Tabs() ([]Tab, error) {
	res, err := proto.TargetGetTargets{}.Call(s.rb)
	if err != nil {
		return nil, fmt.Errorf("browse: list tabs: %w", err)
	}
	var out []Tab
	for _, t := range res.TargetInfos {
		if t.Type == proto.TargetTargetInfoTypePage {
			out = append(out, Tab{ID: string(t.TargetID), URL: t.URL, Title: t.Title})
		}
	}
	return out, nil
}

// Open opens a new tab at u and waits for it to load.
func (s *Session) Open(ctx context.Context, u string) (Tab, error) {
	p, err := s.rb.Page(proto.TargetCreateTarget{URL: "about:blank"})
	if err != nil {
		return Tab{}, fmt.Errorf("browse: open tab: %w", err)
	}
	if err := navigate(ctx, p, u); err != nil {
		return Tab{ID: string(p.TargetID)}, err
	}
	return tabOf(p), nil
}

func tabOf(p *rod.Page) Tab {
	t := Tab{ID: string(p.TargetID)}
	if info, err := p.Info(); err == nil {
		t.URL, t.Title = info.URL, info.Title
	}
	return t
}

// ErrNoTab is returned for a tab id that is not open any more.
var ErrNoTab = errors.New("browse: no such tab")

// Page returns the tab's page, activated.
func (s *Session) Page(id string) (*rod.Page, error) {
	tabs, err := s.Tabs()
	if err != nil {
		return nil, err
	}
	found := false
	for _, t := range tabs {
		found = found || t.ID == id
	}
	if !found {
		return nil, ErrNoTab
	}
	p, err := s.rb.PageFromTarget(proto.TargetTargetID(id))
	if err != nil {
		return nil, fmt.Errorf("browse: tab %s: %w", id, err)
	}
	return p, nil
}

// Switch brings a tab to the front.
func (s *Session) Switch(id string) (Tab, error) {
	p, err := s.Page(id)
	if err != nil {
		return Tab{}, err
	}
	if _, err := p.Activate(); err != nil {
		return Tab{}, fmt.Errorf("browse: switch tab: %w", err)
	}
	return tabOf(p), nil
}

// CloseTab closes a tab.
func (s *Session) CloseTab(id string) error {
	p, err := s.Page(id)
	if err != nil {
		return err
	}
	if err := p.Close(); err != nil {
		return fmt.Errorf("browse: close tab: %w", err)
	}
	return nil
}

// Navigate loads u in the tab.
func (s *Session) Navigate(ctx context.Context, id, u string) (Tab, error) {
	p, err := s.Page(id)
	if err != nil {
		return Tab{}, err
	}
	if err := navigate(ctx, p, u); err != nil {
		return tabOf(p), err
	}
	return tabOf(p), nil
}

func navigate(ctx context.Context, p *rod.Page, u string) error {
	pc := p.Context(ctx).Timeout(30 * time.Second)
	wait := pc.WaitNavigation(proto.PageLifecycleEventNameLoad)
	if err := pc.Navigate(u); err != nil {
		return fmt.Errorf("browse: navigate to %s: %w", u, err)
	}
	wait()
	return nil
}

// Screenshot captures the tab's viewport as PNG.
func (s *Session) Screenshot(id string) ([]byte, error) {
	p, err := s.Page(id)
	if err != nil {
		return nil, err
	}
	b, err := p.Timeout(15*time.Second).Screenshot(false, &proto.PageCaptureScreenshot{Format: proto.PageCaptureScreenshotFormatPng})
	if err != nil {
		return nil, fmt.Errorf("browse: screenshot: %w", err)
	}
	return b, nil
}
