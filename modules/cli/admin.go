package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/config"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/modules/account"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/tenant"
)

var panelRole = []string{"panel"}

func adminCommands() []Command {
	return []Command{
		define(Command{Name: "admin create-user", Roles: panelRole, DB: true,
			Summary: "create an operator: --email, --role admin|operator|viewer; prints a one-time password, or reads one with --password-stdin",
			Detail:  "They set up two-factor authentication at their first sign-in. Works with or without a panel running on --data-dir."},
			func(s *config.Set, o *userOptions) {
				userFlags(s, o)
				s.Enum(&o.role, "role", "", "operator", []string{"admin", "operator", "viewer"}, "the new user's role")
				s.Bool(&o.passwordStdin, "password-stdin", "", false, "read the initial password from the first line of standard input instead of generating one")
			}, createUser),
		define(Command{Name: "admin reset-mfa", Roles: panelRole, DB: true,
			Summary: "remove a user's TOTP enrolment and end their sessions (--email); they enrol again at the next sign-in"},
			userFlags, resetMFA),
		define(Command{Name: "admin disable-user", Roles: panelRole, DB: true,
			Summary: "disable a user and end their sessions (--email)"},
			userFlags, disableUser),
		define(Command{Name: "admin pause", Roles: panelRole, DB: true,
			Summary: "pause claiming: no new lease, no new action (the whole fleet, or --tenant SLUG); audited"},
			pauseFlags, func(ctx context.Context, c *Call, o *pauseOptions) error { return setPaused(ctx, c, o, true) }),
		define(Command{Name: "admin resume", Roles: panelRole, DB: true,
			Summary: "resume claiming (the whole fleet, or --tenant SLUG); audited"},
			pauseFlags, func(ctx context.Context, c *Call, o *pauseOptions) error { return setPaused(ctx, c, o, false) }),
		define(Command{Name: "admin dispatch-mode", Roles: panelRole, DB: true,
			Summary: "set a tenant's dispatch mode (--tenant SLUG --mode race|assign); audited; every panel replica applies it within 2 s"},
			func(s *config.Set, o *dispatchOptions) {
				s.String(&o.tenant, "tenant", "FLEET_ADMIN_TENANT", "", "tenant slug")
				s.Enum(&o.mode, "mode", "", "", claim.DispatchModes, "race: every warm actor may ask for each job; assign: the panel chooses one actor per job and grants it in one commit (see docs/CLAIMS.md)")
			}, setDispatchMode),
		define(Command{Name: "admin issue-agent-token", Roles: panelRole, DB: true,
			Summary: "give an agent a new token, printed once (--tenant SLUG --agent NAME); the old one stops working"},
			func(s *config.Set, o *tokenOptions) {
				s.String(&o.tenant, "tenant", "FLEET_ADMIN_TENANT", "", "the agent's tenant (slug)")
				s.String(&o.agent, "agent", "", "", "the agent's name, as on the fleet page")
				s.Bool(&o.newInstallation, "new-installation", "", false, "also forget the agent's pinned installation key: the next agent to connect with the new token receives the credentials (its state dir was lost)")
			}, issueAgentToken),
	}
}

// userOptions are the flags of the commands on one operator.
type userOptions struct {
	email, role   string
	passwordStdin bool
}

func userFlags(s *config.Set, o *userOptions) {
	s.String(&o.email, "email", "", "", "the user's email address")
}

func (o *userOptions) check() error {
	if strings.TrimSpace(o.email) == "" {
		return usagef("--email is required")
	}
	return nil
}

func createUser(ctx context.Context, c *Call, o *userOptions) error {
	if err := o.check(); err != nil {
		return err
	}
	return c.Meta.App(ctx, func(pool *pgxpool.Pool) error {
		password, generated := "", false
		if o.passwordStdin {
			var err error
			if password, err = secretLine(c, "the password"); err != nil {
				return err
			}
		} else {
			password, generated = account.GeneratePassword(), true
			logging.RegisterSecret(password)
		}
		u, err := account.CreateUser(ctx, pool, account.NewUser{Email: o.email, Role: auth.Role(o.role), Password: password, MustChange: true}, actor())
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
		fmt.Fprintf(c.Stdout, "created %s %s (id %s)\n", u.Role, u.Email, u.ID)
		if generated {
			// The one place a password is shown: once, to the terminal of the
			// person creating the account. It is stored only as its hash.
			fmt.Fprintf(c.Stdout, "one-time password: %s\n", password)
		}
		fmt.Fprintln(c.Stdout, "they set up two-factor authentication at their first sign-in")
		return nil
	})
}

// onUser runs fn on the user --email names.
func onUser(ctx context.Context, c *Call, o *userOptions, fn func(pool *pgxpool.Pool, u account.User) error) error {
	if err := o.check(); err != nil {
		return err
	}
	return c.Meta.App(ctx, func(pool *pgxpool.Pool) error {
		u, err := account.UserByEmail(ctx, pool, o.email)
		if errors.Is(err, account.ErrNoUser) {
			return fmt.Errorf("no user with email %s", o.email)
		}
		if err != nil {
			return err
		}
		return fn(pool, u)
	})
}

func resetMFA(ctx context.Context, c *Call, o *userOptions) error {
	return onUser(ctx, c, o, func(pool *pgxpool.Pool, u account.User) error {
		if err := account.ResetMFA(ctx, pool, u.ID, actor()); err != nil {
			return err
		}
		fmt.Fprintf(c.Stdout, "two-factor authentication of %s was reset and their sessions ended; they enrol again at the next sign-in\n", u.Email)
		return nil
	})
}

func disableUser(ctx context.Context, c *Call, o *userOptions) error {
	return onUser(ctx, c, o, func(pool *pgxpool.Pool, u account.User) error {
		if err := account.SetDisabled(ctx, pool, u.ID, true, actor()); err != nil {
			return err
		}
		fmt.Fprintf(c.Stdout, "%s is disabled and signed out everywhere\n", u.Email)
		return nil
	})
}

type pauseOptions struct{ tenant string }

func pauseFlags(s *config.Set, o *pauseOptions) {
	s.String(&o.tenant, "tenant", "FLEET_ADMIN_TENANT", "", "tenant slug (empty: the whole fleet)")
}

// setPaused flips the global or a tenant's pause switch: no new lease and no
// LEASED → ACTING from then on (actions in flight finish); audited in the
// console's audit log as the CLI user. The agents concerned get a configure
// command carrying the pause; NOTIFY wakes the panel replica holding each
// connected agent, so they stop starting actions within seconds.
func setPaused(ctx context.Context, c *Call, o *pauseOptions, pause bool) error {
	return c.Meta.App(ctx, func(pool *pgxpool.Pool) error {
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
		if err := st.SetPaused(ctx, actor(), tenantID, pause); err != nil {
			return err
		}
		if pause {
			fmt.Fprintln(c.Stdout, "paused:", scope, "(no new lease or action; actions in flight finish; the agents were told)")
		} else {
			fmt.Fprintln(c.Stdout, "resumed:", scope)
		}
		return nil
	})
}

type dispatchOptions struct{ tenant, mode string }

// setDispatchMode sets a tenant's dispatch mode (race or assign), audited
// as the CLI user; every replica applies it within 2 s.
func setDispatchMode(ctx context.Context, c *Call, o *dispatchOptions) error {
	if o.tenant == "" || o.mode == "" {
		return usagef("--tenant and --mode (race or assign) are required")
	}
	return withTenant(ctx, c, o.tenant, func(pool *pgxpool.Pool, t tenant.Tenant) error {
		if err := claim.NewStore(pool, nil).SetDispatchMode(ctx, actor(), t.ID, o.mode); err != nil {
			return err
		}
		fmt.Fprintf(c.Stdout, "tenant %s dispatches in %s mode (was %s)\n", t.Slug, o.mode, t.DispatchMode)
		return nil
	})
}

type tokenOptions struct {
	tenant, agent   string
	newInstallation bool
}

// issueAgentToken gives an agent a new token and prints it once; the old
// token stops working at once. Only its SHA-256 is stored.
func issueAgentToken(ctx context.Context, c *Call, o *tokenOptions) error {
	if o.tenant == "" || o.agent == "" {
		return usagef("--tenant and --agent are required")
	}
	return withTenant(ctx, c, o.tenant, func(pool *pgxpool.Pool, t tenant.Tenant) error {
		st := fleet.NewStore(pool, nil)
		id, err := st.AgentByName(ctx, t.ID, o.agent)
		if err != nil {
			return err
		}
		if o.newInstallation {
			if err := st.AcceptNewInstallation(ctx, t.ID, id, actor()); err != nil {
				return err
			}
		}
		token, err := st.RotateToken(ctx, t.ID, id, actor())
		if err != nil {
			return err
		}
		fmt.Fprintf(c.Stdout, "agent token (shown once; write it to the agent's --token-file with mode 0600):\n%s\n", token)
		return nil
	})
}
