// Package cli is fleetwright's one-shot commands (admin, crawl, limit, …) as
// one table: every command is an entry {name, usage, flags, run}, one file
// per command family, and dispatch, --help and the refusal of wrong input
// are driven by that table, written once here. The long-running roles stay
// in main, which hands every word it does not know to Run.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/app/logging"
)

// Many is MaxArgs for a command that takes any number of arguments.
const Many = -1

// Exit statuses shared by the commands.
const (
	// ExitFailed: the command ran and failed.
	ExitFailed = 1
	// ExitUsage: the command line was wrong; nothing was done.
	ExitUsage = 2
)

// Command is one entry of the table.
type Command struct {
	// Name is the command's words: "fetch", "admin create-user", "crawl proxy add".
	Name string
	// Args names the positional arguments for the usage line: "URL", "KIND DAYS", "FILE…".
	Args string
	// Summary is the command's line in fleetwright --help.
	Summary string
	// Detail is printed by `fleetwright NAME --help` under the summary.
	Detail string
	// Roles are the roles whose hosts take this command, for
	// `--role=R --help`; empty means every role.
	Roles []string
	// DB says the command reads or changes the panel's database and takes
	// the shared database flags (Meta).
	DB bool
	// MinArgs and MaxArgs bound the positional arguments (MaxArgs Many: no bound).
	MinArgs, MaxArgs int
	// bind declares the command's own flags on s and returns its run.
	bind func(s *config.Set) runFunc
}

type runFunc func(ctx context.Context, c *Call) error

// define builds an entry from its options type: flags declares them (nil:
// none), run runs the command with them once the line is parsed.
func define[O any](c Command, flags func(s *config.Set, o *O), run func(ctx context.Context, c *Call, o *O) error) Command {
	c.bind = func(s *config.Set) runFunc {
		o := new(O)
		if flags != nil {
			flags(s, o)
		}
		return func(ctx context.Context, call *Call) error { return run(ctx, call, o) }
	}
	return c
}

// Call is one parsed invocation, handed to a command's run.
type Call struct {
	// Name is the command's name.
	Name string
	// Args are the positional arguments, within the command's bounds.
	Args []string
	// Meta holds the database flags (DB commands only).
	Meta *Meta
	// Flags is the parsed set, for Given.
	Flags          *config.Set
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	build          Build
}

// Build is what the binary knows about itself.
type Build struct {
	// Version is the build version (main's -ldflags "-X main.version=…").
	Version string
	// Roles are the long-running roles, so that a group named like one
	// (agent, assistant) can point to --role.
	Roles []string
}

// Table is the command table of one build.
type Table struct {
	build    Build
	commands []Command
}

// New returns the table of every command.
func New(b Build) *Table {
	return &Table{build: b, commands: slices.Concat(
		versionCommands(), migrateCommands(), adminCommands(), keyCommands(), auditCommands(), agentCommands(),
		limitCommands(), retentionCommands(), privacyCommands(), backupCommands(),
		assistantCommands(), assistantDataCommands(), crawlCommands(), crawlProxyCommands(), crawlCaptchaCommands(), platformCommands(), platformRegistryCommands(),
		fetchCommands(), unitFailedCommands(), benchCommands(), loadtestCommands(),
	)}
}

// Commands returns the entries in the order --help lists them.
func (t *Table) Commands() []Command { return slices.Clone(t.commands) }

// Names returns every command's name.
func (t *Table) Names() []string {
	out := make([]string, len(t.commands))
	for i, c := range t.commands {
		out[i] = c.Name
	}
	return out
}

// Knows reports whether word starts a command or a group of commands.
func (t *Table) Knows(word string) bool {
	for _, c := range t.commands {
		if c.Name == word || strings.HasPrefix(c.Name, word+" ") {
			return true
		}
	}
	return false
}

// For reports whether the command is listed for role ("" or "all": every role).
func (c Command) For(role string) bool {
	return role == "" || role == "all" || len(c.Roles) == 0 || slices.Contains(c.Roles, role)
}

// Usage is the command's usage line.
func (c Command) Usage() string {
	u := "fleetwright " + c.Name
	if c.Args != "" {
		u += " " + c.Args
	}
	return u + " [flags]"
}

// WriteCommands writes the table's lines of fleetwright --help: every
// command role takes ("" or "all": every command).
func (t *Table) WriteCommands(w io.Writer, role string) {
	for _, c := range t.commands {
		if c.For(role) {
			writeLine(w, c.Name, c.Args, c.Summary)
		}
	}
}

func writeLine(w io.Writer, name, args, summary string) {
	if args != "" {
		name += " " + args
	}
	if len(name) > 26 {
		fmt.Fprintf(w, "  %s\n  %-26s %s\n", name, "", summary)
		return
	}
	fmt.Fprintf(w, "  %-26s %s\n", name, summary)
}

// Run runs the command args name (its words, then its flags and arguments)
// and returns the exit status: 0, 1 when it failed, 2 when the command line
// was wrong (the message names what is wrong and points to --help), or a
// status of the command's own (fetch's 3).
func (t *Table) Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c, rest, code := t.lookup(args, stdout, stderr)
	if c == nil {
		return code
	}
	call := &Call{Name: c.Name, Stdin: stdin, Stdout: stdout, Stderr: stderr, build: t.build}
	s := config.New("fleetwright " + c.Name)
	if c.DB {
		call.Meta = &Meta{stderr: stderr, release: t.build.Version}
		call.Meta.flags(s)
	}
	run := c.bind(s)
	call.Flags = s
	// Positional arguments may stand before, between or after the flags.
	for {
		r, err := s.Parse(rest, nil)
		if errors.Is(err, config.ErrHelp) {
			t.commandHelp(stdout, *c, s)
			return 0
		}
		if err != nil {
			return refuse(stderr, c.Name, err)
		}
		if len(r) == 0 {
			break
		}
		call.Args, rest = append(call.Args, r[0]), r[1:]
	}
	if err := c.checkArgs(call.Args); err != nil {
		return refuse(stderr, c.Name, err)
	}
	return finish(stderr, c.Name, run(ctx, call))
}

// lookup finds the command args names, longest name first, and returns it
// with the rest of args; or nil with the status of the help or refusal it
// wrote.
func (t *Table) lookup(args []string, stdout, stderr io.Writer) (*Command, []string, int) {
	var words []string
	for _, a := range args {
		if a == "" || a[0] == '-' {
			break
		}
		words = append(words, a)
	}
	for n := len(words); n > 0; n-- {
		name := strings.Join(words[:n], " ")
		for i := range t.commands {
			if t.commands[i].Name == name {
				return &t.commands[i], args[n:], 0
			}
		}
	}
	// The longest run of words that is a group of commands.
	group := ""
	for n := len(words); n > 0 && group == ""; n-- {
		if g := strings.Join(words[:n], " "); t.Knows(g) {
			group = g
		}
	}
	if group == "" {
		word := "help"
		if len(args) > 0 {
			word = args[0]
		}
		fmt.Fprintf(stderr, "fleetwright: unknown command %q; commands: %s (see fleetwright --help)\n", word, strings.Join(t.groups(""), ", "))
		return nil, nil, ExitUsage
	}
	n := len(strings.Fields(group))
	next := ""
	if len(args) > n {
		next = args[n]
	}
	switch {
	case next == "-h" || next == "-help" || next == "--help" || next == "help":
		t.groupHelp(stdout, group)
		return nil, nil, 0
	case next == "" || next[0] == '-':
		hint := ""
		if slices.Contains(t.build.Roles, group) {
			hint = fmt.Sprintf("; the role itself is --role=%s", group)
		}
		fmt.Fprintf(stderr, "fleetwright: %s needs one of: %s%s (see fleetwright %s --help)\n", group, strings.Join(t.groups(group), ", "), hint, group)
	default:
		fmt.Fprintf(stderr, "fleetwright: unknown command %q; %s takes: %s (see fleetwright %s --help)\n", group+" "+next, group, strings.Join(t.groups(group), ", "), group)
	}
	return nil, nil, ExitUsage
}

// groups returns the distinct next words after prefix ("" for the first words).
func (t *Table) groups(prefix string) []string {
	var out []string
	for _, c := range t.commands {
		rest, ok := strings.CutPrefix(c.Name, prefix)
		if prefix != "" && (!ok || !strings.HasPrefix(rest, " ")) {
			continue
		}
		if w := strings.Fields(rest)[0]; !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out
}

func (t *Table) groupHelp(w io.Writer, group string) {
	fmt.Fprintf(w, "Usage: fleetwright %s COMMAND [flags]\n\n", group)
	db := false
	for _, c := range t.commands {
		if strings.HasPrefix(c.Name, group+" ") {
			writeLine(w, strings.TrimPrefix(c.Name, group+" "), c.Args, c.Summary)
			db = db || c.DB
		}
	}
	fmt.Fprintf(w, "\nfleetwright %s COMMAND --help shows a command's flags.\n", group)
	if db {
		fmt.Fprint(w, dbNote)
	}
}

func (t *Table) commandHelp(w io.Writer, c Command, s *config.Set) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", c.Usage(), c.Summary)
	if c.Detail != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(c.Detail, "\n"))
	}
	if c.DB {
		fmt.Fprint(w, dbNote)
	}
	fmt.Fprintf(w, "\nFlags (a flag wins over its variable, the variable over the default):\n")
	s.PrintDefaults(w)
}

const dbNote = `
The database flags (--data-dir, --database-url, --database-app-url) are the
same for every command that uses the panel's database: with none given, the
command starts the embedded cluster under --data-dir, or attaches to the one
a running panel holds there.
`

func (c Command) checkArgs(args []string) error {
	n := len(args)
	switch {
	case c.MaxArgs == 0 && n > 0:
		return fmt.Errorf("unexpected argument %q", args[0])
	case n >= c.MinArgs && (c.MaxArgs == Many || n <= c.MaxArgs):
		return nil
	case c.MaxArgs == Many:
		return fmt.Errorf("takes at least %d argument(s) (%s), got %d", c.MinArgs, c.Args, n)
	case c.MinArgs == c.MaxArgs:
		return fmt.Errorf("takes %d argument(s) (%s), got %d", c.MinArgs, c.Args, n)
	default:
		return fmt.Errorf("takes %d to %d argument(s) (%s), got %d", c.MinArgs, c.MaxArgs, c.Args, n)
	}
}

// usageError is wrong input found after parsing: exit 2, nothing done.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usage marks err as wrong input (exit 2, with the pointer to --help).
func usage(err error) error { return usageError{err} }

// usagef is usage(fmt.Errorf(…)).
func usagef(format string, a ...any) error { return usage(fmt.Errorf(format, a...)) }

// exitError ends a command with its own status; its message, if any, was
// printed by the command or is printed here.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

// exit ends the command with status code and no further message.
func exit(code int) error { return exitError{code: code} }

// refuse writes wrong input of command name in one line and returns 2. A
// message that already names the command (a Validate error) is not
// prefixed twice.
func refuse(stderr io.Writer, name string, err error) int {
	msg := strings.TrimPrefix(err.Error(), name+": ")
	fmt.Fprintf(stderr, "fleetwright %s: %s (see fleetwright %s --help)\n", name, logging.Scrub(msg), name)
	return ExitUsage
}

// finish maps a run's error to the exit status, writing its message.
func finish(stderr io.Writer, name string, err error) int {
	var ue usageError
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		return refuse(stderr, name, ue.err)
	case errors.As(err, &ee):
		if ee.err != nil {
			fmt.Fprintf(stderr, "fleetwright %s: %s\n", name, logging.Scrub(ee.err.Error()))
		}
		return ee.code
	}
	fmt.Fprintf(stderr, "fleetwright %s: %s\n", name, logging.Scrub(err.Error()))
	return ExitFailed
}
