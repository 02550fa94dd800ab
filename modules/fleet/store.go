// Package fleet is the panel's side of the agents: platform accounts, agents
// and their tokens, the commands sent to them (persisted until acknowledged),
// the assistants' limits and tasks, and the live fleet view read from the
// database. The WebSocket gateway the agents dial is fleet/gateway; the
// console's fleet page is fleet/web.
package fleet

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// tokenPrefix starts every agent token; the tenant id follows, so the panel
// can look the token up inside that tenant's row-level security scope
// without any path that sees every tenant.
const tokenPrefix = "fwa_"

// Errors of authentication.
var (
	ErrUnknownToken = errors.New("fleet: unknown token")
	ErrRetired      = errors.New("fleet: agent retired")
)

// Store reads and writes the fleet's tables as the application role.
type Store struct {
	pool  *pgxpool.Pool
	vault *vault.Vault
}

// NewStore returns a store.
func NewStore(pool *pgxpool.Pool, v *vault.Vault) *Store { return &Store{pool: pool, vault: v} }

// Pool is the application role's pool the store reads and writes through
// (the gateway's relay and alarms share it).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Vault seals and opens what the fleet keeps secret; nil when the panel runs
// without a data key.
func (s *Store) Vault() *vault.Vault { return s.vault }

// AccountInput is what an operator enters for a platform account.
type AccountInput struct {
	Key, Region, BoardURL, Username string
	// Client is the platform client the account books as (the board's
	// name for the customer whose bookings it makes). Every account of a
	// tenant books as the same client on the same board.
	Client               string
	Password, TOTPSecret string
	Workers              []wire.WorkerSpec
}

type sealedSecrets struct {
	Password   string `json:"p"`
	TOTPSecret string `json:"t"`
}

var keyRe = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,200}$`)

// Validate reports the first problem with an account's fields.
func (in AccountInput) Validate() error {
	switch {
	case !keyRe.MatchString(in.Key):
		return FieldError{"key", "account key must be 1–200 letters, digits or ._@-"}
	case !strings.HasPrefix(in.BoardURL, "http://") && !strings.HasPrefix(in.BoardURL, "https://"):
		return FieldError{"board_url", "board URL must start with http:// or https://"}
	case in.Username == "":
		return FieldError{"username", "username is required"}
	case validClient(in.Client) != nil:
		return FieldError{"client", strings.TrimPrefix(validClient(in.Client).Error(), "fleet: ")}
	case in.Password == "":
		return FieldError{"password", "password is required"}
	case in.TOTPSecret == "":
		return FieldError{"totp_secret", "TOTP secret is required"}
	}
	for _, w := range in.Workers {
		if w.Name == "" || w.Kind == "" {
			return FieldError{"workers", "every worker needs a name and a kind"}
		}
	}
	return nil
}

// FieldError is bad input in one field of a form: Field is the form's
// name for it, Msg what is wrong in words.
type FieldError struct{ Field, Msg string }

func (e FieldError) Error() string { return "fleet: " + e.Msg }

// validClient checks a platform client's name.
func validClient(c string) error {
	if strings.TrimSpace(c) == "" {
		return errors.New("fleet: platform client is required (the client the account books as on the board)")
	}
	if len(c) > 200 || strings.ContainsFunc(c, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return errors.New("fleet: platform client must be at most 200 printable characters")
	}
	return nil
}

// ErrOtherClient is the one-client rule's refusal: another account of the
// tenant books as another client or on another board.
var ErrOtherClient = errors.New("every account of a tenant books as the same client on the same board")

// oneClient turns the database's refusal (trigger accounts_one_client) into
// an error naming the conflicting account.
func oneClient(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.ConstraintName == "accounts_one_client" {
		return fmt.Errorf("fleet: %s: %w (change %s first, or move every account at once)", pe.Message, ErrOtherClient, pe.Detail)
	}
	return err
}

// CreateAccount stores an account; its secrets are sealed with the panel's
// key, bound to the account's id, and never shown again.
func (s *Store) CreateAccount(ctx context.Context, tenant string, in AccountInput, by audit.Entry) (string, error) {
	if err := in.Validate(); err != nil {
		return "", err
	}
	logging.RegisterSecret(in.Password, in.TOTPSecret)
	if in.Region == "" {
		in.Region = "us-east"
	}
	if in.Workers == nil {
		in.Workers = []wire.WorkerSpec{}
	}
	workers, _ := json.Marshal(in.Workers)
	var id string
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, "SELECT gen_random_uuid()::text").Scan(&id); err != nil {
			return err
		}
		pt, _ := json.Marshal(sealedSecrets{Password: in.Password, TOTPSecret: in.TOTPSecret})
		box := s.vault.Seal(pt, sealContext(id, in.BoardURL))
		if _, err := tx.Exec(ctx, `INSERT INTO accounts (id, tenant_id, account_key, region, board_url, username, client, secret_box, workers)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, id, tenant, in.Key, in.Region, in.BoardURL, in.Username, in.Client, box, workers); err != nil {
			return oneClient(err)
		}
		by.Action, by.Target = "fleet.account.create", "account "+in.Key
		by.Detail = map[string]any{"account_id": id, "region": in.Region, "board_url": in.BoardURL, "username": in.Username,
			"client": in.Client, "workers": in.Workers}
		return audit.Append(ctx, tx, by)
	})
	if errors.Is(err, ErrOtherClient) {
		return "", err
	}
	if err != nil {
		return "", fmt.Errorf("fleet: create account: %w", err)
	}
	return id, nil
}

// SetWorkers replaces an account's worker specs (the agents get a configure
// command from the caller).
func (s *Store) SetWorkers(ctx context.Context, tenant, accountID string, workers []wire.WorkerSpec, by audit.Entry) error {
	b, _ := json.Marshal(workers)
	return db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE accounts SET workers = $2 WHERE id = $1`, accountID, b); err != nil {
			return err
		}
		by.Action, by.Target, by.Detail = "fleet.account.workers", "account "+accountID, map[string]any{"workers": workers}
		return audit.Append(ctx, tx, by)
	})
}

// Credentials are an account's sign-in secrets on its board, entered again
// when the account moves to another board.
type Credentials struct {
	Username, Password, TOTPSecret string
}

// BoardOrigin is the origin (scheme://host[:port], lower-case, default port
// left out) of a board URL; "" when it has none.
func BoardOrigin(raw string) string {
	if !strings.HasPrefix(strings.TrimSpace(raw), "http://") && !strings.HasPrefix(strings.TrimSpace(raw), "https://") {
		return ""
	}
	// The agent compares origins the same way (wire.Credentials.CheckOrigin).
	return wire.Origin(raw)
}

// sealContext binds an account's sealed credentials to it and to its
// board's origin: a board URL changed behind the store's back (a script, a
// restored dump) leaves them sealed, so they never reach that board.
func sealContext(accountID, boardURL string) string {
	return "account:" + accountID + "\nboard:" + BoardOrigin(boardURL)
}

// SealedCredentials opens every account's credentials of the tenant, by
// account key, for SetPlatform to seal them to a new board. Only the demo
// calls it: it is the host's admin moving its own sandbox board, which
// listens on another port at each start. A console change has them typed.
func (s *Store) SealedCredentials(ctx context.Context, tenant string) (map[string]Credentials, error) {
	out := map[string]Credentials{}
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id::text, account_key, board_url, username, secret_box FROM accounts`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, key, board, user string
			var box []byte
			if err := rows.Scan(&id, &key, &board, &user, &box); err != nil {
				return err
			}
			pt, err := s.vault.Open(box, sealContext(id, board))
			if err != nil {
				if pt, err = s.vault.Open(box, "account:"+id); err != nil {
					return fmt.Errorf("account %s: %w", key, err)
				}
			}
			var sec sealedSecrets
			if err := json.Unmarshal(pt, &sec); err != nil {
				return fmt.Errorf("account %s: %w", key, err)
			}
			out[key] = Credentials{Username: user, Password: sec.Password, TOTPSecret: sec.TOTPSecret}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("fleet: credentials: %w", err)
	}
	return out, nil
}

// SetPlatform changes the board and the platform client an account books
// as, or (accountID "") those of every account of the tenant at once, in
// one statement: the way to move a tenant to another board or client. An
// account moving to another board origin needs its credentials in relogin
// (by account key): they are sealed to the new origin. A
// change that would leave two accounts of the tenant on different clients
// or boards is refused, naming the other account (ErrOtherClient). Audited
// with the values before.
func (s *Store) SetPlatform(ctx context.Context, tenant, accountID, boardURL, client string, relogin map[string]Credentials, by audit.Entry) error {
	if !strings.HasPrefix(boardURL, "http://") && !strings.HasPrefix(boardURL, "https://") || BoardOrigin(boardURL) == "" {
		return errors.New("fleet: board URL must start with http:// or https://")
	}
	if err := validClient(client); err != nil {
		return err
	}
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		type before struct {
			ID       string `json:"-"`
			Key      string `json:"account"`
			BoardURL string `json:"board_url"`
			Client   string `json:"client"`
		}
		rows, err := tx.Query(ctx, `SELECT id::text, account_key, board_url, client FROM accounts
			WHERE ($1 = '' OR id::text = $1) ORDER BY account_key FOR UPDATE`, accountID)
		if err != nil {
			return err
		}
		was, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (before, error) {
			var b before
			return b, r.Scan(&b.ID, &b.Key, &b.BoardURL, &b.Client)
		})
		if err != nil {
			return err
		}
		if len(was) == 0 && accountID != "" {
			return errors.New("fleet: no such account")
		}
		same := true
		for _, b := range was {
			same = same && b.Client == client && strings.TrimRight(b.BoardURL, "/") == strings.TrimRight(boardURL, "/")
		}
		if same {
			return nil // nothing changes, nothing is audited
		}
		// Credentials are sealed to their board's origin: an account moved
		// to another origin needs them entered again, and they are sealed
		// to the new one. (Else whoever picks the board collects them.)
		moved := []string{}
		for _, b := range was {
			if BoardOrigin(b.BoardURL) == BoardOrigin(boardURL) {
				continue
			}
			c, ok := relogin[b.Key]
			if !ok || c.Username == "" || c.Password == "" || c.TOTPSecret == "" {
				return fmt.Errorf("fleet: account %s moves to another board (%s): enter its username, password and TOTP secret again; its credentials are never sent to a board they were not entered for", b.Key, BoardOrigin(boardURL))
			}
			logging.RegisterSecret(c.Password, c.TOTPSecret)
			pt, _ := json.Marshal(sealedSecrets{Password: c.Password, TOTPSecret: c.TOTPSecret})
			if _, err := tx.Exec(ctx, `UPDATE accounts SET username = $2, secret_box = $3 WHERE id = $1`, b.ID, c.Username, s.vault.Seal(pt, sealContext(b.ID, boardURL))); err != nil {
				return err
			}
			moved = append(moved, b.Key)
		}
		if _, err := tx.Exec(ctx, `UPDATE accounts SET board_url = $2, client = $3 WHERE ($1 = '' OR id::text = $1)`,
			accountID, boardURL, client); err != nil {
			return oneClient(err)
		}
		by.Action, by.Target = "fleet.account.platform", "account "+was[0].Key
		if accountID == "" {
			by.Target = "every account"
		}
		by.Detail = map[string]any{"board_url": boardURL, "client": client, "before": was, "credentials_entered_again": moved}
		return audit.Append(ctx, tx, by)
	})
	if err != nil && !errors.Is(err, ErrOtherClient) && !strings.HasPrefix(err.Error(), "fleet: ") {
		return fmt.Errorf("fleet: set board and client: %w", err)
	}
	return err
}

// ClientAgents returns the ids of the tenant's agents whose account books as
// client on board: the only ones a look-up of that client's bookings may be
// answered by.
func (s *Store) ClientAgents(ctx context.Context, tenant, board, client string) (map[string]bool, error) {
	out := map[string]bool{}
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT ag.id::text FROM agents ag JOIN accounts ac ON ac.id = ag.account_id
			WHERE ac.client = $1 AND ac.client <> '' AND rtrim(ac.board_url, '/') = rtrim($2, '/')
			  AND ag.retired_at IS NULL`, client, board)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, id := range ids {
			out[id] = true
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("fleet: agents of client %s: %w", client, err)
	}
	return out, nil
}

func newToken(tenant string) (token string, hash []byte) {
	b := make([]byte, 32) // 256 random bits
	_, _ = rand.Read(b)
	token = tokenPrefix + strings.ReplaceAll(tenant, "-", "") + "_" + base64.RawURLEncoding.EncodeToString(b)
	h := sha256.Sum256([]byte(token))
	return token, h[:]
}

func hint(token string) string { return "…" + token[len(token)-4:] }

// tenantOfToken extracts the tenant id a token was issued in.
func tenantOfToken(token string) (string, bool) {
	rest, ok := strings.CutPrefix(token, tokenPrefix)
	if !ok {
		return "", false
	}
	t, _, ok := strings.Cut(rest, "_")
	if !ok || len(t) != 32 {
		return "", false
	}
	for _, c := range t {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return "", false
		}
	}
	return t[0:8] + "-" + t[8:12] + "-" + t[12:16] + "-" + t[16:20] + "-" + t[20:], true
}

// CreateAgent creates the agent of an account and returns its token, which is
// shown once and stored only as its SHA-256.
func (s *Store) CreateAgent(ctx context.Context, tenant, accountID, name string, by audit.Entry) (id, token string, err error) {
	token, hash := newToken(tenant)
	logging.RegisterSecret(token)
	err = db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO agents (tenant_id, account_id, name, token_hash, token_hint)
			VALUES ($1, $2, $3, $4, $5) RETURNING id::text`, tenant, accountID, name, hash, hint(token)).Scan(&id); err != nil {
			return err
		}
		by.Action, by.Target = "fleet.agent.create", "agent "+name
		by.Detail = map[string]any{"agent_id": id, "account_id": accountID, "token_hint": hint(token)}
		return audit.Append(ctx, tx, by)
	})
	if err != nil {
		return "", "", fmt.Errorf("fleet: create agent: %w", err)
	}
	return id, token, nil
}

// RotateToken issues a new token for an agent; the old one stops working at
// once (the agent then answers "unknown token" until given the new one).
func (s *Store) RotateToken(ctx context.Context, tenant, agentID string, by audit.Entry) (string, error) {
	token, hash := newToken(tenant)
	logging.RegisterSecret(token)
	err := db.InTenant(ctx, s.pool, tenant, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE agents SET token_hash = $2, token_hint = $3 WHERE id = $1 AND retired_at IS NULL`,
			agentID, hash, hint(token))
		if err == nil && tag.RowsAffected() == 0 {
			err = errors.New("no such live agent")
		}
		if err != nil {
			return err
		}
		by.Action, by.Target, by.Detail = "fleet.agent.rotate_token", "agent "+agentID, map[string]any{"token_hint": hint(token)}
		return audit.Append(ctx, tx, by)
	})
	if err != nil {
		return "", fmt.Errorf("fleet: rotate token: %w", err)
	}
	return token, nil
}

// AgentByName finds a live agent of the tenant by its name.
func (s *Store) AgentByName(ctx context.Context, tenant, name string) (string, error) {
	var id string
	err := db.TenantRow(ctx, s.pool, tenant, `SELECT id::text FROM agents WHERE name = $1 AND retired_at IS NULL`, name).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("fleet: no live agent named %q in that tenant", name)
	}
	if err != nil {
		return "", fmt.Errorf("fleet: find agent: %w", err)
	}
	return id, nil
}

// Agent is what authentication yields.
type Agent struct {
	ID, Tenant, AccountID, Name string
	Paused                      bool
}

// Authenticate finds the agent a token belongs to. A token of a deleted
// agent yields ErrRetired (its tombstone); anything else unknown yields
// ErrUnknownToken.
func (s *Store) Authenticate(ctx context.Context, token string) (Agent, error) {
	tenant, ok := tenantOfToken(token)
	if !ok {
		return Agent{}, ErrUnknownToken
	}
	h := sha256.Sum256([]byte(token))
	a := Agent{Tenant: tenant}
	var retired *time.Time
	err := db.TenantRow(ctx, s.pool, tenant, `SELECT id::text, account_id::text, name, paused, retired_at
		FROM agents WHERE token_hash = $1`, h[:]).Scan(&a.ID, &a.AccountID, &a.Name, &a.Paused, &retired)
	if errors.Is(err, pgx.ErrNoRows) {
		return Agent{}, ErrUnknownToken
	}
	if err != nil {
		// A malformed tenant id is the token's fault, not the database's.
		if strings.Contains(err.Error(), "invalid input syntax") {
			return Agent{}, ErrUnknownToken
		}
		return Agent{}, fmt.Errorf("fleet: authenticate: %w", err)
	}
	if retired != nil {
		return Agent{}, ErrRetired
	}
	return a, nil
}

// Welcome builds what the agent is told on connect: its configuration and the
// account's credentials, opened from the vault.
func (s *Store) Welcome(ctx context.Context, a Agent) (wire.Config, wire.Credentials, error) {
	var cfg wire.Config
	var creds wire.Credentials
	var box, workers []byte
	var pname, pdigest, psource *string
	var pversion *int
	// The account's platform version (modules/platform/registry): none
	// means the shipped sandbox the agent has built in.
	err := db.TenantRow(ctx, s.pool, a.Tenant, `
		SELECT ac.account_key, ac.region, ac.board_url, ac.username, ac.secret_box, ac.workers,
		       ag.paused OR t.paused OR (SELECT paused FROM fleet_switches),
		       p.name, v.version, v.digest, v.source
		FROM agents ag JOIN accounts ac ON ac.id = ag.account_id JOIN tenants t ON t.id = ag.tenant_id
		LEFT JOIN account_platforms ap ON ap.account_id = ac.id
		LEFT JOIN platforms p ON p.id = ap.platform_id
		LEFT JOIN platform_versions v ON v.platform_id = ap.platform_id AND v.version = ap.version
		WHERE ag.id = $1`, a.ID).
		Scan(&cfg.Account.Key, &cfg.Account.Region, &cfg.Account.BoardURL, &creds.Username, &box, &workers, &cfg.Paused,
			&pname, &pversion, &pdigest, &psource)
	if err != nil {
		return cfg, creds, fmt.Errorf("fleet: welcome: %w", err)
	}
	if pname != nil && pversion != nil {
		cfg.Account.Platform = &wire.PlatformSpec{Name: *pname, Version: *pversion, Digest: *pdigest, Source: *psource}
	}
	if err := json.Unmarshal(workers, &cfg.Workers); err != nil {
		return cfg, creds, fmt.Errorf("fleet: welcome: workers: %w", err)
	}
	pt, err := s.vault.Open(box, sealContext(a.AccountID, cfg.Account.BoardURL))
	// The origin the box opened for is the one the agent may send the
	// credentials to (it checks this itself, whatever its board URL says).
	creds.Origins = []string{BoardOrigin(cfg.Account.BoardURL)}
	if err != nil {
		// Sealed before credentials were bound to their board: those open
		// as they were, and are bound when the board next changes.
		if pt, err = s.vault.Open(box, "account:"+a.AccountID); err != nil {
			// The agent is still welcomed (it can be seen, paused and
			// retired); the credentials are withheld with the reason.
			return cfg, wire.Credentials{Username: creds.Username}, fmt.Errorf("%w: the credentials do not open for %s (they are sealed to another board: an admin enters them again for this one): %v",
				ErrSealedElsewhere, BoardOrigin(cfg.Account.BoardURL), err)
		}
	}
	var sec sealedSecrets
	if err := json.Unmarshal(pt, &sec); err != nil {
		return cfg, creds, fmt.Errorf("fleet: welcome: sealed secrets: %w", err)
	}
	logging.RegisterSecret(sec.Password, sec.TOTPSecret)
	creds.Password, creds.TOTPSecret = wire.NewSecret(sec.Password), wire.NewSecret(sec.TOTPSecret)
	return cfg, creds, nil
}

// ErrSealedElsewhere is Welcome's error when the account's credentials
// were sealed for another board than its row names: the configuration is
// complete, the credentials are not.
var ErrSealedElsewhere = errors.New("fleet: welcome: credentials sealed for another board")

// Connected records that an agent connected to this replica and returns
// the row's connected_at, which names this connection for Disconnected.
func (s *Store) Connected(ctx context.Context, a Agent, replica, remote, host, build string, protocol int) (time.Time, error) {
	var at time.Time
	err := db.InTenant(ctx, s.pool, a.Tenant, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `UPDATE agents SET connected = true, replica_id = $2, remote_addr = $3, host = $4,
			build = $5, protocol = $6, connected_at = clock_timestamp(), last_seen = now() WHERE id = $1
			RETURNING connected_at`,
			a.ID, replica, remote, host, build, protocol).Scan(&at)
	})
	return at, err
}

// Disconnected records that the agent left this replica (unless it already
// reconnected, here or elsewhere: the row's connected_at is no longer
// since, the one Connected returned for the connection that ended; a zero
// since matches any), with its last clock-offset estimate when the row
// does not hold it yet (est nil: the row's stays).
func (s *Store) Disconnected(ctx context.Context, a Agent, replica string, since time.Time, est *wire.Estimate) error {
	var offset, bound, rtt *float64
	if est != nil {
		o, b, r := millis(est.Offset), millis(est.ErrorBound), millis(est.RoundTrip)
		offset, bound, rtt = &o, &b, &r
	}
	var at *time.Time
	if !since.IsZero() {
		at = &since
	}
	return db.InTenant(ctx, s.pool, a.Tenant, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE agents SET connected = false, last_seen = now(),
			clock_offset_ms = COALESCE($3, clock_offset_ms), clock_error_ms = COALESCE($4, clock_error_ms),
			rtt_ms = COALESCE($5, rtt_ms)
			WHERE id = $1 AND replica_id = $2 AND ($6::timestamptz IS NULL OR connected_at = $6)`, a.ID, replica, offset, bound, rtt, at)
		return err
	})
}

// millis is a duration in (fractional) milliseconds, as the agents row keeps it.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// SaveState stores the agent's latest state report.
func (s *Store) SaveState(ctx context.Context, a Agent, st wire.State) error {
	_, err := s.SaveStateSince(ctx, a, st)
	return err
}

// SaveStateSince is SaveState that also returns the state it replaced (zero
// when none), read under the row's lock: what grew between two reports is
// counted once, whichever replica receives them.
func (s *Store) SaveStateSince(ctx context.Context, a Agent, st wire.State) (wire.State, error) {
	b, _ := json.Marshal(st)
	var prev wire.State
	err := db.InTenant(ctx, s.pool, a.Tenant, func(tx pgx.Tx) error {
		var old []byte
		err := tx.QueryRow(ctx, `WITH old AS (SELECT id, state FROM agents WHERE id = $1 FOR UPDATE)
			UPDATE agents a SET state = $2, state_at = now(), last_seen = now() FROM old WHERE a.id = old.id RETURNING old.state`, a.ID, b).Scan(&old)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(old) > 0 {
			_ = json.Unmarshal(old, &prev) // an unreadable old state counts as none
		}
		return nil
	})
	return prev, err
}

// BrowserSecondsGrowth is what each worker kind's browser seconds grew by
// from prev to cur (wire.State.BrowserSeconds, totals since the agent
// process started): the difference within one process, the whole total of
// a process that started since (its StartedAt differs).
func BrowserSecondsGrowth(prev, cur wire.State) map[string]float64 {
	same := prev.StartedAt != nil && cur.StartedAt != nil && prev.StartedAt.Equal(*cur.StartedAt)
	out := map[string]float64{}
	for kind, v := range cur.BrowserSeconds {
		d := v
		if same {
			d = v - prev.BrowserSeconds[kind]
		}
		if d > 0 {
			out[kind] = d
		}
	}
	return out
}

// SaveAssistantReport keeps an enrolled assistant's latest report.
func (s *Store) SaveAssistantReport(ctx context.Context, a Agent, r wire.AssistantReport) error {
	b, _ := json.Marshal(r)
	return db.InTenant(ctx, s.pool, a.Tenant, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE agents SET assistant_report = $2, assistant_report_at = now(), last_seen = now() WHERE id = $1`, a.ID, b)
		return err
	})
}

// SaveOffset stores the agent's measured clock offset and its error bound
// (the gateway writes it only when it changed: offset.go).
func (s *Store) SaveOffset(ctx context.Context, a Agent, e wire.Estimate) error {
	return db.InTenant(ctx, s.pool, a.Tenant, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE agents SET clock_offset_ms = $2, clock_error_ms = $3, rtt_ms = $4, last_seen = now()
			WHERE id = $1`, a.ID, millis(e.Offset), millis(e.ErrorBound), millis(e.RoundTrip))
		return err
	})
}

// AddEvent stores an event the agent reported.
func (s *Store) AddEvent(ctx context.Context, a Agent, e wire.Event) error {
	fields, _ := json.Marshal(e.Fields)
	if e.At.IsZero() {
		e.At = time.Now()
	}
	return db.InTenant(ctx, s.pool, a.Tenant, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO agent_events (tenant_id, agent_id, at, level, kind, worker, message, fields)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, a.Tenant, a.ID, e.At, e.Level, e.Kind, e.Worker,
			logging.Scrub(e.Message), fields)
		return err
	})
}
