package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/pquerna/otp/totp"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/modules/account"
	"github.com/fleetwright/fleetwright/modules/agent"
	"github.com/fleetwright/fleetwright/modules/agent/store"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/cell"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/panel"
	"github.com/fleetwright/fleetwright/modules/tenant"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// actor is who the seeding is audited as.
const actor = "demo"

// seeder creates what the demo needs, or finds it from an earlier start:
// every step looks before it creates, so a second start changes nothing but
// what must follow this start (the board's address, cell B's Redis URL, a
// lost token file, the admin's one-time password).
type seeder struct {
	p       *panel.Panel
	b       *board.Server
	dataDir string
	log     *slog.Logger
	by      audit.Entry
}

func newSeeder(p *panel.Panel, b *board.Server, dataDir string, log *slog.Logger) *seeder {
	return &seeder{p: p, b: b, dataDir: dataDir, log: log, by: audit.Entry{Actor: actor}}
}

// cellB points cell B at the second Redis (its URL is stable across starts,
// but the row is rewritten when it is not) and applies it at once.
func (s *seeder) cellB(ctx context.Context, redisURL string) error {
	defs, err := cell.ListCells(ctx, s.p.DB)
	if err != nil {
		return err
	}
	for _, d := range defs {
		if d.Name == CellB && d.RedisURL == redisURL {
			return s.p.Cells.Reload(ctx)
		}
	}
	// Audited on the system chain; the engine reloads the cells.
	if err := s.p.Claims.PutCell(ctx, s.by, cell.Def{Name: CellB, RedisURL: redisURL}); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	return nil
}

// tenant finds or creates a tenant, routes it to its cell and gives it its
// filter; it returns the tenant's id.
func (s *seeder) tenant(ctx context.Context, t Tenant) (string, error) {
	st := s.p.Claims.Store()
	ct, err := tenant.BySlug(ctx, s.p.DB, t.Slug)
	if err != nil {
		created, cerr := tenant.Create(ctx, s.p.DB, t.Slug, t.Name, s.by)
		if cerr != nil {
			return "", fmt.Errorf("demo: tenant %s: %w", t.Slug, cerr)
		}
		if ct, err = tenant.BySlug(ctx, s.p.DB, created.Slug); err != nil {
			return "", fmt.Errorf("demo: %w", err)
		}
		s.log.Info("demo: tenant created", "tenant", t.Slug)
	}
	if ct.Cell != t.Cell {
		if err := s.p.Claims.RouteTenant(ctx, s.by, ct.ID, t.Cell); err != nil {
			return "", fmt.Errorf("demo: %w", err)
		}
	}
	if err := s.assignMode(ctx, ct); err != nil {
		return "", err
	}
	filters, err := st.Filters(ctx, ct.ID)
	if err != nil {
		return "", err
	}
	for _, f := range filters {
		if f.Name == t.Filter.Name {
			return ct.ID, nil
		}
	}
	if _, err := s.p.Claims.PutFilter(ctx, s.by, ct.ID, t.Filter); err != nil {
		return "", fmt.Errorf("demo: filter of %s: %w", t.Slug, err)
	}
	return ct.ID, nil
}

// assignMode moves a demo tenant made before assign became the default
// dispatch mode (migration 0140) to assign, audited as the demo. Only a
// tenant whose mode nobody ever chose (no claim.dispatch_mode entry in its
// chain) is moved: a mode an admin set stands.
func (s *seeder) assignMode(ctx context.Context, t tenant.Tenant) error {
	if t.DispatchMode == claim.DispatchAssign {
		return nil
	}
	chosen, err := s.p.Claims.Store().AuditLog(ctx, t.ID, "claim.dispatch_mode", 1)
	if err != nil {
		return fmt.Errorf("demo: dispatch mode of %s: %w", t.Slug, err)
	}
	if len(chosen) > 0 {
		return nil
	}
	if err := s.p.Claims.SetDispatchMode(ctx, s.by, t.ID, claim.DispatchAssign); err != nil {
		return fmt.Errorf("demo: dispatch mode of %s: %w", t.Slug, err)
	}
	s.log.Info("demo: tenant moved to assign dispatch (its mode was never chosen)", "tenant", t.Slug, "was", t.DispatchMode)
	return nil
}

// AgentDir is an agent's state directory (its "host"): the token file, the
// agent's SQLite state, and HOME and TMPDIR of its Chromium.
func AgentDir(dataDir string, a Agent) string { return filepath.Join(dataDir, "agents", a.Key) }

// TokenFile is where an agent's token is kept (0600).
func TokenFile(dataDir string, a Agent) string {
	return filepath.Join(AgentDir(dataDir, a), "agent.token")
}

// agent finds or creates the agent's panel account, its agent (writing the
// token file) and its board account. Credentials are generated once, sealed
// in the panel; a board account missing on a later start is recreated from
// the sealed copy, the way an agent receives them.
func (s *seeder) agent(ctx context.Context, tenantID string, a Agent) error {
	dir := AgentDir(s.dataDir, a)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("demo: agent dir: %w", err)
	}
	var accountID, boardURL, client string
	var workers []byte
	var fresh *board.AccountSpec
	err := db.TenantRow(ctx, s.p.DB, tenantID, `SELECT id::text, board_url, client, workers FROM accounts WHERE account_key = $1`, a.Key).
		Scan(&accountID, &boardURL, &client, &workers)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		key, err := totp.Generate(totp.GenerateOpts{Issuer: "SandboxBoard", AccountName: a.Key})
		if err != nil {
			return fmt.Errorf("demo: TOTP secret: %w", err)
		}
		fresh = &board.AccountSpec{Username: a.Key, Password: account.GeneratePassword(), Client: a.Tenant, TOTPSecret: key.Secret()}
		logging.RegisterSecret(fresh.Password, fresh.TOTPSecret)
		// The tenant's other accounts first follow the board to this start.
		if err := s.setPlatform(ctx, tenantID, a); err != nil {
			return err
		}
		accountID, err = s.p.Fleet.CreateAccount(ctx, tenantID, fleet.AccountInput{Key: a.Key, BoardURL: s.b.URL(),
			Client: a.Tenant, Username: a.Key, Password: fresh.Password, TOTPSecret: fresh.TOTPSecret, Workers: a.Workers()}, s.by)
		if err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("demo: account %s: %w", a.Key, err)
	default:
		if boardURL != s.b.URL() || client != a.Tenant {
			if err := s.setPlatform(ctx, tenantID, a); err != nil {
				return err
			}
		}
		var have []wire.WorkerSpec
		if json.Unmarshal(workers, &have) != nil || !reflect.DeepEqual(have, a.Workers()) {
			if err := s.p.Fleet.SetWorkers(ctx, tenantID, accountID, a.Workers(), s.by); err != nil {
				return fmt.Errorf("demo: workers of %s: %w", a.Key, err)
			}
		}
	}

	var agentID string
	err = db.TenantRow(ctx, s.p.DB, tenantID, `SELECT id::text FROM agents WHERE account_id = $1 AND name = $2 AND retired_at IS NULL`,
		accountID, a.Name()).Scan(&agentID)
	token := ""
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// A new agent on an old state dir (its predecessor was deleted in
		// the console and retired itself): the demo is the operator who
		// clears it on purpose.
		if err := agent.ResetState(dir); err != nil {
			return err
		}
		if agentID, token, err = s.p.Fleet.CreateAgent(ctx, tenantID, accountID, a.Name(), s.by); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("demo: agent %s: %w", a.Name(), err)
	default:
		if _, rerr := agent.ReadTokenFile(TokenFile(s.dataDir, a)); rerr != nil {
			// The agent's files are gone (a wiped demo dir with the panel's
			// database kept): the demo, as the host's admin, accepts the
			// new installation so its fresh key is pinned.
			if _, serr := os.Stat(filepath.Join(dir, store.FileName)); serr != nil {
				if err := s.p.Fleet.AcceptNewInstallation(ctx, tenantID, agentID, s.by); err != nil {
					return err
				}
			}
			if token, err = s.p.Fleet.RotateToken(ctx, tenantID, agentID, s.by); err != nil {
				return err
			}
		}
	}
	if token != "" {
		if err := writeSecretFile(TokenFile(s.dataDir, a), token+"\n"); err != nil {
			return err
		}
	}

	for _, acct := range s.b.Accounts() {
		if acct.Username == a.Key {
			return nil
		}
	}
	if fresh == nil {
		// The panel holds the only copy: open it as the agent's welcome does.
		_, creds, err := s.p.Fleet.Welcome(ctx, fleet.Agent{ID: agentID, Tenant: tenantID, AccountID: accountID, Name: a.Name()})
		if err != nil {
			return err
		}
		fresh = &board.AccountSpec{Username: creds.Username, Password: creds.Password.Reveal(), Client: a.Tenant,
			TOTPSecret: creds.TOTPSecret.Reveal()}
	}
	if _, err := s.b.CreateAccount(ctx, *fresh); err != nil && !errors.Is(err, board.ErrAccountExists) {
		return fmt.Errorf("demo: board account %s: %w", a.Key, err)
	}
	return nil
}

// setPlatform follows the board to its address of this start
// (--board-listen may change, or be :0 in tests), moving every account of
// the tenant at once: they all book as the tenant's client on one board.
func (s *seeder) setPlatform(ctx context.Context, tenantID string, a Agent) error {
	creds, err := s.p.Fleet.SealedCredentials(ctx, tenantID)
	if err != nil {
		return fmt.Errorf("demo: board and client of %s: %w", a.Tenant, err)
	}
	if err := s.p.Fleet.SetPlatform(ctx, tenantID, "", s.b.URL(), a.Tenant, creds, s.by); err != nil {
		return fmt.Errorf("demo: board and client of %s: %w", a.Tenant, err)
	}
	return nil
}

// admin creates the demo's administrator with a one-time password on the
// first start (the first sign-in with it must choose a new one: it was
// printed on a terminal). Later starts keep its password and TOTP enrolment (a person
// does not re-enrol an authenticator at every restart) and return "";
// with reset it gets a new one-time password and its enrolment and
// sessions are reset, so enrolment follows at the next sign-in.
func (s *seeder) admin(ctx context.Context, reset bool) (string, error) {
	u, err := account.UserByEmail(ctx, s.p.DB, AdminEmail)
	if err == nil && !reset {
		return "", nil
	}
	password := account.GeneratePassword()
	logging.RegisterSecret(password)
	if errors.Is(err, account.ErrNoUser) {
		_, err = account.CreateUser(ctx, s.p.DB, account.NewUser{Email: AdminEmail, Role: auth.Admin, Password: password, MustChange: true}, s.by)
		if err != nil {
			return "", fmt.Errorf("demo: create admin: %w", err)
		}
		return password, nil
	}
	if err != nil {
		return "", err
	}
	by := s.by
	by.Detail = map[string]any{"user_id": u.ID, "reason": "demo start with --reset-admin: new one-time password"}
	if err := account.ResetPassword(ctx, s.p.DB, u.ID, password, true, by); err != nil {
		return "", fmt.Errorf("demo: reset admin password: %w", err)
	}
	if err := account.ResetMFA(ctx, s.p.DB, u.ID, s.by); err != nil {
		return "", fmt.Errorf("demo: reset admin TOTP: %w", err)
	}
	return password, nil
}

// writeSecretFile writes a file readable by its owner only, atomically.
func writeSecretFile(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return fmt.Errorf("demo: write %s: %w", filepath.Base(path), err)
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return fmt.Errorf("demo: chmod %s: %w", filepath.Base(path), err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("demo: write %s: %w", filepath.Base(path), err)
	}
	return nil
}

// trimURL is a base URL without its trailing slash.
func trimURL(u string) string { return strings.TrimRight(u, "/") }
