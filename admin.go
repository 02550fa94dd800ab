package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/migrations"
	"github.com/fleetwright/fleetwright/modules/account"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/tenant"
)

// subcommands of the two-word commands (admin …, audit …).
var subcommands = map[string][]string{
	"admin": {"create-user", "reset-mfa", "disable-user", "pause", "resume", "issue-agent-token", "dispatch-mode"},
	"audit": {"verify"},
}

type adminOptions struct {
	dataDir, databaseURL, databaseAppURL, logFormat, logLevel string
	email, role, tenant, agent, mode                          string
	passwordStdin                                             bool
	newInstallation                                           bool
}

func adminFlags(o *adminOptions, cmd string) *config.Set {
	s := config.New("fleetwright " + cmd)
	s.String(&o.dataDir, "data-dir", "FLEET_DATA_DIR", "./var", "the panel's data directory (its embedded Postgres and the audit anchors)")
	s.String(&o.databaseURL, "database-url", "FLEET_DATABASE_URL", "", "owner role's Postgres URL; empty uses the embedded cluster under --data-dir")
	s.String(&o.databaseAppURL, "database-app-url", "FLEET_DATABASE_APP_URL", "", "application role's Postgres URL (required with --database-url)")
	s.Enum(&o.logFormat, "log-format", "FLEET_LOG_FORMAT", "text", []string{"text", "json"}, "log line format")
	s.Enum(&o.logLevel, "log-level", "FLEET_LOG_LEVEL", "warn", []string{"debug", "info", "warn", "error"}, "lowest level logged")
	if userCommand(cmd) {
		s.String(&o.email, "email", "", "", "the user's email address")
	}
	if cmd == "admin pause" || cmd == "admin resume" {
		s.String(&o.tenant, "tenant", "FLEET_ADMIN_TENANT", "", "tenant slug (empty: the whole fleet)")
	}
	if cmd == "admin dispatch-mode" {
		s.String(&o.tenant, "tenant", "FLEET_ADMIN_TENANT", "", "tenant slug")
		s.Enum(&o.mode, "mode", "", "", []string{"race", "assign"}, "race: every warm actor may ask for each job; assign: the panel chooses one actor per job and grants it in one commit (see docs/CLAIMS.md)")
	}
	if cmd == "admin issue-agent-token" {
		s.String(&o.tenant, "tenant", "FLEET_ADMIN_TENANT", "", "the agent's tenant (slug)")
		s.String(&o.agent, "agent", "", "", "the agent's name, as on the fleet page")
		s.Bool(&o.newInstallation, "new-installation", "", false, "also forget the agent's pinned installation key: the next agent to connect with the new token receives the credentials (its state dir was lost)")
	}
	if cmd == "admin create-user" {
		s.Enum(&o.role, "role", "", "operator", []string{"admin", "operator", "viewer"}, "the new user's role")
		s.Bool(&o.passwordStdin, "password-stdin", "", false, "read the initial password from the first line of standard input instead of generating one")
	}
	return s
}

// runTwoWord runs `admin …` and `audit …`.
func runTwoWord(cmd string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "" || args[0][0] == '-' {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprintf(stdout, "Usage: fleetwright %s {%s} [flags]\n", cmd, strings.Join(subcommands[cmd], "|"))
			return 0
		}
		fmt.Fprintf(stderr, "fleetwright: %s needs one of: %s (see fleetwright --help)\n", cmd, strings.Join(subcommands[cmd], ", "))
		return 2
	}
	sub := args[0]
	known := false
	for _, s := range subcommands[cmd] {
		known = known || s == sub
	}
	if !known {
		fmt.Fprintf(stderr, "fleetwright: unknown command %q; %s takes: %s (see fleetwright --help)\n", cmd+" "+sub, cmd, strings.Join(subcommands[cmd], ", "))
		return 2
	}
	full := cmd + " " + sub
	var o adminOptions
	s := adminFlags(&o, full)
	rest, err := s.Parse(args[1:], os.Getenv)
	if errors.Is(err, config.ErrHelp) {
		fmt.Fprintf(stdout, "Usage: fleetwright %s [flags]\n\nFlags:\n", full)
		s.PrintDefaults(stdout)
		return 0
	}
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("unexpected argument %q", rest[0])
	}
	if err == nil && full == "admin issue-agent-token" && (o.tenant == "" || o.agent == "") {
		err = errors.New("--tenant and --agent are required")
	}
	if err == nil && full == "admin dispatch-mode" && (o.tenant == "" || o.mode == "") {
		err = errors.New("--tenant and --mode (race or assign) are required")
	}
	if err == nil && userCommand(full) && strings.TrimSpace(o.email) == "" {
		err = errors.New("--email is required")
	}
	if err != nil {
		fmt.Fprintf(stderr, "fleetwright: %s: %v (see fleetwright %s --help)\n", full, err, full)
		return 2
	}
	log := logging.New(stderr, logging.Options{Format: o.logFormat, Level: level(o.logLevel)})
	ctx, stop := signalContext()
	defer stop()
	err = withAppDB(ctx, o, log, func(pool *pgxpool.Pool) error {
		switch full {
		case "admin create-user":
			return createUser(ctx, pool, o, stdin, stdout)
		case "admin reset-mfa", "admin disable-user":
			u, err := account.UserByEmail(ctx, pool, o.email)
			if errors.Is(err, account.ErrNoUser) {
				return fmt.Errorf("no user with email %s", o.email)
			}
			if err != nil {
				return err
			}
			if full == "admin reset-mfa" {
				if err := account.ResetMFA(ctx, pool, u.ID, cliActor()); err != nil {
					return err
				}
				fmt.Fprintf(stdout, "two-factor authentication of %s was reset and their sessions ended; they enrol again at the next sign-in\n", u.Email)
				return nil
			}
			if err := account.SetDisabled(ctx, pool, u.ID, true, cliActor()); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s is disabled and signed out everywhere\n", u.Email)
			return nil
		case "audit verify":
			return verifyAudit(ctx, pool, o, stdout)
		case "admin pause", "admin resume":
			return setPaused(ctx, pool, o, full == "admin pause", stdout)
		case "admin issue-agent-token":
			return issueAgentToken(ctx, pool, o, stdout)
		case "admin dispatch-mode":
			return setDispatchMode(ctx, pool, o, stdout)
		}
		return nil
	})
	return exit(stderr, err)
}

// userCommand reports whether cmd acts on one operator (and needs --email).
func userCommand(cmd string) bool {
	return cmd == "admin create-user" || cmd == "admin reset-mfa" || cmd == "admin disable-user"
}

// setPaused flips the global or a tenant's pause switch: no new lease and no
// LEASED → ACTING from then on (actions in flight finish); audited in the
// console's audit log as the CLI user. The agents concerned get a configure
// command carrying the pause; NOTIFY wakes the panel replica holding each
// connected agent, so they stop starting actions within seconds.
func setPaused(ctx context.Context, pool *pgxpool.Pool, o adminOptions, pause bool, stdout io.Writer) error {
	st := claim.NewStore(pool, nil)
	st.SetAgentNotifier(fleet.PauseNotifier{})
	tenantID, scope := "", "the whole fleet"
	if o.tenant != "" {
		t, err := tenant.BySlug(ctx, pool, o.tenant)
		if err != nil {
			return err
		}
		tenantID, scope = t.ID, "tenant "+t.Slug
	}
	if err := st.SetPaused(ctx, cliActor(), tenantID, pause); err != nil {
		return err
	}
	if pause {
		fmt.Fprintln(stdout, "paused:", scope, "(no new lease or action; actions in flight finish; the agents were told)")
	} else {
		fmt.Fprintln(stdout, "resumed:", scope)
	}
	return nil
}

// setDispatchMode sets a tenant's dispatch mode (race or assign), audited
// as the CLI user; every replica applies it within 2 s.
func setDispatchMode(ctx context.Context, pool *pgxpool.Pool, o adminOptions, stdout io.Writer) error {
	st := claim.NewStore(pool, nil)
	t, err := tenant.BySlug(ctx, pool, o.tenant)
	if err != nil {
		return err
	}
	if err := st.SetDispatchMode(ctx, cliActor(), t.ID, o.mode); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "tenant %s dispatches in %s mode (was %s)\n", t.Slug, o.mode, t.DispatchMode)
	return nil
}

// issueAgentToken gives an agent a new token and prints it once; the old
// token stops working at once. Only its SHA-256 is stored.
func issueAgentToken(ctx context.Context, pool *pgxpool.Pool, o adminOptions, stdout io.Writer) error {
	t, err := tenant.BySlug(ctx, pool, o.tenant)
	if err != nil {
		return err
	}
	st := fleet.NewStore(pool, nil)
	id, err := st.AgentByName(ctx, t.ID, o.agent)
	if err != nil {
		return err
	}
	if o.newInstallation {
		if err := st.AcceptNewInstallation(ctx, t.ID, id, cliActor()); err != nil {
			return err
		}
	}
	token, err := st.RotateToken(ctx, t.ID, id, cliActor())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "agent token (shown once; write it to the agent's --token-file with mode 0600):\n%s\n", token)
	return nil
}

func cliActor() audit.Entry {
	who := "cli"
	if u := os.Getenv("SUDO_USER"); u != "" {
		who = "cli:" + u
	} else if u := os.Getenv("USER"); u != "" {
		who = "cli:" + u
	}
	return audit.Entry{Actor: who}
}

func createUser(ctx context.Context, pool *pgxpool.Pool, o adminOptions, stdin io.Reader, stdout io.Writer) error {
	password, generated := "", false
	if o.passwordStdin {
		line, err := bufio.NewReader(stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read password from stdin: %w", err)
		}
		password = strings.TrimRight(line, "\r\n")
	} else {
		password, generated = account.GeneratePassword(), true
	}
	logging.RegisterSecret(password)
	u, err := account.CreateUser(ctx, pool, account.NewUser{Email: o.email, Role: auth.Role(o.role), Password: password, MustChange: true}, cliActor())
	var fe account.FieldErrors
	if errors.As(err, &fe) {
		var msgs []string
		for k, v := range fe {
			msgs = append(msgs, k+": "+v)
		}
		return errors.New(strings.Join(msgs, "; "))
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "created %s %s (id %s)\n", u.Role, u.Email, u.ID)
	if generated {
		// The one place a password is shown: once, to the terminal of the
		// person creating the account. It is stored only as its hash.
		fmt.Fprintf(stdout, "one-time password: %s\n", password)
	}
	fmt.Fprintln(stdout, "they set up two-factor authentication at their first sign-in")
	return nil
}

func verifyAudit(ctx context.Context, pool *pgxpool.Pool, o adminOptions, stdout io.Writer) error {
	path := audit.AnchorFile(o.dataDir)
	rep, err := audit.Verify(ctx, pool, path)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "audit verify: %d chains, %d entries (%d not sealed yet), %d anchors from %s\n",
		rep.Chains, rep.Entries, rep.Unsealed, rep.Anchors, path)
	if rep.Checkpoints > 0 {
		fmt.Fprintf(stdout, "audit verify: %d chains verified from a checkpoint (their older entries were dropped by retention)\n", rep.Checkpoints)
	}
	for _, p := range rep.Problems {
		fmt.Fprintln(stdout, "PROBLEM:", p)
	}
	if !rep.OK() {
		return fmt.Errorf("audit verify: %d problems found: the audit log was tampered with", len(rep.Problems))
	}
	fmt.Fprintln(stdout, "audit verify: OK")
	return nil
}

// withAppDB connects as the application role: to --database-app-url, or to
// the embedded cluster — started here (and migrated) when no panel runs, or
// the running panel's when its data directory is locked.
func withAppDB(ctx context.Context, o adminOptions, log *slog.Logger, fn func(*pgxpool.Pool) error) error {
	return withDB(ctx, o, log, false, func(app, _ *pgxpool.Pool) error { return fn(app) })
}

// withDB is withAppDB that also connects as the owner role when owner is
// true (erasing a tenant deletes history the application role may not).
func withDB(ctx context.Context, o adminOptions, log *slog.Logger, owner bool, fn func(app, owner *pgxpool.Pool) error) error {
	appURL, ownerURL := o.databaseAppURL, o.databaseURL
	if o.databaseURL != "" && appURL == "" {
		return errors.New("--database-url needs --database-app-url (FLEET_DATABASE_APP_URL)")
	}
	if o.databaseURL == "" {
		pgDir := filepath.Join(o.dataDir, "postgres")
		lock, err := embedded.LockDataDir(o.dataDir, "a fleetwright command")
		switch {
		case err == nil:
			defer lock.Release()
			pg, err := embedded.StartPostgres(ctx, embedded.PostgresConfig{Dir: pgDir, Logger: log})
			if err != nil {
				return err
			}
			defer pg.Stop()
			own, err := db.Open(ctx, pg.OwnerURL(), 2)
			if err != nil {
				return err
			}
			err = db.Migrate(ctx, own, migrations.FS, embedded.AppRole, log)
			own.Close()
			if err != nil {
				return err
			}
			appURL, ownerURL = pg.AppURL(), pg.OwnerURL()
		case errors.Is(err, embedded.ErrLocked):
			pg, err := embedded.Attach(ctx, pgDir)
			if err != nil {
				return err
			}
			appURL, ownerURL = pg.AppURL(), pg.OwnerURL()
		default:
			return err
		}
	}
	pool, err := db.Open(ctx, appURL, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := db.CheckAppRole(ctx, pool); err != nil {
		return err
	}
	var own *pgxpool.Pool
	if owner {
		if own, err = db.Open(ctx, ownerURL, 2); err != nil {
			return err
		}
		defer own.Close()
	}
	return fn(pool, own)
}
