// Command fleetwright is the whole product in one binary: the role flag
// decides which subsystems start, not which code exists.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/migrations"
	"github.com/fleetwright/fleetwright/modules/agent"
	"github.com/fleetwright/fleetwright/modules/assistant"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/demo"
	"github.com/fleetwright/fleetwright/modules/panel"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// roles are the long-running roles this build has.
var roles = []string{"panel", "agent", "board", "demo", "assistant"}

// commands are the one-shot subcommands.
var commands = []struct{ name, help string }{
	{"version", "print the build version"},
	{"migrate", "apply database migrations (embedded cluster under --data-dir, or --database-url) and exit"},
	{"admin create-user", "create an operator: --email, --role admin|operator|viewer; prints a one-time password, or reads one with --password-stdin"},
	{"admin reset-mfa", "remove a user's TOTP enrolment and end their sessions (--email); they enrol again at the next sign-in"},
	{"admin disable-user", "disable a user and end their sessions (--email)"},
	{"admin pause", "pause claiming: no new lease, no new action (the whole fleet, or --tenant SLUG); audited"},
	{"admin resume", "resume claiming (the whole fleet, or --tenant SLUG); audited"},
	{"admin issue-agent-token", "give an agent a new token, printed once (--tenant SLUG --agent NAME); the old one stops working"},
	{"audit verify", "check the audit log's hash chains against their seals and the anchors under --data-dir/audit; exit 1 on tampering"},
	{"agent reset-state", "clear a retired agent's state dir (--state-dir) on purpose, so it may start again"},
	{"assistant model-stub", "serve the scripted model (Ollama and OpenAI-compatible protocols) for the assistant without a real model (--listen, --script post|injection|FILE)"},
	{"assistant studio", "serve the Demo Studio (--listen) and its outside address that logs every request (--outside, default 127.0.0.2:8076)"},
	{"assistant eval", "run the Demo Studio tasks against a model (--model, --model-endpoint, --model-url) and report success, steps, tokens and time per task"},
	{"crawl validate", "check crawl job files (docs/CRAWL.md): every bad field's path and line; exit 1 on any error"},
	{"crawl apply|run|list|runs|items|pause|resume|egress", "crawl jobs of a tenant: store versions, queue runs, read items (CSV, JSON Lines), set the egress allowlist; see crawl --help"},
	{"limit show|set", "per tenant and global limits (browser concurrency, run time per task, retries, crawl pages per day, an assistant's model spend per day); set is audited; see limit --help"},
	{"retention show|set|run", "how long each kind of a tenant's data is kept (agent events, screenshots, claim archive, crawl data, alarms, audit entries behind a checkpoint); set is audited; run prunes now; see retention --help"},
	{"privacy export|erase", "export a tenant's or a person's data as JSON Lines, or erase it (--tenant SLUG | --email ADDRESS, --confirm); audited; see privacy --help"},
	{"fetch", "fetch one URL through the egress (SSRF) guard and print the status, final URL and size, or the refusal and its reason (exit 3): fetch URL [--allow CIDR]… [--port N]…"},
	{"unit-failed", "tell the journal and a signed webhook (FLEET_NOTIFY_WEBHOOK) that a systemd unit failed for good (--unit NAME); run by fleetwright-failure@.service"},
	{"loadtest", "run the whole fleet on this machine under a chaos schedule and report duplicates, lost and phantom claims, leaks and latency (--workers, --duration, --rate, --chaos, --json; see loadtest --help)"},
}

type options struct {
	role, listen, dataDir, logFormat, logLevel string
	panel                                      panel.Config
	board                                      board.Config
	agent                                      agent.Config
	demo                                       demo.Config
	assistant                                  assistant.Config
}

func flags(o *options) *config.Set {
	s := config.New("fleetwright")
	s.Enum(&o.role, "role", "FLEET_ROLE", "panel", roles, "which role this process runs")
	s.String(&o.listen, "listen", "FLEET_LISTEN", "127.0.0.1:8080", "address the HTTP server listens on (the board's default is 127.0.0.1:8090; the demo's console)", config.Roles("panel", "board", "demo", "assistant"))
	s.String(&o.dataDir, "data-dir", "FLEET_DATA_DIR", "./var", "directory for the role's state (embedded Postgres and Redis live under it)", config.Roles("panel", "board", "demo", "migrate"))
	s.Enum(&o.logFormat, "log-format", "FLEET_LOG_FORMAT", "text", []string{"text", "json"}, "log line format")
	s.Enum(&o.logLevel, "log-level", "FLEET_LOG_LEVEL", "info", []string{"debug", "info", "warn", "error"}, "lowest level logged")
	o.panel.Register(s)
	o.board = board.Defaults()
	o.board.Register(s)
	o.agent.Register(s)
	o.demo.Register(s)
	o.assistant.Register(s)
	return s
}

// libraryLogs sends the third-party libraries' own log lines through the
// product's structured, redacting logger. go-redis prints a line per failed
// dial on stderr otherwise; River gets its logger in its config, and pgx
// logs nothing unless given a tracer.
func libraryLogs(log *slog.Logger) {
	redis.SetLogger(&logging.Printf{Log: log.With("component", "go-redis"), Level: slog.LevelWarn, Every: 10 * time.Second})
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	cmd := ""
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
		// Two-word commands: "agent reset-state".
		if cmd == "agent" && len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
			cmd, args = cmd+" "+args[0], args[1:]
		}
	}
	if _, ok := subcommands[cmd]; ok {
		return runTwoWord(cmd, args, os.Stdin, stdout, stderr)
	}
	if cmd == "assistant" {
		return runAssistantCommand(args, stdout, stderr)
	}
	if cmd == "crawl" {
		return runCrawl(args, stdout, stderr)
	}
	if cmd == "fetch" {
		return runFetch(args, stdout, stderr)
	}
	if cmd == "limit" {
		return runLimit(args, stdout, stderr)
	}
	if cmd == "retention" {
		return runRetention(args, stdout, stderr)
	}
	if cmd == "privacy" {
		return runPrivacy(args, stdout, stderr)
	}
	if cmd == "unit-failed" {
		return runUnitFailed(args, stdout, stderr)
	}
	if cmd == "loadtest" {
		return runLoadtest(args, stdout, stderr)
	}
	var o options
	s := flags(&o)
	rest, err := s.Parse(args, os.Getenv)
	if errors.Is(err, config.ErrHelp) {
		usage(stdout, s)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "fleetwright: %v (see fleetwright --help)\n", err)
		return 2
	}
	if len(rest) > 0 {
		fmt.Fprintf(stderr, "fleetwright: unexpected argument %q (see fleetwright --help)\n", rest[0])
		return 2
	}
	log := logging.New(stderr, logging.Options{Format: o.logFormat, Level: level(o.logLevel)})
	slog.SetDefault(log)
	libraryLogs(log)
	ctx, stop := signalContext()
	defer stop()

	switch cmd {
	case "":
	case "version":
		fmt.Fprintln(stdout, "fleetwright", version)
		return 0
	case "migrate":
		return exit(stderr, migrate(ctx, o, log))
	case "agent reset-state":
		if o.agent.StateDir == "" {
			fmt.Fprintln(stderr, "fleetwright: agent reset-state needs --state-dir (see fleetwright --help)")
			return 2
		}
		if err := agent.ResetState(o.agent.StateDir); err != nil {
			return exit(stderr, err)
		}
		fmt.Fprintln(stdout, "agent state cleared:", o.agent.StateDir)
		return 0
	case "help":
		usage(stdout, s)
		return 0
	default:
		fmt.Fprintf(stderr, "fleetwright: unknown command %q; commands: %s (see fleetwright --help)\n", cmd, commandNames())
		return 2
	}
	switch o.role {
	case "panel":
		o.panel.Listen, o.panel.DataDir, o.panel.Version = o.listen, o.dataDir, version
		return exit(stderr, panel.Run(ctx, o.panel, log))
	case "agent":
		o.agent.Build = version
		err := agent.Run(ctx, o.agent, log)
		if err != nil {
			fmt.Fprintf(stderr, "fleetwright: %s\n", logging.Scrub(err.Error()))
		}
		return agent.ExitCode(err)
	case "board":
		o.board.Listen, o.board.DataDir = o.listen, o.dataDir
		if !s.Given("listen") {
			o.board.Listen = "127.0.0.1:8090"
		}
		return exit(stderr, board.Run(ctx, o.board, log))
	case "assistant":
		o.assistant.Listen, o.assistant.StateDir, o.assistant.Out = o.listen, o.agent.StateDir, stdout
		o.assistant.Panel, o.assistant.TokenFile, o.assistant.Build = o.agent.PanelURL, o.agent.TokenFile, version
		o.assistant.BrowserUser, o.assistant.BrowserNoSandbox = o.agent.BrowserUser, o.agent.BrowserNoSandbox
		o.assistant.PanelCAFile = o.agent.PanelCAFile
		if !s.Given("listen") {
			o.assistant.Listen = assistant.DefaultListen
		}
		return exit(stderr, assistant.Run(ctx, o.assistant, log))
	case "demo":
		o.demo.Listen, o.demo.DataDir, o.demo.Version = o.listen, o.dataDir, version
		o.demo.Panel, o.demo.Out, o.demo.CatalogPort = o.panel, stdout, o.board.CatalogPort
		return exit(stderr, demo.Run(ctx, o.demo, log))
	}
	return 2
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func exit(stderr io.Writer, err error) int {
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "fleetwright: %s\n", logging.Scrub(err.Error()))
	return 1
}

func level(s string) slog.Level {
	var l slog.Level
	_ = l.UnmarshalText([]byte(s))
	return l
}

func commandNames() string {
	out := ""
	for i, c := range commands {
		if i > 0 && strings.Fields(c.name)[0] == strings.Fields(commands[i-1].name)[0] {
			continue
		}
		if i > 0 {
			out += ", "
		}
		out += strings.Fields(c.name)[0]
	}
	return out
}

// migrate applies migrations against --database-url, or the embedded cluster.
func migrate(ctx context.Context, o options, log *slog.Logger) error {
	ownerURL, appRole := o.panel.DatabaseURL, embedded.AppRole
	if ownerURL == "" {
		lock, err := embedded.LockDataDir(o.dataDir, "fleetwright migrate")
		if err != nil {
			return err
		}
		defer lock.Release()
		pg, err := embedded.StartPostgres(ctx, embedded.PostgresConfig{Dir: filepath.Join(o.dataDir, "postgres"), Logger: log})
		if err != nil {
			return err
		}
		defer pg.Stop()
		ownerURL = pg.OwnerURL()
	} else if o.panel.DatabaseAppURL != "" {
		u, err := userOf(o.panel.DatabaseAppURL)
		if err != nil {
			return err
		}
		appRole = u
	}
	pool, err := db.Open(ctx, ownerURL, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := db.Migrate(ctx, pool, migrations.FS, appRole, log); err != nil {
		return err
	}
	log.Info("migrations up to date")
	return nil
}

func usage(w io.Writer, s *config.Set) {
	fmt.Fprintf(w, `Fleetwright %s — control plane for browser-automation fleets.

Usage:
  fleetwright [--role=ROLE] [flags]     run a long-lived role
  fleetwright COMMAND [flags]           run a one-shot command

Roles:
  panel    the control plane: console, agent gateway, claim engine, durable jobs, metrics
  agent    runs beside one platform account: holds its session, runs its workers, obeys the panel
  board    the sandbox load board: a realistic platform to rehearse, demo and load-test against
  demo     everything on one machine: panel, board, three tenants and ten agent processes (make run)
  assistant  the local AI browser agent: loopback UI with a per-launch key, Ollama by default, risky actions held for approval (docs/ASSISTANT.md)

Commands:
`, version)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-19s %s\n", c.name, c.help)
	}
	fmt.Fprintf(w, "\nFlags (a flag wins over its variable, the variable over the default):\n")
	s.PrintDefaults(w)
}
