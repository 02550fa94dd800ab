// Package assistant is `fleetwright --role=assistant`: a local AI agent
// that drives the person's own browser across tabs through typed tools,
// on Ollama by default, and cannot publish, send or buy without the
// person's approval: risky actions are held in code (package gate), page
// text reaches the model as delimited untrusted data, secrets only as
// placeholders, drafted content carries an AI-generated label, and spend,
// steps, time and tabs are capped. Its UI listens on loopback only and
// opens with a per-launch key; its state is SQLite under --state-dir. It
// sends no telemetry: its only outbound traffic is to the model endpoint
// and the pages its tasks visit.
package assistant

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fleetwright/fleetwright/app/browser"
	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/app/egress"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/assistant/browse"
	"github.com/fleetwright/fleetwright/modules/assistant/model"
	"github.com/fleetwright/fleetwright/modules/assistant/store"
	"github.com/fleetwright/fleetwright/modules/link"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// DefaultListen is the UI's address when --listen is not given.
const DefaultListen = "127.0.0.1:8070"

// Config is the role's configuration.
type Config struct {
	Listen   string
	StateDir string

	ModelKind string
	ModelURL  string
	Model     string
	KeyFile   string
	PriceIn   float64
	PriceOut  float64
	Attach    string
	Headful   bool
	Chromium  string
	// BrowserUser is the unprivileged user a launched Chromium runs as when
	// the assistant runs as root (empty: $FLEET_BROWSER_USER, then nobody);
	// BrowserNoSandbox is the escape hatch that turns its sandbox off.
	BrowserUser      string
	BrowserNoSandbox bool
	Limits           store.Limits
	// EgressAllow and EgressPorts widen the egress guard for pages: CIDR
	// ranges admitted although special-purpose, and destination ports
	// besides 80 and 443 (a loopback Demo Studio needs both).
	EgressAllow []string
	EgressPorts []string
	// Panel and TokenFile enrol the assistant in a panel (optional): it
	// connects like an agent, reports its tasks and obeys the panel's pause.
	Panel     string
	TokenFile string
	// PanelCAFile is a private CA that signs the panel's certificate.
	PanelCAFile string
	// AcceptPanelTasks lets operators start tasks from the console.
	AcceptPanelTasks bool
	Build            string
	// ReportEvery is how often an enrolled assistant reports (default 2 s).
	ReportEvery time.Duration
	RiskySettle time.Duration

	// Clock is injected by tests (default: real time).
	Clock clock.Clock
	// Out receives the launch URL line (default: stdout).
	Out io.Writer
	// Ready, when set, receives the UI's address once it listens.
	Ready chan<- string
}

// Register declares the role's flags.
func (c *Config) Register(s *config.Set) {
	role := config.Roles("assistant")
	s.Enum(&c.ModelKind, "model-endpoint", "FLEET_ASSISTANT_MODEL_ENDPOINT", "ollama", []string{"ollama", "openai"}, "assistant: the model's protocol: Ollama's /api/chat or an OpenAI-compatible /chat/completions", role)
	s.String(&c.ModelURL, "model-url", "FLEET_ASSISTANT_MODEL_URL", "", "assistant: the model endpoint's base URL (Ollama: http://127.0.0.1:11434; OpenAI-compatible: the base ending in /v1)", role)
	s.String(&c.Model, "model", "FLEET_ASSISTANT_MODEL", "qwen2.5:7b", "assistant: the model's name at the endpoint", role)
	s.String(&c.KeyFile, "model-key-file", "FLEET_ASSISTANT_MODEL_KEY_FILE", "", "assistant: file holding the OpenAI-compatible endpoint's API key (mode 0600; never a flag)", role)
	s.Float(&c.PriceIn, "model-price-in", "FLEET_ASSISTANT_MODEL_PRICE_IN", 0, "assistant: USD per million prompt tokens (0: unpriced, e.g. local Ollama)", role)
	s.Float(&c.PriceOut, "model-price-out", "FLEET_ASSISTANT_MODEL_PRICE_OUT", 0, "assistant: USD per million completion tokens", role)
	s.String(&c.Attach, "chrome-attach", "FLEET_ASSISTANT_CHROME_ATTACH", "", "assistant: attach to a running Chrome at this DevTools address (http://127.0.0.1:9222) instead of launching Chromium on the assistant's own profile", role)
	s.Bool(&c.Headful, "headful", "FLEET_ASSISTANT_HEADFUL", false, "assistant: show the launched browser's window", role)
	s.List(&c.EgressAllow, "egress-allow", "FLEET_EGRESS_ALLOW", "assistant: admit this CIDR range or address for pages although it is special-purpose (repeatable or comma-separated; e.g. 127.0.0.1/32 for a local Demo Studio)", role)
	s.List(&c.EgressPorts, "egress-port", "FLEET_EGRESS_PORTS", "assistant: allowed destination port for pages (repeatable; default 80 and 443)", role)
	s.Bool(&c.AcceptPanelTasks, "accept-panel-tasks", "FLEET_ASSISTANT_ACCEPT_PANEL_TASKS", false, "assistant: when enrolled, take tasks operators start from the console (they run behind the same approval gate, on this machine)", role)
	s.Int(&c.Limits.Steps, "task-max-steps", "FLEET_ASSISTANT_TASK_MAX_STEPS", 60, "assistant: steps per task (0: none)", role)
	s.Int(&c.Limits.Tokens, "task-max-tokens", "FLEET_ASSISTANT_TASK_MAX_TOKENS", 400000, "assistant: model tokens per task (0: none)", role)
	s.Float(&c.Limits.CostUSD, "task-max-cost", "FLEET_ASSISTANT_TASK_MAX_COST", 1, "assistant: spend per task in USD on a priced endpoint (0: none)", role)
	s.Duration(&c.Limits.WallTime, "task-max-time", "FLEET_ASSISTANT_TASK_MAX_TIME", 30*time.Minute, "assistant: wall time per task (0: none)", role)
	s.Int(&c.Limits.Tabs, "task-max-tabs", "FLEET_ASSISTANT_TASK_MAX_TABS", 8, "assistant: open tabs per task (0: none)", role)
}

// Run serves the assistant until ctx ends.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if cfg.StateDir == "" {
		return errors.New("assistant: --state-dir is required (the assistant's SQLite state, sealed secrets and browser profile live there)")
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	host, _, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return fmt.Errorf("assistant: --listen %q: %w", cfg.Listen, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("assistant: --listen %s is not a loopback address: the assistant's UI listens on 127.0.0.1 or ::1 only", cfg.Listen)
	}
	// The panel's address, token and CA are checked before anything starts:
	// a cleartext panel off this machine is refused at once.
	var (
		panelWS   string
		panelTok  wire.Secret
		panelHTTP *http.Client
	)
	if cfg.Panel != "" {
		if cfg.TokenFile == "" {
			return errors.New("assistant: --panel needs --token-file (the token the panel issued for this assistant)")
		}
		if panelWS, err = wsURL(cfg.Panel); err != nil {
			return err
		}
		if panelTok, err = link.ReadTokenFile(cfg.TokenFile); err != nil {
			return fmt.Errorf("assistant: %w", err)
		}
		if panelHTTP, err = link.Client(cfg.PanelCAFile); err != nil {
			return fmt.Errorf("assistant: %w", err)
		}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Out == nil {
		cfg.Out = os.Stdout
	}
	st, err := store.Open(ctx, cfg.StateDir)
	if err != nil {
		return fmt.Errorf("assistant: %w", err)
	}
	defer st.Close()
	key, err := vault.Load(os.Getenv("FLEET_ASSISTANT_SECRET_KEY"), filepath.Join(cfg.StateDir, "secret.key"), true)
	if err != nil {
		return fmt.Errorf("assistant: %w", err)
	}
	vlt, err := vault.New(key)
	if err != nil {
		return fmt.Errorf("assistant: %w", err)
	}
	mcfg := model.Config{Kind: cfg.ModelKind, URL: cfg.ModelURL, KeyFile: cfg.KeyFile, PriceIn: cfg.PriceIn, PriceOut: cfg.PriceOut}
	client, err := model.New(mcfg)
	if err != nil {
		return fmt.Errorf("assistant: %w", err)
	}
	guard, err := newEgress(cfg, log)
	if err != nil {
		return err
	}
	if cfg.Attach == "" {
		// As root, Chromium runs as the browser's user, and its profile
		// lives under the state dir: that user must be let through it.
		if err := browser.LetThrough(cfg.StateDir, cfg.BrowserUser); err != nil {
			return fmt.Errorf("assistant: --state-dir: %w", err)
		}
	}
	bo := browse.Options{Attach: cfg.Attach, Profile: filepath.Join(cfg.StateDir, "profile"), Binary: cfg.Chromium, Headful: cfg.Headful,
		User: cfg.BrowserUser, NoSandbox: cfg.BrowserNoSandbox, Log: log,
		Check: func(ctx context.Context, hostport string) error {
			_, err := guard.Check(ctx, "tcp", hostport)
			return err
		}}
	// An approved action's writes are sent by the assistant itself, once
	// each, on a fresh connection through the guard (browse.ClickOnce):
	// never kept alive, so never on a reused connection, never resent.
	writes := guard.Transport(nil)
	writes.DisableKeepAlives, writes.ForceAttemptHTTP2 = true, false
	bo.Writes = writes
	if cfg.Attach == "" {
		// A launched Chromium reaches the network only through the guard's
		// proxy (loopback included), which checks at dial time.
		px, err := guard.ListenProxy("127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("assistant: egress proxy: %w", err)
		}
		defer px.Close()
		for _, f := range px.ChromiumFlags() {
			bo.ExtraFlags = append(bo.ExtraFlags, strings.TrimPrefix(f, "--"))
		}
	}
	bs, err := browse.Open(ctx, bo)
	if err != nil {
		return fmt.Errorf("assistant: %w", err)
	}
	defer bs.Close()
	r := &Runner{St: st, Clock: cfg.Clock, Model: mcfg, ModelName: cfg.Model, Browser: bs, Vault: vlt, Log: log, Defaults: cfg.Limits, RiskySettle: cfg.RiskySettle,
		Caller: &model.Caller{Client: client, Modes: modeStore{st}}}
	if err := r.Recover(ctx); err != nil {
		return fmt.Errorf("assistant: recover: %w", err)
	}
	if _, _, err := r.secrets(ctx); err != nil {
		return err
	}

	var enr *enroller
	if cfg.Panel != "" {
		host, _ := os.Hostname()
		every := cfg.ReportEvery
		if every <= 0 {
			every = 2 * time.Second
		}
		enr = &enroller{r: r, wsURL: panelWS, token: panelTok, build: cfg.Build, host: host, every: every, model: cfg.ModelKind + " " + cfg.Model,
			client: panelHTTP, caFile: cfg.PanelCAFile, acceptTasks: cfg.AcceptPanelTasks}
		if ok, err := r.mayEnrol(ctx, enr.fingerprint()); err != nil {
			return err
		} else if !ok {
			enr = nil
		}
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("assistant: listen on %s: %w", cfg.Listen, err)
	}
	kb := make([]byte, 24)
	if _, err := rand.Read(kb); err != nil {
		return fmt.Errorf("assistant: %w", err)
	}
	secret := hex.EncodeToString(kb)
	g := newGuard(secret, ln.Addr())
	u := &ui{r: r, endpoint: client.Endpoint()}
	srv := &http.Server{Handler: g.wrap(u.routes()), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { r.Run(rctx); close(done) }()
	enrolled := make(chan struct{})
	if enr != nil {
		go func() { enr.run(rctx); close(enrolled) }()
	} else {
		close(enrolled)
	}

	// The launch URL is for the person's eyes only: printed, never logged.
	fmt.Fprintf(cfg.Out, "assistant UI: http://%s/?k=%s\n", ln.Addr(), secret)
	logging.RegisterSecret(secret)
	log.Info("assistant: ready", "listen", ln.Addr().String(), "model", cfg.Model, "endpoint", client.Endpoint(), "browser", browserKind(cfg))
	if cfg.Ready != nil {
		cfg.Ready <- ln.Addr().String()
	}
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = srv.Shutdown(sctx)
	<-done
	<-enrolled
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("assistant: serve: %w", err)
	}
	return nil
}

func newEgress(cfg Config, log *slog.Logger) (*egress.Guard, error) {
	allow, err := egress.ParseAllow(cfg.EgressAllow)
	if err != nil {
		return nil, fmt.Errorf("assistant: --egress-allow: %w", err)
	}
	var ports []int
	for _, p := range cfg.EgressPorts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("assistant: --egress-port %q is not a port number", p)
		}
		ports = append(ports, n)
	}
	if len(ports) > 0 {
		ports = append(ports, egress.DefaultPorts...)
	}
	g, err := egress.New(egress.Config{Policy: egress.Policy{Allow: allow, Ports: ports}, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("assistant: %w", err)
	}
	return g, nil
}

func browserKind(cfg Config) string {
	if cfg.Attach != "" {
		return "attached to " + cfg.Attach
	}
	return "chromium on the assistant's profile"
}

// modeStore adapts the store to model.ModeStore.
type modeStore struct{ st *store.Store }

func (m modeStore) ModelMode(ctx context.Context, name string) (string, string, bool, error) {
	v, ok, err := m.st.ModelMode(ctx, name)
	return v.Mode, v.Reason, ok, err
}

func (m modeStore) SetModelMode(ctx context.Context, name, mode, reason string) error {
	return m.st.SetModelMode(ctx, name, store.ModelMode{Mode: mode, Reason: reason})
}
