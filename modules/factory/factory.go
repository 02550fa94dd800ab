// Package factory makes the rows tests start from — tenants, platform
// accounts, agents and console users — in one place, so a test says what
// it needs ("a tenant acme with one watcher account") instead of writing
// the inserts. Accounts, agents and users go through the product's own
// stores (sealed credentials, hashed tokens, argon2id passwords, audited),
// so a test starts from rows the product could have made. Only tests
// import it.
package factory

import (
	"context"
	"strconv"
	"testing"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/account"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/wire"
	"github.com/jackc/pgx/v5"
)

// By is the audit actor the factory's changes are recorded under.
var By = audit.Entry{Actor: "test"}

// Tenant inserts a tenant as the database owner and returns its id. It is
// a bare row (no filters, no limits, the schema's defaults), as a test of
// one module needs; the product's own tenant page adds what an operator
// would.
func Tenant(t testing.TB, d *testenv.Database, slug, name string) string {
	t.Helper()
	return TenantOn(t, d.Owner, slug, name)
}

// Querier is what TenantOn inserts through: a pool or a single connection.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// TenantOn is Tenant on a database testenv did not make (a panel's own
// embedded cluster): q must connect as a role that may insert tenants (the
// owner or a superuser).
func TenantOn(t testing.TB, q Querier, slug, name string) string {
	t.Helper()
	var id string
	if err := q.QueryRow(context.Background(),
		`INSERT INTO tenants (slug, name) VALUES ($1, $2) RETURNING id::text`, slug, name).Scan(&id); err != nil {
		t.Fatalf("factory: tenant %s: %v", slug, err)
	}
	return id
}

// Account creates a platform account of tenant through fleet.Store (its
// credentials sealed with the store's vault) and returns its id. Fields
// left empty get working defaults: the account key as username, a board
// address nothing listens on, client "acme", a password and a TOTP secret.
func Account(t testing.TB, st *fleet.Store, tenant string, in fleet.AccountInput) string {
	t.Helper()
	if in.Username == "" {
		in.Username = in.Key
	}
	if in.BoardURL == "" {
		in.BoardURL = "http://127.0.0.1:9"
	}
	if in.Client == "" {
		in.Client = "acme"
	}
	if in.Password == "" {
		in.Password = "unused-" + in.Key
	}
	if in.TOTPSecret == "" {
		in.TOTPSecret = "JBSWY3DPEHPK3PXP"
	}
	id, err := st.CreateAccount(context.Background(), tenant, in, By)
	if err != nil {
		t.Fatalf("factory: account %s: %v", in.Key, err)
	}
	return id
}

// Workers is a worker list for AccountInput: one worker per kind, named
// kind-1, kind-2, … in order.
func Workers(kinds ...string) []wire.WorkerSpec {
	var out []wire.WorkerSpec
	seen := map[string]int{}
	for _, k := range kinds {
		seen[k]++
		out = append(out, wire.WorkerSpec{Name: k + "-" + strconv.Itoa(seen[k]), Kind: k})
	}
	return out
}

// Agent creates the agent of an account and returns its id and its token
// (shown once, stored hashed, as the console does).
func Agent(t testing.TB, st *fleet.Store, tenant, accountID, name string) (id, token string) {
	t.Helper()
	id, token, err := st.CreateAgent(context.Background(), tenant, accountID, name, By)
	if err != nil {
		t.Fatalf("factory: agent %s: %v", name, err)
	}
	return id, token
}

// Store is a fleet store on the test database's application role with a
// fresh vault.
func Store(t testing.TB, d *testenv.Database) *fleet.Store {
	t.Helper()
	return fleet.NewStore(d.App, testenv.Vault(t))
}

// User creates a console user through account.CreateUser (argon2id, the
// password rules, audited) and grants it the given tenants.
func User(t testing.TB, d *testenv.Database, email string, role auth.Role, password string, tenants ...string) account.User {
	t.Helper()
	ctx := context.Background()
	u, err := account.CreateUser(ctx, d.App, account.NewUser{Email: email, Role: role, Password: password}, By)
	if err != nil {
		t.Fatalf("factory: user %s: %v", email, err)
	}
	if len(tenants) > 0 {
		if err := account.SetGrants(ctx, d.App, u.ID, tenants, By); err != nil {
			t.Fatalf("factory: grants of %s: %v", email, err)
		}
	}
	return u
}
