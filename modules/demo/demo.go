// Package demo is the demo role (`fleetwright --role=demo`, what `make run`
// starts): the whole product on one machine, on loopback. It runs a panel on
// embedded Postgres and Redis, a second embedded Redis for a second cell, a
// sandbox board publishing loads, three tenants with accounts, filters and
// agents, and the agents themselves as separate processes of the same binary,
// supervised as systemd would supervise them. Everything is wired by real
// tokens and the real protocol; nothing is faked. A second start reuses the
// data dir.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/board/catalog"
	"github.com/fleetwright/fleetwright/modules/panel"
)

// Config is the demo role's configuration.
type Config struct {
	// Listen is the console's address (shared --listen).
	Listen string
	// DataDir holds everything (shared --data-dir): the panel's Postgres,
	// Redis and keys, cell B's Redis (redis-b/), the board (board/), the
	// agents' state dirs (agents/), their logs (logs/) and demo.json.
	DataDir string
	// BoardListen is the sandbox board's address.
	BoardListen string
	// BoardRate is the board's publishing rate, loads per second.
	BoardRate float64
	// BoardIdempotencyKeys makes the demo's board honour the
	// Idempotency-Key header on bookings (a board that does not is the
	// harder case, and the default).
	BoardIdempotencyKeys bool
	// CatalogPort is the crawl catalogue's port on its hosts (0: a free one);
	// main sets it from the board's --catalog-port.
	CatalogPort int
	// Panel is the panel's configuration (main's panel flags); Listen and
	// DataDir are set from the fields above.
	Panel panel.Config
	// Version is the build's version.
	Version string
	// Executable runs the agents; empty means this process's binary.
	Executable string
	// Out receives the start banner (the one-time password is printed there
	// and nowhere else).
	Out io.Writer
	// ResetAdmin gives the admin a new one-time password and a new TOTP
	// enrolment on this start (a lost password or authenticator). Without
	// it, only the first start on a data dir prints a password.
	ResetAdmin bool
}

// Register declares the demo's own flags (--listen and --data-dir are shared
// and declared by main).
func (c *Config) Register(s *config.Set) {
	role := config.Roles("demo")
	s.String(&c.BoardListen, "board-listen", "FLEET_DEMO_BOARD_LISTEN", "127.0.0.1:8090",
		"address of the demo's sandbox board (port 0: any free port)", role)
	s.Float(&c.BoardRate, "board-rate", "FLEET_DEMO_BOARD_RATE", 0.5,
		"loads the demo's board publishes per second (Poisson arrivals; 0 stops the publisher)", role)
	s.Bool(&c.BoardIdempotencyKeys, "board-idempotency-keys", "FLEET_DEMO_BOARD_IDEMPOTENCY_KEYS", false,
		"the demo's board honours the Idempotency-Key header on bookings (default: it does not, like most real boards)", role)
	s.Bool(&c.ResetAdmin, "reset-admin", "FLEET_DEMO_RESET_ADMIN", false,
		"give admin@demo.test a new one-time password and a new authenticator enrolment (a lost password or phone); without it only the first start prints a password", role)
}

// Info is what demo.json holds, so a script can follow the demo.
type Info struct {
	ConsoleURL      string `json:"console_url"`
	BoardURL        string `json:"board_url"`
	BoardAdminToken string `json:"board_admin_token"`
	// MetricsURL is the panel's metrics listener ("" without one).
	MetricsURL string `json:"metrics_url,omitempty"`
	// CatalogURLs are the crawl catalogue's hosts.
	CatalogURLs []string `json:"catalog_urls"`
	AdminEmail  string   `json:"admin_email"`
	// StudioURL is the Demo Studio the demo's assistant works on; the
	// assistant's own UI address (with its key) is printed in the banner
	// only.
	StudioURL    string `json:"studio_url"`
	AssistantURL string `json:"-"`
	DataDir      string `json:"data_dir"`
	PID          int    `json:"pid"`
	Tenants      []struct {
		Slug string `json:"slug"`
		Cell string `json:"cell"`
	} `json:"tenants"`
	Agents []struct {
		Name    string `json:"name"`
		Tenant  string `json:"tenant"`
		Kind    string `json:"kind"`
		Browser bool   `json:"browser"`
		Log     string `json:"log"`
	} `json:"agents"`
}

// InfoFile is demo.json's path.
func InfoFile(dataDir string) string { return filepath.Join(dataDir, "demo.json") }

// Run starts the demo and runs it until ctx ends, then stops everything in
// order: the agents (SIGTERM, SIGKILL after their unit's timeout), the board,
// the panel (which stops its Postgres and Redis) and cell B's Redis.
func Run(ctx context.Context, cfg Config, log *slog.Logger) (err error) {
	if cfg.Out == nil {
		cfg.Out = os.Stdout
	}
	if cfg.BoardRate < 0 {
		return errors.New("demo: --board-rate must not be negative")
	}
	if cfg.DataDir, err = filepath.Abs(cfg.DataDir); err != nil {
		return fmt.Errorf("demo: data dir: %w", err)
	}
	exe := cfg.Executable
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return fmt.Errorf("demo: find own binary: %w", err)
		}
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("demo: create data dir: %w", err)
	}

	pcfg := cfg.Panel
	pcfg.Listen, pcfg.DataDir, pcfg.Version = cfg.Listen, cfg.DataDir, cfg.Version
	p, err := panel.Start(ctx, pcfg, log)
	if err != nil {
		return err
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- p.Serve() }()
	var (
		rdsB   *embedded.Redis
		brd    *board.Server
		cat    *catalog.Server
		agents *fleetProcs
	)
	// Stop in reverse order of dependence, whatever happened.
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 2*stopTimeout)
		defer cancel()
		if agents != nil {
			agents.stop(stopCtx)
			log.Info("demo: agents stopped")
		}
		// A process a killed agent left behind (its Chromium) is reaped the
		// way systemd's KillMode reaps a unit's cgroup.
		reap(filepath.Join(cfg.DataDir, "agents"), log)
		reap(TempRoot(cfg.DataDir), log)
		reap(AssistantDir(cfg.DataDir), log)
		_ = os.RemoveAll(TempRoot(cfg.DataDir))
		if cat != nil {
			_ = cat.Close()
		}
		if brd != nil {
			if cerr := brd.Close(); cerr != nil {
				log.Warn("demo: board stop", "err", cerr)
			}
			log.Info("demo: board stopped")
		}
		p.Stop()
		rdsB.Stop()
	}()

	// Cell B's Redis: the panel holds the data dir's lock, which covers it.
	rdsB, err = embedded.StartRedis(ctx, embedded.RedisConfig{Dir: filepath.Join(cfg.DataDir, "redis-b"), Logger: log.With("cell", CellB)})
	if err != nil {
		return err
	}
	// Supervised like the panel's own: restarted when it dies, counted on
	// the panel's /metrics as fleet_embedded_restarts_total{service="redis:cell-b"}.
	rdsB.Supervise(p.Supervision("redis:" + CellB))
	bcfg := board.Defaults()
	// On disk, not in memory: load ids go on from the last start, because
	// the panel's cells remember ids they saw until the loads expire.
	bcfg.Listen, bcfg.DataDir, bcfg.Rate = cfg.BoardListen, filepath.Join(cfg.DataDir, "board"), cfg.BoardRate
	bcfg.IdempotencyKeys = cfg.BoardIdempotencyKeys
	bcfg.Data = filepath.Join(bcfg.DataDir, "board.sqlite")
	bcfg.Seed = int(time.Now().UnixNano() % 1_000_000)
	brd, err = board.Start(ctx, bcfg, log.With("component", "board"))
	if err != nil {
		return err
	}

	s := newSeeder(p, brd, cfg.DataDir, log)
	if err := s.cellB(ctx, rdsB.URL(0)); err != nil {
		return err
	}
	tenantIDs := map[string]string{}
	for _, t := range Tenants {
		id, err := s.tenant(ctx, t)
		if err != nil {
			return err
		}
		tenantIDs[t.Slug] = id
		for _, a := range Agents {
			if a.Tenant == t.Slug {
				if err := s.agent(ctx, id, a); err != nil {
					return err
				}
			}
		}
	}
	if err := s.assistantAgent(ctx, tenantIDs[AssistantTenant]); err != nil {
		return err
	}
	if cat, err = startCrawl(ctx, p, brd.AdminToken(), cfg.CatalogPort, tenantIDs[CrawlTenant], log); err != nil {
		return err
	}
	password, err := s.admin(ctx, cfg.ResetAdmin)
	if err != nil {
		return err
	}
	consoleURL := "http://" + p.Addr()
	info := newInfo(cfg.DataDir, consoleURL, brd)
	if a := p.MetricsAddr(); a != "" {
		info.MetricsURL = "http://" + a + "/metrics"
	}
	info.CatalogURLs = cat.URLs()
	if err := writeInfo(cfg.DataDir, info); err != nil {
		return err
	}
	if agents, err = startAgents(exe, cfg.DataDir, consoleURL, Agents, log); err != nil {
		return err
	}
	info.StudioURL, info.AssistantURL, err = startAssistant(ctx, agents, exe, cfg.DataDir, consoleURL, log)
	agents.startJanitor(log)
	if err != nil {
		// The claim fleet and the crawler run without it.
		log.Warn("demo: the assistant did not start", "err", err)
	}
	if err := writeInfo(cfg.DataDir, info); err != nil {
		return err
	}
	banner(cfg.Out, info, password)

	select {
	case <-ctx.Done():
		log.Info("demo stopping")
		return nil
	case err := <-serveErr:
		return err
	}
}

func newInfo(dataDir, consoleURL string, b *board.Server) Info {
	info := Info{ConsoleURL: consoleURL + "/", BoardURL: trimURL(b.URL()) + "/", BoardAdminToken: b.AdminToken(),
		AdminEmail: AdminEmail, DataDir: dataDir, PID: os.Getpid()}
	for _, t := range Tenants {
		info.Tenants = append(info.Tenants, struct {
			Slug string `json:"slug"`
			Cell string `json:"cell"`
		}{t.Slug, t.Cell})
	}
	for _, a := range Agents {
		info.Agents = append(info.Agents, struct {
			Name    string `json:"name"`
			Tenant  string `json:"tenant"`
			Kind    string `json:"kind"`
			Browser bool   `json:"browser"`
			Log     string `json:"log"`
		}{a.Name(), a.Tenant, a.Kind, a.Browser(), LogFile(dataDir, a)})
	}
	return info
}

func writeInfo(dataDir string, info Info) error {
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return fmt.Errorf("demo: encode demo.json: %w", err)
	}
	return writeSecretFile(InfoFile(dataDir), string(b)+"\n")
}

func firstOr(xs []string) string {
	if len(xs) == 0 {
		return ""
	}
	return xs[0]
}

// metricsLine says where the panel's metrics are.
func metricsLine(u string) string {
	if u == "" {
		return "not served (--metrics-listen is empty)"
	}
	return u + "   (Prometheus; this machine only)"
}

// banner prints what a person needs: where to sign in, with what, and where
// the board is. It is the one place the one-time password appears, and only
// on the start that set one (the first, or --reset-admin).
func banner(w io.Writer, info Info, password string) {
	browsers := 0
	for _, a := range Agents {
		if a.Browser() {
			browsers++
		}
	}
	var cells, others []string
	for _, t := range Tenants {
		cells = append(cells, t.Slug+" ("+t.Cell+")")
		if t.Slug != Tenants[0].Slug {
			others = append(others, t.Slug)
		}
	}
	signIn := fmt.Sprintf(`%s
             one-time password: %s
             (at this sign-in, set up two-factor authentication and choose
              your own password; later starts keep both; --reset-admin sets new ones)`, info.AdminEmail, password)
	if password == "" {
		signIn = fmt.Sprintf(`%s with the password and authenticator you set at the first sign-in
             (lost them? start once with --reset-admin)`, info.AdminEmail)
	}
	first := info.ConsoleURL + "t/" + Tenants[0].Slug
	fmt.Fprintf(w, `
Fleetwright demo is running.

  Console:   %s   (the overview: the whole fleet in one window)
  Sign in:   %s
  Board:     %s   (oracle: %s_sandbox/, admin token in %s)
  Tenants:   %s
  Fleet:     %d agent processes (%d with Chromium); logs in %s
  Claims:    %s/claims   latency: %s/claims/latency   (other tenants: %s)
  Alarms:    %salarms
  Metrics:   %s
  Crawl:     %s/crawl   (job %s on the catalogue %s every two minutes;
             flip its layout to see the zero-result alarm: curl -d layout=2 -H "Authorization: Bearer <board_admin_token in demo.json>" %s/_catalog/control)
  Assistant: %s

Ctrl-C stops everything.

`, info.ConsoleURL, signIn, info.BoardURL, info.BoardURL, InfoFile(info.DataDir),
		strings.Join(cells, ", "), len(Agents), browsers, filepath.Join(info.DataDir, "logs"), first, first,
		strings.Join(others, ", "), info.ConsoleURL, metricsLine(info.MetricsURL), info.ConsoleURL+"t/"+CrawlTenant, CrawlJob, strings.Join(info.CatalogURLs, " "), firstOr(info.CatalogURLs),
		assistantLine(info))
}

// assistantLine says where the assistant is and what to try with it.
func assistantLine(info Info) string {
	if info.AssistantURL == "" {
		return "did not start; see " + AssistantLog(info.DataDir)
	}
	return fmt.Sprintf(`%s   (enrolled in %s as %s, with the scripted model;
             give it "Draft the launch post from the brief in the drafts editor and publish it"
             with the start URLs %s/brief %s/drafts %s/calendar; it stops at Publish for
             your approval; its tasks also show on %st/%s/fleet)`, info.AssistantURL, AssistantTenant, AssistantName,
		info.StudioURL, info.StudioURL, info.StudioURL, info.ConsoleURL, AssistantTenant)
}
