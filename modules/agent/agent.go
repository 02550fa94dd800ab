// Package agent is the agent role: it holds one platform account's
// connection to the panel, runs the account's workers under a supervisor and
// carries out the panel's commands. It never holds database or Redis
// credentials: everything it does with the panel goes through the wire
// protocol.
package agent

import (
	"context"
	"errors"
	"fmt"
	"github.com/fleetwright/fleetwright/app/config"
	"log/slog"
	"math/rand/v2"
	"os"
	"time"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/modules/agent/store"
	"github.com/fleetwright/fleetwright/modules/agent/supervisor"
	"github.com/fleetwright/fleetwright/modules/link"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// Exit statuses of the agent process.
const (
	ExitOK      = 0
	ExitFailure = 1
	// ExitConfig: bad flags or an unsafe token file; fix and start again.
	ExitConfig = 2
	// ExitRetired: the agent retired itself (or refuses to start because it
	// did). The systemd unit lists it in RestartPreventExitStatus=, so a
	// retired agent is not restarted.
	ExitRetired = 78
)

// Errors Run returns; ExitCode maps them.
var (
	// ErrRetired: the agent has just retired (20 unknown-token answers, a
	// tombstone, or a retire command) and wiped its secrets.
	ErrRetired = errors.New("agent: retired")
	// ErrAlreadyRetired: the state dir carries the retired mark.
	ErrAlreadyRetired = errors.New("agent: this agent retired itself and will not start until its state is reset on purpose")
	// ErrConfig wraps configuration errors.
	ErrConfig = errors.New("agent: configuration")
)

// ExitCode maps Run's result to the process exit status.
func ExitCode(err error) int {
	switch {
	case err == nil, errors.Is(err, context.Canceled):
		return ExitOK
	case errors.Is(err, ErrRetired), errors.Is(err, ErrAlreadyRetired):
		return ExitRetired
	case errors.Is(err, ErrConfig):
		return ExitConfig
	}
	return ExitFailure
}

// WorkerEnv is what a worker of some kind gets from the agent.
type WorkerEnv struct {
	Spec    wire.WorkerSpec
	Account wire.Account
	// Paused reports whether new actions are paused; a worker checks it
	// before every action.
	Paused func() bool
	// Store journals actions (Store.Do) and holds credentials and cookies.
	Store *store.Store
	// Claims is the claim engine's client over the live connection.
	Claims *Claims
	// Sessions coordinates sign-ins and offers sessions for look-ups.
	Sessions *Sessions
	// Platforms builds the account's platform adapter from its spec.
	Platforms *Platforms
	// Browsers are the agent's browser slots: take one before launching
	// Chromium, give it back after closing it.
	Browsers chan struct{}
	// Crawl routes page tasks to crawler workers (KindCrawler).
	Crawl *crawlHub
	// BrowserUser and BrowserNoSandbox are Config's, for every launch.
	BrowserUser      string
	BrowserNoSandbox bool
	// Event reports an event to the panel (kept across reconnects).
	Event func(wire.Event)
	Clock clock.Clock
	Log   *slog.Logger
	// gateStop is the StopAfterGateEnv chaos switch (nil: none).
	gateStop *gateStopper
	// PanelClock is Clock corrected to the panel's by its pings: for codes
	// a platform checks against real time (TOTP).
	PanelClock clock.Clock
	// Budget is the account's request budget (budget.go): every request to
	// the platform is counted, and while it is spent workers hold.
	Budget *requestBudget
	// BrowserTime counts the seconds the worker's browsers are open.
	BrowserTime *browserTime
}

// WorkerFunc is the code of one worker kind.
type WorkerFunc func(ctx context.Context, h *supervisor.Handle, env WorkerEnv) error

// Config configures the agent role.
type Config struct {
	// PanelURL is the panel's base URL, https://host[:port][/prefix], or its
	// wss://…/agent/ws endpoint; cleartext (http, ws) only on loopback
	// (--panel, FLEET_PANEL). The agent dials wss://…/agent/ws.
	PanelURL string
	// PanelCAFile, when set, is a PEM file of the CA certificates that sign
	// the panel's TLS certificate (a private CA, such as Caddy's "tls
	// internal"); only those are trusted then (--panel-ca-file,
	// FLEET_PANEL_CA_FILE).
	PanelCAFile string
	// TokenFile holds the agent's token; it must be mode 0600 or stricter
	// (--token-file, FLEET_TOKEN_FILE). The token never goes on a command line.
	TokenFile string
	// StateDir holds the agent's SQLite state (--state-dir, FLEET_STATE_DIR).
	StateDir string
	// Build is the binary's build version, sent in hello.
	Build string
	// Hostname defaults to os.Hostname.
	Hostname string
	// Kinds maps worker kinds to their code; a kind missing here is
	// reported as unsupported.
	Kinds map[string]WorkerFunc
	// StateEvery is how often a state report is sent (default 30 s); one is
	// also sent on connect and on every change.
	StateEvery time.Duration
	// IOTimeout bounds a dial, the wait for welcome and each write
	// (default 30 s, real time).
	IOTimeout time.Duration
	// Clock defaults to the real clock; tests inject a fake one.
	Clock clock.Clock
	// LimitClock times the account's request budget per rolling hour
	// (default Clock): a test jumps it an hour to free the window.
	LimitClock clock.Clock
	// Jitter returns numbers in [0, 1); defaults to math/rand/v2.
	Jitter func() float64
	// RestartDelay is passed to the supervisor (0: its default).
	RestartDelay time.Duration
	// Platforms builds the workers' adapters from platform specs (nil: a
	// fresh NewPlatforms, the built-in specs; a test passes its own to
	// count compiles).
	Platforms *Platforms
	// BrowserSlots bounds the Chromium processes the agent runs at once
	// (--browser-slots, FLEET_AGENT_BROWSER_SLOTS, default 2).
	BrowserSlots int
	// BrowserUser is the unprivileged user Chromium runs as when the agent
	// runs as root (--browser-user, FLEET_BROWSER_USER; default "nobody").
	BrowserUser string
	// BrowserNoSandbox turns Chromium's sandbox off, for a container that
	// cannot give it user namespaces (--browser-no-sandbox); every browser
	// start then logs a warning.
	BrowserNoSandbox bool
}

func (c *Config) defaults() {
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.LimitClock == nil {
		c.LimitClock = c.Clock
	}
	if c.Jitter == nil {
		c.Jitter = rand.Float64
	}
	if c.StateEvery <= 0 {
		c.StateEvery = 30 * time.Second
	}
	if c.IOTimeout <= 0 {
		c.IOTimeout = 30 * time.Second
	}
	if c.Hostname == "" {
		c.Hostname, _ = os.Hostname()
	}
	if c.Build == "" {
		c.Build = "dev"
	}
	if c.Kinds == nil {
		c.Kinds = DefaultKinds()
	}
	if c.BrowserSlots <= 0 {
		c.BrowserSlots = 2
	}
}

// WebSocketURL is link.WebSocketURL, its error a configuration error.
func WebSocketURL(panel string) (string, error) {
	u, err := link.WebSocketURL(panel)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return u, nil
}

// ReadTokenFile is link.ReadTokenFile, its error a configuration error.
func ReadTokenFile(path string) (wire.Secret, error) {
	s, err := link.ReadTokenFile(path)
	if err != nil {
		return wire.Secret{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return s, nil
}

// ResetState deletes a (retired) agent's state on purpose, so it may start
// again: the deliberate reset behind `fleetwright agent reset-state
// --state-dir DIR`. Deleting the state dir by hand does the same.
func ResetState(stateDir string) error {
	if stateDir == "" {
		return fmt.Errorf("%w: --state-dir is required", ErrConfig)
	}
	if err := store.ResetState(stateDir); err != nil {
		return fmt.Errorf("agent: reset state: %w", err)
	}
	return nil
}

// Run runs the agent until ctx ends, it retires, or its configuration is
// unusable. Map the result with ExitCode.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) error {
	cfg.defaults()
	wsURL, err := WebSocketURL(cfg.PanelURL)
	if err != nil {
		return err
	}
	if cfg.StateDir == "" {
		return fmt.Errorf("%w: --state-dir is required", ErrConfig)
	}
	client, err := panelClient(cfg.PanelCAFile)
	if err != nil {
		return err
	}
	token, err := ReadTokenFile(cfg.TokenFile)
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, cfg.StateDir)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	defer st.Close()
	if mark, retired, err := st.Retired(ctx); err != nil {
		return fmt.Errorf("agent: %w", err)
	} else if retired {
		return fmt.Errorf("%w (retired at %s: %s); reset it with `fleetwright agent reset-state --state-dir %s` or delete that directory",
			ErrAlreadyRetired, mark.At.Format(time.RFC3339), mark.Reason, cfg.StateDir)
	}
	if d := clockSkew(); d != 0 {
		logger.Warn("agent: chaos switch (never on a real fleet): this agent's wall clock is skewed", "env", ClockSkewEnv, "by", d)
		cfg.Clock = skewed{Clock: cfg.Clock, by: d}
	}
	key, err := st.InstallKey(ctx)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a := newAgent(cfg, logger, st, token, wsURL)
	a.client, a.installKey = client, key
	a.gateStop = newGateStopper(logger)
	return a.run(ctx)
}

// Register declares the agent role's flags.
func (c *Config) Register(s *config.Set) {
	role := config.Roles("agent")
	enrol := config.Roles("agent", "assistant")
	s.String(&c.PanelURL, "panel", "FLEET_PANEL", "", "the panel's URL: https://host[:port] (the agent dials wss://…/agent/ws) or the wss://…/agent/ws endpoint itself; http:// and ws:// only on loopback (the assistant, when enrolled)", enrol)
	s.String(&c.PanelCAFile, "panel-ca-file", "FLEET_PANEL_CA_FILE", "", "PEM file of the private CA that signs the panel's certificate; when set, only it is trusted", enrol)
	s.String(&c.TokenFile, "token-file", "FLEET_TOKEN_FILE", "", "file holding the agent's token (mode 0600; the token never goes on a command line); an enrolled assistant's too", enrol)
	s.Int(&c.BrowserSlots, "browser-slots", "FLEET_AGENT_BROWSER_SLOTS", 2, "how many Chromium processes the agent's workers may run at once", role)
	s.String(&c.BrowserUser, "browser-user", "FLEET_BROWSER_USER", "", "when the agent or assistant runs as root: the unprivileged user Chromium runs as (empty: nobody)", config.Roles("agent", "assistant"))
	s.Bool(&c.BrowserNoSandbox, "browser-no-sandbox", "FLEET_BROWSER_NO_SANDBOX", false, "run Chromium WITHOUT its sandbox: only for a container that cannot give it user namespaces; warns at every start", config.Roles("agent", "assistant"))
	s.String(&c.StateDir, "state-dir", "FLEET_STATE_DIR", "", "directory of the agent's local state: credentials, cookies, journal (SQLite, 0600); the assistant's tasks, secrets and browser profile", config.Roles("agent", "assistant"))
}

func (a *agent) workerEnv(spec wire.WorkerSpec, acct wire.Account) WorkerEnv {
	return WorkerEnv{Spec: spec, Account: acct, Paused: a.isPaused, Store: a.store,
		Claims: a.claims, Sessions: a.sessions, Platforms: a.platforms, Browsers: a.browsers, Crawl: a.crawl,
		BrowserUser: a.cfg.BrowserUser, BrowserNoSandbox: a.cfg.BrowserNoSandbox,
		Event: a.event, Clock: a.cfg.Clock, Log: a.log.With("worker", spec.Name, "kind", spec.Kind), gateStop: a.gateStop, PanelClock: a.panelClock,
		Budget: a.budget, BrowserTime: a.browserTime}
}

func (a *agent) setCurrent(s *session) {
	a.mu.Lock()
	a.cur = s
	a.mu.Unlock()
	if s == nil {
		a.claims.disconnected()
	}
}

func (a *agent) current() *session {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cur
}
