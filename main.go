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
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/modules/agent"
	"github.com/fleetwright/fleetwright/modules/assistant"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/cli"
	"github.com/fleetwright/fleetwright/modules/demo"
	"github.com/fleetwright/fleetwright/modules/panel"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// roles are the long-running roles this build has, with their --help line.
var roles = []struct{ name, help string }{
	{"panel", "the control plane: console, agent gateway, claim engine, durable jobs, metrics"},
	{"agent", "runs beside one platform account: holds its session, runs its workers, obeys the panel"},
	{"board", "the sandbox load board: a realistic platform to rehearse, demo and load-test against"},
	{"demo", "everything on one machine: panel, board, three tenants and ten agent processes (make run)"},
	{"assistant", "the local AI browser agent: loopback UI with a per-launch key, Ollama by default, risky actions held for approval (docs/ASSISTANT.md)"},
}

func roleNames() []string {
	out := make([]string, len(roles))
	for i, r := range roles {
		out[i] = r.name
	}
	return out
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
	s.Enum(&o.role, "role", "FLEET_ROLE", "panel", roleNames(), "which role this process runs")
	s.String(&o.listen, "listen", "FLEET_LISTEN", "127.0.0.1:8080", "address the HTTP server listens on (the board's default is 127.0.0.1:8090; the demo's console)", config.Roles("panel", "board", "demo", "assistant"))
	s.String(&o.dataDir, "data-dir", "FLEET_DATA_DIR", "./var", "directory for the role's state (embedded Postgres and Redis live under it)", config.Roles("panel", "board", "demo"))
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

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs a role, or hands a command's words to the command table.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	commands := cli.New(cli.Build{Version: version, Roles: roleNames()})
	var o options
	s := flags(&o)
	if len(args) > 0 && args[0] == "help" {
		usage(stdout, s, commands, helpRole(args[1:]))
		return 0
	}
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		return commands.Run(ctx, args, stdin, stdout, stderr)
	}
	rest, err := s.Parse(args, os.Getenv)
	if errors.Is(err, config.ErrHelp) {
		usage(stdout, s, commands, helpRole(args))
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
	log := logging.New(stderr, logging.Options{Format: o.logFormat, Level: cli.Level(o.logLevel)})
	slog.SetDefault(log)
	libraryLogs(log)
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

func exit(stderr io.Writer, err error) int {
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "fleetwright: %s\n", logging.Scrub(err.Error()))
	return 1
}

// helpRole is the role --help is narrowed to: the --role on the command
// line, if it names one.
func helpRole(args []string) string {
	for i, a := range args {
		v, ok := strings.CutPrefix(a, "--role=")
		if !ok {
			v, ok = strings.CutPrefix(a, "-role=")
		}
		if !ok && (a == "--role" || a == "-role") && i+1 < len(args) {
			v, ok = args[i+1], true
		}
		if ok && slices.Contains(roleNames(), v) {
			return v
		}
	}
	return ""
}

func usage(w io.Writer, s *config.Set, commands *cli.Table, role string) {
	fmt.Fprintf(w, `Fleetwright %s — control plane for browser-automation fleets.

Usage:
  fleetwright [--role=ROLE] [flags]     run a long-lived role
  fleetwright COMMAND [flags]           run a one-shot command (fleetwright COMMAND --help: its flags)
`, version)
	if role != "" {
		fmt.Fprintf(w, "\nWhat --role=%s takes (fleetwright --help lists every role, command and flag).\n", role)
	}
	fmt.Fprintf(w, "\nRoles:\n")
	for _, r := range roles {
		if role == "" || r.name == role {
			fmt.Fprintf(w, "  %-10s %s\n", r.name, r.help)
		}
	}
	fmt.Fprintf(w, "\nCommands:\n")
	commands.WriteCommands(w, role)
	fmt.Fprintf(w, "\nFlags (a flag wins over its variable, the variable over the default):\n")
	s.PrintRole(w, role)
}
